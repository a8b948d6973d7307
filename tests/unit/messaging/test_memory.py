"""Memory per queued message: at most 300 bytes beyond the body in a standard queue.

Messages are built the way a protocol engine builds them: routing key and
exchange decoded afresh from wire bytes, the properties kept in wire form with
the engine's codec, a fresh clock reading per message, a distinct 256-byte
body.  Everything allocated while they are built and queued is counted,
including the body's own object header; only the 256 body bytes are not.
"""

from __future__ import annotations

import gc
import time
import tracemalloc

from broker.messaging import Message, MessageProperties, Namespace

BODY_SIZE = 256
COUNT = 100_000
BUDGET_PER_MESSAGE = 300


class WireCodec:
    """A compact stand-in for the 0-9-1 basic-properties format."""

    tag = "test-wire"

    def encode(self, props: MessageProperties, annotations: object = None) -> bytes:
        content_type = (props.content_type or "").encode()
        return bytes([0x90, 0x00, len(content_type)]) + content_type + bytes([props.delivery_mode or 0])

    def decode(self, data: bytes) -> MessageProperties:
        size = data[2]
        return MessageProperties(content_type=data[3:3 + size].decode() or None,
                                 delivery_mode=data[3 + size] or None)


def test_queued_message_overhead_is_within_budget() -> None:
    namespace = Namespace("v")
    queue, _, _ = namespace.declare_queue("q", durable=True)
    codec = WireCodec()
    wire_exchange, wire_key = b"", b"orders.created"
    props = MessageProperties(content_type="application/json", delivery_mode=2)
    clock = time.monotonic
    route = namespace.route
    namespace.bind_queue("q", "amq.direct", "orders.created")

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(COUNT):
            body = index.to_bytes(4, "big") * (BODY_SIZE // 4)
            message = Message(exchange="amq.direct" + wire_exchange.decode(),
                              routing_key=wire_key.decode(), body=body, properties=props,
                              native=codec.encode(props), format=codec, arrival=clock())
            for target in route("amq.direct", message):
                target.enqueue(message)
        del body, message, target
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert queue.message_count == COUNT
    per_message = used / COUNT - BODY_SIZE
    print(f"\n{per_message:.1f} bytes per queued message beyond its {BODY_SIZE}-byte body")
    assert per_message <= BUDGET_PER_MESSAGE
    entry = queue.get()
    assert entry is not None and entry.message.properties == props  # still readable
