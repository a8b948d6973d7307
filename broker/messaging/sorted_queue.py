"""The sorted queue (Broker-J's SortedQueue): ascending by a header's value.

The header is named by ``qpid.queue_sort_key``.  Messages without it come
first; then numbers in numeric order; then text in code-point order; then
anything else by its text.  Equal keys keep arrival order.  (Broker-J compares
every value as a string, which puts "10" before "9"; ordering numbers as
numbers is what a client sorting on a numeric header means.)

Storage is a binary heap of entries keyed by ``(sort key, arrival number)``;
a released entry keeps its key, so it returns to its original place.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Any, ClassVar, Iterable

from broker.messaging.message import Message
from broker.messaging.queue import AVAILABLE, SETTLED, Queue, QueueEntry

__all__ = ["SortedQueue", "sort_key"]


def sort_key(value: Any) -> tuple[Any, ...]:
    """A totally ordered key for a header value (None: header absent)."""
    if value is None:
        return (0,)
    if isinstance(value, (int, float)):  # bool included: False < True
        return (1, value)
    if isinstance(value, (bytes, bytearray)):
        return (2, bytes(value).decode("utf-8", "replace"))
    if isinstance(value, str):
        return (2, value)
    return (3, str(value))


class SortedQueue(Queue):
    """A queue delivering messages in ascending order of a header's value."""

    type: ClassVar[str] = "sorted"

    __slots__ = ("_sort_header", "_heap", "_sequence")

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._sort_header = self.settings.sort_key or ""
        self._heap: list[QueueEntry] = []
        self._sequence = 0

    @property
    def sort_header(self) -> str:
        return self._sort_header

    def _entry(self, message: Message) -> QueueEntry:
        headers = message.properties.headers
        value = headers.get(self._sort_header) if headers else None
        entry = QueueEntry(message, self, (sort_key(value), self._sequence))
        self._sequence += 1
        return entry

    def _new_entry(self, message: Message) -> QueueEntry:
        return self._entry(message)

    def _store(self, message: Message) -> None:
        heappush(self._heap, self._entry(message))

    def _take(self) -> QueueEntry | None:
        return heappop(self._heap) if self._heap else None

    def _put_back(self, entry: QueueEntry) -> None:
        entry.state = AVAILABLE
        heappush(self._heap, entry)

    def _peek(self) -> Message | QueueEntry | None:
        return self._heap[0] if self._heap else None

    def _ready_items(self) -> Iterable[Message | QueueEntry]:
        return list(self._heap)

    def _clear(self) -> None:
        for entry in self._heap:
            entry.state = SETTLED
        self._heap.clear()
