"""Flow to disk in memory: segments of ids, paged queues, the threshold policy.

The journal is :class:`~tests.unit.messaging.paging_fake.PagingJournal`: the
test decides when a commit is durable and when a read lands.  The Delta
journal's reader is tested in ``tests/lakehouse/test_flow_to_disk.py``.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import pytest

from broker.messaging.flow_to_disk import FlowToDisk, memory_held, threshold_from
from broker.messaging.message import Message
from broker.messaging.namespace import Namespace
from broker.messaging.page_segments import SEGMENT_SIZE, PageSegments
from broker.messaging.paged_queue import PAGE_CHUNK, WINDOW, PagedQueue, start_paging
from broker.messaging.paged_storage import RETRY_SECONDS
from broker.messaging.queue import Queue

from .paging_fake import PagingJournal
from .support import FakeClock, RecordingConsumer, message


def persistent(index: int, **props: Any) -> Message:
    return message(b"body-%d" % index, delivery_mode=2, message_id=f"id-{index}", **props)


def setup(arguments: dict[str, Any] | None = None, clock: FakeClock | None = None
          ) -> tuple[Namespace, PagingJournal, Queue]:
    ns = Namespace("v", clock or FakeClock())
    journal = PagingJournal()
    ns.journal = journal  # type: ignore[assignment]
    queue = ns.declare_queue("q", durable=True, arguments=arguments)[0]
    return ns, journal, queue


def publish(journal: PagingJournal, queue: Queue, count: int, start: int = 0, **props: Any) -> None:
    for index in range(start, start + count):
        queue.enqueue(persistent(index, **props))
    journal.complete()          # the enqueues are durable: the queue takes them (and pages them)


def live_messages(queue: Queue) -> int:
    return sum(1 for obj in gc.get_objects() if type(obj) is Message and obj.routing_key == "rk"
               and obj.body.startswith(b"body-"))


def consume_all(queue: Queue, journal: PagingJournal) -> list[bytes]:
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    queue.dispatch()
    while journal.page_reader.finish():
        pass
    return consumer.bodies


# -- segments ------------------------------------------------------------------------------

def test_segments_count_take_and_clear_across_segment_boundaries() -> None:
    segments = PageSegments()
    total = SEGMENT_SIZE + 100
    segments.extend_ids(range(1, total + 1), [10] * total)
    transient = message(b"t" * 7)
    segments.append(transient)                          # not journaled: held, in order
    segments.append(persistent(0))                      # persistent but never numbered: held too
    assert (segments.count, segments.bytes) == (total + 2, total * 10 + 7 + 6)
    assert (segments.paged_count, segments.paged_bytes) == (total, total * 10)
    assert segments.segment_count == 2
    first = segments.take(SEGMENT_SIZE - 1)
    assert first.ids == list(range(1, SEGMENT_SIZE))
    across = segments.take(3)
    assert across.ids == [SEGMENT_SIZE, SEGMENT_SIZE + 1, SEGMENT_SIZE + 2]
    assert segments.segment_count == 1 and segments.count == total + 2 - SEGMENT_SIZE - 2
    rest = segments.clear()
    assert rest.ids[-2:] == [0, 0] and list(rest.held.values())[0] is transient
    assert rest.paged_ids == list(range(SEGMENT_SIZE + 3, total + 1))
    assert (segments.count, segments.bytes, segments.paged_count, segments.paged_bytes) == (0, 0, 0, 0)
    assert not segments and segments.segment_count == 0


# -- a lazy queue ---------------------------------------------------------------------------

def test_a_lazy_queue_pages_durable_messages_and_drops_their_objects() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    assert type(queue) is PagedQueue
    count = 3 * PAGE_CHUNK + 10
    publish(journal, queue, count)
    assert queue.message_count == count
    assert queue.message_bytes == sum(len(b"body-%d" % i) for i in range(count))
    assert queue.paged_count == 3 * PAGE_CHUNK          # whole chunks once durable; the rest waits
    assert queue.paged_bytes == sum(len(b"body-%d" % i) for i in range(3 * PAGE_CHUNK))
    gc.collect()
    assert live_messages(queue) == 10                   # only the tail's messages are objects


def test_messages_are_paged_only_once_their_commit_is_durable() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    for index in range(PAGE_CHUNK):
        queue.enqueue(persistent(index))
    assert queue.message_count == 0                     # held until the journal says durable
    journal.complete()
    assert queue.paged_count == PAGE_CHUNK
    # a kept enqueue (a dead letter) joins at once: it waits for the next commit to be paged
    for index in range(PAGE_CHUNK):
        queue.enqueue(persistent(PAGE_CHUNK + index), keep=True)
    assert queue.message_count == 2 * PAGE_CHUNK and queue.paged_count == PAGE_CHUNK
    journal.complete()
    assert queue.paged_count == 2 * PAGE_CHUNK
    # a failed commit pages nothing
    for index in range(PAGE_CHUNK):
        queue.enqueue(persistent(2 * PAGE_CHUNK + index), keep=True)
    journal.complete(OSError("disk full"))
    assert queue.paged_count == 2 * PAGE_CHUNK and queue.message_count == 3 * PAGE_CHUNK


def test_consumers_get_every_paged_message_in_order_read_back_in_batches() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    count = 5 * WINDOW + 17
    publish(journal, queue, count)
    bodies = consume_all(queue, journal)
    assert bodies == [b"body-%d" % i for i in range(count)]
    assert all(len(read) <= WINDOW for read in journal.page_reader.reads)
    assert queue.message_count == 0 and queue.paged_count == 0 and queue.unacked_count == count


def test_dispatch_waits_for_the_read_and_reads_ahead_of_the_consumer() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, 4 * WINDOW)
    consumer = RecordingConsumer(credit=10)
    queue.add_consumer(consumer)
    queue.dispatch()
    assert consumer.entries == [] and len(journal.page_reader.pending) == 1   # the head is on disk
    journal.page_reader.finish()
    assert consumer.bodies == [b"body-%d" % i for i in range(10)]
    # the window went below its size: the next batch is being read already
    assert len(journal.page_reader.pending) == 1
    consumer.credit = 3 * WINDOW
    queue.dispatch()
    while journal.page_reader.finish():
        pass
    assert consumer.bodies == [b"body-%d" % i for i in range(3 * WINDOW + 10)]
    assert queue.message_count == WINDOW - 10


def test_properties_and_ids_survive_paging() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, PAGE_CHUNK, headers={"h": 1}, content_type="text/plain")
    entries: list[Any] = []
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    queue.dispatch()
    journal.page_reader.finish()
    entries = consumer.entries
    assert [e.message.properties.message_id for e in entries] == [f"id-{i}" for i in range(PAGE_CHUNK)]
    assert {e.message.properties.content_type for e in entries} == {"text/plain"}
    assert entries[5].message.headers == {"h": 1} and entries[5].message.persistent
    assert [e.message.journal_id for e in entries] == list(range(1, PAGE_CHUNK + 1))


def test_basic_get_waits_for_the_read_of_a_paged_head() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, PAGE_CHUNK)
    assert queue.get() is None                          # on its way back from disk
    held = queue.held_until
    assert held is not None and not held.done
    answered: list[bytes] = []

    def get_now() -> None:
        entry = queue.get(no_ack=True)
        assert entry is not None
        answered.append(entry.message.body)
    held.when_durable(get_now)
    journal.page_reader.finish()
    assert answered == [b"body-0"]


def test_purge_journals_paged_ids_by_ranges_without_reading() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, 2 * PAGE_CHUNK + 5)
    queue.get()                                         # a read is now in flight
    assert journal.page_reader.pending
    assert queue.purge() == 2 * PAGE_CHUNK + 5
    assert queue.message_count == queue.message_bytes == queue.paged_count == queue.paged_bytes == 0
    purged = [e for e in journal.range_events if e[0] == "settle"]
    assert purged == [("settle", "q", [(1, 2 * PAGE_CHUNK)], "purged", None, 0)]
    assert len(journal.of("settle")) == 2 * PAGE_CHUNK + 5          # the tail's, one by one
    journal.page_reader.finish()                        # the read lands after the purge: void
    assert queue.message_count == 0 and queue.get() is None
    publish(journal, queue, 3, start=10_000)            # the queue goes on
    assert consume_all(queue, journal) == [b"body-10000", b"body-10001", b"body-10002"]


def test_delete_drops_the_paged_messages() -> None:
    ns, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, 2 * PAGE_CHUNK)
    assert ns.delete_queue("q") == 2 * PAGE_CHUNK
    assert queue.message_count == 0 and queue.paged_count == 0
    assert journal.of("queue_deleted") == [("queue_deleted", "q")]


def test_max_length_drop_head_drops_paged_messages_by_id() -> None:
    limit = 2 * PAGE_CHUNK
    _, journal, queue = setup({"x-queue-mode": "lazy", "x-max-length": limit})
    publish(journal, queue, limit)
    assert queue.paged_count == limit
    publish(journal, queue, PAGE_CHUNK + 3, start=limit)
    assert queue.message_count == limit and journal.page_reader.reads == []     # dropped unread
    assert [r for event in journal.range_events for r in event[2]] == [(i, i) for i in range(1, PAGE_CHUNK + 4)]
    dropped = sorted(e[2] for e in journal.of("settle") if e[3] == "dropped")
    assert dropped == list(range(1, PAGE_CHUNK + 4))
    assert consume_all(queue, journal) == [b"body-%d" % i for i in range(PAGE_CHUNK + 3, 2 * limit - PAGE_CHUNK + 3)]


def test_drop_head_with_a_dead_letter_exchange_reads_the_head_back_and_dead_letters_it() -> None:
    limit = 2 * PAGE_CHUNK
    ns, journal, queue = setup({"x-queue-mode": "lazy", "x-max-length": limit, "x-dead-letter-exchange": "dlx"})
    assert type(queue) is PagedQueue
    dead = dead_letter_queue(ns)
    publish(journal, queue, limit)
    assert queue.paged_count == limit
    publish(journal, queue, 3, start=limit)
    assert queue.message_count == limit + 3 and len(journal.page_reader.pending) == 1   # the head is read first
    journal.page_reader.finish()
    assert queue.message_count == limit and dead.message_count == 3
    assert [dead.get(no_ack=True).message.body for _ in range(3)] == [b"body-0", b"body-1", b"body-2"]  # type: ignore[union-attr]
    assert [e[3:5] for e in journal.of("settle")] == [("dead_lettered", "maxlen")] * 3
    assert consume_all(queue, journal) == [b"body-%d" % i for i in range(3, limit + 3)]


def test_reject_publish_counts_paged_messages() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy", "x-max-length": PAGE_CHUNK,
                               "x-overflow": "reject-publish"})
    publish(journal, queue, PAGE_CHUNK)
    assert queue.paged_count == PAGE_CHUNK
    assert queue.enqueue(persistent(99_999)) is False


def dead_letter_queue(ns: Namespace) -> Queue:
    """Queue 'dead', bound to the fanout exchange 'dlx'."""
    ns.declare_exchange("dlx", "fanout")
    dead = ns.declare_queue("dead")[0]
    ns.bind_queue("dead", "dlx", "")
    return dead


#: a lazy queue whose messages live a second and are dead-lettered to 'dlx'
EXPIRING = {"x-queue-mode": "lazy", "x-message-ttl": 1000, "x-dead-letter-exchange": "dlx"}


def test_paged_messages_expire_when_read_back_and_are_dead_lettered() -> None:
    clock = FakeClock()
    ns, journal, queue = setup(EXPIRING, clock)
    dead = dead_letter_queue(ns)
    publish(journal, queue, PAGE_CHUNK, arrival=clock.now)
    clock.advance(2)
    assert queue.message_count == PAGE_CHUNK            # paged: expired only when read back
    assert consume_all(queue, journal) == []
    assert queue.message_count == 0 and dead.message_count == PAGE_CHUNK
    assert dead.get() is not None


def test_a_selective_consumer_gets_its_paged_messages_in_order() -> None:
    from broker.messaging.selectors import compile_selector

    _, journal, queue = setup({"x-queue-mode": "lazy"})
    for index in range(3 * PAGE_CHUNK):
        queue.enqueue(persistent(index, headers={"even": index % 2 == 0}))
    journal.complete()
    consumer = RecordingConsumer()
    consumer.selector = compile_selector("even = TRUE")  # type: ignore[attr-defined]
    queue.add_consumer(consumer)
    queue.dispatch()
    while journal.page_reader.finish():
        queue.dispatch()
    assert consumer.bodies == [b"body-%d" % i for i in range(0, 3 * PAGE_CHUNK, 2)]
    assert queue.message_count == 3 * PAGE_CHUNK // 2


def test_messages_missing_from_the_journal_leave_the_counts() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, PAGE_CHUNK)
    del journal.page_reader.rows[3], journal.page_reader.rows[7]
    assert consume_all(queue, journal) == [b"body-%d" % i for i in range(PAGE_CHUNK) if i not in (2, 6)]
    assert queue.message_count == 0 and queue.message_bytes == 0


def test_a_failing_read_is_tried_again_and_delivers_nothing_meanwhile(caplog: pytest.LogCaptureFixture) -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, PAGE_CHUNK)
    journal.page_reader.fail_with = OSError("disk gone")
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    with caplog.at_level(logging.ERROR):
        queue.dispatch()
        journal.page_reader.finish()
        queue.dispatch()
        journal.page_reader.finish()
    assert consumer.entries == [] and queue.message_count == PAGE_CHUNK
    assert sum("reading paged messages back failed" in r.message for r in caplog.records) == 1
    journal.page_reader.fail_with = None
    queue.dispatch()
    journal.page_reader.finish()
    assert len(consumer.entries) == PAGE_CHUNK


def test_browsing_sees_the_window_and_never_reads_more() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, 3 * WINDOW)
    assert queue.browse() == [] and len(journal.page_reader.pending) == 1     # nothing in memory: one window
    journal.page_reader.finish()
    for _ in range(3):                                   # looking again reads nothing more
        assert [e.message.body for e in queue.browse()] == [b"body-%d" % i for i in range(WINDOW)]
    assert journal.page_reader.pending == [] and len(journal.page_reader.reads) == 1
    removed = queue.remove_ready(lambda e: e.message.body == b"body-5")
    assert [e.message.body for e in removed] == [b"body-5"] and queue.message_count == 3 * WINDOW - 1
    assert journal.page_reader.pending == []
    bodies = consume_all(queue, journal)                 # consumers see everything, in order
    assert bodies == [b"body-%d" % i for i in range(3 * WINDOW) if i != 5]


def test_without_an_event_loop_reads_are_answered_at_once() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, 2 * PAGE_CHUNK)
    journal.page_reader.at_once = True
    assert [e.message.body for e in queue.browse(limit=3)] == [b"body-0", b"body-1", b"body-2"]
    bodies = []
    while (entry := queue.get(no_ack=True)) is not None:
        bodies.append(entry.message.body)
    assert bodies == [b"body-%d" % i for i in range(2 * PAGE_CHUNK)]


def test_queues_that_cannot_page_stay_in_memory() -> None:
    ns = Namespace("v")
    journal = PagingJournal()
    ns.journal = journal  # type: ignore[assignment]
    transient = ns.declare_queue("t", arguments={"x-queue-mode": "lazy"})[0]
    last_value = ns.declare_queue("l", durable=True, arguments={"x-queue-mode": "lazy", "x-last-value-key": "k"})[0]
    by_key = ns.declare_queue("s", durable=True, arguments={"x-queue-mode": "lazy", "qpid.queue_sort_key": "k"})[0]
    queues = (transient, last_value, by_key)
    assert [type(q).__name__ for q in queues] == ["Queue", "LastValueQueue", "SortedQueue"]
    assert not any(start_paging(q) for q in queues)


def test_transient_messages_stay_in_memory_among_paged_ones() -> None:
    _, journal, queue = setup({"x-queue-mode": "lazy"})
    for index in range(PAGE_CHUNK):
        queue.enqueue(persistent(index) if index % 100 else message(b"body-%d" % index))
    journal.complete()
    assert queue.paged_count == PAGE_CHUNK - 11 and queue.message_count == PAGE_CHUNK
    assert consume_all(queue, journal) == [b"body-%d" % i for i in range(PAGE_CHUNK)]


# -- the threshold ---------------------------------------------------------------------------

def test_the_broker_flows_to_disk_above_the_threshold_and_stops_below(caplog: pytest.LogCaptureFixture) -> None:
    ns, journal, queue = setup()
    publish(journal, queue, 3 * WINDOW)
    assert type(queue) is Queue
    held = memory_held([queue])
    flow = FlowToDisk(threshold=held // 2)
    with caplog.at_level(logging.WARNING, logger="deltamq"):
        assert flow.check(ns.queues.values())
        assert type(queue) is PagedQueue
        assert queue.paged_count == 2 * WINDOW and queue.message_count == 3 * WINDOW   # the window stays
        assert memory_held([queue]) < held // 2
        # arrivals are paged while flowing
        publish(journal, queue, PAGE_CHUNK, start=3 * WINDOW)
        assert queue.paged_count == 2 * WINDOW + PAGE_CHUNK
        flow.threshold = int(memory_held([queue]) / 0.95)
        assert flow.check(ns.queues.values())           # below the threshold, not below 90% of it
        flow.threshold = held * 10
        assert not flow.check(ns.queues.values())
        flow.check(ns.queues.values())
    started = [r for r in caplog.records if "flow to disk started" in r.message]
    stopped = [r for r in caplog.records if "flow to disk stopped" in r.message]
    assert len(started) == 1 and len(stopped) == 1
    # consumed to the end, the queue is a plain queue again
    assert consume_all(queue, journal) == [b"body-%d" % i for i in range(3 * WINDOW + PAGE_CHUNK)]
    assert type(queue) is Queue and queue.paged_count == 0


def test_the_memory_alarm_does_not_count_paged_messages() -> None:
    from broker.resource_alarms import MESSAGE_OVERHEAD, held_bytes

    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, PAGE_CHUNK + 1)
    assert held_bytes([queue], []) == len(b"body-%d" % PAGE_CHUNK) + MESSAGE_OVERHEAD   # the tail's one
    assert memory_held([queue]) == held_bytes([queue], [])


def test_threshold_values() -> None:
    assert threshold_from(None, 1000) == 750 and threshold_from(" ", 1000) == 750
    assert threshold_from("12345", 1000) == 12345 and threshold_from("0", 1000) == 0
    with pytest.raises(ValueError, match="broker.flowToDiskThreshold"):
        threshold_from("lots", 1000)
    with pytest.raises(ValueError, match="0 or more"):
        threshold_from("-1", 1000)


def test_x_queue_mode_is_checked() -> None:
    from broker.errors import PreconditionFailed

    ns = Namespace("v")
    with pytest.raises(PreconditionFailed, match="x-queue-mode"):
        ns.declare_queue("q", arguments={"x-queue-mode": "sleepy"})
    assert ns.declare_queue("d", arguments={"x-queue-mode": "default"})[0].settings.lazy is False


# -- what the review of the first version found ------------------------------------------------

def test_a_basic_get_waiting_for_a_read_is_answered_when_the_queue_is_purged_or_deleted() -> None:
    ns, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, PAGE_CHUNK)
    assert queue.get() is None
    held = queue.held_until
    assert held is not None and not held.done
    queue.purge()                                        # the read it waits for is void now
    assert held.done
    publish(journal, queue, PAGE_CHUNK, start=PAGE_CHUNK)
    assert queue.get() is None
    held = queue.held_until
    assert held is not None and not held.done
    ns.delete_queue("q")
    assert held.done
    journal.page_reader.finish()
    assert queue.message_count == 0


def test_a_failed_read_is_tried_again_by_the_timer_for_a_waiting_consumer(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    ns, journal, queue = setup({"x-queue-mode": "lazy"}, clock)
    publish(journal, queue, PAGE_CHUNK)
    journal.page_reader.fail_with = OSError("disk gone")
    consumer = RecordingConsumer()                       # credit to spare: it asks for nothing more
    queue.add_consumer(consumer)
    with caplog.at_level(logging.ERROR):
        queue.dispatch()
        journal.page_reader.finish()
    assert consumer.entries == [] and journal.page_reader.pending == []
    journal.page_reader.fail_with = None                 # the disk is back
    deadline = ns.next_deadline()
    assert deadline is not None and deadline <= clock.now + RETRY_SECONDS
    clock.advance(RETRY_SECONDS)
    ns.run_due(clock.now)
    journal.page_reader.finish()
    assert consumer.bodies == [b"body-%d" % i for i in range(PAGE_CHUNK)]
    assert ns.next_deadline() is None


def run_timers(ns: Namespace, journal: PagingJournal, clock: FakeClock, rounds: int = 50) -> None:
    """What the broker's timer loop does: run what is due, then the reads it asked for land."""
    for _ in range(rounds):
        deadline = ns.next_deadline()
        if deadline is None or deadline > clock.now:
            return
        ns.run_due(clock.now)
        journal.page_reader.finish()
    raise AssertionError("the timers never settle")


def test_paged_messages_expire_and_are_dead_lettered_without_a_consumer() -> None:
    clock = FakeClock()
    ns, journal, queue = setup(EXPIRING, clock)
    dead = dead_letter_queue(ns)
    count = 3 * WINDOW
    publish(journal, queue, count, arrival=clock.now)
    assert queue.paged_count == count
    run_timers(ns, journal, clock)                      # the head is read back to learn when it expires
    assert len(journal.page_reader.reads) == 1 and queue.paged_count == count - WINDOW
    assert ns.next_deadline() == clock.now + 1
    clock.advance(2)
    run_timers(ns, journal, clock)
    assert queue.message_count == 0 and queue.paged_count == 0 and dead.message_count == count
    assert [dead.get(no_ack=True).message.body for _ in range(3)] == [b"body-0", b"body-1", b"body-2"]  # type: ignore[union-attr]


def test_recovered_paged_messages_with_their_own_expiration_expire() -> None:
    clock = FakeClock()
    _, journal, queue = setup({"x-queue-mode": "lazy"}, clock)
    rows = journal.page_reader.rows
    for index in range(10):                              # as journaled before a restart
        row = persistent(index, expiration="1000", arrival=clock.now)
        rows[index + 1] = (row.exchange, row.routing_key, row.body, row.properties, row.arrival)
    assert isinstance(queue, PagedQueue)
    queue.restore_paged(list(range(1, 11)), [6] * 10)   # their expiration is on disk
    assert not queue.timed
    clock.advance(2)
    assert consume_all(queue, journal) == []
    assert queue.message_count == 0 and queue.timed
