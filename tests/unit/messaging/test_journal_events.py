"""Durable queues report every event of every persistent message to the journal, and nothing else."""

from __future__ import annotations

import pytest

from broker.messaging.namespace import Namespace
from broker.messaging.queue import Queue

from .journal_fake import RecordingJournal
from .support import FakeClock, RecordingConsumer, message


@pytest.fixture
def journal() -> RecordingJournal:
    return RecordingJournal()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ns(journal: RecordingJournal, clock: FakeClock) -> Namespace:
    namespace = Namespace("v", clock=clock)
    namespace.journal = journal
    return namespace


def durable(ns: Namespace, name: str = "q", **arguments: object) -> Queue:
    return ns.declare_queue(name, durable=True, arguments=dict(arguments))[0]


def persistent(body: str = "m", **props: object) -> object:
    return message(body, delivery_mode=2, **props)


def test_only_persistent_messages_on_durable_non_exclusive_queues_are_journaled(
        ns: Namespace, journal: RecordingJournal) -> None:
    q = durable(ns)
    transient_queue = ns.declare_queue("t")[0]
    exclusive = ns.declare_queue("x", durable=True, exclusive_owner="conn")[0]
    assert q.journal is journal and transient_queue.journal is None and exclusive.journal is None
    q.enqueue(message("transient"))
    q.enqueue(persistent("p"))
    transient_queue.enqueue(persistent("p2"))
    exclusive.enqueue(persistent("p3"))
    assert journal.events == [("enqueue", "q", 1, None)]


def test_a_message_routed_to_two_queues_keeps_one_id(ns: Namespace, journal: RecordingJournal) -> None:
    a, b = durable(ns, "a"), durable(ns, "b")
    m = persistent()
    a.enqueue(m)
    b.enqueue(m)
    assert journal.of("enqueue") == [("enqueue", "a", 1, None), ("enqueue", "b", 1, None)]
    assert m.journal_id == 1


def test_delivery_ack_and_requeue_carry_delivery_counts(ns: Namespace, journal: RecordingJournal) -> None:
    q = durable(ns)
    q.enqueue(persistent())
    journal.complete()                              # held until its enqueue is durable
    consumer = RecordingConsumer()
    q.add_consumer(consumer)
    q.dispatch()
    first = consumer.entries[0]
    q.release(first)                                # requeued, and at once redelivered
    second = consumer.entries[1]
    q.settle(second)
    assert journal.events[1:] == [("deliver", "q", 1, 1), ("requeue", "q", 1, 1), ("deliver", "q", 1, 2),
                                  ("settle", "q", 1, "acked", None, 2, None)]


def test_no_ack_delivery_and_get_settle_at_once(ns: Namespace, journal: RecordingJournal) -> None:
    q = durable(ns)
    q.enqueue(persistent("a"))
    q.enqueue(persistent("b"))
    journal.complete()
    q.get(no_ack=True)
    q.add_consumer(RecordingConsumer(no_ack=True))
    q.dispatch()
    assert [e[3] for e in journal.of("settle")] == ["acked", "acked"]
    assert not journal.of("deliver")


def test_reject_without_and_with_dead_letter_exchange(ns: Namespace, journal: RecordingJournal) -> None:
    plain = durable(ns, "plain")
    plain.enqueue(persistent())
    journal.complete()
    plain.reject(plain.get())                       # type: ignore[arg-type]
    ns.declare_exchange("dlx", "fanout", durable=True)
    dlq = durable(ns, "dlq")
    ns.bind_queue("dlq", "dlx", "")
    dead = durable(ns, "dead", **{"x-dead-letter-exchange": "dlx"})
    dead.enqueue(persistent("d"))
    journal.complete()
    dead.reject(dead.get())                         # type: ignore[arg-type]
    assert dlq.message_count == 1                   # a dead letter is kept, not held
    journal.complete()
    settles = journal.of("settle")
    assert settles[0] == ("settle", "plain", 1, "rejected", "rejected", 1, None)
    assert settles[1] == ("settle", "dead", 2, "dead_lettered", "rejected", 1, None)
    # the dead-lettered copy is a new message (its x-death headers differ)
    assert journal.of("enqueue")[-1] == ("enqueue", "dlq", 3, None)
    assert dlq.message_count == 1


def test_expiry_max_length_and_delivery_limit_outcomes(ns: Namespace, journal: RecordingJournal,
                                                       clock: FakeClock) -> None:
    ttl = durable(ns, "ttl", **{"x-message-ttl": 1000})
    ttl.enqueue(persistent())
    journal.complete()
    clock.advance(2)
    ns.run_due(clock.now)
    short = durable(ns, "short", **{"x-max-length": 1})
    short.enqueue(persistent("old"))
    short.enqueue(persistent("new"))
    limited = durable(ns, "limited", **{"x-delivery-limit": 0})
    limited.enqueue(persistent())
    journal.complete()
    limited.release(limited.get())                  # type: ignore[arg-type]
    assert [(e[1], e[3], e[4]) for e in journal.of("settle")] == [
        ("ttl", "expired", "expired"), ("short", "dropped", "maxlen"),
        ("limited", "dropped", "delivery_limit")]


def test_purge_settles_every_ready_message_and_delete_marks_the_queue(
        ns: Namespace, journal: RecordingJournal) -> None:
    q = durable(ns)
    for body in "abc":
        q.enqueue(persistent(body))
    journal.complete()
    held = q.get()
    assert ns.declare_queue("q", durable=True)[1] == 2
    q.purge()
    assert [(e[2], e[3]) for e in journal.of("settle")] == [(2, "purged"), (3, "purged")]
    assert held is not None and held.acquired         # unacked messages are not purged
    ns.delete_queue("q")
    assert journal.events[-1] == ("queue_deleted", "q")


def test_last_value_queue_journals_the_replaced_message(ns: Namespace, journal: RecordingJournal) -> None:
    q = durable(ns, "lvq", **{"x-last-value-key": "k"})
    q.enqueue(persistent("v1", headers={"k": "a"}))
    q.enqueue(persistent("v2", headers={"k": "a"}))
    journal.complete()
    assert journal.of("settle") == [("settle", "lvq", 1, "replaced", None, 0, None)]


def test_restore_does_not_journal_and_marks_delivered_messages_redelivered(
        ns: Namespace, journal: RecordingJournal) -> None:
    q = durable(ns)
    first, second = persistent("first"), persistent("second")
    q.restore(first, deliveries=2)
    q.restore(second)
    assert journal.events == [] and q.message_count == 2
    got = q.get()
    assert got is not None and got.message is first and got.redelivered and got.delivery_count == 2
    got = q.get()
    assert got is not None and got.message is second and not got.redelivered


def test_a_dead_letter_is_not_held_and_its_rows_survive_a_failed_commit(
        ns: Namespace, journal: RecordingJournal) -> None:
    # the original leaves its queue whatever the journal says: its dead-letter copy must not vanish
    ns.declare_exchange("dlx", "fanout", durable=True)
    dlq = durable(ns, "dlq")
    ns.bind_queue("dlq", "dlx", "")
    work = durable(ns, "work", **{"x-dead-letter-exchange": "dlx"})
    work.enqueue(persistent("bad"))
    journal.complete()
    work.reject(work.get())                         # type: ignore[arg-type]
    assert dlq.message_count == 1                    # not held
    journal.complete(OSError("disk full"))
    assert dlq.message_count == 1


def test_a_held_message_is_dropped_when_its_commit_fails(ns: Namespace, journal: RecordingJournal) -> None:
    q = durable(ns)
    consumer = RecordingConsumer()
    q.add_consumer(consumer)
    q.enqueue(persistent("lost"))
    q.enqueue(message("transient behind it"))
    assert consumer.entries == [] and q.held_count == 2
    journal.complete(OSError("disk full"))
    assert [e.message.body for e in consumer.entries] == [b"transient behind it"]
    assert q.held_count == 0 and q.message_count == 0
