"""The storage of a paged queue: lanes of window, paged segments and tail (flow to disk).

A queue that pages (:mod:`broker.messaging.paged_queue`) keeps its
never-delivered messages in *lanes*: a standard queue has one, a priority
queue one per priority level (:mod:`broker.messaging.paged_priority_queue`).
A lane holds, in queue order::

    window (Messages)  |  paged segments (ids + sizes)  |  tail (Messages)

* the **tail** takes arrivals.  Once a chunk of them is there (or at once
  when paging starts), the queue asks its journal to say when everything
  reported so far is durable; then the tails' messages move to the segments,
  where a persistent message is only its journal id and body size
  (:mod:`broker.messaging.page_segments`), and its object is freed;
* the **window** is what consumers are served from (the queue's ``_fresh``,
  or a priority level's ``fresh``).  Whenever the lane being served holds
  fewer than :data:`WINDOW` messages there, the next :data:`WINDOW` are read
  back from the journal in a worker thread (one read per queue in flight at
  a time) and join it when they arrive; if the window runs dry, dispatch
  pauses until the read lands (``basic.get`` waits for it);
* while a lane has no segment left and no read in flight, its tail joins
  its window directly: a queue whose consumers keep up never touches the disk.

Requeued messages are entries in the queue's (or level's) heap of returned
entries, ahead of the window, in memory, as in a queue that does not page.

:class:`PagedStorage` is that storage, for both kinds; the kinds say where a
lane's window and returned entries are and which lane holds the head.  Its
timers (through the queue's ``next_deadline``/``run_due``): a read that
failed is tried again every :data:`RETRY_SECONDS`, and a queue with a TTL
whose head is on disk reads it back so that it expires (and is dead-lettered)
with no consumer present, as RabbitMQ's classic queues expire paged messages.
"""

from __future__ import annotations

import logging
from collections import deque
from heapq import heappop
from typing import TYPE_CHECKING, Callable, Final, Iterable, Sequence

from broker.messaging.flow_to_disk import UnreadablePages
from broker.messaging.id_ranges import id_ranges
from broker.messaging.journal import DROPPED, PURGED
from broker.messaging.message import Message
from broker.messaging.page_segments import PageSegments, Taken
from broker.messaging.queue import Queue, QueueEntry

if TYPE_CHECKING:
    from broker.messaging.flow_to_disk import FlowToDisk, PageReader
    from broker.messaging.journal import Durability

__all__ = ["Lane", "PageState", "PageWait", "PagedStorage", "WINDOW", "PAGE_CHUNK", "SPILL_CHUNK",
           "RETRY_SECONDS", "head_landing"]

log = logging.getLogger("broker.messaging.paged_queue")

#: messages kept in memory at the head of a paged lane (read back in batches of this many)
WINDOW: Final = 1024
#: arrivals paged out together
PAGE_CHUNK: Final = 1024
#: messages moved from the tails to the segments in one go
SPILL_CHUNK: Final = 65_536
#: seconds between tries of a read back that failed (the disk is gone)
RETRY_SECONDS: Final = 1.0


class PageWait:
    """A read back in flight, as a :class:`~broker.messaging.journal.Durability` (basic.get waits on it)."""

    __slots__ = ("done", "error", "_callbacks")

    def __init__(self) -> None:
        self.done = False
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[], None]] = []

    def when_durable(self, callback: Callable[[], None]) -> None:
        if self.done:
            callback()
        else:
            self._callbacks.append(callback)

    def forget(self, callback: Callable[[], None]) -> None:
        """``callback`` is no longer wanted (its waiter went away before the read landed)."""
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def finish(self) -> None:
        self.done = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


class Lane:
    """One FIFO sequence of a paged queue beyond its window: segments and tail (see the module)."""

    __slots__ = ("index", "segments", "tail", "tail_base", "batch")

    def __init__(self, index: int) -> None:
        #: the lane's number (a priority queue's level)
        self.index = index
        self.segments = PageSegments()
        self.tail: deque[Message] = deque()
        #: messages ever taken off the tail's head (to find what a durable wait covered)
        self.tail_base = 0
        #: the messages taken off the segments for the read in flight (or failed)
        self.batch: Taken | None = None

    @property
    def on_disk(self) -> bool:
        """Something is paged (or being read back): the tail waits behind it."""
        return bool(self.segments) or self.batch is not None

    @property
    def holds(self) -> bool:
        return bool(self.segments) or self.batch is not None or bool(self.tail)

    @property
    def paged_count(self) -> int:
        batch = self.batch
        return self.segments.paged_count + (len(batch) - len(batch.held) if batch is not None else 0)

    @property
    def paged_bytes(self) -> int:
        batch = self.batch
        return self.segments.paged_bytes + (batch.paged_bytes if batch is not None else 0)


class PageState:
    """The paging state of one queue (its ``_pages``)."""

    __slots__ = ("reader", "policy", "lazy", "plain", "lanes", "reading", "epoch", "awaiting", "stored",
                 "in_call", "wait", "failing", "retry_at", "expiring", "looking")

    def __init__(self, reader: PageReader, policy: FlowToDisk | None, lazy: bool, plain: type[Queue],
                 lanes: int = 1) -> None:
        self.reader = reader
        self.policy = policy
        self.lazy = lazy
        #: the queue's class when it does not page (it becomes that again)
        self.plain = plain
        self.lanes = [Lane(index) for index in range(lanes)]
        #: a read is in flight (one per queue)
        self.reading = False
        #: bumped by purge and delete: a read or wait of an older epoch is void
        self.epoch = 0
        self.awaiting = False
        #: arrivals stored since the last durable wait was asked for (a priority queue's trigger)
        self.stored = 0
        self.in_call = False
        self.wait: PageWait | None = None
        self.failing = False
        #: when a failed read is tried again (None: nothing failed)
        self.retry_at: float | None = None
        #: some arrival had its own expiration: the head is read back to expire it (see the module)
        self.expiring = False
        #: management or a browser looks at the head: no read-ahead meanwhile
        self.looking = False

    @property
    def wanted(self) -> bool:
        """Arrivals are to be paged: the queue is lazy or the broker flows to disk."""
        return self.lazy or (self.policy is not None and self.policy.flowing)

    @property
    def paged_count(self) -> int:
        return sum(lane.paged_count for lane in self.lanes)

    @property
    def paged_bytes(self) -> int:
        return sum(lane.paged_bytes for lane in self.lanes)


class PagedStorage(Queue):
    """The storage of a paged queue of any kind (see the module); adds no slots to the queue's.

    A kind says where lane ``index`` keeps its window (:meth:`_window`) and
    returned entries (:meth:`_returned_at`), how an entry is numbered there
    (:meth:`_entry_at`), which lane holds the queue's head (:meth:`_head_index`)
    and keeps its own bookkeeping when a lane's content changes (:meth:`_lane_changed`).
    A queue stops paging (changes class back to ``state.plain``) only when a
    read lands on the event loop or a take moves the last tail to the window;
    never inside a read answered at once (no event loop), so a method that
    reads back may go on as the class it started as.
    """

    __slots__ = ()

    _pages: PageState

    # -- what the kinds say ----------------------------------------------------------------

    def _window(self, index: int) -> deque[Message]:
        raise NotImplementedError

    def _set_window(self, index: int, window: deque[Message]) -> None:
        raise NotImplementedError

    def _returned_at(self, index: int) -> list[QueueEntry]:
        raise NotImplementedError

    def _entry_at(self, index: int, message: Message) -> QueueEntry:
        raise NotImplementedError

    def _head_index(self) -> int | None:
        raise NotImplementedError

    def _lane_of(self, priority: int) -> int:
        """The lane a recovered message of ``priority`` joins."""
        return 0

    def _lane_changed(self, index: int) -> None:
        """Lane ``index`` gained or lost messages."""

    # -- views -----------------------------------------------------------------------------

    @property
    def paged_count(self) -> int:
        return self._pages.paged_count

    @property
    def paged_bytes(self) -> int:
        return self._pages.paged_bytes

    def _head_on_disk(self) -> Lane | None:
        """The lane of the queue's head when that head is paged (or being read back)."""
        index = self._head_index()
        if index is None:
            return None
        lane = self._pages.lanes[index]
        if lane.on_disk and not self._window(index) and not self._returned_at(index):
            return lane
        return None

    @property
    def held_until(self) -> Durability | None:
        """Also the read in flight when the head is on disk (basic.get answers once it has landed)."""
        wait = self.head_landing()
        return wait if wait is not None else super().held_until

    def head_landing(self) -> PageWait | None:
        """The read back of the head in flight when nothing of it is in memory (started if need be).

        None when the head is in memory (or was read at once).  The wait is
        done once the window has landed, the read failed (its ``error``) or the
        queue was purged or deleted.
        """
        state = self._pages
        lane = self._head_on_disk()
        if lane is None:
            return None
        if not state.reading:
            self._page_in(lane)
        if self._pages is state and self._head_on_disk() is not None and state.reading:
            if state.wait is None:
                state.wait = PageWait()
            return state.wait
        return None

    def restore_paged(self, ids: Sequence[int], sizes: Sequence[int], priorities: Sequence[int] | None = None
                      ) -> None:
        """Put back recovered messages known by journal id and body size only (nothing is journaled).

        They join their lane's end (by ``priorities`` in a priority queue) as
        paged messages: their bodies stay in the journal until read back.
        """
        lanes = self._pages.lanes
        start = 0
        total = len(ids)
        while start < total:
            index = 0 if priorities is None else self._lane_of(priorities[start])
            end = start + 1
            if priorities is None:
                end = total
            else:
                while end < total and self._lane_of(priorities[end]) == index:
                    end += 1
            lane = lanes[index]
            if lane.tail:                        # keep order: what was restored before goes first
                for message in lane.tail:
                    lane.segments.append(message)
                lane.tail_base += len(lane.tail)
                lane.tail.clear()
            lane.segments.extend_ids(ids[start:end], sizes[start:end])
            self._lane_changed(index)
            start = end
        self._ready += total
        self._ready_bytes += sum(sizes)

    def browse(self, select: Callable[[QueueEntry], bool] | None = None,
               limit: int | None = None) -> list[QueueEntry]:
        """As :meth:`Queue.browse`, over the messages in memory at the head.

        Only when nothing is in memory at the head is the next window read back
        (without an event loop: at once); a browse never makes a queue hold more.
        """
        state = self._pages
        lane = self._head_on_disk()
        if lane is not None and lane.batch is None and not state.reading:
            self._page_in(lane)
        state.looking = True
        try:
            return Queue.browse(self, select, limit)
        finally:
            state.looking = False

    def remove_ready(self, select: Callable[[QueueEntry], bool],
                     limit: int | None = None) -> list[QueueEntry]:
        """As :meth:`Queue.remove_ready`, over the messages in memory at the head."""
        state = self._pages
        state.looking = True
        try:
            return Queue.remove_ready(self, select, limit)
        finally:
            state.looking = False

    # -- storage ---------------------------------------------------------------------------

    def _take_fresh(self, index: int) -> QueueEntry | None:
        """The next never-delivered message of lane ``index`` as an entry (None: on its way back, or none)."""
        state = self._pages
        lane = state.lanes[index]
        window = self._window(index)
        landed = False
        if len(window) < WINDOW and lane.on_disk and not state.reading and not state.looking:
            self._page_in(lane)
            landed = not state.reading          # read at once (no event loop)
        if not window:
            if lane.on_disk or not lane.tail:
                return None                     # on its way back from disk (or nothing)
            stop = self._tail_to_window(lane)
        else:
            stop = landed and self._may_stop()
        entry = self._entry_at(index, window.popleft())
        self._lane_changed(index)
        if stop:
            self._stop_paging()
        return entry

    def _head_of(self, index: int) -> Message | QueueEntry | None:
        """The head of lane ``index`` when it is in memory."""
        returned = self._returned_at(index)
        if returned:
            return returned[0]
        window = self._window(index)
        if window:
            return window[0]
        lane = self._pages.lanes[index]
        if lane.on_disk or not lane.tail:
            return None
        return lane.tail[0]

    def _ready_items(self) -> Iterable[Message | QueueEntry]:
        state = self._pages
        items = list(state.plain._ready_items(self))
        for lane in state.lanes:
            if lane.batch is not None:
                items += lane.batch.held.values()
            items += lane.segments.held_messages()
            items += lane.tail
        return items

    def _clear(self) -> None:
        state = self._pages
        state.plain._clear(self)
        for lane in state.lanes:
            lane.segments.clear()
            lane.tail.clear()
            lane.batch = None
        state.reading = False
        state.epoch += 1
        state.awaiting = False
        state.retry_at = None
        wait, state.wait = state.wait, None
        if wait is not None:
            wait.finish()                       # a basic.get waiting for the head answers (empty)

    def purge(self) -> int:
        """As :meth:`Queue.purge`; the paged messages are journaled by id ranges, never read."""
        state = self._pages
        ids: list[int] = []
        for lane in state.lanes:
            ids += lane.segments.clear().paged_ids
            if lane.batch is not None:
                ids += lane.batch.paged_ids
        journal = self.journal
        if journal is not None and ids:
            journal.settled_ranges(self, id_ranges(sorted(ids)), PURGED, None, 0)
        return Queue.purge(self)

    def _drop_over_limit(self) -> None:
        """drop-head, from the head whatever part it is in: paged messages go by id, never read.

        With a dead-letter exchange the paged head is read back first (a dead
        letter is the whole message), and dropped when it lands.  While the
        head is being read back, dropping waits until it has landed.
        """
        settings = self.settings
        if settings.overflow != "drop-head":
            return
        max_length, max_bytes = settings.max_length, settings.max_length_bytes
        read_first = settings.dead_letter_exchange is not None
        lanes = self._pages.lanes
        dropped: list[int] = []
        while ((max_length is not None and self._ready > max_length)
               or (max_bytes is not None and self._ready_bytes > max_bytes)):
            index = self._head_index()
            if index is None:
                break
            lane, returned, window = lanes[index], self._returned_at(index), self._window(index)
            if returned:
                entry = heappop(returned)
            elif window:
                entry = self._entry_at(index, window.popleft())
            elif lane.batch is not None:
                break                           # the head is on its way back: dropped when it lands
            elif lane.segments and read_first:
                self._page_in(lane)             # dead-lettered once it has landed
                if not window:
                    break
                continue
            elif lane.segments:
                taken = lane.segments.take(1)
                self._ready -= 1
                self._ready_bytes -= taken.sizes[0]
                if taken.held:
                    self._discard(taken.held[0], "maxlen", 0)
                else:
                    dropped.append(taken.ids[0])
                self._lane_changed(index)
                continue
            elif lane.tail:
                lane.tail_base += 1
                entry = self._entry_at(index, lane.tail.popleft())
            else:
                break
            self._lane_changed(index)
            self._remove(entry, "maxlen")
        journal = self.journal
        if dropped and journal is not None:
            journal.settled_ranges(self, id_ranges(dropped), DROPPED, "maxlen", 0)

    # -- paging out ------------------------------------------------------------------------

    def _spill(self) -> None:
        """Paging starts or is wanted again: what is in memory beyond the head's window goes to the tails.

        The lane of the head keeps a window of :data:`WINDOW` messages; the
        others keep none (they are read back when they hold the head).
        """
        state = self._pages
        head = self._head_index()
        for lane in state.lanes:
            if lane.on_disk:
                continue
            index = lane.index
            fresh = self._window(index)
            keep = WINDOW if index == head else 0
            if len(fresh) <= keep:
                continue
            # the window's messages move to a new deque; the rest, however many, stays where it is
            window: deque[Message] = deque()
            take = fresh.popleft
            for _ in range(keep):
                window.append(take())
            fresh.extend(lane.tail)
            lane.tail = fresh
            self._set_window(index, window)
        self._page_out()

    def _page_out(self) -> None:
        """Ask for the tails to move to the segments once what they hold is durable."""
        state = self._pages
        if state.awaiting or not state.wanted:
            return
        targets = [(lane, lane.tail_base + len(lane.tail)) for lane in state.lanes if lane.tail]
        if not targets:
            return
        state.awaiting = True
        state.stored = 0
        epoch = state.epoch
        # by the class's function: the queue may be plain again when the journal answers
        tails_durable = PagedStorage._tails_durable
        state.reader.after_durable(lambda durable: tails_durable(self, state, epoch, targets, durable))

    def _tails_durable(self, state: PageState, epoch: int, targets: list[tuple[Lane, int]], durable: bool) -> None:
        if self._pages is not state or state.epoch != epoch:
            return
        state.awaiting = False
        if not durable or self._deleted:
            return                              # a commit failed: the next arrivals try again
        # at most SPILL_CHUNK per turn of the event loop (the reader calls back on a later one)
        budget = SPILL_CHUNK
        for lane, target in targets:
            tail = lane.tail
            count = min(target - lane.tail_base, len(tail), budget)
            if count > 0:
                append, take = lane.segments.append, tail.popleft
                expiring = state.expiring
                for _ in range(count):
                    message = take()
                    if message.expires_at is not None:
                        expiring = True     # (in memory when paging started: not seen by _store)
                    append(message)
                state.expiring = expiring
                lane.tail_base += count
                budget -= count
        if state.stored >= PAGE_CHUNK or any(len(lane.tail) >= PAGE_CHUNK for lane in state.lanes):
            self._page_out()

    def _tail_to_window(self, lane: Lane) -> bool:
        """No segment left and no read in flight: the tail joins the window; True when paging may end."""
        state = self._pages
        tail = lane.tail
        lane.tail_base += len(tail)
        self._window(lane.index).extend(tail)
        tail.clear()
        return self._may_stop()

    def _may_stop(self) -> bool:
        state = self._pages
        return not state.wanted and not any(lane.holds for lane in state.lanes)

    def _stop_paging(self) -> None:
        state = self._pages
        state.epoch += 1                        # a durable wait still registered is void
        self._pages = None  # type: ignore[assignment]
        self.__class__ = state.plain  # type: ignore[assignment]

    # -- reading back ----------------------------------------------------------------------

    def _page_in(self, lane: Lane) -> None:
        """Read the lane's next batch of paged messages back (or the batch whose read failed, again)."""
        state = self._pages
        if state.reading:
            return
        if lane.batch is None:
            if not lane.segments:
                return
            lane.batch = lane.segments.take(WINDOW)
        batch = lane.batch
        ids = sorted(set(batch.paged_ids))
        state.reading = True
        epoch = state.epoch
        state.in_call = True
        try:
            # by the class's function: a purge voids this read, and the queue may be plain when it lands
            paged_in = PagedStorage._paged_in
            state.reader.read_back(ids, lambda result: paged_in(self, state, epoch, lane, batch, ids, result))
        finally:
            state.in_call = False

    def _paged_in(self, state: PageState, epoch: int, lane: Lane, batch: Taken, ids: list[int],
                  result: list[Message] | BaseException) -> None:
        if self._pages is not state or state.epoch != epoch or lane.batch is not batch:
            return                              # purged or deleted meanwhile: already accounted
        state.reading = False
        if isinstance(result, BaseException):
            self._read_failed(state, lane, batch, result)
            return
        if state.failing:
            log.warning("queue '%s' in vhost '%s': paged messages are read back again", self.name, self.vhost)
            state.failing = False
            state.retry_at = None
        found = dict(zip(ids, result))
        held = batch.held
        window = self._window(lane.index)
        for index, message_id in enumerate(batch.ids):
            window.append(held[index] if not message_id else found[message_id])
        lane.batch = None
        if not state.expiring:                  # recovered paged: their expirations are news
            for message in result:
                if message.expires_at is not None:
                    state.expiring = True
                    if not self._timed:
                        self._become_timed()
                    break
        self._lane_changed(lane.index)
        if state.in_call:
            return                              # read at once (no event loop): the caller goes on (and stops)
        stopped = self._may_stop()
        if stopped:
            self._stop_paging()
        if self._limited:
            self._drop_over_limit()
        if not stopped and self._pages is state:
            head = self._head_on_disk()         # (a priority queue: another level took the head)
            if head is not None:
                self._page_in(head)
            if head is not None and state.reading:
                self.dispatch()
                return                          # basic.get waits for that read
        wait, state.wait = state.wait, None
        if wait is not None:
            wait.finish()
        self.dispatch()

    def _read_failed(self, state: PageState, lane: Lane, batch: Taken, error: BaseException) -> None:
        if isinstance(error, UnreadablePages):
            # gone from the journal (never to come back): out of the counts, the rest read again
            missing = set(error.ids)
            log.error("queue '%s' in vhost '%s': %d paged messages are missing from the journal and are"
                      " dropped", self.name, self.vhost, len(missing))
            kept = Taken()
            for index, message_id in enumerate(batch.ids):
                if message_id and message_id in missing:
                    self._ready -= 1
                    self._ready_bytes -= batch.sizes[index]
                    continue
                if not message_id:
                    kept.held[len(kept.ids)] = batch.held[index]
                kept.ids.append(message_id)
                kept.sizes.append(batch.sizes[index])
            lane.batch = kept
            if not state.in_call:
                self._page_in(lane)
            return
        if not state.failing:
            state.failing = True
            log.error("queue '%s' in vhost '%s': reading paged messages back failed (tried again every %g s"
                      " and as consumers ask): %s", self.name, self.vhost, RETRY_SECONDS, error)
        state.retry_at = self._clock() + RETRY_SECONDS
        if self._host is not None:
            self._host.queue_timed(self)        # (the virtual host drives next_deadline/run_due)
        if state.in_call:
            return
        wait, state.wait = state.wait, None
        if wait is not None:
            wait.error = error
            wait.finish()

    # -- timers: a failed read tried again, a head on disk read back to expire ------------------

    def _due_lane(self, now: float) -> Lane | None:
        """The lane to read back by ``now`` for the timers (see the module), or None."""
        state = self._pages
        if state.reading or self._deleted:
            return None
        if state.retry_at is not None:
            if state.retry_at <= now:
                for lane in state.lanes:
                    if lane.batch is not None:
                        return lane
                state.retry_at = None
            return None
        if self._ttl is None and not state.expiring:
            return None
        for lane in reversed(state.lanes):      # the highest priority first
            index = lane.index
            if lane.on_disk and not self._window(index) and not self._returned_at(index):
                return lane
        return None

    def next_deadline(self) -> float | None:
        deadline = Queue.next_deadline(self)
        state = self._pages
        due = state.retry_at if state.retry_at is not None and not state.reading else None
        if due is None:
            now = self._clock()
            if self._due_lane(now) is not None:
                due = now
        if due is not None and (deadline is None or due < deadline):
            deadline = due
        return deadline

    def run_due(self, now: float) -> bool:
        lane = self._due_lane(now)
        if lane is not None:
            self._page_in(lane)
        return Queue.run_due(self, now)


def head_landing(queue: Queue) -> PageWait | None:
    """The read back of ``queue``'s head in flight (:meth:`PagedStorage.head_landing`); None: none."""
    return queue.head_landing() if isinstance(queue, PagedStorage) else None
