"""Lease consumers (Spark jobs): grants, settlement, lease expiry, sessions, transient messages.

In memory: a namespace with a recording journal and a fake clock; the lease
runs out when the test moves the clock and the namespace's timer runs.
"""

from __future__ import annotations

import pytest

from broker.errors import AccessRefused, ConfigurationError, PreconditionFailed
from broker.messaging.leases import Leases, id_ranges, ids_in
from broker.messaging.namespace import Namespace
from broker.messaging.queue import Queue

from .journal_fake import RecordingJournal
from .support import FakeClock, RecordingConsumer, message
# the namespace of the journal-event tests (a recording journal, a fake clock): the same fixtures
from .test_journal_events import clock, journal, ns  # noqa: F401

LEASE = 30.0




@pytest.fixture
def leases(ns: Namespace) -> Leases:
    return ns.leases


def durable_queue(ns: Namespace, journal: RecordingJournal, count: int, name: str = "q",
                  persistent: bool = True) -> Queue:
    queue = ns.declare_queue(name, durable=True)[0]
    for n in range(count):
        if persistent:
            queue.enqueue(message(f"m{n}", delivery_mode=2))
        else:
            queue.enqueue(message(f"m{n}"))
    journal.complete()                      # the enqueue rows are durable: the messages arrive
    return queue


def expire(ns: Namespace, clock: FakeClock, seconds: float = LEASE + 1) -> None:
    now = clock.advance(seconds)
    deadline = ns.next_deadline()
    assert deadline is not None and deadline <= now
    ns.run_due(now)


def test_a_grant_takes_from_the_head_and_no_other_consumer_gets_those(
        ns: Namespace, journal: RecordingJournal, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 5)
    grant = leases.grant(queue, "job", "s1", 3, LEASE)
    assert grant.message_ids == [1, 2, 3] and grant.redelivered == {} and grant.number == 1
    assert queue.consumer_count == 1 and queue.message_count == 2 and queue.unacked_count == 3
    other = RecordingConsumer("amqp")
    queue.add_consumer(other)
    queue.dispatch()
    assert other.bodies == [b"m3", b"m4"]                 # never the granted ones
    assert journal.of("deliver")[:3] == [("deliver", "q", i, 1) for i in (1, 2, 3)]


def test_settle_acks_in_the_journal_naming_the_consumer_and_is_idempotent(
        ns: Namespace, journal: RecordingJournal, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 3)
    leases.grant(queue, "job", "s1", 3, LEASE)
    done = leases.settle(queue, "job", "s1", [1, 2], LEASE)
    assert (done.settled, done.unknown) == (2, 0)
    assert journal.of("settle") == [("settle", "q", 1, "acked", "consumer:job", 1, None),
                                    ("settle", "q", 2, "acked", "consumer:job", 1, None)]
    again = leases.settle(queue, "job", "s1", [1, 2, 3], LEASE)
    assert (again.settled, again.unknown) == (1, 2)       # 1 and 2 were settled already
    assert len(journal.of("settle")) == 3
    assert queue.unacked_count == 0 and queue.message_count == 0


def test_the_lease_runs_out_and_the_messages_come_back_redelivered(
        ns: Namespace, journal: RecordingJournal, clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 3)
    leases.grant(queue, "job", "s1", 2, LEASE)
    clock.advance(LEASE - 1)
    assert ns.next_deadline() is not None
    leases.grant(queue, "job", "s1", 0, LEASE)          # renewed: not due for another lease
    clock.advance(LEASE - 1)
    ns.run_due(clock())
    assert queue.unacked_count == 2
    expire(ns, clock, 2)
    assert queue.consumer_count == 0 and leases.consumers() == []
    assert queue.message_count == 3 and queue.unacked_count == 0
    assert journal.of("requeue") == [("requeue", "q", 1, 1), ("requeue", "q", 2, 1)]
    taker = RecordingConsumer("amqp")
    queue.add_consumer(taker)
    queue.dispatch()
    assert taker.bodies == [b"m0", b"m1", b"m2"]          # back at their places
    assert [(e.redelivered, e.delivery_count) for e in taker.entries] == [(True, 1), (True, 1), (False, 0)]


def test_a_regrant_reports_earlier_deliveries(ns: Namespace, journal: RecordingJournal,
                                              clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 2)
    leases.grant(queue, "job", "s1", 1, LEASE)
    expire(ns, clock)
    grant = leases.grant(queue, "job", "s1", 5, LEASE)
    assert grant.message_ids == [1, 2] and grant.redelivered == {1: 1}
    assert journal.of("deliver")[-2:] == [("deliver", "q", 1, 2), ("deliver", "q", 2, 1)]


def test_settling_after_the_lease_ran_out_takes_the_message_back_out_of_the_queue(
        ns: Namespace, journal: RecordingJournal, clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 3)
    leases.grant(queue, "job", "s1", 2, LEASE)
    expire(ns, clock)                                    # a restarted job commits late
    done = leases.settle(queue, "job", "s2", [1, 2], LEASE)
    assert (done.settled, done.unknown) == (2, 0)
    assert queue.message_count == 1 and queue.unacked_count == 0
    assert [e[2] for e in journal.of("settle")] == [1, 2]


def test_a_message_another_consumer_took_is_not_settled_by_the_job(
        ns: Namespace, journal: RecordingJournal, clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 1)
    leases.grant(queue, "job", "s1", 1, LEASE)
    expire(ns, clock)
    other = RecordingConsumer("amqp")
    queue.add_consumer(other)
    queue.dispatch()
    done = leases.settle(queue, "job", "s2", [1], LEASE)
    assert (done.settled, done.unknown) == (0, 1)
    assert other.entries[0].acquired and journal.of("settle") == []


def test_a_new_session_keeps_the_old_sessions_messages_held_for_one_lease(
        ns: Namespace, journal: RecordingJournal, clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 6)
    leases.grant(queue, "job", "old", 2, LEASE)           # batch 1: committed to the sink
    leases.grant(queue, "job", "old", 2, LEASE)           # batch 2: logged, not committed
    leases.grant(queue, "job", "old", 2, LEASE)           # granted, never logged (the job died)
    clock.advance(10)
    # the restarted job: commit(last committed end), then replay of the logged batch
    assert leases.settle(queue, "job", "new", [1, 2], LEASE).settled == 2
    claim = leases.claim(queue, "job", "new", [3, 4], LEASE)
    assert claim.message_ids == [3, 4] and claim.missing == []
    consumer = leases.find(queue, "job")
    assert consumer is not None and consumer.held_ids() == [3, 4] and consumer.orphan_ids() == [5, 6]
    assert leases.grant(queue, "job", "new", 10, LEASE).message_ids == []   # 5, 6 still held
    clock.advance(LEASE - 1)
    leases.grant(queue, "job", "new", 0, LEASE)           # the new session renews ...
    ns.run_due(clock())
    assert consumer.orphan_ids() == [5, 6]                # ... not the old one's: held one lease
    clock.advance(1)
    ns.run_due(clock())
    assert consumer.orphan_ids() == [] and queue.message_count == 2      # 5 and 6 went back
    assert leases.grant(queue, "job", "new", 10, LEASE).message_ids == [5, 6]
    assert leases.grant(queue, "job", "new", 10, LEASE).redelivered == {}


def test_a_replay_claims_messages_back_from_the_queue(ns: Namespace, journal: RecordingJournal,
                                                      clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 4)
    leases.grant(queue, "job", "old", 2, LEASE)
    expire(ns, clock)                                    # the job came back too late
    claim = leases.claim(queue, "job", "new", [1, 2, 9], LEASE)
    assert claim.message_ids == [1, 2] and claim.missing == [9] and claim.redelivered == {1: 1, 2: 1}
    assert queue.message_count == 2
    assert leases.grant(queue, "job", "new", 10, LEASE).message_ids == [3, 4]


def test_release_returns_messages_at_once(ns: Namespace, journal: RecordingJournal,
                                          leases: Leases) -> None:
    queue = durable_queue(ns, journal, 3)
    leases.grant(queue, "job", "s", 3, LEASE)
    assert leases.release(queue, "job", [2]) == 1
    assert queue.message_count == 1
    assert leases.release(queue, "job", None) == 2
    assert queue.consumer_count == 0 and queue.message_count == 3
    assert leases.release(queue, "nobody", None) == 0


def test_non_durable_and_exclusive_queues_are_refused_by_name(ns: Namespace, leases: Leases) -> None:
    plain = ns.declare_queue("plain")[0]
    with pytest.raises(PreconditionFailed, match="queue 'plain' in vhost 'v' is not durable"):
        leases.grant(plain, "job", "s", 1, LEASE)
    mine = ns.declare_queue("mine", durable=True, exclusive_owner="conn")[0]
    with pytest.raises(PreconditionFailed, match="'mine'.*exclusive"):
        leases.grant(mine, "job", "s", 1, LEASE)
    assert plain.consumer_count == 0


def test_a_queue_without_a_journal_is_refused(clock: FakeClock) -> None:
    namespace = Namespace("v", clock=clock)
    queue = namespace.declare_queue("q", durable=True)[0]
    with pytest.raises(PreconditionFailed, match="no message journal"):
        namespace.leases.grant(queue, "job", "s", 1, LEASE)


def test_an_exclusive_consumer_keeps_the_job_out(ns: Namespace, journal: RecordingJournal,
                                                 leases: Leases) -> None:
    queue = durable_queue(ns, journal, 1)
    queue.add_consumer(RecordingConsumer("x"), exclusive=True)
    with pytest.raises(AccessRefused):
        leases.grant(queue, "job", "s", 1, LEASE)
    assert leases.consumers() == []


def test_bad_parameters(ns: Namespace, journal: RecordingJournal, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 1)
    with pytest.raises(ConfigurationError, match="leaseSeconds"):
        leases.grant(queue, "job", "s", 1, 0)
    with pytest.raises(ConfigurationError, match="'max'"):
        leases.grant(queue, "job", "s", -1, LEASE)
    with pytest.raises(ConfigurationError, match="'consumer'"):
        leases.grant(queue, "", "s", 1, LEASE)
    with pytest.raises(ConfigurationError, match=r"\[5, 2\]"):
        ids_in([[5, 2]])
    with pytest.raises(ConfigurationError, match="list"):
        ids_in("1-5")


def test_id_ranges_round_trip() -> None:
    assert id_ranges([5, 1, 2, 3, 9, 10]) == [[1, 3], [5, 5], [9, 10]]
    assert ids_in([[1, 3], [5, 5]]) == [1, 2, 3, 5]


def test_a_transient_message_is_journaled_when_granted_and_when_settled(
        ns: Namespace, journal: RecordingJournal, clock: FakeClock, leases: Leases) -> None:
    queue = durable_queue(ns, journal, 2, persistent=False)
    assert journal.events == []                           # transient: nothing journaled yet
    grant = leases.grant(queue, "job", "s", 1, LEASE)
    assert grant.message_ids == [1]
    assert journal.events == [("enqueue", "q", 1, None), ("deliver", "q", 1, 1)]
    assert journal.pending is not None                    # the grant waits for this group
    expire(ns, clock)
    assert journal.of("requeue") == [("requeue", "q", 1, 1)]
    regrant = leases.grant(queue, "job", "s", 2, LEASE)
    assert regrant.message_ids == [1, 2]
    assert journal.of("enqueue") == [("enqueue", "q", 1, None), ("enqueue", "q", 2, None)]  # once each
    leases.settle(queue, "job", "s", [1, 2], LEASE)
    assert [(e[2], e[3], e[4]) for e in journal.of("settle")] == [(1, "acked", "consumer:job"),
                                                                  (2, "acked", "consumer:job")]


def test_deleting_the_queue_detaches_the_consumer(ns: Namespace, journal: RecordingJournal,
                                                  leases: Leases) -> None:
    queue = durable_queue(ns, journal, 2)
    leases.grant(queue, "job", "s", 2, LEASE)
    detached: list[bool] = []
    consumer = leases.find(queue, "job")
    assert consumer is not None
    consumer.on_detach = lambda: detached.append(True)
    ns.delete_queue("q")
    assert leases.consumers() == [] and detached == [True] and ns.next_deadline() is None


def test_a_grant_on_a_priority_queue_takes_the_highest_first(ns: Namespace, journal: RecordingJournal,
                                                             leases: Leases) -> None:
    queue = ns.declare_queue("p", durable=True, arguments={"x-max-priority": 9})[0]
    for n, priority in enumerate((1, 9, 5)):
        queue.enqueue(message(f"m{n}", delivery_mode=2, priority=priority))
    journal.complete()
    assert leases.grant(queue, "job", "s", 3, LEASE).message_ids == [2, 3, 1]
