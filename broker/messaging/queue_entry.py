"""A message's place in a queue, and what a queue expects of its consumers and host.

:class:`QueueEntry` exists from the moment a message first leaves a queue's
head (see :mod:`broker.messaging.queue` for why not before); its ``state`` is
one of :data:`AVAILABLE`, :data:`ACQUIRED` and :data:`SETTLED`.
:class:`Consumer` is implemented by protocol engines, :class:`QueueHost` by
the virtual host's :class:`~broker.messaging.namespace.Namespace`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from broker.messaging.message import Message

if TYPE_CHECKING:
    from broker.messaging.queue import Queue

__all__ = ["QueueEntry", "Consumer", "QueueHost", "AVAILABLE", "ACQUIRED", "SETTLED"]

# QueueEntry states (ints, not an Enum: compared on every delivery).
AVAILABLE: Final = 0  # in the queue's storage, ready for delivery
ACQUIRED: Final = 1   # delivered (or got), waiting for settle/release/reject
SETTLED: Final = 2    # gone from the queue: acked, dead-lettered, expired, dropped


class QueueEntry:
    """A message's place in one queue, created when it first leaves the head.

    ``delivery_count`` is how many times the message was delivered before the
    current delivery; ``redelivered`` is the AMQP redelivered flag.
    ``position`` orders entries within their queue (an int, or a tuple for
    sorted queues).
    """

    __slots__ = ("message", "queue", "position", "delivery_count", "redelivered", "state")

    def __init__(self, message: Message, queue: Queue, position: Any) -> None:
        self.message = message
        self.queue = queue
        self.position = position
        self.delivery_count = 0
        self.redelivered = False
        self.state = AVAILABLE

    def __lt__(self, other: QueueEntry) -> bool:
        return self.position < other.position  # type: ignore[no-any-return]

    @property
    def acquired(self) -> bool:
        return self.state == ACQUIRED

    def settle(self) -> None:
        self.queue.settle(self)

    def release(self) -> None:
        self.queue.release(self)

    def reject(self) -> None:
        self.queue.reject(self)

    def __repr__(self) -> str:
        state = ("available", "acquired", "settled")[self.state]
        return f"<QueueEntry {self.queue.name!r}#{self.position} {state} {self.message!r}>"


class Consumer(Protocol):
    """What a queue needs from a consumer (implemented by protocol engines).

    Two optional attributes, read with ``getattr`` when a consumer is added:
    ``priority`` (int, RabbitMQ's ``x-priority``; default 0) and ``selector``
    (a :class:`~broker.messaging.selectors.Selector` or None: the consumer is
    offered only the messages it matches; see :mod:`broker.messaging.consumers`).
    Both must stay as they were when the consumer was added.
    """

    tag: str
    no_ack: bool

    def can_deliver(self, entry: QueueEntry) -> bool: ...

    def deliver(self, entry: QueueEntry) -> None: ...

    def queue_deleted(self, queue: Queue) -> None: ...


class QueueHost(Protocol):
    """The virtual host side of a queue (the Namespace): dead-lettering and lifetime."""

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None: ...

    def queue_unused(self, queue: Queue) -> None: ...

    def queue_timed(self, queue: Queue) -> None: ...

