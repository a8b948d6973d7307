"""0-8 / 0-9 / 0-9-1 method frames' payloads (the generated ``amqp0_9_1/methods.py``).

The first byte picks the version (modulo 3: 0-9-1, 0-9, 0-8); the rest is a
method frame's payload: class id, method id, arguments.  An unknown method is
the engine's 540 NOT_IMPLEMENTED, not the decoder's business; a known one's
arguments decode or fail with the codec's errors (``ValueError``,
``IndexError``, ``struct.error``).  A decoded method encodes again, in the
same version, to bytes that decode to the same method.
"""

from __future__ import annotations

import struct

from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.versions import VERSION_TABLES
from broker.protocol.detect import AmqpVersion
from fuzz.contract import agree
from tests.unit.protocol.amqp1_0.strategies import same

MALFORMED = (ValueError, IndexError, struct.error)
VERSIONS = (AmqpVersion.V0_9_1, AmqpVersion.V0_9, AmqpVersion.V0_8)
_KEY = struct.Struct(">I")


def one_input(data: bytes) -> None:
    if len(data) < 5:
        return
    decoders, encoders, _pair = VERSION_TABLES[VERSIONS[data[0] % 3]]
    payload = data[1:]
    decoder = decoders.get(_KEY.unpack_from(payload)[0])
    if decoder is None:
        return
    try:
        method = decoder(payload, 4)
    except MALFORMED:
        return
    again = decoder(encoders[type(method)](method), 4)
    agree(f"{method.NAME} round trip", method, again, same)


def seeds() -> list[bytes]:
    samples: list[m.Method] = [
        m.ConnectionStartOk(client_properties={"product": "fuzz", "capabilities": {"publisher_confirms": True}},
                            mechanism="PLAIN", response=b"\x00guest\x00guest", locale="en_US"),
        m.ConnectionTuneOk(channel_max=2047, frame_max=131072, heartbeat=60),
        m.ConnectionOpen(virtual_host="/"), m.ConnectionClose(reply_code=200, reply_text="bye"),
        m.ChannelOpen(), m.ChannelFlow(active=True),
        m.ExchangeDeclare(exchange="e", type="headers", durable=True, arguments={"alternate-exchange": "ae"}),
        m.QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 10, "x-queue-type": "classic"}),
        m.QueueBind(queue="q", exchange="amq.topic", routing_key="a.#", arguments={"x-match": "any"}),
        m.BasicQos(prefetch_count=10), m.BasicConsume(queue="q", consumer_tag="t", no_ack=False,
                                                      arguments={"x-filter-jms-selector": "a = 1"}),
        m.BasicPublish(exchange="amq.topic", routing_key="a.b", mandatory=True),
        m.BasicAck(delivery_tag=5, multiple=True), m.BasicReject(delivery_tag=2, requeue=False),
        m.BasicGet(queue="q", no_ack=True), m.BasicRecover(requeue=True), m.TxSelect(),
    ]
    out = []
    for index, version in enumerate(VERSIONS):
        decoders, encoders, _pair = VERSION_TABLES[version]
        for method in samples:
            encoder = encoders.get(type(method))
            if encoder is not None:
                out.append(bytes((index,)) + encoder(method))
    return out
