"""Server transactions: enqueues and settlements applied together or not at all.

One interface (:class:`ServerTransaction`, Broker-J's name) with two kinds:

- :class:`AutoCommitTransaction` applies each operation at once: a
  channel's publishes and settlements while no tx is selected (Broker-J's
  ``AutoCommitTransaction``), and the broker's own work such as a
  management "move messages".
- :class:`LocalTransaction` (AMQP 0-9-1 tx, AMQP 1.0 local transactions)
  records operations in order and applies them all on :meth:`commit`, or
  forgets them on :meth:`rollback`.  As in RabbitMQ, rolling back
  acknowledgements does not release the messages: they stay acquired by the
  consumer, which may ack them again or recover.

Operations are kept as one ordered list so a durable journal can later write
the persistent ones as a single record before applying them (one atomic
commit), without the engines changing.
"""

from __future__ import annotations

from typing import Callable, Final, Iterable, Protocol, Union

from broker.messaging.message import Message
from broker.messaging.queue import Queue, QueueEntry, enqueue_all

__all__ = ["ServerTransaction", "AutoCommitTransaction", "LocalTransaction",
           "Operation", "ENQUEUE", "SETTLE", "RELEASE", "REJECT"]

ENQUEUE: Final = "enqueue"
SETTLE: Final = "settle"
RELEASE: Final = "release"
REJECT: Final = "reject"

#: ``(ENQUEUE, message, queues)`` or ``(SETTLE | RELEASE | REJECT, entry, None)``
Operation = tuple[str, Union[Message, QueueEntry], Union[tuple[Queue, ...], None]]


class ServerTransaction(Protocol):
    """What engines use to enqueue and settle, whether or not a transaction is open."""

    def enqueue(self, message: Message, queues: Iterable[Queue]) -> bool:
        """Enqueue into every queue; False when applied now and some queue refused it."""
        ...

    def settle(self, entry: QueueEntry) -> None: ...

    def release(self, entry: QueueEntry) -> None: ...

    def reject(self, entry: QueueEntry) -> None: ...

    def add_post_commit_action(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the operations so far are committed (at once for auto-commit)."""
        ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


class AutoCommitTransaction:
    """Applies every operation as it is made."""

    __slots__ = ()

    def enqueue(self, message: Message, queues: Iterable[Queue]) -> bool:
        if type(queues) is list:
            if len(queues) == 1:                # the common case, one call less
                return queues[0].enqueue(message)
            return enqueue_all(message, queues)
        return enqueue_all(message, tuple(queues))

    def settle(self, entry: QueueEntry) -> None:
        entry.queue.settle(entry)

    def release(self, entry: QueueEntry) -> None:
        entry.queue.release(entry)

    def reject(self, entry: QueueEntry) -> None:
        entry.queue.reject(entry)

    def add_post_commit_action(self, action: Callable[[], None]) -> None:
        action()

    def commit(self) -> None:
        """Nothing is ever pending."""

    def rollback(self) -> None:
        """Nothing is ever pending."""


class LocalTransaction:
    """Buffers operations until :meth:`commit` applies them in order."""

    __slots__ = ("_operations", "_post_commit", "_on_rollback")

    def __init__(self) -> None:
        self._operations: list[Operation] = []
        self._post_commit: list[Callable[[], None]] = []
        self._on_rollback: list[Callable[[], None]] = []

    @property
    def operations(self) -> tuple[Operation, ...]:
        """The pending operations, in the order they were made."""
        return tuple(self._operations)

    @property
    def pending(self) -> bool:
        return bool(self._operations or self._post_commit)

    def enqueue(self, message: Message, queues: Iterable[Queue]) -> bool:
        self._operations.append((ENQUEUE, message, tuple(queues)))
        return True

    def settle(self, entry: QueueEntry) -> None:
        self._operations.append((SETTLE, entry, None))

    def release(self, entry: QueueEntry) -> None:
        self._operations.append((RELEASE, entry, None))

    def reject(self, entry: QueueEntry) -> None:
        self._operations.append((REJECT, entry, None))

    def add_post_commit_action(self, action: Callable[[], None]) -> None:
        self._post_commit.append(action)

    def add_rollback_action(self, action: Callable[[], None]) -> None:
        self._on_rollback.append(action)

    def commit(self) -> None:
        """Apply every pending operation in order, then run the post-commit actions."""
        operations, self._operations = self._operations, []
        post_commit, self._post_commit = self._post_commit, []
        self._on_rollback = []
        released: dict[Queue, list[QueueEntry]] = {}
        for kind, subject, queues in operations:
            if kind == ENQUEUE:
                enqueue_all(subject, queues or ())  # type: ignore[arg-type]
                continue
            entry: QueueEntry = subject  # type: ignore[assignment]
            if kind == SETTLE:
                entry.queue.settle(entry)
            elif kind == REJECT:
                entry.queue.reject(entry)
            else:
                released.setdefault(entry.queue, []).append(entry)
        for queue, entries in released.items():
            queue.release_many(entries)
        for action in post_commit:
            action()

    def rollback(self) -> None:
        """Forget every pending operation (acquired messages stay acquired)."""
        on_rollback = self._on_rollback
        self._operations = []
        self._post_commit = []
        self._on_rollback = []
        for action in on_rollback:
            action()
