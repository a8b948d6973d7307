"""What durable queues tell the message journal, and how engines wait for it.

A virtual host whose node keeps a journal (the ``delta`` store) hands a
:class:`MessageJournal` to its :class:`~broker.messaging.namespace.Namespace`;
the namespace gives it to every durable queue.  Such a queue reports each
event of each *persistent* message (delivery mode 2) -- enqueued, delivered,
requeued, settled (and how), and its own deletion -- as it happens, on the
event loop.  Non-durable queues and transient messages never reach the
journal (as in RabbitMQ and Broker-J), so they pay nothing.

The journal groups events (group commit): everything reported while the
previous commit is in flight goes into the next one.  An engine that must not
answer before its work is durable -- a publisher confirm, tx.commit-ok --
takes :attr:`MessageJournal.pending` (the group its events joined) and waits
on it with :meth:`Durability.when_durable`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Final, Protocol

if TYPE_CHECKING:
    from broker.messaging.message import Message
    from broker.messaging.queue import Queue, QueueEntry

__all__ = ["MessageJournal", "Durability", "ACKED", "REJECTED", "DEAD_LETTERED", "EXPIRED",
           "DROPPED", "PURGED", "REPLACED", "settle_outcome"]

# how a message left a queue (the journal's ``outcome``)
ACKED: Final = "acked"
REJECTED: Final = "rejected"
DEAD_LETTERED: Final = "dead_lettered"
EXPIRED: Final = "expired"
DROPPED: Final = "dropped"
PURGED: Final = "purged"
REPLACED: Final = "replaced"


def settle_outcome(reason: str, dead_letter_exchange: str | None) -> str:
    """The outcome of a message retired for ``reason`` (RabbitMQ's x-death reason)."""
    if dead_letter_exchange is not None:
        return DEAD_LETTERED
    if reason == "expired":
        return EXPIRED
    if reason == "rejected":
        return REJECTED
    return DROPPED                                   # maxlen, delivery_limit


class Durability(Protocol):
    """One group of journal events on its way to disk."""

    @property
    def done(self) -> bool:
        """True once the group's commit finished (durably, or with :attr:`error`)."""
        ...

    @property
    def error(self) -> BaseException | None:
        """Why the commit failed, when it did."""
        ...

    def when_durable(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the event loop once :attr:`done` (at once if it is)."""
        ...


class MessageJournal(Protocol):
    """Where durable queues record what happens to persistent messages."""

    @property
    def pending(self) -> Durability | None:
        """The group collecting events now, when it holds any; None when all is durable."""
        ...

    def begin_transaction(self) -> None:
        """Tag the events reported until :meth:`end_transaction` with a new transaction id."""
        ...

    def end_transaction(self) -> None: ...

    def enqueued(self, queue: Queue, message: Message, keep: bool = False) -> bool:
        """``message`` (persistent) joined durable ``queue``; the first queue also stores its body.

        ``keep``: the broker itself enqueued it (a dead letter, whose original's
        settlement is kept too): should the commit fail, the row is committed
        again with the next group instead of being given up (not inside a
        transaction, which fails as a whole).  Returns True when the queue need
        not hold the message until the commit: its row is kept so, or nothing
        waits for commits yet (no event loop: start-up, tests).
        """
        ...

    def delivered(self, entry: QueueEntry) -> None:
        """``entry`` went to a consumer or basic.get that will settle it."""
        ...

    def requeued(self, entry: QueueEntry) -> None:
        """``entry`` went back to its queue (its ``delivery_count`` already counts the delivery)."""
        ...

    def settled(self, queue: Queue, message: Message, outcome: str, reason: str | None = None,
                delivery_count: int = 0) -> None:
        """``message`` left ``queue`` for good, with ``outcome`` (see the constants)."""
        ...

    def delivered_ranges(self, queue: Queue, ranges: list[tuple[int, int]], delivery_count: int) -> None:
        """The persistent messages of ``queue`` with the ids of ``ranges`` (``(first, last)``) went
        to a lease consumer together (:mod:`broker.messaging.entry_runs`), each now delivered
        ``delivery_count`` times: as :meth:`delivered` for each, recorded once per range."""
        ...

    def settled_ranges(self, queue: Queue, ranges: list[tuple[int, int]], outcome: str, reason: str | None,
                       delivery_count: int) -> None:
        """The messages of ``queue`` with the ids of ``ranges`` left it together: as :meth:`settled`
        for each, recorded once per range."""
        ...

    def queue_deleted(self, queue: Queue) -> None:
        """Durable ``queue`` was deleted with everything in it."""
        ...

    def producer_committed(self, producer: str, sequence: int) -> None:
        """``producer`` committed its transaction of ``sequence`` (reported inside that transaction).

        See :mod:`broker.messaging.producer_sequences`: the record joins the
        group of the transaction's messages, so both are durable together.
        """
        ...
