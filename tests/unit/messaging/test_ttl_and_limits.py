from __future__ import annotations

from typing import Any

import pytest

from broker.messaging import Namespace, Queue

from .support import FakeClock, RecordingConsumer, drain, message


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def namespace(clock: FakeClock) -> Namespace:
    return Namespace("v", clock, wall_clock=FakeClock(1_700_000_000.0))


def declare(namespace: Namespace, name: str, **arguments: Any) -> Queue:
    queue, _, _ = namespace.declare_queue(name, arguments=arguments or None)
    return queue


def dead_letter_sink(namespace: Namespace, source_args: dict[str, Any]) -> tuple[Queue, Queue]:
    namespace.declare_exchange("dlx", "fanout")
    sink = declare(namespace, "dead")
    namespace.bind_queue("dead", "dlx", "")
    source = declare(namespace, "q", **{"x-dead-letter-exchange": "dlx", **source_args})
    return source, sink


def reasons(queue: Queue) -> list[tuple[bytes, str]]:
    out = []
    while (entry := queue.get(no_ack=True)) is not None:
        out.append((entry.message.body, entry.message.headers["x-death"][0]["reason"]))
    return out


# -- message TTL -----------------------------------------------------------------------------

def test_queue_ttl_expires_messages_at_head(namespace: Namespace, clock: FakeClock) -> None:
    queue = declare(namespace, "q", **{"x-message-ttl": 1000})
    queue.enqueue(message("a", arrival=clock.now))
    clock.advance(0.5)
    queue.enqueue(message("b", arrival=clock.now))
    assert namespace.next_deadline() == pytest.approx(1001.0)
    clock.advance(0.5)
    namespace.run_due(clock.now)
    assert queue.message_count == 1
    assert namespace.next_deadline() == pytest.approx(1001.5)
    clock.advance(0.2)
    assert drain(queue) == [b"b"]


def test_expired_messages_are_skipped_by_get_and_dispatch(namespace: Namespace, clock: FakeClock) -> None:
    queue = declare(namespace, "q", **{"x-message-ttl": 100})
    queue.enqueue(message("old", arrival=clock.now))
    clock.advance(0.05)
    queue.enqueue(message("young", arrival=clock.now))
    clock.advance(0.06)  # old is 110 ms old, young 60 ms
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    queue.dispatch()
    assert consumer.bodies == [b"young"]


def test_per_message_expiration_and_smaller_ttl_wins(namespace: Namespace, clock: FakeClock) -> None:
    long_ttl = declare(namespace, "long", **{"x-message-ttl": 10_000})
    long_ttl.enqueue(message("msg-ttl-wins", arrival=clock.now, expiration="500"))
    short_ttl = declare(namespace, "short", **{"x-message-ttl": 200})
    short_ttl.enqueue(message("queue-ttl-wins", arrival=clock.now, expiration="5000"))
    no_ttl = declare(namespace, "plain")
    no_ttl.enqueue(message("own-expiry", arrival=clock.now, expiration="300"))
    assert namespace.next_deadline() == pytest.approx(1000.2)
    namespace.run_due(1000.25)
    assert (long_ttl.message_count, short_ttl.message_count, no_ttl.message_count) == (1, 0, 1)
    namespace.run_due(1000.35)
    assert no_ttl.message_count == 0
    namespace.run_due(1000.5)
    assert long_ttl.message_count == 0 and namespace.next_deadline() is None


def test_per_message_ttl_only_expires_at_head(namespace: Namespace, clock: FakeClock) -> None:
    """RabbitMQ: a message behind an unexpired one waits until it reaches the head."""
    queue = declare(namespace, "q")
    queue.enqueue(message("forever", arrival=clock.now))
    queue.enqueue(message("short", arrival=clock.now, expiration="10"))
    namespace.run_due(clock.advance(1))
    assert queue.message_count == 2
    first = queue.get(no_ack=True)
    assert first is not None and first.message.body == b"forever"
    assert queue.get() is None  # the expired one is dropped on reaching the head


def test_ttl_zero_delivers_only_to_a_waiting_consumer(namespace: Namespace, clock: FakeClock) -> None:
    queue = declare(namespace, "q", **{"x-message-ttl": 0})
    assert queue.enqueue(message("nobody", arrival=clock.now))
    assert queue.message_count == 0
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    queue.enqueue(message("somebody", arrival=clock.now))
    assert consumer.bodies == [b"somebody"]


def test_ttl_zero_expires_at_once_when_consumers_lack_credit(namespace: Namespace, clock: FakeClock) -> None:
    source, sink = dead_letter_sink(namespace, {"x-message-ttl": 0})
    consumer = RecordingConsumer(credit=0)
    source.add_consumer(consumer)
    assert source.enqueue(message("late", arrival=clock.now))
    assert source.message_count == 0 and consumer.entries == []
    assert reasons(sink) == [(b"late", "expired")]


def test_expired_messages_are_dead_lettered(namespace: Namespace, clock: FakeClock) -> None:
    source, sink = dead_letter_sink(namespace, {"x-message-ttl": 100})
    source.enqueue(message("stale", arrival=clock.now, expiration="50"))
    namespace.run_due(clock.advance(1))
    entry = sink.get()
    assert entry is not None
    death = entry.message.headers["x-death"][0]
    assert death["reason"] == "expired" and death["original-expiration"] == "50"
    assert entry.message.properties.expiration is None


def test_released_message_keeps_its_expiry(namespace: Namespace, clock: FakeClock) -> None:
    queue = declare(namespace, "q", **{"x-message-ttl": 1000})
    queue.enqueue(message("a", arrival=clock.now))
    entry = queue.get()
    assert entry is not None
    clock.advance(2)
    queue.release(entry)
    assert queue.get() is None


# -- queue expiry --------------------------------------------------------------------------

def test_unused_queue_expires(namespace: Namespace, clock: FakeClock) -> None:
    declare(namespace, "q", **{"x-expires": 5000})
    assert namespace.next_deadline() == pytest.approx(1005.0)
    namespace.run_due(clock.advance(4.9))
    assert "q" in namespace.queues
    namespace.run_due(clock.advance(0.1))
    assert "q" not in namespace.queues and namespace.next_deadline() is None


def test_expiry_is_postponed_by_get_redeclare_and_consumers(namespace: Namespace, clock: FakeClock) -> None:
    queue = declare(namespace, "q", **{"x-expires": 1000})
    clock.advance(0.8)
    queue.get()
    namespace.run_due(clock.advance(0.8))
    assert "q" in namespace.queues
    namespace.declare_queue("q", arguments={"x-expires": 1000})  # redeclare
    namespace.run_due(clock.advance(0.8))
    namespace.declare_queue("q", passive=True)
    namespace.run_due(clock.advance(0.8))
    assert "q" in namespace.queues
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    namespace.run_due(clock.advance(60))
    assert "q" in namespace.queues
    queue.remove_consumer(consumer)
    namespace.run_due(clock.advance(0.9))
    assert "q" in namespace.queues
    namespace.run_due(clock.advance(0.1))
    assert "q" not in namespace.queues and queue.deleted


# -- max length -------------------------------------------------------------------------------

def test_max_length_drop_head(namespace: Namespace) -> None:
    queue = declare(namespace, "q", **{"x-max-length": 2})
    for body in "abc":
        assert queue.enqueue(message(body))
    assert drain(queue) == [b"b", b"c"]


def test_max_length_drop_head_dead_letters_with_maxlen(namespace: Namespace) -> None:
    source, sink = dead_letter_sink(namespace, {"x-max-length": 1})
    for body in "abc":
        source.enqueue(message(body))
    assert reasons(sink) == [(b"a", "maxlen"), (b"b", "maxlen")]
    assert drain(source) == [b"c"]


def test_max_length_bytes_drop_head(namespace: Namespace) -> None:
    queue = declare(namespace, "q", **{"x-max-length-bytes": 10})
    for body in ("aaaa", "bbbb", "cccc"):
        queue.enqueue(message(body))
    assert queue.message_bytes == 8
    assert drain(queue) == [b"bbbb", b"cccc"]


def test_reject_publish_refuses_when_full(namespace: Namespace) -> None:
    queue = declare(namespace, "q", **{"x-max-length": 2, "x-overflow": "reject-publish"})
    assert queue.enqueue(message("a")) and queue.enqueue(message("b"))
    assert queue.enqueue(message("c")) is False
    queue.get(no_ack=True)
    assert queue.enqueue(message("d"))
    assert drain(queue) == [b"b", b"d"]


def test_reject_publish_counts_bytes(namespace: Namespace) -> None:
    queue = declare(namespace, "q", **{"x-max-length-bytes": 5, "x-overflow": "reject-publish"})
    assert queue.enqueue(message("abc"))
    assert queue.enqueue(message("def")) is False
    assert queue.enqueue(message("gh"))


def test_reject_publish_dlx_dead_letters_the_refused_message(namespace: Namespace) -> None:
    source, sink = dead_letter_sink(namespace, {"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    assert source.enqueue(message("kept"))
    assert source.enqueue(message("refused")) is False
    assert reasons(sink) == [(b"refused", "maxlen")]
    assert drain(source) == [b"kept"]


def test_unacked_messages_do_not_count_towards_max_length(namespace: Namespace) -> None:
    queue = declare(namespace, "q", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    consumer = RecordingConsumer(credit=2)
    queue.add_consumer(consumer)
    assert queue.enqueue(message("a")) and queue.enqueue(message("b")) and queue.enqueue(message("c"))
    assert queue.enqueue(message("d")) is False
    assert consumer.bodies == [b"a", b"b"] and queue.unacked_count == 2


def test_qpid_ring_policy_drops_oldest(namespace: Namespace) -> None:
    queue = declare(namespace, "q", **{"qpid.max_count": 2, "qpid.policy_type": "ring"})
    for body in "abcd":
        queue.enqueue(message(body))
    assert drain(queue) == [b"c", b"d"]


# -- delivery limit ------------------------------------------------------------------------

def test_delivery_limit_dead_letters_after_too_many_releases(namespace: Namespace) -> None:
    source, sink = dead_letter_sink(namespace, {"x-delivery-limit": 2})
    source.enqueue(message("poison"))
    for expected_count in (0, 1, 2):
        entry = source.get()
        assert entry is not None and entry.delivery_count == expected_count
        source.release(entry)
    assert source.message_count == 0 and source.unacked_count == 0
    assert reasons(sink) == [(b"poison", "delivery_limit")]


def test_qpid_maximum_delivery_count_counts_deliveries_and_drops_without_dlx(namespace: Namespace) -> None:
    """Broker-J: maximumDeliveryAttempts 2 means two deliveries in all, then no more."""
    queue = declare(namespace, "q", **{"x-qpid-maximum-delivery-count": 2})
    queue.enqueue(message("poison"))
    first = queue.get()
    assert first is not None
    queue.release(first)
    second = queue.get()
    assert second is first and second.redelivered and second.delivery_count == 1
    queue.release(second)
    assert queue.message_count == 0 and queue.get() is None and queue.unacked_count == 0
