"""A priority queue whose persistent backlog is paged out of memory (flow to disk).

As RabbitMQ's classic priority queues page each priority's messages, every
priority level of a paging :class:`~broker.messaging.priority_queue.PriorityQueue`
is a lane of :class:`~broker.messaging.paged_storage.PagedStorage`: the
level's ``fresh`` deque is the lane's window, its paged messages (journal ids
and sizes) and newest arrivals follow.  Delivery is as without paging:
higher priority first, FIFO within a priority, requeued messages at their
place in their level.

Only the level holding the head is read back: a level's window is filled
when the level becomes the highest one holding messages, and paging starts
keeping a window only for that level (the others page everything).  The
bitmask of occupied levels counts a level's paged messages and tail, so the
head is always found at once; while the head's level is being read back,
delivery waits for it rather than handing out a lower priority.

Arrivals are paged once :data:`~broker.messaging.paged_storage.PAGE_CHUNK`
of them, whatever their levels, have been stored since the last durable
wait, so the tails of all levels together stay within about a chunk.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop

from broker.messaging.message import Message
from broker.messaging.paged_storage import PAGE_CHUNK, PagedStorage
from broker.messaging.priority_queue import PriorityQueue
from broker.messaging.queue import QueueEntry

__all__ = ["PagedPriorityQueue"]


class PagedPriorityQueue(PagedStorage, PriorityQueue):
    """A priority queue paging its persistent backlog (see the module); same slots as :class:`PriorityQueue`."""

    __slots__ = ()

    # -- the lanes are the levels ------------------------------------------------------------

    def _window(self, index: int) -> deque[Message]:
        return self._levels[index].fresh

    def _set_window(self, index: int, window: deque[Message]) -> None:
        self._levels[index].fresh = window

    def _returned_at(self, index: int) -> list[QueueEntry]:
        return self._levels[index].returned

    def _entry_at(self, index: int, message: Message) -> QueueEntry:
        level = self._levels[index]
        entry = QueueEntry(message, self, level.taken)
        level.taken += 1
        return entry

    def _head_index(self) -> int | None:
        occupied = self._occupied
        return occupied.bit_length() - 1 if occupied else None

    def _lane_of(self, priority: int) -> int:
        index = priority - self._offset
        if index > self._top:
            return self._top
        return index if index > 0 else 0

    def _lane_changed(self, index: int) -> None:
        level = self._levels[index]
        if level.returned or level.fresh or self._pages.lanes[index].holds:
            self._occupied |= 1 << index
        else:
            self._occupied &= ~(1 << index)

    # -- storage -----------------------------------------------------------------------------

    def _store(self, message: Message) -> None:
        state = self._pages
        if message.expires_at is not None:
            state.expiring = True
        index = self.level_of(message)
        state.lanes[index].tail.append(message)
        self._occupied |= 1 << index
        state.stored += 1
        if state.stored >= PAGE_CHUNK:
            self._page_out()

    def _take_from(self, index: int) -> QueueEntry | None:
        returned = self._levels[index].returned
        if returned:
            entry = heappop(returned)
            self._lane_changed(index)
            return entry
        return self._take_fresh(index)

    def _level_head(self, index: int) -> Message | QueueEntry | None:
        return self._head_of(index)
