"""Flow to disk for priority queues, in memory: every level pages, the highest is read back first.

The journal is :class:`~tests.unit.messaging.paging_fake.PagingJournal` (the
test decides when a commit is durable and when a read lands); the Delta
journal's side is in ``tests/lakehouse/test_flow_to_disk.py``.
"""

from __future__ import annotations

import gc
from typing import Any

from broker.messaging.flow_to_disk import FlowToDisk, memory_held
from broker.messaging.message import Message
from broker.messaging.namespace import Namespace
from broker.messaging.paged_queue import PAGE_CHUNK, WINDOW, PagedPriorityQueue
from broker.messaging.priority_queue import PriorityQueue
from broker.messaging.queue import Queue

from .paging_fake import PagingJournal
from .support import FakeClock, RecordingConsumer, message
from .test_paged_queue import EXPIRING, consume_all, dead_letter_queue, run_timers


def persistent(index: int, priority: int, **props: Any) -> Message:
    return message(b"body-%d" % index, delivery_mode=2, priority=priority, **props)


def setup(arguments: dict[str, Any], clock: FakeClock | None = None) -> tuple[Namespace, PagingJournal, Queue]:
    ns = Namespace("v", clock or FakeClock())
    journal = PagingJournal()
    ns.journal = journal  # type: ignore[assignment]
    queue = ns.declare_queue("q", durable=True, arguments={"x-max-priority": 9, **arguments})[0]
    return ns, journal, queue


def publish(journal: PagingJournal, queue: Queue, indices: range, priority_of: Any, **props: Any) -> None:
    for index in indices:
        queue.enqueue(persistent(index, priority_of(index), **props))
    journal.complete()


def by_priority(indices: range, priority_of: Any) -> list[bytes]:
    """Bodies in the order a priority queue delivers them: highest first, FIFO within a priority."""
    return [b"body-%d" % i for i in sorted(indices, key=lambda i: (-priority_of(i), i))]


def live_messages() -> int:
    return sum(1 for obj in gc.get_objects() if type(obj) is Message and obj.body.startswith(b"body-"))


def ten(index: int) -> int:
    return index % 10


def test_a_lazy_priority_queue_pages_every_level_and_delivers_the_highest_first() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    assert type(queue) is PagedPriorityQueue
    count = 4 * PAGE_CHUNK
    publish(journal, queue, range(count), ten)
    assert queue.message_count == count and queue.paged_count == count
    assert queue.message_bytes == queue.paged_bytes == sum(len(b"body-%d" % i) for i in range(count))
    gc.collect()
    assert live_messages() == 0                          # 12 bytes each, whatever the level
    bodies = consume_all(queue, journal)
    assert bodies == by_priority(range(count), ten)
    assert all(len(read) <= WINDOW for read in journal.page_reader.reads)
    assert queue.message_count == 0 and queue.paged_count == 0


def test_only_the_level_holding_the_head_is_read_back() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, range(2 * PAGE_CHUNK), lambda i: 2 if i < PAGE_CHUNK else 7)
    consumer = RecordingConsumer(credit=5)
    queue.add_consumer(consumer)
    queue.dispatch()
    journal.page_reader.finish()
    assert consumer.bodies == [b"body-%d" % i for i in range(PAGE_CHUNK, PAGE_CHUNK + 5)]
    assert journal.page_reader.reads == [list(range(PAGE_CHUNK + 1, 2 * PAGE_CHUNK + 1))]   # level 7's ids
    assert queue.paged_count == PAGE_CHUNK               # level 2 is still on disk


def test_a_higher_priority_arrival_overtakes_the_backlog_being_read() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, range(2 * PAGE_CHUNK), lambda i: 1)
    consumer = RecordingConsumer(credit=3)
    queue.add_consumer(consumer)
    queue.dispatch()
    journal.page_reader.finish()
    publish(journal, queue, range(10_000, 10_003), lambda i: 8)
    consumer.credit = 6
    queue.dispatch()
    assert consumer.bodies == [b"body-0", b"body-1", b"body-2", b"body-10000", b"body-10001", b"body-10002",
                               b"body-3", b"body-4", b"body-5"]


def test_requeued_messages_keep_their_place_in_their_level_and_their_delivery_count() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, range(2 * PAGE_CHUNK), lambda i: 5 if i % 2 else 0)
    consumer = RecordingConsumer(credit=4)
    queue.add_consumer(consumer)
    queue.dispatch()
    journal.page_reader.finish()
    assert consumer.bodies == [b"body-1", b"body-3", b"body-5", b"body-7"]
    second, third = consumer.entries[1], consumer.entries[2]
    queue.release_many([third, second])
    consumer.credit = 3
    queue.dispatch()
    again = consumer.entries[4:]
    assert [e.message.body for e in again] == [b"body-3", b"body-5", b"body-9"]
    assert [(e.redelivered, e.delivery_count) for e in again] == [(True, 1), (True, 1), (False, 0)]


def test_recovered_paged_messages_join_their_priority_level() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy", "x-max-priority": 5})
    rows = journal.page_reader.rows
    priorities = [(0, 3, 9, 5)[i % 4] for i in range(40)]  # 9 is above the top: level 5
    for index in range(40):
        row = persistent(index, priorities[index])
        rows[index + 1] = (row.exchange, row.routing_key, row.body, row.properties, row.arrival)
    assert isinstance(queue, PagedPriorityQueue)
    queue.restore_paged(list(range(1, 41)), [len(b"body-%d" % i) for i in range(40)], priorities)
    assert queue.paged_count == 40 and queue.message_count == 40
    assert consume_all(queue, journal) == by_priority(range(40), lambda i: min(priorities[i], 5))


def test_purge_journals_the_paged_ids_of_every_level_by_ranges() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, range(2 * PAGE_CHUNK), ten)
    publish(journal, queue, range(5_000, 5_005), ten)   # in the tails, in memory
    assert queue.purge() == 2 * PAGE_CHUNK + 5
    assert queue.message_count == queue.paged_count == 0
    assert [e for e in journal.range_events if e[0] == "settle"] == [
        ("settle", "q", [(1, 2 * PAGE_CHUNK)], "purged", None, 0)]
    assert len(journal.of("settle")) == 2 * PAGE_CHUNK + 5
    assert journal.page_reader.reads == []
    publish(journal, queue, range(3), ten)
    assert consume_all(queue, journal) == [b"body-2", b"body-1", b"body-0"]


def test_drop_head_drops_the_highest_priority_head_by_id_without_reading() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy", "x-max-length": PAGE_CHUNK})
    publish(journal, queue, range(PAGE_CHUNK), lambda i: 4)
    publish(journal, queue, range(PAGE_CHUNK, PAGE_CHUNK + 3), lambda i: 1)
    assert queue.message_count == PAGE_CHUNK and journal.page_reader.reads == []
    assert [r for e in journal.range_events for r in e[2]] == [(1, 1), (2, 2), (3, 3)]


def test_paged_levels_expire_without_a_consumer() -> None:
    clock = FakeClock()
    ns, journal, queue = setup(EXPIRING, clock)
    dead = dead_letter_queue(ns)
    count = 3 * WINDOW
    publish(journal, queue, range(count), lambda i: i % 3, arrival=clock.now)
    clock.advance(2)
    run_timers(ns, journal, clock)
    assert queue.message_count == 0 and dead.message_count == count


def test_the_threshold_pages_a_priority_queue_and_it_becomes_plain_again() -> None:
    ns, journal, queue = setup({"x-max-priority": 3})
    count = 3 * WINDOW
    publish(journal, queue, range(count), lambda i: i % 4)
    assert type(queue) is PriorityQueue
    flow = FlowToDisk(threshold=memory_held([queue]) // 2)
    assert flow.check(ns.queues.values())
    assert type(queue) is PagedPriorityQueue
    top = count // 4                                     # the head's level keeps its window
    assert queue.paged_count == count - top and queue.message_count == count
    publish(journal, queue, range(count, count + PAGE_CHUNK), lambda i: i % 4)    # paged while flowing
    assert queue.paged_count == count - top + PAGE_CHUNK
    flow.threshold = memory_held([queue]) * 100
    assert not flow.check(ns.queues.values())
    assert consume_all(queue, journal) == by_priority(range(count + PAGE_CHUNK), lambda i: i % 4)
    assert type(queue) is PriorityQueue and queue.paged_count == 0
