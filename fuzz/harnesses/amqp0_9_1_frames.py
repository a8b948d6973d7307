"""The 0-8 / 0-9 / 0-9-1 engine (``amqp0_9_1/connection.py``, ``channel.py`` ...) fed a byte stream.

The first byte steers, the rest is what the client sends after the protocol
header:

* bit 7 clear: a client has logged in, opened the virtual host and channel 1
  first, so the stream reaches the channel methods; set: the stream starts
  the connection (the handshake is the fuzzer's to find; the host offers
  SCRAM too, with the RFC examples' user and nonce, :mod:`fuzz.scram_examples`,
  so seeds log in over ``connection.secure``);
* bits 5-6: the version (0 and 3: 0-9-1, 1: 0-9, 2: 0-8);
* bits 0-4: the stream arrives in pieces of that many bytes (0: in one piece).

The engine must answer anything with a close (or take it), never let an
exception out nor log an internal error, keep no more unparsed input than
one frame of the negotiated frame-max (4096 here, the smallest allowed, so
that inputs can exceed it), send only frames a client can decode, and never
close with 541 INTERNAL_ERROR (what the engine says when it failed itself).
"""

from __future__ import annotations

from broker import errors
from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.connection import State
from broker.protocol.detect import AmqpVersion
from fuzz.contract import ContractViolation, bounded, no_internal_error
from fuzz.scram_examples import MESSAGES, ScramExamples
from tests.unit.protocol.harness import Client, FakeHost

MAX_LEN = 16384
FRAME_MAX = 4096
RAW = 0x80
INTERNAL_ERROR = errors.InternalError.reply_code
VERSIONS = (AmqpVersion.V0_9_1, AmqpVersion.V0_9, AmqpVersion.V0_8, AmqpVersion.V0_9_1)


class ScramHost(ScramExamples, FakeHost):
    """The harness's host: SCRAM (the RFC examples), AMQPLAIN and PLAIN."""


def one_input(data: bytes) -> None:
    if not data:
        return
    steer, stream = data[0], data[1:]
    with no_internal_error():
        client = Client(ScramHost(frame_max=FRAME_MAX), VERSIONS[(steer >> 5) & 3])
        if not steer & RAW:
            client.handshake()
            client.open_channel(1)
        piece = (steer & 0x1F) or len(stream) or 1
        for at in range(0, len(stream), piece):
            client.raw(stream[at:at + piece])
            bounded("the engine's unparsed input", len(client.server._rest), client.server._frame_limit)
        for channel, sent in client.take():
            if isinstance(sent, (m.ConnectionClose, m.ChannelClose)) and sent.reply_code == INTERNAL_ERROR:
                raise ContractViolation(f"the engine closed channel {channel} with {sent.reply_text!r}")
        if client.server.state not in State:
            raise ContractViolation(f"the engine is in no state: {client.server.state!r}")
        client.server.connection_lost()


def _session(client: Client) -> list[bytes]:
    """Frames of the usual conversations on channel 1 (opened by the harness)."""
    def e(channel: int, method: m.Method) -> bytes:
        """The method's frame; nothing when the client's version has no such method."""
        try:
            return client.encode(channel, method)
        except KeyError:
            return b""

    topic = e(1, m.QueueDeclare(queue="q", arguments={"x-max-length": 100, "x-dead-letter-exchange": "dlx"}))
    topic += e(1, m.QueueBind(queue="q", exchange="amq.topic", routing_key="a.#"))
    publish = client.publish_bytes(1, "amq.topic", "a.b", b"payload" * 10,
                                   MessageProperties(headers={"x": [1, "two", {"three": 3.0}]}, priority=3,
                                                     delivery_mode=2, expiration="60000"), frame_max=FRAME_MAX)
    big = client.publish_bytes(1, "", "q", b"B" * 9000, MessageProperties(), mandatory=True, frame_max=FRAME_MAX)
    consume = e(1, m.BasicQos(prefetch_count=2)) + e(1, m.BasicConsume(queue="q", consumer_tag="t"))
    selector = e(1, m.BasicConsume(queue="q", consumer_tag="s",
                                   arguments={"x-filter-jms-selector": "priority > 2 AND x IS NOT NULL"}))
    return [
        topic + publish + consume + e(1, m.BasicAck(delivery_tag=1)) + e(1, m.BasicCancel(consumer_tag="t")),
        topic + e(1, m.ConfirmSelect()) + publish + big + e(1, m.BasicGet(queue="q"))
        + e(1, m.BasicNack(delivery_tag=1, requeue=True)),
        topic + e(1, m.TxSelect()) + publish + e(1, m.TxCommit()) + consume + e(1, m.BasicReject(delivery_tag=1))
        + e(1, m.TxRollback()),
        e(1, m.ExchangeDeclare(exchange="h", type="headers", arguments={"alternate-exchange": "amq.fanout"}))
        + e(1, m.QueueDeclare(queue="", exclusive=True))
        + e(1, m.QueueBind(queue="", exchange="h", arguments={"x-match": "all", "k": "v"}))
        + e(1, m.ExchangeBind(destination="h", source="amq.direct", routing_key="r"))
        + e(1, m.QueuePurge(queue="q")) + e(1, m.QueueDelete(queue="q")) + e(1, m.ExchangeDelete(exchange="h")),
        topic + selector + publish + e(1, m.BasicRecover(requeue=True)) + e(1, m.ChannelFlow(active=False))
        + e(1, m.ChannelClose(reply_code=200, reply_text="bye")) + e(0, m.ConnectionClose(reply_code=200)),
        e(1, m.BasicConsume(queue="amq.rabbitmq.reply-to", no_ack=True))
        + client.publish_bytes(1, "", "q", b"ask", MessageProperties(reply_to="amq.rabbitmq.reply-to"),
                               frame_max=FRAME_MAX),
    ]


def seeds() -> list[bytes]:
    out = []
    for index, version in enumerate(VERSIONS[:3]):
        client = Client(FakeHost(frame_max=FRAME_MAX), version)
        out += [bytes((index << 5,)) + stream for stream in _session(client)]
    client = Client(FakeHost(frame_max=FRAME_MAX))
    hello = client.encode(0, m.ConnectionStartOk(client_properties={"capabilities": {"publisher_confirms": True}},
                                                 mechanism="AMQPLAIN",
                                                 response=b"\x05LOGINS\x00\x00\x00\x05guest"
                                                          b"\x08PASSWORDS\x00\x00\x00\x05guest", locale="en_US"))
    hello += client.encode(0, m.ConnectionTuneOk(channel_max=10, frame_max=FRAME_MAX, heartbeat=30))
    hello += client.encode(0, m.ConnectionOpen(virtual_host="/")) + client.encode(1, m.ChannelOpen())
    out += [bytes((RAW,)) + hello, bytes((RAW | 7,)) + hello]
    for index, version in enumerate(VERSIONS[:3]):
        out += [bytes((RAW | index << 5,)) + scram_login(Client(FakeHost(), version), mechanism, initial)
                for mechanism, initial in (("SCRAM-SHA-256", True), ("SCRAM-SHA-1", False))]
    return out


def scram_login(client: Client, mechanism: str, initial_response: bool) -> bytes:
    """A SCRAM login (the RFC example), opening the virtual host and channel 1, then a publish.
    Without an initial response the client-first message goes in the first secure-ok."""
    first, final = MESSAGES[mechanism]
    e = client.encode
    data = e(0, m.ConnectionStartOk(client_properties={}, mechanism=mechanism,
                                    response=first if initial_response else b"", locale="en_US"))
    if not initial_response:
        data += e(0, m.ConnectionSecureOk(response=first))
    data += e(0, m.ConnectionSecureOk(response=final)) + e(0, m.ConnectionSecureOk(response=b""))
    data += e(0, m.ConnectionTuneOk(channel_max=10, frame_max=FRAME_MAX, heartbeat=0))
    data += e(0, m.ConnectionOpen(virtual_host="/")) + e(1, m.ChannelOpen())
    return data + client.publish_bytes(1, "", "q", b"after SCRAM", MessageProperties(), frame_max=FRAME_MAX)
