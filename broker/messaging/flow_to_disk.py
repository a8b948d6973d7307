"""Flow to disk: when persistent messages leave memory, and what the journal does for it.

Two things page a queue (:mod:`broker.messaging.paged_queue`):

* the broker-wide **threshold** (Broker-J's ``broker.flowToDiskThreshold``,
  bytes): :meth:`FlowToDisk.check`, run once a second with the resource
  alarms, adds up what the queues hold in memory -- body bytes and
  :data:`MESSAGE_OVERHEAD` per message, ready and unacknowledged, paged
  messages not counted -- and while that is above the threshold the broker
  *flows to disk*: every queue that can page starts doing so, and queues
  already paging page their arrivals.  It stops once below 90% of the
  threshold (the memory alarm's hysteresis).  Each start and stop is logged
  once;
* a queue declared with ``x-queue-mode: lazy`` (RabbitMQ's lazy queue) pages
  always.

Only a standard or priority queue that is durable and journals its messages
can page, and only its persistent messages: their bodies are in the journal.
Transient messages and sorted and last-value queues stay in memory.

The journal's side is :class:`PageReader` (``journal.page_reader``): it says
when everything reported so far is durable (a message is paged out only once
its ``enqueue`` row is), and reads paged messages back in a worker thread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Final, Iterable, Protocol, Sequence

if TYPE_CHECKING:
    from broker.messaging.message import Message
    from broker.messaging.queue import Queue

__all__ = ["FlowToDisk", "PageReader", "UnreadablePages", "THRESHOLD_VARIABLE", "DEFAULT_THRESHOLD_SHARE",
           "MESSAGE_OVERHEAD", "threshold_from", "memory_held", "page_reader_of"]

log = logging.getLogger("deltamq")

#: the context variable of the threshold, bytes (Broker-J's name)
THRESHOLD_VARIABLE: Final = "broker.flowToDiskThreshold"
#: its default: this share of the broker's ``memoryHighWatermark`` (paging starts before the alarm)
DEFAULT_THRESHOLD_SHARE: Final = 0.75
#: what a message held in memory costs besides its body (as the memory alarm counts it)
MESSAGE_OVERHEAD: Final = 256
#: share of the threshold memory must fall below before the broker stops flowing to disk
HYSTERESIS: Final = 0.1


class UnreadablePages(LookupError):
    """Paged messages the journal holds no row for any more; ``ids`` names them."""

    def __init__(self, ids: Sequence[int], text: str = "") -> None:
        super().__init__(text or f"{len(ids)} paged messages not found in the journal")
        self.ids = list(ids)


class PageReader(Protocol):
    """What a paged queue needs of its journal (implemented in ``lakehouse``)."""

    def after_durable(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(True)`` once every enqueue reported so far is durable, ``callback(False)``
        if its commit failed; at once when nothing is pending."""
        ...

    def read_back(self, ids: list[int], done: Callable[[list[Message] | BaseException], None]) -> None:
        """Read the messages of ``ids`` (ascending, distinct) without blocking the event loop.

        ``done`` gets them in the same order, or the exception (an
        :class:`UnreadablePages` naming what is missing), on the event loop;
        before a loop exists (start-up, tests), at once.
        """
        ...


def page_reader_of(queue: Queue) -> PageReader | None:
    """The reader of ``queue``'s journal when the queue can page (see the module), else None."""
    from broker.messaging.queue import Queue as Standard

    journal = queue.journal
    if (journal is None or not queue.durable or not isinstance(queue, Standard)
            or queue.type not in ("standard", "priority")):
        return None
    reader: PageReader | None = getattr(journal, "page_reader", None)
    return reader


def threshold_from(text: str | None, memory_high_watermark: int) -> int:
    """The threshold the variable's ``text`` sets (unset or empty: the default share of the watermark)."""
    if text is None or not text.strip():
        return int(memory_high_watermark * DEFAULT_THRESHOLD_SHARE)
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"context variable '{THRESHOLD_VARIABLE}' is {text!r}; expected a number of bytes"
                         " (0: never on memory pressure)") from None
    if value < 0:
        raise ValueError(f"context variable '{THRESHOLD_VARIABLE}' is {text!r}; expected 0 or more bytes")
    return value


def memory_held(queues: Iterable[Queue]) -> int:
    """Bytes the queues hold in memory: bodies and per-message overhead, paged messages aside."""
    total = 0
    for queue in queues:
        count = queue.message_count + queue.unacked_count - queue.paged_count
        total += queue.message_bytes + queue.unacked_bytes - queue.paged_bytes + count * MESSAGE_OVERHEAD
    return total


class FlowToDisk:
    """The broker-wide policy (see the module): one for all virtual hosts."""

    def __init__(self, threshold: int = 0) -> None:
        #: bytes held in memory above which persistent messages are paged (0: only lazy queues page)
        self.threshold = threshold
        #: True while above the threshold (until below 90% of it)
        self.flowing = False
        #: the last measurement
        self.held = 0

    def check(self, queues: Iterable[Queue]) -> bool:
        """Measure, start or stop flowing, and page the queues that can while flowing; ``flowing``."""
        from broker.messaging.paged_queue import start_paging

        queues = list(queues)
        held = self.held = memory_held(queues)
        threshold = self.threshold
        if not self.flowing:
            if 0 < threshold < held:
                self.flowing = True
                log.warning("flow to disk started: queues hold %d bytes in memory, above the %s of %d;"
                            " persistent messages of durable queues are paged out", held, THRESHOLD_VARIABLE,
                            threshold)
        elif threshold <= 0 or held < threshold - threshold * HYSTERESIS:
            self.flowing = False
            log.warning("flow to disk stopped: queues hold %d bytes in memory (%s %d)", held,
                        THRESHOLD_VARIABLE, threshold)
        if self.flowing:
            for queue in queues:
                if queue.message_count > queue.paged_count and not queue.deleted:
                    start_paging(queue, self)
        return self.flowing
