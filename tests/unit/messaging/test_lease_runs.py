"""Lease grants by runs: fresh messages taken at once and journaled by ranges, split when needed.

A grant of the fresh persistent messages at a standard queue's head reports
one ``deliver`` per range of consecutive ids to the journal, and a settlement
of all of them one ``settle`` per range; whatever names part of a run handles
its messages one by one, with the same outcome as if they had been taken so.
"""

from __future__ import annotations

from broker.messaging.leases import Leases
from broker.messaging.namespace import Namespace
from broker.messaging.queue import Queue

from .journal_fake import RecordingJournal
from .support import FakeClock, RecordingConsumer, message
from .test_journal_events import clock, journal, ns  # noqa: F401
from .test_leases import LEASE, durable_queue, expire, leases  # noqa: F401


def test_a_grant_of_fresh_messages_is_one_range_and_its_settlement_another(
        ns: Namespace, journal: RecordingJournal, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 10)
    grant = leases.grant(queue, "job", "s1", 6, LEASE)
    assert grant.ranges == [(1, 6)] and grant.count == 6 and grant.message_ids == [1, 2, 3, 4, 5, 6]
    assert journal.range_events == [("deliver", "q", [(1, 6)], 1)]
    assert queue.message_count == 4 and queue.unacked_count == 6 and queue.unacked_bytes == 12
    consumer = leases.find(queue, "job")
    assert consumer is not None and consumer.held == {} and consumer.held_count == 6
    done = leases.settle_ranges(queue, "job", "s1", [(1, 6)], LEASE)
    assert (done.settled, done.unknown) == (6, 0)
    assert journal.range_events[1:] == [("settle", "q", [(1, 6)], "acked", "consumer:job", 1)]
    assert queue.unacked_count == 0 and queue.unacked_bytes == 0 and consumer.held_count == 0
    assert leases.settle_ranges(queue, "job", "s1", [(1, 6)], LEASE).unknown == 6   # idempotent
    assert len(journal.of("settle")) == 6


def test_ids_interleaved_with_another_queues_make_one_range_each(
        ns: Namespace, journal: RecordingJournal, leases: Leases) -> None:
    queue = ns.declare_queue("q", durable=True)[0]
    other = ns.declare_queue("other", durable=True)[0]
    for n in range(6):
        (queue if n % 3 else other).enqueue(message(f"m{n}", delivery_mode=2))
    journal.complete()
    grant = leases.grant(queue, "job", "s", 10, LEASE)
    assert grant.ranges == [(2, 3), (5, 6)]                  # never other's 1 and 4
    assert journal.range_events == [("deliver", "q", [(2, 3), (5, 6)], 1)]


def test_settling_part_of_a_run_splits_it_and_the_rest_comes_back_in_place(
        ns: Namespace, journal: RecordingJournal, clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 6)
    leases.grant(queue, "job", "s1", 4, LEASE)
    assert leases.settle(queue, "job", "s1", [2, 3], LEASE).settled == 2
    assert len(journal.range_events) == 1                    # the deliver: these two settle one by one
    assert [e[2] for e in journal.of("settle")] == [2, 3]
    consumer = leases.find(queue, "job")
    assert consumer is not None and consumer.held_ids() == [1, 4] and consumer.runs == []
    expire(ns, clock)
    assert journal.of("requeue") == [("requeue", "q", 1, 1), ("requeue", "q", 4, 1)]
    taker = RecordingConsumer("amqp")
    queue.add_consumer(taker)
    queue.dispatch()
    assert taker.bodies == [b"m0", b"m3", b"m4", b"m5"]     # back at their places, ahead of the fresh
    assert [e.delivery_count for e in taker.entries] == [1, 1, 0, 0]


def test_a_grant_takes_requeued_messages_one_by_one_then_a_run(
        ns: Namespace, journal: RecordingJournal, clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 5)
    leases.grant(queue, "job", "s1", 2, LEASE)
    expire(ns, clock)
    journal.range_events.clear()
    grant = leases.grant(queue, "job", "s1", 10, LEASE)
    assert grant.message_ids == [1, 2, 3, 4, 5] and grant.redelivered == {1: 1, 2: 1}
    assert grant.ranges == [(1, 5)]
    assert journal.range_events == [("deliver", "q", [(3, 5)], 1)]
    assert journal.of("deliver")[-5:-3] == [("deliver", "q", 1, 2), ("deliver", "q", 2, 2)]


def test_a_transient_message_ends_a_run(ns: Namespace, journal: RecordingJournal, leases: Leases) -> None:
    queue = ns.declare_queue("q", durable=True)[0]
    for n, mode in enumerate((2, 2, 1, 2)):
        queue.enqueue(message(f"m{n}", delivery_mode=mode))
    journal.complete()
    grant = leases.grant(queue, "job", "s", 10, LEASE)
    # the transient one is journaled (numbered) when granted, one by one
    assert grant.message_ids == [1, 2, 4, 3] and grant.ranges == [(1, 4)]
    assert journal.range_events == [("deliver", "q", [(1, 2)], 1), ("deliver", "q", [(3, 3)], 1)]
    assert ("enqueue", "q", 4, None) in journal.events


def test_queues_taking_one_by_one_journal_per_message(
        ns: Namespace, journal: RecordingJournal, leases: Leases) -> None:
    timed = ns.declare_queue("ttl", durable=True, arguments={"x-message-ttl": 60_000})[0]
    ranked = ns.declare_queue("p", durable=True, arguments={"x-max-priority": 5})[0]
    for queue in (timed, ranked):
        for n in range(3):
            queue.enqueue(message(f"m{n}", delivery_mode=2))
    journal.complete()
    assert leases.grant(timed, "job", "s", 3, LEASE).count == 3
    assert leases.grant(ranked, "job", "s", 3, LEASE).count == 3
    assert journal.range_events == [] and len(journal.of("deliver")) == 6


def test_a_replay_adopts_a_whole_run_of_the_earlier_session(
        ns: Namespace, journal: RecordingJournal, clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 9)
    leases.grant(queue, "job", "old", 3, LEASE)             # committed to the sink
    leases.grant(queue, "job", "old", 3, LEASE)             # logged, not committed
    leases.grant(queue, "job", "old", 3, LEASE)             # never logged
    consumer = leases.find(queue, "job")
    assert consumer is not None
    assert leases.settle(queue, "job", "new", [1, 2, 3], LEASE).settled == 3
    claim = leases.claim(queue, "job", "new", [4, 5, 6], LEASE)
    assert claim.ranges == [(4, 6)] and claim.missing == [] and claim.redelivered == {}
    assert [run.ranges for run in consumer.runs] == [[(4, 6)]] and consumer.orphan_ids() == [7, 8, 9]
    assert [e[0] for e in journal.range_events] == ["deliver"] * 3 + ["settle"]
    clock.advance(LEASE)
    leases.grant(queue, "job", "new", 0, LEASE)             # the orphans' lease ran out
    ns.run_due(clock())
    assert consumer.orphan_ids() == [] and queue.message_count == 3
    assert leases.settle(queue, "job", "new", [4, 5, 6], LEASE).settled == 3
    assert journal.range_events[-1] == ("settle", "q", [(4, 6)], "acked", "consumer:job", 1)


def test_release_and_queue_deletion_with_runs_held(ns: Namespace, journal: RecordingJournal,
                                                   leases: Leases) -> None:
    queue = durable_queue(ns, journal, 4)
    leases.grant(queue, "job", "s", 4, LEASE)
    assert leases.release(queue, "job", [2]) == 1
    consumer = leases.find(queue, "job")
    assert consumer is not None and consumer.held_ids() == [1, 3, 4]
    assert queue.message_count == 1 and queue.unacked_count == 3
    assert leases.release(queue, "job", None) == 3 and queue.message_count == 4 and queue.unacked_count == 0
    leases.grant(queue, "job", "s", 4, LEASE)
    again = leases.find(queue, "job")
    assert again is not None and again.held_count == 4 and queue.unacked_count == 4
    ns.delete_queue("q")
    assert leases.consumers() == [] and again.held_count == 0


def test_a_run_is_taken_from_a_queue_and_counted_like_gets(ns: Namespace, journal: RecordingJournal) -> None:
    queue: Queue = durable_queue(ns, journal, 3)
    run = queue.take_run(2)
    assert run is not None and len(run) == 2 and run.ranges == [(1, 2)]
    assert queue.delivered_messages == 2 and queue.message_count == 1 and queue.unacked_count == 2
    entries = queue.split_run(run)
    assert [(e.position, e.acquired, e.message.body) for e in entries] == [(0, True, b"m0"), (1, True, b"m1")]
    assert len(run) == 0 and queue.settle_run(run) == 0 and queue.split_run(run) == []
    entry = queue.get()
    assert entry is not None and entry.position == 2      # numbered after the run
    assert queue.take_run(5) is None                      # nothing left
