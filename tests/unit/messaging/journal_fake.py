"""A MessageJournal that records events in memory; the test decides when a group is durable."""

from __future__ import annotations

from typing import Any, Callable

from broker.messaging.message import Message
from broker.messaging.queue import Queue, QueueEntry


class Group:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.callbacks: list[Callable[[], None]] = []
        self.done = False
        self.error: BaseException | None = None

    def when_durable(self, callback: Callable[[], None]) -> None:
        if self.done:
            callback()
        else:
            self.callbacks.append(callback)


class RecordingJournal:
    """Events as tuples ``(event, queue, message_id, ...)``; :meth:`complete` makes a group durable.

    Events reported by ranges are recorded per message in :attr:`events` (what
    they stand for) and as reported in :attr:`range_events`.
    """

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.range_events: list[tuple[Any, ...]] = []
        self.group = Group()
        self.next_id = 1
        self.tx: int | None = None
        self.next_tx = 1

    @property
    def pending(self) -> Group | None:
        return self.group if self.group.events else None

    def complete(self, error: BaseException | None = None) -> None:
        """The open group's commit finished (with ``error`` when it failed); a new group opens."""
        group, self.group = self.group, Group()
        group.done, group.error = True, error
        for callback in group.callbacks:
            callback()

    def _record(self, *event: Any) -> None:
        self.events.append(event)
        self.group.events.append(event)

    def begin_transaction(self) -> None:
        self.tx, self.next_tx = self.next_tx, self.next_tx + 1

    def end_transaction(self) -> None:
        self.tx = None

    def enqueued(self, queue: Queue, message: Message, keep: bool = False) -> bool:
        if not message.journal_id:
            message.journal_id = self.next_id
            self.next_id += 1
        self._record("enqueue", queue.name, message.journal_id, self.tx)
        return keep and self.tx is None

    def delivered(self, entry: QueueEntry) -> None:
        self._record("deliver", entry.queue.name, entry.message.journal_id, entry.delivery_count + 1)

    def requeued(self, entry: QueueEntry) -> None:
        self._record("requeue", entry.queue.name, entry.message.journal_id, entry.delivery_count)

    def settled(self, queue: Queue, message: Message, outcome: str, reason: str | None = None,
                delivery_count: int = 0) -> None:
        self._record("settle", queue.name, message.journal_id, outcome, reason, delivery_count, self.tx)

    def delivered_ranges(self, queue: Queue, ranges: list[tuple[int, int]], delivery_count: int) -> None:
        self.range_events.append(("deliver", queue.name, list(ranges), delivery_count))
        for first, last in ranges:
            for message_id in range(first, last + 1):
                self._record("deliver", queue.name, message_id, delivery_count)

    def settled_ranges(self, queue: Queue, ranges: list[tuple[int, int]], outcome: str, reason: str | None,
                       delivery_count: int) -> None:
        self.range_events.append(("settle", queue.name, list(ranges), outcome, reason, delivery_count))
        for first, last in ranges:
            for message_id in range(first, last + 1):
                self._record("settle", queue.name, message_id, outcome, reason, delivery_count, self.tx)

    def queue_deleted(self, queue: Queue) -> None:
        self._record("queue_deleted", queue.name)

    def producer_committed(self, producer: str, sequence: int) -> None:
        self._record("producer_sequence", producer, sequence, self.tx)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == kind]
