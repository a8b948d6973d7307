"""Runs: many never-delivered messages taken from a standard queue's head at once.

A lease consumer (a Spark job, :mod:`broker.messaging.leases`) is granted
messages by the hundred thousand.  Taken one by one (``Queue.get``), each
would get its :class:`~broker.messaging.queue_entry.QueueEntry` and its own
``deliver`` row in the journal, and its settlement its own ``settle`` row:
about 12 us of the event loop per message.  :meth:`RunTaking.take_run`
instead pops a run of messages off the queue's storage of fresh messages
(never delivered, in queue order), counts them as acquired in one step,
creates no entries, and reports the run's ids to the journal as ranges (one
``deliver`` row per run of consecutive ids); :meth:`RunTaking.settle_run`
acknowledges the whole run with one ``settle`` row per range.

An :class:`EntryRun` remembers where its messages stood (the queue position
of its first one), so when they must be handled one by one -- a lease ran out
and they go back to the queue, a claim or a settlement names only some of
them -- :meth:`RunTaking.split_run` turns it into the acquired entries
``Queue.get`` would have made, at their original positions, and everything
goes on per entry as before.

Only a standard queue takes runs, only from a head of fresh persistent
messages, with no message TTL to check, on a queue that journals: the other
cases (priority, sorted and last-value queues, requeued messages at the
head, transient messages, TTL) are taken one by one.
"""

from __future__ import annotations

from collections import deque
from itertools import islice, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, ClassVar, Final

from broker.messaging.id_ranges import Range, id_ranges
from broker.messaging.journal import ACKED
from broker.messaging.queue_entry import ACQUIRED, SETTLED, QueueEntry

if TYPE_CHECKING:
    from broker.messaging.journal import MessageJournal
    from broker.messaging.message import Message
    from broker.messaging.queue import Queue

__all__ = ["EntryRun", "RunTaking"]

#: an EntryRun split into entries (or settled): it holds nothing any more
_SPLIT: Final = 3

_PERSISTENT = attrgetter("persistent")
_JOURNAL_ID = attrgetter("journal_id")
_BODY = attrgetter("body")


class EntryRun:
    """Messages taken from a queue's head together, acquired, without entries (see the module)."""

    __slots__ = ("queue", "messages", "position", "ranges", "size", "state")

    def __init__(self, queue: Queue, messages: list[Message], position: int, ranges: list[Range],
                 size: int) -> None:
        self.queue = queue
        self.messages = messages
        #: the queue position of the first message (the others follow)
        self.position = position
        #: the messages' journal ids, as ranges
        self.ranges = ranges
        #: their body bytes
        self.size = size
        self.state = ACQUIRED

    def __len__(self) -> int:
        return len(self.messages) if self.state == ACQUIRED else 0

    def __repr__(self) -> str:
        return f"<EntryRun {self.queue.name!r}#{self.position} {len(self.messages)} messages {self.ranges[:3]}>"


class RunTaking:
    """Queue methods taking and settling runs (mixed into :class:`~broker.messaging.queue.Queue`)."""

    # The state is in the queue's slots (as for ArrivalHold): none here at runtime.
    if not TYPE_CHECKING:
        __slots__ = ()

    type: ClassVar[str]
    journal: MessageJournal | None
    _fresh: deque[Message]
    _returned: list[QueueEntry]
    _timed: bool
    _deleted: bool
    _taken: int
    _ready: int
    _ready_bytes: int
    _unacked: int
    _unacked_bytes: int
    _last_used: float
    _clock: Callable[[], float]
    delivered_messages: int
    delivered_bytes: int

    def take_run(self, limit: int) -> EntryRun | None:
        """Acquire up to ``limit`` fresh persistent messages from the head as one run.

        None when the head cannot be taken so (see the module): take it with ``get``.
        """
        journal = self.journal
        fresh = self._fresh
        if (limit <= 0 or not fresh or self._returned or self._timed or self._deleted or journal is None
                or self.type != "standard" or not fresh[0].persistent):
            return None
        # in C loops (map, islice): the Python work per message is one popleft
        wanted = min(limit, len(fresh))
        flags = list(map(_PERSISTENT, islice(fresh, wanted)))
        if not all(flags):
            wanted = flags.index(False)         # up to the first transient message
        messages = list(islice(fresh, wanted))
        if wanted == len(fresh):
            fresh.clear()
        else:
            take = fresh.popleft
            for _ in repeat(None, wanted):
                take()
        ids = list(map(_JOURNAL_ID, messages))
        size = sum(map(len, map(_BODY, messages)))
        queue: Queue = self  # type: ignore[assignment]
        run = EntryRun(queue, messages, self._taken, id_ranges(ids), size)
        taken = len(messages)
        self._taken += taken
        self._ready -= taken
        self._ready_bytes -= size
        self._unacked += taken
        self._unacked_bytes += size
        self.delivered_messages += taken
        self.delivered_bytes += size
        self._last_used = self._clock()
        journal.delivered_ranges(queue, run.ranges, 1)
        return run

    def settle_run(self, run: EntryRun, by: str | None = None) -> int:
        """Acknowledge every message of ``run`` (journaled by ranges); how many (0: split or settled before)."""
        if run.state != ACQUIRED or run.queue is not self:
            return 0
        run.state = SETTLED
        taken = len(run.messages)
        self._unacked -= taken
        self._unacked_bytes -= run.size
        journal = self.journal
        if journal is not None:
            journal.settled_ranges(run.queue, run.ranges, ACKED, by, 1)
        return taken

    def split_run(self, run: EntryRun) -> list[QueueEntry]:
        """The acquired entries of ``run``'s messages, at their positions; the run holds nothing after.

        Nothing is journaled: the entries are as delivered as the run was.
        """
        if run.state != ACQUIRED or run.queue is not self:
            return []
        run.state = _SPLIT
        entries = []
        queue = run.queue
        for offset, message in enumerate(run.messages):
            entry = QueueEntry(message, queue, run.position + offset)
            entry.state = ACQUIRED
            entries.append(entry)
        return entries
