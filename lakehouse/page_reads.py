"""The journal's side of flow to disk: when paging may happen, and reading paged messages back.

:class:`JournalPageReader` is the :class:`~broker.messaging.flow_to_disk.PageReader`
of a :class:`~lakehouse.journal.DeltaMessageJournal` (its ``page_reader``):

* :meth:`~JournalPageReader.after_durable` waits for the journal group that
  is open now (or the one in flight when none is open): once it is durable,
  every ``enqueue`` row reported before is, and a queue may drop those
  messages from memory;
* :meth:`~JournalPageReader.read_back` reads messages by journal id with
  :class:`lakehouse.message_pages.MessagePages` in a worker thread (never
  on the event loop) and hands them to the queue on the loop, rebuilt as
  :class:`~broker.messaging.message.Message` by :class:`MessageRebuilder`,
  the same code recovery rebuilds journaled messages with.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Final

from broker.cpu_placement import release_this_thread
from broker.messaging.flow_to_disk import UnreadablePages
from broker.messaging.message import Message, MessageProperties
from broker.messaging.message_format import MessageFormat, format_for

if TYPE_CHECKING:
    from .journal import DeltaMessageJournal, JournalGroup
    from .message_pages import MessagePages, StoredMessage

__all__ = ["JournalPageReader", "MessageRebuilder"]

log = logging.getLogger(__name__)

_CACHE_LIMIT: Final = 10_000
#: worker threads reading paged messages back (per journal; MessagePages serialises its reads anyway)
READ_THREADS: Final = 1


class MessageRebuilder:
    """Journal values -> :class:`Message`: formats found by tag, decoded metadata cached.

    ``published_at`` is seconds since the epoch; the message's ``arrival``
    is on the broker's monotonic clock, as if it had arrived then.
    """

    def __init__(self) -> None:
        self._formats: dict[str, MessageFormat] = {}
        self._properties: dict[tuple[str, bytes], MessageProperties] = {}
        self.monotonic_offset = time.monotonic() - time.time()

    def build(self, message_id: int, exchange: str, routing_key: str, published_at: float, tag: str,
              native: bytes, body: bytes) -> Message:
        fmt = self._formats.get(tag)
        if fmt is None:
            fmt = self._formats[tag] = format_for(tag)
        cache = self._properties
        properties = cache.get((tag, native))
        if properties is None:
            properties = fmt.decode(native)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[(tag, native)] = properties
        message = Message(exchange=exchange, routing_key=routing_key, body=body, properties=properties,
                          native=native, format=fmt, arrival=published_at + self.monotonic_offset)
        message.journal_id = message_id
        return message

    def from_stored(self, stored: StoredMessage) -> Message:
        return self.build(stored.message_id, stored.exchange, stored.routing_key, stored.published_at,
                          stored.message_format, stored.native, stored.body)


class JournalPageReader:
    """One journal's page reader (see the module)."""

    def __init__(self, journal: DeltaMessageJournal) -> None:
        self.journal = journal
        self._pages: MessagePages | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._rebuilder = MessageRebuilder()
        #: figures for management: reads made, messages read back
        self.reads = 0
        self.messages_read = 0

    def after_durable(self, callback: Callable[[bool], None]) -> None:
        """``callback(True)`` once every ``enqueue`` row reported so far is durable; False when
        one of them failed or waits for a retry (the caller tries again later).

        Dead letters join their queue before their commit and, when it fails, wait in the
        journal for the next attempt (``_kept_enqueues``): a later group being durable does
        not make them so, hence the check of those reported before this call."""
        journal = self.journal
        group = journal.pending or journal._in_flight
        loop = journal._loop
        kept = set(journal._kept_enqueues)
        if group is None:
            if loop is not None and not loop.is_closed():
                loop.call_soon(callback, not kept)  # on the next turn: a large spill is done in steps
            else:
                callback(not kept)
            return
        if loop is None:
            # no loop (start-up, tests): the group is committed in-process at close, too late
            callback(False)
            return
        waited: JournalGroup = group
        waited.when_durable(lambda: callback(waited.error is None
                                             and not (kept and kept & journal._kept_enqueues)))

    def read_back(self, ids: list[int], done: Callable[[list[Message] | BaseException], None]) -> None:
        loop = self.journal._loop
        if loop is None or loop.is_closed():
            try:
                result: list[Message] | BaseException = self._read(ids)
            except Exception as exc:
                result = exc
            done(result)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="page-reads",
                                                initializer=release_this_thread)
        future = self._executor.submit(self._read, ids)

        def landed(finished: Future[list[Message]]) -> None:
            error = finished.exception()
            done(error if error is not None else finished.result())

        def hand_over(finished: Future[list[Message]]) -> None:
            try:
                loop.call_soon_threadsafe(landed, finished)
            except RuntimeError:                # the loop closed meanwhile (shut-down): nobody waits
                pass

        future.add_done_callback(hand_over)

    def _read(self, ids: list[int]) -> list[Message]:
        """In a worker thread: the messages of ``ids``, in order, rebuilt."""
        from .message_pages import MessagePages
        from .queue_reads import MissingMessages

        if not ids:
            return []
        if self._pages is None:
            table = self.journal.table
            self._pages = MessagePages(table.uri, table.storage_options)
        try:
            stored = self._pages.read(ids)
        except MissingMessages as exc:
            missing = _missing_ids(exc)
            if missing is None:
                raise
            raise UnreadablePages(missing, str(exc)) from exc
        rebuild = self._rebuilder.from_stored
        self.reads += 1
        self.messages_read += len(stored)
        return [rebuild(item) for item in stored]

    def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


def _missing_ids(error: Any) -> list[int] | None:
    """The ids a MissingMessages names (an ``ids`` attribute), None when it names none."""
    for name in ("ids", "message_ids", "missing"):
        value = getattr(error, name, None)
        if value:
            return [int(item) for item in value]
    return None
