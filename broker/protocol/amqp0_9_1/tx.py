"""The tx class (spec 0-9-1 section 1.9) of a channel: select, commit, rollback.

A channel starts with an :class:`~broker.messaging.transaction.AutoCommitTransaction`
(every publish and settlement applied at once); ``tx.select`` gives it a
:class:`~broker.messaging.transaction.LocalTransaction`, which ``tx.commit``
applies as one journal group and answers with commit-ok only once that group
is durable (what the client asks after the commit waits behind the answer).
If the journal fails, the commit is undone: its publishes reached no queue,
its acknowledged messages go back to their queues, and the channel is closed
with the store's error.

A transaction whose messages carry a producer mark (the Spark sink's
exactly-once publishing; :mod:`broker.messaging.producer_sequences`) is
checked at commit: a replayed sequence is dropped whole and answered
commit-ok; a new one is recorded in the same journal group as its messages.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.messaging.message import MessageProperties
from broker.messaging.producer_sequences import PRODUCER_HEADER, ProducerMark, ProducerSequences, producer_mark
from broker.messaging.transaction import REJECT, SETTLE, AutoCommitTransaction, LocalTransaction

from . import methods as m
from .properties import encode_properties

if TYPE_CHECKING:
    from broker.messaging.journal import Durability, MessageJournal

    from .connection import AmqpConnection
    from .replies import Reservation, ReplyOrder

__all__ = ["Mode", "TxMethods", "PRODUCER_HEADER"]


class Mode(enum.Enum):
    """What a channel does with publishes: plain, publisher confirms, or transactions."""

    NORMAL = 0
    CONFIRM = 1
    TX = 2


class TxMethods:
    """The tx-class handlers of :class:`~.channel.Channel` (mixed into it)."""

    connection: AmqpConnection
    number: int
    closing: bool
    mode: Mode
    tx: LocalTransaction | AutoCommitTransaction
    _journal: MessageJournal | None
    _replies: ReplyOrder
    namespace: Any
    _producer: ProducerMark | None = None      # the producer mark of the open transaction

    if TYPE_CHECKING:                    # the channel's own, which these handlers use
        def reply(self, method: m.Method) -> None: ...

        def soft_error(self, exc: errors.BrokerError, method: m.Method) -> None: ...

        def resume_deliveries(self) -> None: ...

    def _tx_select(self, method: m.TxSelect) -> None:
        if self.mode is Mode.CONFIRM:
            raise errors.PreconditionFailed("cannot switch from confirm to tx mode")
        if self.mode is not Mode.TX:
            self.mode = Mode.TX
            self.tx = LocalTransaction()
        self.reply(m.TxSelectOk())

    def producer_marked(self, props: MessageProperties) -> tuple[MessageProperties, bytes, dict[str, Any] | None]:
        """A publish carries a producer mark: check it, note it, strip it (props, bytes, headers)."""
        assert props.headers is not None
        mark, headers = producer_mark(props.headers)
        if self.mode is not Mode.TX:
            raise errors.PreconditionFailed(
                f"producer '{mark.producer}' marks its messages for exactly-once publishing,"
                " which needs a transactional channel (tx.select)")
        if self._producer is None:
            self._producer = mark
        elif self._producer != mark:
            raise errors.PreconditionFailed(
                f"one transaction publishes one producer sequence: got producer '{mark.producer}'"
                f" sequence {mark.sequence} after '{self._producer.producer}' {self._producer.sequence}")
        props = props.replace(headers=headers or None)
        return props, encode_properties(props), props.headers

    def _tx_commit(self, method: m.TxCommit) -> None:
        if not isinstance(self.tx, LocalTransaction):
            raise errors.PreconditionFailed("channel is not transactional")
        mark, self._producer = self._producer, None
        producers: ProducerSequences | None = getattr(self.namespace, "producers", None)
        if mark is not None and producers is not None:
            replay = producers.admit(mark)
            if replay is not None:               # published before: drop it, answer as the original
                self.tx.rollback()
                self.tx = LocalTransaction()
                if replay.original is None or replay.original.done and replay.original.error is None:
                    self.reply(m.TxCommitOk())
                else:
                    place = self._replies.reserve()
                    original = replay.original
                    original.when_durable(lambda: self._tx_durable(original, [], place))
                return
        journal = self._journal
        if journal is None:
            self.tx.commit()
            self.tx = LocalTransaction()
            if mark is not None and producers is not None:
                producers.committing(mark, None)
            self.reply(m.TxCommitOk())
            return
        settled = [entry for kind, entry, _queues in self.tx.operations if kind in (SETTLE, REJECT)]
        journal.begin_transaction()
        try:
            self.tx.commit()
            if mark is not None:
                journal.producer_committed(mark.producer, mark.sequence)
        finally:
            journal.end_transaction()
        self.tx = LocalTransaction()
        pending = journal.pending
        if mark is not None and producers is not None:
            producers.committing(mark, pending)
        if pending is None:
            self.reply(m.TxCommitOk())
        else:
            # commit-ok once the journal has it on disk; later replies wait behind it
            place = self._replies.reserve()
            pending.when_durable(lambda: self._tx_durable(pending, settled, place))

    def _tx_durable(self, durability: Durability, settled: list[Any], place: Reservation) -> None:
        connection = self.connection
        if durability.error is not None:
            # all or nothing: its publishes were dropped by their queues; its
            # acknowledged and rejected messages go back to theirs.  What the
            # client asked after the commit is answered by the channel's close.
            for entry in settled:
                entry.queue.reinstate(entry)
            if not connection.is_open:
                self._replies.discard()
            elif self.closing:                   # a close already asked for: its close-ok may go
                self._replies.fill(place, [], 0)
            elif connection.channels.get(self.number) is not self:
                self._replies.discard()
            else:
                self._replies.discard()
                self.soft_error(errors.StoreFailed(
                    f"transaction could not be made durable: {durability.error}"), m.TxCommit())
            return
        if not connection.is_open:
            self._replies.discard()
            return
        data = connection.encode_method(self.number, m.TxCommitOk())
        self._replies.fill(place, [data], len(data))
        if not self._replies.holding and not self.closing:
            self.resume_deliveries()             # deliveries waited for the reply
            connection.run_dispatch()

    def _tx_rollback(self, method: m.TxRollback) -> None:
        if not isinstance(self.tx, LocalTransaction):
            raise errors.PreconditionFailed("channel is not transactional")
        self.tx.rollback()
        self.tx = LocalTransaction()
        self._producer = None
        self.reply(m.TxRollbackOk())
