"""A standard queue whose persistent backlog is paged out of memory (flow to disk).

When a queue starts paging (:func:`start_paging`: the broker flows to disk,
or the queue is lazy -- :mod:`broker.messaging.flow_to_disk`), its class
becomes :class:`PagedQueue` and its ready messages are kept in three parts,
in queue order::

    head window (Messages)  |  paged segments (ids + sizes)  |  tail (Messages)
    _fresh                     _pages.segments                  _pages.tail

* the **tail** takes arrivals.  Once it holds :data:`PAGE_CHUNK` messages
  (or at once when paging starts), the queue asks its journal to say when
  everything reported so far is durable; then the tail's messages move to
  the segments, where a persistent message is only its journal id and body
  size (:mod:`broker.messaging.page_segments`), and its object is freed;
* the **head window** is what consumers are served from.  Whenever it holds
  fewer than :data:`WINDOW` messages, the next :data:`WINDOW` are read back
  from the journal in a worker thread (one read in flight at a time) and join
  it when they arrive, so a consumer finds the head in memory as long as the
  disk keeps up; if the window runs dry, dispatch pauses until the read lands
  (``basic.get`` waits for it, as it waits for a publish on its way to disk);
* while no segment is left and no read is in flight, the tail joins the
  window directly: a queue whose consumers keep up never touches the disk.

Counts and bytes (``message_count``, ``message_bytes``, limits) include the
paged messages; ``paged_count`` and ``paged_bytes`` say how many are out of
memory.  A purge journals the paged ids by ranges without reading them; a
``drop-head`` queue drops its paged head by ids (queues that dead-letter
what they drop never page); TTL is checked when a message is read back
(a paged message expires when it reaches the window, as RabbitMQ's classic
queues expire paged messages).  Browsing and management's message listing see
the messages in memory at the head (they read the next window back only when
none is in memory, so looking never makes a queue hold more); basic.get,
consumers (selectors too) and lease consumers see everything.

A queue no longer flowing to disk (and not lazy) becomes a plain
:class:`~broker.messaging.queue.Queue` again once its segments are read back.
"""

from __future__ import annotations

import logging
from collections import deque
from heapq import heappop
from typing import TYPE_CHECKING, Callable, Final, Iterable, Sequence

from broker.messaging.flow_to_disk import UnreadablePages, page_reader_of
from broker.messaging.id_ranges import id_ranges
from broker.messaging.journal import DROPPED, PURGED
from broker.messaging.message import Message
from broker.messaging.page_segments import PageSegments, Taken
from broker.messaging.queue import Queue, QueueEntry

if TYPE_CHECKING:
    from broker.messaging.flow_to_disk import FlowToDisk, PageReader
    from broker.messaging.journal import Durability

__all__ = ["PagedQueue", "PageState", "start_paging", "WINDOW", "PAGE_CHUNK"]

log = logging.getLogger(__name__)

#: messages kept in memory at the head of a paged queue (read back in batches of this many)
WINDOW: Final = 1024
#: arrivals paged out together
PAGE_CHUNK: Final = 1024
#: messages moved from the tail to the segments in one go
SPILL_CHUNK: Final = 65_536


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

    def finish(self) -> None:
        self.done = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


class PageState:
    """The paging state of one queue (its ``_pages``)."""

    __slots__ = ("reader", "policy", "lazy", "segments", "tail", "tail_base", "batch", "reading", "epoch",
                 "awaiting", "in_call", "wait", "failing", "looking")

    def __init__(self, reader: PageReader, policy: FlowToDisk | None, lazy: bool) -> None:
        self.reader = reader
        self.policy = policy
        self.lazy = lazy
        self.segments = PageSegments()
        self.tail: deque[Message] = deque()
        #: messages ever taken off the tail's head (to find what a durable wait covered)
        self.tail_base = 0
        #: the messages taken off the segments for the read in flight (or failed)
        self.batch: Taken | None = None
        self.reading = False
        #: bumped by purge and delete: a read or wait of an older epoch is void
        self.epoch = 0
        self.awaiting = False
        self.in_call = False
        self.wait: PageWait | None = None
        self.failing = False
        #: management or a browser looks at the head: no read-ahead meanwhile
        self.looking = False

    @property
    def wanted(self) -> bool:
        """Arrivals are to be paged: the queue is lazy or the broker flows to disk."""
        return self.lazy or (self.policy is not None and self.policy.flowing)

    @property
    def paged_count(self) -> int:
        batch = self.batch
        return self.segments.paged_count + (len(batch) - len(batch.held) if batch is not None else 0)

    @property
    def paged_bytes(self) -> int:
        batch = self.batch
        return self.segments.paged_bytes + (batch.paged_bytes if batch is not None else 0)


def start_paging(queue: Queue, policy: FlowToDisk | None = None, *, lazy: bool = False) -> bool:
    """Make ``queue`` page (see the module); False when it cannot (not a durable journaled standard queue)."""
    state = queue._pages
    if state is None:
        reader = page_reader_of(queue)
        if reader is None:
            return False
        state = queue._pages = PageState(reader, policy, lazy)
        queue.__class__ = PagedQueue
    else:
        state.lazy = state.lazy or lazy
        state.policy = state.policy or policy
    assert isinstance(queue, PagedQueue)
    queue._spill()
    return True


class PagedQueue(Queue):
    """A standard queue paging its persistent backlog (see the module); same slots as :class:`Queue`."""

    __slots__ = ()

    _pages: PageState

    @property
    def paged_count(self) -> int:
        return self._pages.paged_count

    @property
    def paged_bytes(self) -> int:
        return self._pages.paged_bytes

    @property
    def held_until(self) -> Durability | None:
        """Also the read in flight when the head is on disk (basic.get answers once it has landed)."""
        state = self._pages
        if not self._returned and not self._fresh and (state.segments or state.batch is not None):
            if state.batch is None or not state.reading:
                self._page_in()
            if not self._fresh and state.batch is not None:
                if state.wait is None:
                    state.wait = PageWait()
                return state.wait
        return super().held_until

    def restore_paged(self, ids: Sequence[int], sizes: Sequence[int]) -> None:
        """Put back recovered messages known by journal id and body size only (nothing is journaled).

        They join the tail's end as paged messages: their bodies stay in the journal until read back.
        """
        state = self._pages
        if state.tail:                          # keep order: what was restored before goes first
            for message in state.tail:
                state.segments.append(message)
            state.tail_base += len(state.tail)
            state.tail.clear()
        state.segments.extend_ids(ids, sizes)
        self._ready += len(ids)
        self._ready_bytes += sum(sizes)

    def browse(self, select: Callable[[QueueEntry], bool] | None = None,
               limit: int | None = None) -> list[QueueEntry]:
        """As :meth:`Queue.browse`, over the messages in memory at the head (see the module).

        Only when nothing is in memory at the head is the next window read back
        (without an event loop: at once); a browse never makes a queue hold more.
        """
        state = self._pages
        if not self._fresh and not self._returned and state.batch is None and state.segments:
            self._page_in()
        state.looking = True
        try:
            return super().browse(select, limit)
        finally:
            state.looking = False

    def remove_ready(self, select: Callable[[QueueEntry], bool],
                     limit: int | None = None) -> list[QueueEntry]:
        """As :meth:`Queue.remove_ready`, over the messages in memory at the head."""
        state = self._pages
        state.looking = True
        try:
            return super().remove_ready(select, limit)
        finally:
            state.looking = False

    # -- storage ---------------------------------------------------------------------

    def _store(self, message: Message) -> None:
        tail = self._pages.tail
        tail.append(message)
        if len(tail) >= PAGE_CHUNK:
            self._page_out()

    def _take(self) -> QueueEntry | None:
        returned = self._returned
        if returned:
            return heappop(returned)
        fresh = self._fresh
        state = self._pages
        if (len(fresh) < WINDOW and (state.segments or state.batch is not None) and not state.reading
                and not state.looking):
            self._page_in()
        if not fresh:
            if state.segments or state.batch is not None or not state.tail:
                return None                     # on its way back from disk (or nothing)
            self._tail_to_window()
        entry = QueueEntry(fresh.popleft(), self, self._taken)
        self._taken += 1
        return entry

    def _peek(self) -> Message | QueueEntry | None:
        if self._returned:
            return self._returned[0]
        if self._fresh:
            return self._fresh[0]
        state = self._pages
        if state.segments or state.batch is not None or not state.tail:
            return None
        return state.tail[0]

    def _ready_items(self) -> Iterable[Message | QueueEntry]:
        state = self._pages
        held = list(state.batch.held.values()) if state.batch is not None else []
        return [*self._returned, *self._fresh, *held, *state.segments.held_messages(), *state.tail]

    def _clear(self) -> None:
        super()._clear()
        state = self._pages
        state.segments.clear()
        state.tail.clear()
        state.batch = None
        state.reading = False
        state.epoch += 1
        state.awaiting = False

    def purge(self) -> int:
        """As :meth:`Queue.purge`; the paged messages are journaled by id ranges, never read."""
        state = self._pages
        ids = state.segments.clear().paged_ids
        if state.batch is not None:
            ids += state.batch.paged_ids
        journal = self.journal
        if journal is not None and ids:
            journal.settled_ranges(self, id_ranges(sorted(ids)), PURGED, None, 0)
        return super().purge()

    def _drop_over_limit(self) -> None:
        """drop-head, from the head whatever part it is in: paged messages go by id, never read.

        While the head is being read back, dropping waits for it to land.
        """
        settings = self.settings
        if settings.overflow != "drop-head":
            return
        max_length, max_bytes = settings.max_length, settings.max_length_bytes
        state = self._pages
        dropped: list[int] = []
        while ((max_length is not None and self._ready > max_length)
               or (max_bytes is not None and self._ready_bytes > max_bytes)):
            if self._returned:
                entry = heappop(self._returned)
            elif self._fresh:
                entry = QueueEntry(self._fresh.popleft(), self, self._taken)
                self._taken += 1
            elif state.batch is not None:
                break                           # the head is on its way back: dropped when it lands
            elif state.segments:
                taken = state.segments.take(1)
                self._ready -= 1
                self._ready_bytes -= taken.sizes[0]
                if taken.held:
                    self._discard(taken.held[0], "maxlen", 0)
                else:
                    dropped.append(taken.ids[0])
                continue
            elif state.tail:
                state.tail_base += 1
                entry = QueueEntry(state.tail.popleft(), self, self._taken)
                self._taken += 1
            else:
                break
            self._remove(entry, "maxlen")
        journal = self.journal
        if dropped and journal is not None:
            journal.settled_ranges(self, id_ranges(dropped), DROPPED, "maxlen", 0)

    # -- paging out ------------------------------------------------------------------

    def _spill(self) -> None:
        """Paging starts or is wanted again: what is in memory beyond the window goes to the tail."""
        state = self._pages
        fresh = self._fresh
        if not state.segments and state.batch is None and len(fresh) > WINDOW:
            # the window's messages move to a new deque; the rest, however many, stays where it is
            window: deque[Message] = deque()
            take = fresh.popleft
            for _ in range(WINDOW):
                window.append(take())
            fresh.extend(state.tail)
            state.tail = fresh
            self._fresh = window
        self._page_out()

    def _page_out(self) -> None:
        """Ask for the tail to move to the segments once what it holds is durable."""
        state = self._pages
        if state.awaiting or not state.tail or not state.wanted:
            return
        state.awaiting = True
        target = state.tail_base + len(state.tail)
        epoch = state.epoch
        state.reader.after_durable(lambda durable: self._tail_durable(state, epoch, target, durable))

    def _tail_durable(self, state: PageState, epoch: int, target: int, durable: bool) -> None:
        if self._pages is not state or state.epoch != epoch:
            return
        state.awaiting = False
        if not durable or self._deleted:
            return                              # a commit failed: the next arrivals try again
        tail, segments = state.tail, state.segments
        # at most SPILL_CHUNK per turn of the event loop (the reader calls back on a later one)
        count = min(target - state.tail_base, len(tail), SPILL_CHUNK)
        if count > 0:
            append, take = segments.append, tail.popleft
            for _ in range(count):
                append(take())
            state.tail_base += count
        if len(tail) >= PAGE_CHUNK:
            self._page_out()

    def _tail_to_window(self) -> None:
        """No segment left and no read in flight: the tail joins the window (and paging may end)."""
        state = self._pages
        tail = state.tail
        state.tail_base += len(tail)
        self._fresh.extend(tail)
        tail.clear()
        if not state.wanted:
            self._stop_paging()

    def _stop_paging(self) -> None:
        state = self._pages
        state.epoch += 1                        # a durable wait still registered is void
        self._pages = None  # type: ignore[assignment]
        self.__class__ = Queue  # type: ignore[assignment]

    # -- reading back ------------------------------------------------------------------

    def _page_in(self) -> None:
        """Read the next batch of paged messages back (or the batch whose read failed, again)."""
        state = self._pages
        if state.reading:
            return
        if state.batch is None:
            if not state.segments:
                return
            state.batch = state.segments.take(WINDOW)
        batch = state.batch
        ids = sorted(set(batch.paged_ids))
        state.reading = True
        epoch = state.epoch
        state.in_call = True
        try:
            state.reader.read_back(ids, lambda result: self._paged_in(state, epoch, batch, ids, result))
        finally:
            state.in_call = False

    def _paged_in(self, state: PageState, epoch: int, batch: Taken, ids: list[int],
                  result: list[Message] | BaseException) -> None:
        if self._pages is not state or state.epoch != epoch or state.batch is not batch:
            return                              # purged or deleted meanwhile: already accounted
        state.reading = False
        if isinstance(result, BaseException):
            self._read_failed(state, batch, result)
            return
        if state.failing:
            log.warning("queue '%s' in vhost '%s': paged messages are read back again", self.name, self.vhost)
            state.failing = False
        found = dict(zip(ids, result))
        held = batch.held
        fresh = self._fresh
        for index, message_id in enumerate(batch.ids):
            fresh.append(held[index] if not message_id else found[message_id])
        state.batch = None
        wait, state.wait = state.wait, None
        if not state.segments and not state.wanted and not state.tail:
            self._stop_paging()
        if state.in_call:
            return                              # read at once (no event loop): the caller goes on
        if self._limited:
            self._drop_over_limit()
        if wait is not None:
            wait.finish()
        self.dispatch()

    def _read_failed(self, state: PageState, batch: Taken, error: BaseException) -> None:
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
            state.batch = kept
            if not state.in_call:
                self._page_in()
            return
        if not state.failing:
            state.failing = True
            log.error("queue '%s' in vhost '%s': reading paged messages back failed (tried again as"
                      " consumers ask): %s", self.name, self.vhost, error)
        wait, state.wait = state.wait, None
        if wait is not None and not state.in_call:
            wait.error = error
            wait.finish()
