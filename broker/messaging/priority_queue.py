"""The priority queue: higher priority first, FIFO within a priority.

One standard-queue storage (a deque of never-delivered messages plus a heap of
released entries, see :mod:`broker.messaging.queue`) per priority level, and a
bitmask of the levels holding anything, so finding the highest non-empty level
is ``mask.bit_length() - 1`` rather than a scan.

How a message priority maps to a level is fixed by the queue's settings:
RabbitMQ's ``x-max-priority`` N gives levels 0..N (priorities above N count as
N); Broker-J's ``x-qpid-priorities`` N gives N levels centred on the 0-9 range
(see :class:`~broker.messaging.arguments.QueueSettings`).
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from typing import Any, ClassVar, Iterable

from broker.messaging.message import Message
from broker.messaging.queue import AVAILABLE, SETTLED, Queue, QueueEntry

__all__ = ["PriorityQueue"]


class _Level:
    """The messages of one priority level, stored as the standard queue stores them."""

    __slots__ = ("fresh", "returned", "taken")

    def __init__(self) -> None:
        self.fresh: deque[Message] = deque()
        self.returned: list[QueueEntry] = []
        self.taken = 0

    def head(self) -> Message | QueueEntry | None:
        if self.returned:
            return self.returned[0]
        if self.fresh:
            return self.fresh[0]
        return None


class PriorityQueue(Queue):
    """A queue delivering higher-priority messages first."""

    type: ClassVar[str] = "priority"

    __slots__ = ("_levels", "_occupied", "_offset", "_top")

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        count = max(self.settings.priority_levels, 1)
        self._levels = [_Level() for _ in range(count)]
        self._occupied = 0  # bit i set: level i holds something
        self._offset = self.settings.priority_offset
        self._top = count - 1

    @property
    def levels(self) -> int:
        return len(self._levels)

    def level_of(self, message: Message) -> int:
        """The level ``message`` is queued at."""
        index = message.priority - self._offset
        if index > self._top:
            return self._top
        return index if index > 0 else 0

    # -- storage -------------------------------------------------------------------

    def _new_entry(self, message: Message) -> QueueEntry:
        level = self._levels[self.level_of(message)]
        entry = QueueEntry(message, self, level.taken)
        level.taken += 1
        return entry

    def _store(self, message: Message) -> None:
        index = self.level_of(message)
        self._levels[index].fresh.append(message)
        self._occupied |= 1 << index

    def _take(self) -> QueueEntry | None:
        occupied = self._occupied
        if not occupied:
            return None
        return self._take_from(occupied.bit_length() - 1)

    def _take_from(self, index: int) -> QueueEntry | None:
        level = self._levels[index]
        if level.returned:
            entry = heappop(level.returned)
        elif level.fresh:
            entry = QueueEntry(level.fresh.popleft(), self, level.taken)
            level.taken += 1
        else:
            return None
        if not level.returned and not level.fresh:
            self._occupied &= ~(1 << index)
        return entry

    def _put_back(self, entry: QueueEntry) -> None:
        entry.state = AVAILABLE
        index = self.level_of(entry.message)
        heappush(self._levels[index].returned, entry)
        self._occupied |= 1 << index

    def _peek(self) -> Message | QueueEntry | None:
        occupied = self._occupied
        if not occupied:
            return None
        return self._level_head(occupied.bit_length() - 1)

    def _level_head(self, index: int) -> Message | QueueEntry | None:
        """The head of level ``index`` (a paged level's, when in memory: broker.messaging.paged_priority_queue)."""
        return self._levels[index].head()

    def _ready_items(self) -> Iterable[Message | QueueEntry]:
        items: list[Message | QueueEntry] = []
        for level in self._levels:
            items += level.returned
            items += level.fresh
        return items

    def _clear(self) -> None:
        for level in self._levels:
            level.fresh.clear()
            for entry in level.returned:
                entry.state = SETTLED
            level.returned.clear()
        self._occupied = 0

    # -- TTL: every level has its own head -------------------------------------------

    def _head_expiry(self) -> float | None:
        earliest: float | None = None
        for index in range(len(self._levels)):
            head = self._level_head(index)
            if head is None:
                continue
            expiry = self._expiry(head if type(head) is Message else head.message)  # type: ignore[union-attr]
            if expiry is not None and (earliest is None or expiry < earliest):
                earliest = expiry
        return earliest

    def _expire_heads(self, now: float) -> None:
        for index in range(len(self._levels)):
            while True:
                head = self._level_head(index)
                if head is None:
                    break
                expiry = self._expiry(head if type(head) is Message else head.message)  # type: ignore[union-attr]
                if expiry is None or expiry > now:
                    break
                entry = self._take_from(index)
                if entry is None:
                    break
                self._remove(entry, "expired")
