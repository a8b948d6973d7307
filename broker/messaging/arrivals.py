"""Arrivals held until the journal commit that makes them durable.

A persistent message arriving at a durable queue of a journaled virtual host
is *held* until the journal group holding its ``enqueue`` row is durable
(Broker-J's post-commit action): only then can a consumer or basic.get see
it.  If the commit fails, the message is dropped -- its publisher is nacked,
or its transaction fails -- so a failed publish leaves no trace.  Messages
arriving while others are held (transient ones too) wait behind them: a
queue keeps arrival order.  Group commit keeps the wait short (one commit, a
few milliseconds).

:class:`ArrivalHold` is the part of :class:`~broker.messaging.queue.Queue`
that keeps the held messages; :func:`enqueue_all` routes one publish to
several queues so that none of them sees a message the journal could not
make durable.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Sequence

from broker.messaging.journal import Durability
from broker.messaging.message import Message

if TYPE_CHECKING:
    from broker.messaging.queue import Queue

__all__ = ["ArrivalHold", "enqueue_all"]


def enqueue_all(message: Message, queues: Sequence[Queue], *, keep: bool = False) -> bool:
    """Enqueue ``message`` into every queue; False when some queue refused it (reject-publish).

    When a durable queue journals the message, the queues that do not (non-durable
    ones) get it only once that journal commit is durable, and never if it fails:
    a publish the broker could not make durable reaches no queue at all.
    ``keep``: see :meth:`Queue.enqueue`.
    """
    if len(queues) == 1:
        return queues[0].enqueue(message, keep=keep)
    accepted = True
    unjournaled: list[Queue] = []
    after: Durability | None = None
    for queue in queues:
        journal = queue.journal
        if not message.persistent or journal is None:
            unjournaled.append(queue)
        elif queue.enqueue(message, keep=keep):
            if not keep:
                after = journal.pending
        else:
            accepted = False
    for queue in unjournaled:
        if not queue.enqueue(message, after):
            accepted = False
    return accepted

class ArrivalHold:
    """The held arrivals of a queue (a base of :class:`~broker.messaging.queue.Queue`).

    The state lives in the queue's slots: ``_arriving``, the held messages
    with the journal group each waits for (None: durable at once), in arrival
    order; ``_awaited``, the last group a callback is registered with.
    """

    # The state is in the queue's slots.  No slots here at runtime keeps the
    # queue free of a __dict__; mypy, seeing none, lets these methods assign
    # the attributes annotated below.
    if not TYPE_CHECKING:
        __slots__ = ()

    _arriving: deque[tuple[Message, Durability | None]]
    _awaited: Durability | None
    _deleted: bool

    if TYPE_CHECKING:
        def _accept(self, message: Message) -> None: ...

    @property
    def held_count(self) -> int:
        """Messages accepted but waiting for the journal before they join the queue."""
        return len(self._arriving)

    @property
    def held_until(self) -> Durability | None:
        """The journal group after whose commit every message held now has joined (or not)."""
        return self._awaited if self._arriving else None

    def hold(self, message: Message, durability: Durability | None) -> None:
        """Let ``message`` join the queue once ``durability`` is done (dropped if its commit failed)."""
        self._arriving.append((message, durability))
        if durability is not None and durability is not self._awaited:
            self._awaited = durability
            durability.when_durable(self._arrived)

    def _arrived(self) -> None:
        """A journal group finished: let in the held messages it decided, in arrival order."""
        arriving = self._arriving
        while arriving:
            message, durability = arriving[0]
            if durability is not None and not durability.done:
                return
            arriving.popleft()
            if self._deleted or (durability is not None and durability.error is not None):
                continue                       # never durable: never enqueued (the publisher was nacked)
            self._accept(message)
        self._awaited = None                    # nothing held: let the group and its rows go
