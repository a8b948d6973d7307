"""The last-value (conflation) queue, as Broker-J's LastValueQueueList does it.

Messages carrying the key header (named by ``x-last-value-key``,
``x-qpid-last-value-queue-key`` or ``qpid.last_value_queue_key``) are
conflated: a new message with the same key value replaces the older one if
that one is still *available*; the new one joins the tail.  An older message
that is out with a consumer is left alone, but if it is released after a newer
message with its key arrived, it is discarded instead of requeued.  Messages
without the key header queue normally.

Storage: a heap of entries by arrival number.  A replaced entry is marked
settled and left in the heap, skipped when it surfaces (lazy deletion), and the
heap is compacted when such garbage outnumbers the live entries.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Any, ClassVar, Hashable, Iterable, cast

from broker.messaging.journal import REPLACED
from broker.messaging.message import Message
from broker.messaging.queue import AVAILABLE, SETTLED, Queue, QueueEntry

__all__ = ["LastValueQueue"]

_COMPACT_AT = 64


class _KeyedEntry(QueueEntry):
    __slots__ = ("key",)

    key: Hashable | None


def _hashable(value: Any) -> Hashable:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


class LastValueQueue(Queue):
    """A queue keeping only the latest available message per key value."""

    type: ClassVar[str] = "lvq"

    __slots__ = ("_key_header", "_latest", "_heap", "_sequence", "_garbage")

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._key_header = self.settings.lvq_key or ""
        self._latest: dict[Hashable, _KeyedEntry] = {}
        self._heap: list[_KeyedEntry] = []
        self._sequence = 0
        self._garbage = 0

    @property
    def key_header(self) -> str:
        return self._key_header

    def key_of(self, message: Message) -> Hashable | None:
        headers = message.properties.headers
        if not headers:
            return None
        value = headers.get(self._key_header)
        return None if value is None else _hashable(value)

    def _entry(self, message: Message) -> _KeyedEntry:
        entry = _KeyedEntry(message, self, self._sequence)
        self._sequence += 1
        key = entry.key = self.key_of(message)
        if key is not None:
            older = self._latest.get(key)
            self._latest[key] = entry
            if older is not None and older.state == AVAILABLE:
                older.state = SETTLED  # replaced: stays in the heap as garbage
                self._ready -= 1
                self._ready_bytes -= len(older.message.body)
                self._garbage += 1
                if self.journal is not None and older.message.persistent:
                    self.journal.settled(self, older.message, REPLACED, None, older.delivery_count)
        return entry

    # -- storage -------------------------------------------------------------------

    def _new_entry(self, message: Message) -> QueueEntry:
        return self._entry(message)

    def _store(self, message: Message) -> None:
        heappush(self._heap, self._entry(message))
        if self._garbage > _COMPACT_AT and self._garbage * 2 > len(self._heap):
            self._heap = [entry for entry in self._heap if entry.state == AVAILABLE]
            heapify(self._heap)
            self._garbage = 0

    def _skip_garbage(self) -> None:
        heap = self._heap
        while heap and heap[0].state != AVAILABLE:
            heappop(heap)
            self._garbage -= 1

    def _take(self) -> QueueEntry | None:
        self._skip_garbage()
        return heappop(self._heap) if self._heap else None

    def _put_back(self, entry: QueueEntry) -> None:
        entry.state = AVAILABLE
        heappush(self._heap, cast(_KeyedEntry, entry))

    def _peek(self) -> Message | QueueEntry | None:
        self._skip_garbage()
        return self._heap[0] if self._heap else None

    def _ready_items(self) -> Iterable[Message | QueueEntry]:
        return [entry for entry in self._heap if entry.state == AVAILABLE]

    def _clear(self) -> None:
        for entry in self._heap:
            if entry.state == AVAILABLE:
                entry.state = SETTLED
                self._forget(entry)
        self._heap.clear()
        self._garbage = 0

    def _may_requeue(self, entry: QueueEntry) -> bool:
        key = entry.key  # type: ignore[attr-defined]
        return key is None or self._latest.get(key) is entry

    def _forget(self, entry: QueueEntry) -> None:
        key = entry.key  # type: ignore[attr-defined]
        if key is not None and self._latest.get(key) is entry:
            del self._latest[key]
