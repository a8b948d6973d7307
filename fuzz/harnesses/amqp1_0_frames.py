"""The AMQP 1.0 engine (``amqp1_0/connection.py``, ``session.py``, ``links.py`` ...) fed a byte stream.

The first byte steers, the rest is what the client sends:

* bit 7 clear: a client has done SASL PLAIN, sent the AMQP header and open,
  begun a session on channel 0 and attached a sender (handle 0) to queue
  ``q`` and a receiver (handle 1) from it with credit, so the stream reaches
  transfers, flows, dispositions and the links' life cycle; set: the stream
  starts right after the SASL protocol header (SASL is the fuzzer's to find;
  the host offers SCRAM too, with the RFC examples' user and nonce,
  :mod:`fuzz.scram_examples`, so seeds log in over ``sasl-challenge``);
* bits 0-6: the stream arrives in pieces of that many bytes (0: in one piece).

The engine must answer anything with a close (or take it), never let an
exception out nor log an internal error, keep no more unparsed input than
one frame of the max-frame-size it announced (4096 here, so that inputs can
exceed it), send only frames a client can decode, and never send the error
``amqp:internal-error`` (what the engine says when it failed itself).
"""

from __future__ import annotations

from typing import Any

from broker.protocol.amqp1_0.conditions import AmqpErrorCondition
from broker.protocol.amqp1_0.definitions import (Accepted, AmqpValue, Attach, Begin, Close, Coordinator, Declare,
                                                 Detach, Discharge, Disposition, End, Flow, Open, Properties,
                                                 SaslInit, SaslResponse, Source, Target, Transfer)
from broker.protocol.amqp1_0.encoding import encode
from broker.protocol.amqp1_0.framing import AMQP_HEADER, TYPE_SASL, encode_frame
from broker.protocol.amqp1_0.types import Described, Symbol
from fuzz.contract import ContractViolation, bounded, no_internal_error
from fuzz.scram_examples import MESSAGES, ScramExamples
from tests.unit.protocol.amqp1_0.engine_client import Client10, Host10, message_payload

MAX_LEN = 16384
FRAME_MAX = 4096
RAW = 0x80
SENDER, RECEIVER = 0, 1
INTERNAL_ERROR = AmqpErrorCondition.INTERNAL_ERROR


class ScramHost10(ScramExamples, Host10):
    """The harness's host: SCRAM (the RFC examples), AMQPLAIN and PLAIN."""


def one_input(data: bytes) -> None:
    if not data:
        return
    steer, stream = data[0], data[1:]
    with no_internal_error():
        host = ScramHost10(frame_max=FRAME_MAX)
        host.namespace.declare_queue("q")
        client = Client10(host)
        if not steer & RAW:
            client.handshake()
            client.begin()
            client.attach_sender("q", handle=SENDER)
            client.attach_receiver("q", handle=RECEIVER)
            client.credit(RECEIVER, 100)
            client.take()
        piece = (steer & 0x7F) or len(stream) or 1
        reader = client.server._reader
        for at in range(0, len(stream), piece):
            client.raw(stream[at:at + piece])
            if not client.server.authentication:
                bounded("the engine's unparsed input", reader.buffered_bytes, max(reader.max_frame_size, 8))
        for sent in client.values():
            error = getattr(sent, "error", None) or getattr(getattr(sent, "state", None), "error", None)
            if error is not None and error.condition == INTERNAL_ERROR:
                raise ContractViolation(f"the engine sent {sent!r}")
        client.server.connection_lost()


def _transfer(delivery_id: int, payload: bytes, **fields: Any) -> bytes:
    return encode_frame(Transfer(handle=SENDER, delivery_id=delivery_id, delivery_tag=bytes((delivery_id,)),
                                 message_format=0, **fields), 0, payload)


def seeds() -> list[bytes]:
    f = encode_frame
    body = message_payload(b"hello", durable=True)
    relay = encode(Properties(to="/queues/q", message_id="m")) + encode(AmqpValue(value={"k": [1, 2]}))
    selector = Source(address="q", filter={Symbol("jms"): Described(Symbol("apache.org:selector-filter:string"),
                                                                    "a IS NULL")})
    streams = [
        _transfer(0, body) + _transfer(1, body, settled=True) + f(Disposition(role=False, first=0, last=1,
                                                                             settled=True, state=Accepted())),
        _transfer(0, body[:3], more=True) + encode_frame(Transfer(handle=SENDER, more=False), 0, body[3:])
        + f(Flow(next_incoming_id=0, incoming_window=10, next_outgoing_id=2, outgoing_window=10, handle=RECEIVER,
                 delivery_count=0, link_credit=0, drain=True, echo=True)),
        f(Attach(name="relay", handle=2, role=False, source=Source(address="c"), target=Target(address=None),
                 initial_delivery_count=0)) + encode_frame(Transfer(handle=2, delivery_id=0, delivery_tag=b"r",
                                                                    settled=True), 0, relay),
        f(Attach(name="sel", handle=3, role=True, source=selector, target=Target(address="c")))
        + f(Detach(handle=3, closed=True)) + f(Detach(handle=SENDER, closed=False)),
        f(Attach(name="tx", handle=4, role=False, source=Source(address="c"),
                 target=Coordinator(capabilities=[Symbol("amqp:local-transactions")]), initial_delivery_count=0))
        + encode_frame(Transfer(handle=4, delivery_id=0, delivery_tag=b"d"), 0, encode(AmqpValue(value=Declare())))
        + encode_frame(Transfer(handle=4, delivery_id=1, delivery_tag=b"x"), 0,
                       encode(AmqpValue(value=Discharge(txn_id=b"\x00\x00\x00\x01", fail=True)))),
        f(Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10), 1) + f(End(), 1) + f(End()) + f(Close()),
        f(None) + f(Close()),
    ]
    sasl = f(SaslInit(mechanism=Symbol("PLAIN"), initial_response=b"\x00guest\x00guest"), frame_type=TYPE_SASL)
    opening = sasl + AMQP_HEADER + f(Open(container_id="fuzz", max_frame_size=FRAME_MAX)) \
        + f(Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10))
    scram = [scram_login(mechanism, initial) + AMQP_HEADER + f(Open(container_id="fuzz", max_frame_size=FRAME_MAX))
             for mechanism, initial in (("SCRAM-SHA-256", True), ("SCRAM-SHA-1", False))]
    return [bytes((0,)) + stream for stream in streams] \
        + [bytes((3,)) + streams[0], bytes((RAW,)) + opening, bytes((RAW | 5,)) + opening] \
        + [bytes((RAW,)) + login for login in scram]


def scram_login(mechanism: str, initial_response: bool) -> bytes:
    """The SASL frames of a SCRAM login (the RFC example); without an initial response the
    client-first message goes in the first sasl-response."""
    first, final = MESSAGES[mechanism]
    sasl: list[Any] = [SaslInit(mechanism=Symbol(mechanism), initial_response=first if initial_response else None)]
    if not initial_response:
        sasl.append(SaslResponse(response=first))
    sasl.append(SaslResponse(response=final))
    return b"".join(encode_frame(frame, frame_type=TYPE_SASL) for frame in sasl)
