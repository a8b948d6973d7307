"""RabbitMQ's consumer priorities (x-priority): higher first while it has credit, round-robin among equals."""

from __future__ import annotations

from broker.messaging.queue import Queue

from .support import RecordingConsumer, message


def _consumer(tag: str, priority: int, credit: int | None = None) -> RecordingConsumer:
    consumer = RecordingConsumer(tag, credit=credit)
    consumer.priority = priority  # type: ignore[attr-defined]
    return consumer


def test_higher_priority_consumer_gets_messages_while_it_has_credit() -> None:
    queue = Queue("q")
    low = _consumer("low", 0)
    high = _consumer("high", 10, credit=3)
    queue.add_consumer(low)
    queue.add_consumer(high)              # added later, still served first
    for i in range(5):
        queue.enqueue(message(f"m{i}"))
    queue.dispatch()
    assert high.bodies == [b"m0", b"m1", b"m2"]
    assert low.bodies == [b"m3", b"m4"]  # only once the high one is out of credit


def test_equal_priorities_share_round_robin_and_outrank_lower_ones() -> None:
    queue = Queue("q")
    a, b, low = _consumer("a", 5), _consumer("b", 5), _consumer("low", 1)
    for c in (low, a, b):
        queue.add_consumer(c)
    for i in range(6):
        queue.enqueue(message(f"m{i}"))
    queue.dispatch()
    assert len(a.bodies) == 3 and len(b.bodies) == 3 and low.bodies == []


def test_without_priorities_round_robin_is_unchanged() -> None:
    queue = Queue("q")
    a, b = RecordingConsumer("a"), RecordingConsumer("b")
    queue.add_consumer(a)
    queue.add_consumer(b)
    for i in range(4):
        queue.enqueue(message(f"m{i}"))
    queue.dispatch()
    assert a.bodies == [b"m0", b"m2"] and b.bodies == [b"m1", b"m3"]


def test_removing_the_high_priority_consumer_falls_back() -> None:
    queue = Queue("q")
    low, high = _consumer("low", 0), _consumer("high", 9)
    queue.add_consumer(low)
    queue.add_consumer(high)
    queue.remove_consumer(high)
    queue.enqueue(message("after"))
    queue.dispatch()
    assert low.bodies == [b"after"]
