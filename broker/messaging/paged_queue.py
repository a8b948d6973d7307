"""A queue whose persistent backlog is paged out of memory (flow to disk).

When a queue starts paging (:func:`start_paging`: the broker flows to disk,
or the queue is lazy -- :mod:`broker.messaging.flow_to_disk`), its class
becomes :class:`PagedQueue` (a standard queue) or
:class:`~broker.messaging.paged_priority_queue.PagedPriorityQueue` (a
priority queue), whose storage is :class:`~broker.messaging.paged_storage.PagedStorage`:
a window of messages in memory at the head, the paged messages (12 bytes
each) behind it, and the newest arrivals at the tail -- one such lane for a
standard queue, one per priority level for a priority queue.

Counts and bytes (``message_count``, ``message_bytes``, limits) include the
paged messages; ``paged_count`` and ``paged_bytes`` say how many are out of
memory.  A purge journals the paged ids by ranges without reading them; a
``drop-head`` queue drops its paged head by ids (one that dead-letters
what it drops reads its head back first); TTL is checked when a message is read back
(a paged message expires when it reaches the window, as RabbitMQ's classic
queues expire paged messages; a queue with a TTL and no consumer reads its
head back for that).  Browsing and management's message listing see the
messages in memory at the head (they read the next window back only when
none is in memory, so looking never makes a queue hold more); basic.get,
consumers (selectors too) and lease consumers see everything.

A queue no longer flowing to disk (and not lazy) becomes a plain queue of
its kind again once its segments are read back.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop
from typing import TYPE_CHECKING

from broker.messaging.flow_to_disk import page_reader_of
from broker.messaging.message import Message
from broker.messaging.paged_priority_queue import PagedPriorityQueue
from broker.messaging.paged_storage import PAGE_CHUNK, WINDOW, PagedStorage, PageState
from broker.messaging.priority_queue import PriorityQueue
from broker.messaging.queue import Queue, QueueEntry

if TYPE_CHECKING:
    from broker.messaging.entry_runs import EntryRun
    from broker.messaging.flow_to_disk import FlowToDisk

__all__ = ["PagedQueue", "PagedPriorityQueue", "PageState", "start_paging", "WINDOW", "PAGE_CHUNK"]


def start_paging(queue: Queue, policy: FlowToDisk | None = None, *, lazy: bool = False) -> bool:
    """Make ``queue`` page (see the module); False when it cannot.

    Durable standard and priority queues of a journaled virtual host can
    (:func:`~broker.messaging.flow_to_disk.page_reader_of` says which).
    """
    state = queue._pages
    if state is None:
        reader = page_reader_of(queue)
        if reader is None:
            return False
        plain = type(queue)
        if plain is Queue:
            state = queue._pages = PageState(reader, policy, lazy, plain)
            queue.__class__ = PagedQueue
        elif plain is PriorityQueue:
            assert isinstance(queue, PriorityQueue)
            state = queue._pages = PageState(reader, policy, lazy, plain, queue.levels)
            queue.__class__ = PagedPriorityQueue
        else:
            return False
    else:
        state.lazy = state.lazy or lazy
        state.policy = state.policy or policy
    assert isinstance(queue, PagedStorage)
    queue._spill()
    return True


class PagedQueue(PagedStorage):
    """A standard queue paging its persistent backlog (see the module); same slots as :class:`Queue`.

    One lane: its window is the queue's ``_fresh``, its returned entries the queue's ``_returned``.
    """

    __slots__ = ()

    def _window(self, index: int) -> deque[Message]:
        return self._fresh

    def _set_window(self, index: int, window: deque[Message]) -> None:
        self._fresh = window

    def _returned_at(self, index: int) -> list[QueueEntry]:
        return self._returned

    def _entry_at(self, index: int, message: Message) -> QueueEntry:
        entry = QueueEntry(message, self, self._taken)
        self._taken += 1
        return entry

    def _head_index(self) -> int | None:
        return 0

    def _store(self, message: Message) -> None:
        state = self._pages
        if message.expires_at is not None:
            state.expiring = True
        tail = state.lanes[0].tail
        tail.append(message)
        if len(tail) >= PAGE_CHUNK:
            self._page_out()

    def _take(self) -> QueueEntry | None:
        returned = self._returned
        if returned:
            return heappop(returned)
        return self._take_fresh(0)

    def _peek(self) -> Message | QueueEntry | None:
        return self._head_of(0)

    def take_run(self, limit: int) -> EntryRun | None:
        """As :meth:`Queue.take_run` (a lease grant), from the window; then the next window is read ahead.

        Without that, a grant that took the whole window would leave the head
        on disk with no read asked for, and the next grant would come back
        short while the queue holds messages.
        """
        run = Queue.take_run(self, limit)
        state = self._pages
        lane = state.lanes[0]
        if len(self._fresh) < WINDOW and lane.on_disk and not state.reading and not state.looking:
            self._page_in(lane)
        return run
