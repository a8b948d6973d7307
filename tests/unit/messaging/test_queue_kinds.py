from __future__ import annotations

from typing import Any

import pytest

from broker.messaging import LastValueQueue, PriorityQueue, SortedQueue, create_queue
from broker.messaging.queue import AVAILABLE, SETTLED

from .support import FakeClock, RecordingConsumer, drain, message


def test_create_queue_picks_the_kind() -> None:
    assert type(create_queue("q")).__name__ == "Queue"
    assert isinstance(create_queue("q", arguments={"x-max-priority": 5}), PriorityQueue)
    assert isinstance(create_queue("q", arguments={"x-qpid-priorities": 5}), PriorityQueue)
    assert isinstance(create_queue("q", arguments={"qpid.last_value_queue_key": "k"}), LastValueQueue)
    assert isinstance(create_queue("q", arguments={"qpid.queue_sort_key": "k"}), SortedQueue)
    assert create_queue("q", arguments={"x-max-priority": 5}).type == "priority"


# -- priority ---------------------------------------------------------------------------

def test_priority_higher_first_fifo_within_priority() -> None:
    queue = create_queue("q", arguments={"x-max-priority": 9})
    for body, priority in [("l1", 1), ("h1", 9), ("m1", 5), ("l2", 1), ("h2", 9), ("n1", None), ("m2", 5)]:
        queue.enqueue(message(body, priority=priority))
    assert drain(queue) == [b"h1", b"h2", b"m1", b"m2", b"l1", b"l2", b"n1"]


def test_priority_above_max_is_treated_as_max() -> None:
    queue = create_queue("q", arguments={"x-max-priority": 3})
    queue.enqueue(message("three", priority=3))
    queue.enqueue(message("two-hundred", priority=200))
    queue.enqueue(message("two", priority=2))
    assert drain(queue) == [b"three", b"two-hundred", b"two"]


def test_qpid_priorities_band_the_jms_range() -> None:
    """Broker-J x-qpid-priorities=2: priorities 0-4 share one level, 5-9 the other."""
    queue = create_queue("q", arguments={"x-qpid-priorities": 2})
    assert isinstance(queue, PriorityQueue) and queue.levels == 2
    for body, priority in [("p4", 4), ("p0", 0), ("p5", 5), ("p9", 9), ("p3", 3)]:
        queue.enqueue(message(body, priority=priority))
    assert drain(queue) == [b"p5", b"p9", b"p4", b"p0", b"p3"]


def test_priority_release_keeps_position_within_level() -> None:
    queue = create_queue("q", arguments={"x-max-priority": 5})
    for body, priority in [("a", 5), ("b", 5), ("c", 1)]:
        queue.enqueue(message(body, priority=priority))
    a, b = queue.get(), queue.get()
    assert a and b
    queue.enqueue(message("d", priority=5))
    queue.release(b)
    queue.release(a)
    assert drain(queue) == [b"a", b"b", b"d", b"c"]


def test_priority_dispatch_prefers_new_high_priority_when_credit_returns() -> None:
    queue = create_queue("q", arguments={"x-max-priority": 5})
    consumer = RecordingConsumer(credit=0)
    queue.add_consumer(consumer)
    queue.enqueue(message("low", priority=0))
    queue.enqueue(message("high", priority=5))
    consumer.credit = 1
    queue.dispatch()
    assert consumer.bodies == [b"high"]


def test_priority_purge_and_counts() -> None:
    queue = create_queue("q", arguments={"x-max-priority": 2})
    for priority in (0, 1, 2, 2):
        queue.enqueue(message("x", priority=priority))
    assert queue.message_count == 4
    assert queue.purge() == 4 and queue.get() is None


# -- last value ---------------------------------------------------------------------------

def lvq(**extra: Any) -> LastValueQueue:
    queue = create_queue("q", arguments={"x-last-value-key": "sym", **extra})
    assert isinstance(queue, LastValueQueue)
    return queue


def test_lvq_newer_message_replaces_available_older_one() -> None:
    queue = lvq()
    queue.enqueue(message("ibm-1", headers={"sym": "IBM"}))
    queue.enqueue(message("msft-1", headers={"sym": "MSFT"}))
    queue.enqueue(message("plain"))  # no key: never conflated
    queue.enqueue(message("ibm-2", headers={"sym": "IBM"}))
    queue.enqueue(message("plain2"))
    assert queue.message_count == 4
    assert drain(queue) == [b"msft-1", b"plain", b"ibm-2", b"plain2"]


def test_lvq_does_not_replace_acquired_and_discards_stale_release() -> None:
    queue = lvq()
    queue.enqueue(message("v1", headers={"sym": "A"}))
    held = queue.get()
    assert held is not None
    queue.enqueue(message("v2", headers={"sym": "A"}))
    assert queue.message_count == 1 and held.state != SETTLED
    queue.release(held)  # a newer value exists: discarded, not requeued
    assert held.state == SETTLED
    assert drain(queue) == [b"v2"]


def test_lvq_release_of_latest_requeues_at_original_position() -> None:
    queue = lvq()
    queue.enqueue(message("a1", headers={"sym": "A"}))
    queue.enqueue(message("b1", headers={"sym": "B"}))
    held = queue.get()
    assert held is not None and held.message.body == b"a1"
    queue.release(held)
    assert held.state == AVAILABLE
    queue.enqueue(message("a2", headers={"sym": "A"}))  # replaces the released one
    assert drain(queue) == [b"b1", b"a2"]


def test_lvq_bytes_keys_and_settle_forget_key() -> None:
    queue = lvq()
    queue.enqueue(message("1", headers={"sym": b"K"}))
    queue.enqueue(message("2", headers={"sym": "K"}))
    entry = queue.get()
    assert entry is not None and entry.message.body == b"2"
    queue.settle(entry)
    queue.enqueue(message("3", headers={"sym": "K"}))
    assert drain(queue) == [b"3"]


def test_lvq_immediate_delivery_then_newer_value() -> None:
    queue = lvq()
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    queue.enqueue(message("v1", headers={"sym": "A"}))
    consumer.credit = 0
    queue.enqueue(message("v2", headers={"sym": "A"}))
    queue.enqueue(message("v3", headers={"sym": "A"}))
    assert queue.message_count == 1
    queue.release(consumer.entries[0])
    assert consumer.entries[0].state == SETTLED
    consumer.credit = 5
    queue.dispatch()
    assert consumer.bodies == [b"v1", b"v3"]


def test_lvq_many_replacements_stay_correct_after_compaction() -> None:
    queue = lvq()
    for index in range(500):
        queue.enqueue(message(f"{index}", headers={"sym": index % 3}))
    assert queue.message_count == 3
    assert drain(queue) == [b"497", b"498", b"499"]


# -- sorted ---------------------------------------------------------------------------

def test_sorted_queue_orders_by_header_value() -> None:
    queue = create_queue("q", arguments={"qpid.queue_sort_key": "rank"})
    for body, rank in [("c", "charlie"), ("n10", 10), ("none", None), ("a", "alpha"), ("n9", 9),
                       ("n9b", 9), ("f", 2.5)]:
        queue.enqueue(message(body, headers=None if rank is None else {"rank": rank}))
    assert drain(queue) == [b"none", b"f", b"n9", b"n9b", b"n10", b"a", b"c"]


def test_sorted_queue_release_keeps_place_and_consumer_order() -> None:
    queue = create_queue("q", arguments={"qpid.queue_sort_key": "k"})
    consumer = RecordingConsumer(credit=0)
    queue.add_consumer(consumer)
    for key in (5, 1, 3):
        queue.enqueue(message(str(key), headers={"k": key}))
    consumer.credit = 1
    queue.dispatch()
    assert consumer.bodies == [b"1"]
    queue.enqueue(message("2", headers={"k": 2}))
    consumer.credit = 0
    queue.release(consumer.entries[0])
    consumer.credit = 10
    queue.dispatch()
    assert consumer.bodies == [b"1", b"1", b"2", b"3", b"5"]


@pytest.mark.parametrize("arguments", [
    {"x-max-priority": 5}, {"x-last-value-key": "k"}, {"qpid.queue_sort_key": "k"}, {}])
def test_every_kind_expires_head_messages(arguments: dict[str, Any]) -> None:
    clock = FakeClock(100.0)
    queue = create_queue("q", arguments={**arguments, "x-message-ttl": 1000}, clock=clock)
    queue.enqueue(message("old", arrival=100.0, headers={"k": 1}, priority=1))
    queue.enqueue(message("new", arrival=100.5, headers={"k": 2}, priority=1))
    assert queue.next_deadline() == pytest.approx(101.0)
    queue.run_due(101.0)
    assert queue.message_count == 1
    assert queue.next_deadline() == pytest.approx(101.5)
    queue.run_due(101.5)
    assert queue.message_count == 0 and queue.next_deadline() is None
