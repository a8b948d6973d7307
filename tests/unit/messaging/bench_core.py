"""Micro-benchmark of the messaging core's hot path: route + enqueue + deliver + settle.

Not a test (pytest does not collect it).  Run from the project root:

    .venv/bin/python -m tests.unit.messaging.bench_core [messages]
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from broker.messaging import Message, MessageProperties, Namespace, QueueEntry

PROPS = MessageProperties(delivery_mode=2, content_type="application/octet-stream")
ENCODED = b"\x90\x00\x02application/octet-stream"


class Codec:
    tag = "bench"

    def encode(self, props: MessageProperties, annotations: object = None) -> bytes:
        return ENCODED

    def decode(self, data: bytes) -> MessageProperties:
        return PROPS


class AckingConsumer:
    """Settles each entry as it is delivered, like a client acking promptly."""

    def __init__(self, no_ack: bool = False) -> None:
        self.tag = "ctag"
        self.no_ack = no_ack
        self.delivered = 0

    def can_deliver(self, entry: QueueEntry) -> bool:
        return True

    def deliver(self, entry: QueueEntry) -> None:
        self.delivered += 1
        if not self.no_ack:
            entry.queue.settle(entry)

    def queue_deleted(self, queue: object) -> None:
        pass


def run(label: str, count: int, setup: Callable[[Namespace], tuple[str, str]],
        no_ack: bool = False) -> None:
    namespace = Namespace("bench")
    exchange, routing_key = setup(namespace)
    consumer = AckingConsumer(no_ack)
    namespace.queue("q").add_consumer(consumer)
    codec = Codec()
    body = bytes(256)
    route = namespace.route
    clock = time.monotonic
    start = time.perf_counter()
    for _ in range(count):
        message = Message(exchange=exchange, routing_key=routing_key, body=body, properties=PROPS,
                          native=ENCODED, format=codec, arrival=clock())
        for queue in route(exchange, message):
            queue.enqueue(message)
    elapsed = time.perf_counter() - start
    assert consumer.delivered == count
    print(f"{label:<42} {count / elapsed:>12,.0f} msg/s")


def _queue(namespace: Namespace) -> None:
    namespace.declare_queue("q")


def default_exchange(namespace: Namespace) -> tuple[str, str]:
    _queue(namespace)
    return "", "q"


def direct_exchange(namespace: Namespace) -> tuple[str, str]:
    _queue(namespace)
    namespace.bind_queue("q", "amq.direct", "orders")
    return "amq.direct", "orders"


def topic_exchange(namespace: Namespace) -> tuple[str, str]:
    _queue(namespace)
    namespace.bind_queue("q", "amq.topic", "orders.*.eu")
    return "amq.topic", "orders.created.eu"


def fanout_exchange(namespace: Namespace) -> tuple[str, str]:
    _queue(namespace)
    namespace.bind_queue("q", "amq.fanout", "")
    return "amq.fanout", ""


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    run("default exchange, ack", count, default_exchange)
    run("default exchange, no_ack", count, default_exchange, no_ack=True)
    run("amq.direct, ack", count, direct_exchange)
    run("amq.topic (cached pattern), ack", count, topic_exchange)
    run("amq.fanout, ack", count, fanout_exchange)
    # enqueue while no consumer, then drain with one
    namespace = Namespace("bench")
    queue, _, _ = namespace.declare_queue("q")
    codec = Codec()
    body = bytes(256)
    start = time.perf_counter()
    for _ in range(count):
        queue.enqueue(Message(exchange="", routing_key="q", body=body, properties=PROPS,
                              native=ENCODED, format=codec, arrival=0.0))
    middle = time.perf_counter()
    consumer = AckingConsumer()
    queue.add_consumer(consumer)
    queue.dispatch()
    end = time.perf_counter()
    assert consumer.delivered == count
    print(f"{'backlog: enqueue only':<42} {count / (middle - start):>12,.0f} msg/s")
    print(f"{'backlog: dispatch + settle':<42} {count / (end - middle):>12,.0f} msg/s")


if __name__ == "__main__":
    main()
