"""The paged-out part of a queue: journal ids and body sizes in compact arrays.

A paged queue (:mod:`broker.messaging.paged_queue`) keeps the middle of its
backlog -- between the in-memory window at its head and the newest arrivals
at its tail -- as :class:`PageSegments`: no :class:`~broker.messaging.message.Message`
and no :class:`~broker.messaging.queue_entry.QueueEntry` per message, only
each message's journal id (8 bytes, ``array('q')``) and body size (4 bytes,
``array('I')``), in segments of :data:`SEGMENT_SIZE` messages.  12 bytes per
paged message, plus the arrays' spare capacity (at most one segment's).

A message that cannot be read back from the journal -- a transient one, or
one the journal never numbered -- may still sit among paged ones (arrival
order is kept): it stays in memory, held by its segment under its index
(journal id 0 in the arrays), and is handed out with the others.

Messages leave from the head only (:meth:`PageSegments.take`), or all at once
(:meth:`PageSegments.clear`); the head of a segment advances by an offset, and
a segment emptied is dropped, so taking is O(taken).
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import TYPE_CHECKING, Final, Iterator, Sequence

if TYPE_CHECKING:
    from broker.messaging.message import Message

__all__ = ["PageSegments", "Segment", "Taken", "SEGMENT_SIZE", "BYTES_PER_PAGED_MESSAGE"]

#: messages per segment
SEGMENT_SIZE: Final = 65_536
#: what a paged message costs in memory (its id and its size)
BYTES_PER_PAGED_MESSAGE: Final = 12


class Segment:
    """Up to :data:`SEGMENT_SIZE` consecutive messages of a queue, from ``start`` on."""

    __slots__ = ("ids", "sizes", "held", "start")

    def __init__(self) -> None:
        self.ids = array("q")
        self.sizes = array("I")
        #: index -> message kept in memory (not readable from the journal)
        self.held: dict[int, Message] = {}
        #: index of the first message still in the segment
        self.start = 0

    def __len__(self) -> int:
        return len(self.ids) - self.start


class Taken:
    """Messages taken from the head of :class:`PageSegments`, in queue order.

    ``ids`` has 0 where a message was held in memory; ``held`` maps those
    positions (in this batch) to their messages.
    """

    __slots__ = ("ids", "sizes", "held")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.sizes: list[int] = []
        self.held: dict[int, Message] = {}

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def paged_ids(self) -> list[int]:
        """The ids to read back from the journal (held messages aside)."""
        return [i for i in self.ids if i]

    @property
    def paged_bytes(self) -> int:
        held = self.held
        return sum(size for index, size in enumerate(self.sizes) if index not in held)

    @property
    def bytes(self) -> int:
        return sum(self.sizes)


class PageSegments:
    """A queue's paged messages, oldest first (see the module)."""

    __slots__ = ("_segments", "count", "bytes", "paged_count", "paged_bytes")

    def __init__(self) -> None:
        self._segments: deque[Segment] = deque()
        #: messages in the segments (held ones included) and their body bytes
        self.count = 0
        self.bytes = 0
        #: of which out of memory: messages and body bytes
        self.paged_count = 0
        self.paged_bytes = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def _tail(self) -> Segment:
        segments = self._segments
        if not segments or len(segments[-1].ids) >= SEGMENT_SIZE:
            segments.append(Segment())
        return segments[-1]

    def append(self, message: Message) -> None:
        """Add ``message`` at the tail: by id when persistent and journaled, else held."""
        segment = self._tail()
        size = len(message.body)
        message_id = message.journal_id
        if message.persistent and message_id:
            segment.ids.append(message_id)
            self.paged_count += 1
            self.paged_bytes += size
        else:
            segment.held[len(segment.ids)] = message
            segment.ids.append(0)
        segment.sizes.append(size)
        self.count += 1
        self.bytes += size

    def extend_ids(self, ids: Sequence[int], sizes: Sequence[int]) -> None:
        """Add messages known only by journal id and body size (recovery), in order."""
        done = 0
        total = len(ids)
        while done < total:
            segment = self._tail()
            room = min(SEGMENT_SIZE - len(segment.ids), total - done)
            segment.ids.extend(ids[done:done + room])
            segment.sizes.extend(sizes[done:done + room])
            done += room
        size = sum(sizes)
        self.count += total
        self.bytes += size
        self.paged_count += total
        self.paged_bytes += size

    def take(self, limit: int) -> Taken:
        """Remove up to ``limit`` messages from the head."""
        taken = Taken()
        segments = self._segments
        while segments and len(taken.ids) < limit:
            segment = segments[0]
            start = segment.start
            end = min(len(segment.ids), start + limit - len(taken.ids))
            base = len(taken.ids)
            if segment.held:
                for index in range(start, end):
                    message = segment.held.pop(index, None)
                    if message is not None:
                        taken.held[base + index - start] = message
            taken.ids.extend(segment.ids[start:end])
            taken.sizes.extend(segment.sizes[start:end])
            if end == len(segment.ids):
                segments.popleft()
            else:
                segment.start = end
        size = taken.bytes
        paged = taken.paged_bytes
        self.count -= len(taken.ids)
        self.bytes -= size
        self.paged_count -= len(taken.ids) - len(taken.held)
        self.paged_bytes -= paged
        return taken

    def clear(self) -> Taken:
        """Remove everything."""
        return self.take(self.count)

    def held_messages(self) -> Iterator[Message]:
        """The messages held in memory among the paged ones, in order."""
        for segment in self._segments:
            for index in sorted(segment.held):
                yield segment.held[index]

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def __repr__(self) -> str:
        return (f"<PageSegments {self.count} messages ({self.paged_count} paged, {self.paged_bytes} bytes)"
                f" in {len(self._segments)} segments>")
