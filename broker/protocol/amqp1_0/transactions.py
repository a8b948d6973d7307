"""AMQP 1.0 local transactions (spec part 4): a session's transactions and their work.

A transaction is declared through a coordinator link (:mod:`.coordinator`)
and lives on the session of that link: only links of the same session can
work in it, and a txn-id named on another session is unknown there
(``amqp:transaction:unknown-id``).  Its work is a
:class:`~broker.messaging.transaction.LocalTransaction`, the one the 0-9-1
``tx`` class uses, so a commit is one journal transaction and the discharge
is answered only once the journal has it on disk.

The two kinds of transactional work (spec 4.4):

- *posting*: a transfer whose state is ``transactional-state`` -- its
  message is routed at once (so the sender hears ``rejected`` in the
  transactional state when nothing takes it) but enqueued only on commit;
  the broker answers ``transactional-state(outcome=accepted)``.  A rejected
  transfer the sender had already settled cannot be told about: it makes the
  transaction rollback-only (its discharge is answered
  ``amqp:transaction:rollback``, as Broker-J does).
- *retirement*: a disposition whose state is ``transactional-state``
  carrying the outcome of a delivery the broker sent.  The outcome is
  applied on commit.  On rollback a delivery the client had left unsettled
  stays unsettled, held by its link as before (spec 4.4.2); one it had
  settled goes back to its queue, since no link holds it any more (what a
  JMS rollback expects: the messages are delivered again).

Ending the session, losing the connection or closing the coordinator link
that declared a transaction rolls it back.
"""

from __future__ import annotations

import itertools
import struct
from typing import TYPE_CHECKING, Any, Callable

from broker.messaging.transaction import REJECT, SETTLE, LocalTransaction

from .conditions import ProtocolFault, Scope
from .definitions import (Accepted, Disposition, Error, Modified, Rejected, Released, TransactionalState,
                          TransactionErrorCondition)

if TYPE_CHECKING:
    from broker.messaging.journal import Durability
    from broker.messaging.queue_entry import QueueEntry

    from .links import LinkEndpoint10, SendingLink
    from .session import Session

__all__ = ["Transaction10", "SessionTransactions"]

_IDS = itertools.count(1)
_ID = struct.Struct(">Q")
_RELEASED = Released()
_OUTCOMES = (Accepted, Rejected, Released, Modified)
#: what the commit answers: None (committed) or the error of the ``rejected`` discharge
Answer = Callable[[Error | None], None]


def _rollback_error(description: str) -> Error:
    return Error(condition=TransactionErrorCondition.TRANSACTION_ROLLBACK, description=description[:1000])


class Transaction10:
    """One declared transaction: its id, its work, the coordinator that declared it."""

    __slots__ = ("txn_id", "work", "coordinator", "rollback_only", "held")

    def __init__(self, txn_id: bytes, coordinator: LinkEndpoint10) -> None:
        self.txn_id = txn_id
        self.work = LocalTransaction()
        self.coordinator = coordinator
        #: why the transaction can only roll back (None while it can commit)
        self.rollback_only: str | None = None
        #: deliveries the client retired in the transaction but left unsettled, by delivery id:
        #: (link, entry, outcome), applied at commit (the last outcome given wins)
        self.held: dict[int, tuple[SendingLink, QueueEntry, Any]] = {}

    def __repr__(self) -> str:
        return f"<Transaction10 {self.txn_id.hex()}>"

    # -- posting ----------------------------------------------------------------------------
    def posted(self, state: Any, settled: bool) -> TransactionalState:
        """The broker's answer to a transactional transfer whose outcome is ``state``."""
        if settled and isinstance(state, Rejected) and self.rollback_only is None:
            reason = state.error.description if state.error is not None else "rejected"
            self.rollback_only = f"a message sent settled in the transaction was rejected: {reason}"
        return TransactionalState(txn_id=self.txn_id, outcome=state)

    # -- retirement -------------------------------------------------------------------------
    def retire(self, link: SendingLink, delivery_id: int, entry: QueueEntry, outcome: Any,
               settled: bool) -> None:
        if not settled:
            if isinstance(outcome, _OUTCOMES):       # else (received, none): nothing to apply yet
                self.held[delivery_id] = (link, entry, outcome)
            return
        self.held.pop(delivery_id, None)
        # settled without a terminal outcome: the default one, accepted (as outside a transaction)
        _apply(self.work, entry, outcome if isinstance(outcome, _OUTCOMES) else Accepted())
        queue = entry.queue
        connection = link.connection

        def back_to_the_queue() -> None:            # settled by the client: no link holds it now
            queue.release(entry)
            connection.schedule_dispatch(queue)

        self.work.add_rollback_action(back_to_the_queue)

    # -- discharge --------------------------------------------------------------------------
    def rollback(self) -> None:
        self.held.clear()
        self.work.rollback()

    def commit(self, session: Session, answer: Answer) -> None:
        """Apply the work as one journal transaction; ``answer`` once it is durable (or not)."""
        if self.rollback_only is not None:
            self.rollback()
            answer(_rollback_error(self.rollback_only))
            return
        unsettled = session.unsettled
        for delivery_id, (link, entry, _outcome) in self.held.items():
            item = unsettled.get(delivery_id)
            if item is None or item[0] is not link or item[1] is not entry:
                self.rollback()
                answer(_rollback_error(f"delivery {delivery_id}, retired in the transaction, was settled"
                                       " or released outside it before the discharge"))
                return
        retired = []
        for delivery_id, (link, entry, outcome) in self.held.items():
            del unsettled[delivery_id]                # the link lets go of it: the commit settles it
            _apply(self.work, entry, outcome)
            retired.append((link, delivery_id, entry, outcome))
        self.held.clear()
        settled: list[Any] = [entry for kind, entry, _queues in self.work.operations if kind in (SETTLE, REJECT)]
        journal = getattr(session.namespace, "journal", None)
        if journal is None:
            self.work.commit()
            _retired(session, retired, None)
            answer(None)
            return
        journal.begin_transaction()
        try:
            self.work.commit()
        finally:
            journal.end_transaction()
        pending = journal.pending
        if pending is None:
            _retired(session, retired, None)
            answer(None)
            return
        pending.when_durable(lambda: _durable(session, pending, settled, retired, answer))


def _apply(work: LocalTransaction, entry: QueueEntry, outcome: Any) -> None:
    """Record the terminal ``outcome`` of ``entry`` in ``work``."""
    if isinstance(outcome, Accepted):
        work.settle(entry)
    elif isinstance(outcome, Rejected):
        work.reject(entry)
    else:
        work.release(entry)                           # released, modified


def _retired(session: Session, retired: list[tuple[SendingLink, int, QueueEntry, Any]],
             error: BaseException | None) -> None:
    """Settle, towards the client, the deliveries it left unsettled and the commit retired."""
    connection = session.connection
    for link, delivery_id, entry, outcome in retired:
        connection.schedule_dispatch(entry.queue)
        if not link.detached and not (session.ended or session.ending) and connection.is_open:
            session.send(Disposition(role=False, first=delivery_id, settled=True,
                                     state=outcome if error is None else _RELEASED))


def _durable(session: Session, durability: Durability, settled: list[QueueEntry],
             retired: list[tuple[SendingLink, int, QueueEntry, Any]], answer: Answer) -> None:
    error = durability.error
    if error is not None:
        # all or nothing: the commit's messages were dropped by their queues; what it
        # acknowledged or rejected goes back to its queue
        for entry in settled:
            entry.queue.reinstate(entry)
    _retired(session, retired, error)
    answer(None if error is None else _rollback_error(f"the transaction could not be made durable: {error}"))
    if session.connection.is_open:
        session.connection.run_dispatch()


class SessionTransactions:
    """The live (declared, not yet discharged) transactions of one session, by txn-id."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.live: dict[bytes, Transaction10] = {}

    def declare(self, coordinator: LinkEndpoint10) -> Transaction10:
        txn = Transaction10(_ID.pack(next(_IDS)), coordinator)
        self.live[txn.txn_id] = txn
        return txn

    def of(self, state: Any, link: LinkEndpoint10) -> Transaction10 | None:
        """The transaction a transfer's or disposition's ``state`` names (None: not transactional).

        A txn-id this session has not declared (or has discharged) detaches the
        link with ``amqp:transaction:unknown-id``.
        """
        if not isinstance(state, TransactionalState):
            return None
        txn = self._live(state.txn_id)
        if txn is None:
            raise _unknown(state.txn_id, link)
        return txn

    def retire(self, link: SendingLink, delivery_id: int, entry: QueueEntry, state: TransactionalState,
               settled: bool) -> None:
        """The client's transactional disposition of a delivery the broker sent on ``link``."""
        txn = self._live(state.txn_id)
        if txn is None:
            if settled:                        # off the link's unsettled map: back to its queue
                entry.queue.release(entry)
                link.connection.schedule_dispatch(entry.queue)
            raise _unknown(state.txn_id, link)
        txn.retire(link, delivery_id, entry, state.outcome, settled)

    def _live(self, txn_id: Any) -> Transaction10 | None:
        return self.live.get(bytes(txn_id)) if isinstance(txn_id, (bytes, bytearray)) else None

    def discharge(self, txn_id: Any, fail: bool, answer: Answer) -> None:
        """Commit (``fail`` false) or roll back; ``answer(None)`` on success, else with the error
        of the ``rejected`` outcome (``amqp:transaction:unknown-id`` or ``:rollback``)."""
        txn = self._live(txn_id)
        if txn is not None:
            del self.live[txn.txn_id]
        if txn is None:
            answer(Error(condition=TransactionErrorCondition.UNKNOWN_ID,
                         description=f"transaction {_shown(txn_id)} is not declared on this session"))
        elif fail:
            txn.rollback()
            answer(None)
        else:
            txn.commit(self.session, answer)

    def rollback_declared_by(self, coordinator: LinkEndpoint10) -> None:
        """The coordinator link is gone (detached, or released as its session ended or its
        connection was lost): roll back what it declared and did not discharge."""
        for txn_id, txn in list(self.live.items()):
            if txn.coordinator is coordinator:
                del self.live[txn_id]
                txn.rollback()


def _unknown(txn_id: Any, link: LinkEndpoint10) -> ProtocolFault:
    return ProtocolFault(TransactionErrorCondition.UNKNOWN_ID,
                         f"transaction {_shown(txn_id)} is not declared on this session", Scope.LINK, link.handle)


def _shown(txn_id: Any) -> str:
    return txn_id.hex() if isinstance(txn_id, (bytes, bytearray)) else repr(txn_id)[:64]
