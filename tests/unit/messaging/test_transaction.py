from __future__ import annotations

from broker.messaging import AutoCommitTransaction, LocalTransaction, Namespace, Queue, ServerTransaction, create_queue
from broker.messaging.queue import ACQUIRED, AVAILABLE, SETTLED
from broker.messaging.transaction import ENQUEUE, SETTLE

from .support import drain, message


def queues(*names: str, **arguments: object) -> list[Queue]:
    return [create_queue(name, arguments=dict(arguments) or None) for name in names]


def test_both_kinds_satisfy_the_interface() -> None:
    kinds: list[ServerTransaction] = [AutoCommitTransaction(), LocalTransaction()]
    assert len(kinds) == 2


def test_auto_commit_applies_at_once_and_reports_refusals() -> None:
    tx = AutoCommitTransaction()
    a, b = queues("a", "b")
    full = create_queue("full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    assert tx.enqueue(message("m"), [a, b])
    assert a.message_count == b.message_count == 1
    assert tx.enqueue(message("n"), [a, full]) is False
    assert a.message_count == 2
    entry = a.get()
    assert entry is not None
    tx.settle(entry)
    assert entry.state == SETTLED
    ran: list[int] = []
    tx.add_post_commit_action(lambda: ran.append(1))
    assert ran == [1]


def test_local_transaction_buffers_until_commit() -> None:
    tx = LocalTransaction()
    a, b = queues("a", "b")
    a.enqueue(message("old"))
    held = a.get()
    assert held is not None
    tx.enqueue(message("new"), [a, b])
    tx.settle(held)
    confirmed: list[str] = []
    tx.add_post_commit_action(lambda: confirmed.append("done"))
    assert a.message_count == 0 and b.message_count == 0 and held.state == ACQUIRED
    assert [op[0] for op in tx.operations] == [ENQUEUE, SETTLE] and tx.pending
    assert confirmed == []
    tx.commit()
    assert held.state == SETTLED and a.unacked_count == 0
    assert drain(a) == [b"new"] and drain(b) == [b"new"]
    assert confirmed == ["done"] and not tx.pending


def test_rollback_drops_everything_and_leaves_acks_acquired() -> None:
    tx = LocalTransaction()
    (a,) = queues("a")
    a.enqueue(message("x"))
    held = a.get()
    assert held is not None
    tx.enqueue(message("never"), [a])
    tx.settle(held)
    rolled: list[bool] = []
    tx.add_rollback_action(lambda: rolled.append(True))
    tx.rollback()
    assert rolled == [True]
    assert held.state == ACQUIRED and a.unacked_count == 1 and a.message_count == 0
    tx.commit()  # nothing left to apply
    assert held.state == ACQUIRED and a.message_count == 0


def test_commit_applies_rejects_and_releases() -> None:
    namespace = Namespace("v")
    namespace.declare_queue("dead")
    work, _, _ = namespace.declare_queue("work", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    for body in "abc":
        work.enqueue(message(body))
    a, b, c = work.get(), work.get(), work.get()
    assert a and b and c
    tx = LocalTransaction()
    tx.release(c)
    tx.release(a)
    tx.reject(b)
    assert namespace.queue("dead").message_count == 0
    tx.commit()
    assert a.state == AVAILABLE and c.state == AVAILABLE and b.state == SETTLED
    assert drain(work) == [b"a", b"c"]
    assert drain(namespace.queue("dead")) == [b"b"]


def test_transaction_can_be_reused_after_commit() -> None:
    tx = LocalTransaction()
    (a,) = queues("a")
    tx.enqueue(message("1"), [a])
    tx.commit()
    tx.enqueue(message("2"), [a])
    tx.rollback()
    tx.enqueue(message("3"), [a])
    tx.commit()
    assert drain(a) == [b"1", b"3"]
