"""Time-travel replay, the reading side: one queue's journaled messages between two bounds.

The broker's ``replayMessages`` operation (a Queue operation of the REST
API, ``deltamq replay``, the console's replay form) publishes again the
messages a queue's ``journal`` rows say were enqueued on it
(:mod:`lakehouse.journal_schema`).  This module finds them and hands them
over in batches, so a range of any size is read with bounded memory; the
broker's reader (:class:`QueueHistoryProcess`) reads in a child process, since
delta-rs holds the interpreter lock while it reads.

Which messages
--------------
Those with an ``enqueue`` row for the queue that falls within every bound given:

* ``from_time`` / ``to_time``: the row's ``at`` (when the message was
  enqueued on the queue) is at or after ``from_time`` and before ``to_time``;
* ``from_version`` / ``to_version``: the row was committed by a version of the
  journal from ``from_version`` to ``to_version``, both included -- it is in
  the table as of ``to_version`` (Delta time travel) and not in the table as
  of ``from_version - 1``.

What became of a message afterwards does not matter: history is replayed,
acknowledged, dead-lettered and expired messages included.  A message that
reached several queues has its body on one row only, the ``enqueue`` into the
first queue it reached, which may be another queue's: bodies are looked up
by message id, whatever the queue.

The whole replay reads one version of the journal, *pinned* when it starts:
``to_version``, or the newest version then.  So the pages of a long replay
agree with each other, and messages the replay itself publishes (into the
same queue, maybe) are never read back.  Pages are taken in message id order
(publish order): a page of ids, then the bodies of those ids, each one query
over the pinned version (DataFusion, file statistics on ``message_id`` skip
the files of other pages).

What it cannot reach: versions whose log entries Delta has cleaned up
(``delta.logRetentionDuration``, one hour by default) and the rows the
journal's history retention removed (messages settled more than seven days
ago by default): see docs/replay.md.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import NamedTuple, TypeVar

from .delta_table import Location
from .delta_versions import TableReadFailed, TableVersions, VersionUnavailable
from .journal_schema import ENQUEUE, FORMAT_SQL, NATIVE_SQL
from .log_state import read_commit

__all__ = ["ReplayRange", "JournaledMessage", "QueueHistory", "QueueHistoryProcess", "BadRange",
           "JournalHistory", "commit_time", "BATCH_SIZE"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: messages per page (the broker publishes a page as one journal transaction)
BATCH_SIZE = 500


class BadRange(ValueError):
    """Bounds that select nothing sensible; ``parameter`` names the bound at fault (if one is)."""

    def __init__(self, parameter: str | None, text: str) -> None:
        super().__init__(text)
        self.parameter = parameter

    def __reduce__(self) -> tuple[type[BadRange], tuple[str | None, str]]:
        return BadRange, (self.parameter, str(self))     # raised in the reader's process


@dataclass(frozen=True, slots=True)
class ReplayRange:
    """The bounds of a replay; None: no bound on that side.  Times are aware (UTC or other)."""

    from_time: datetime | None = None
    to_time: datetime | None = None
    from_version: int | None = None
    to_version: int | None = None

    def check(self) -> None:
        """Raise :class:`BadRange` for bounds that contradict each other or are missing."""
        if self == ReplayRange():
            raise BadRange(None, "give at least one bound: fromTime, toTime, fromVersion"
                                 " or toVersion")
        for name, value in (("fromTime", self.from_time), ("toTime", self.to_time)):
            if value is not None and value.tzinfo is None:
                raise BadRange(name, f"{value.isoformat()} has no time zone")
        for name, number in (("fromVersion", self.from_version), ("toVersion", self.to_version)):
            if number is not None and number < 0:
                raise BadRange(name, f"{number} is not a version (they count from 0)")
        if self.from_time is not None and self.to_time is not None \
                and self.from_time >= self.to_time:
            raise BadRange("toTime", f"{_iso(self.to_time)} is not after fromTime"
                                     f" {_iso(self.from_time)} (the range is fromTime included,"
                                     " toTime excluded)")
        if self.from_version is not None and self.to_version is not None \
                and self.from_version > self.to_version:
            raise BadRange("toVersion", f"{self.to_version} is before fromVersion"
                                        f" {self.from_version}")


class JournaledMessage(NamedTuple):
    """One message as the journal keeps it (its body row), with when it reached the queue."""

    message_id: int
    enqueued_at: datetime
    exchange: str
    routing_key: str
    published_at: datetime | None
    body: bytes
    message_format: str
    native: bytes


class JournalHistory:
    """The history of one journal table (local path or object-storage URI).

    With ``separate_process`` its readers run in a child process
    (:class:`QueueHistoryProcess`), as the broker needs them; else in the
    calling thread (:class:`QueueHistory`).
    """

    def __init__(self, location: Location, storage_options: dict[str, str] | None = None, *,
                 separate_process: bool = False) -> None:
        self.location = location
        self.storage_options = storage_options
        self.separate_process = separate_process

    def queue(self, queue: str, *, from_time: datetime | None = None, to_time: datetime | None = None,
              from_version: int | None = None, to_version: int | None = None,
              limit: int | None = None, batch_size: int = BATCH_SIZE
              ) -> QueueHistory | QueueHistoryProcess:
        """A reader of ``queue``'s messages within the bounds (see :class:`ReplayRange`);
        nothing is read before its ``open()``."""
        bounds = ReplayRange(from_time, to_time, from_version, to_version)
        if self.separate_process:
            return QueueHistoryProcess(self.location, self.storage_options, queue, bounds,
                                       limit=limit, batch_size=batch_size)
        return QueueHistory(TableVersions(self.location, self.storage_options), queue, bounds,
                            limit=limit, batch_size=batch_size)

    def commit_time(self, version: int) -> datetime | None:
        """When ``version`` of the table was committed; None when its log entry is gone."""
        return commit_time(TableVersions(self.location, self.storage_options), version)


def commit_time(table: TableVersions, version: int) -> datetime | None:
    """When ``version`` of ``table`` was committed (its ``commitInfo.timestamp``); None if unknown.

    A local table's commit file is read by :func:`lakehouse.log_state.read_commit`;
    on object storage delta-rs reads the table's history.
    """
    if table.remote:
        ms = table.remote_commit_time_ms(version)
    else:
        try:
            actions = read_commit(Path(table.uri) / "_delta_log", version)
        except (OSError, ValueError):
            return None
        times = [a["commitInfo"].get("timestamp") for a in actions
                 if isinstance(a.get("commitInfo"), dict)]
        ms = times[0] if times and isinstance(times[0], int) else None
    return None if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc)


class QueueHistory:
    """One queue's journaled messages within a range, page by page (blocking: a worker thread).

    :meth:`open` pins the version read and checks the bounds against the
    table; then each :meth:`next_batch` returns the next page, and an empty
    list once the range (or ``limit``) is exhausted.
    """

    def __init__(self, table: TableVersions, queue: str, bounds: ReplayRange, *,
                 limit: int | None = None, batch_size: int = BATCH_SIZE) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.table = table
        self.queue = queue
        self.bounds = bounds
        self.limit = limit
        self.batch_size = batch_size
        #: the version every page is read from, and when it was committed (set by open)
        self.version = -1
        self.committed: datetime | None = None
        self.read = 0                      # messages handed out so far
        self.missing: list[int] = []       # enqueued ids whose body row is gone (history retention)
        self._after = 0                    # the highest message id handed out (or skipped)
        self._done = False

    def open(self) -> int:
        """Check the bounds, pin the version to read; that version."""
        bounds = self.bounds
        bounds.check()
        latest = self.table.latest_version()
        for name, number in (("fromVersion", bounds.from_version), ("toVersion", bounds.to_version)):
            if number is not None and number > latest:
                raise BadRange(name, f"version {number} is not committed yet: the journal's"
                                     f" newest version is {latest}")
        self.version = latest if bounds.to_version is None else bounds.to_version
        self._pin("t", self.version, "toVersion")
        if bounds.from_version is not None and bounds.from_version > 0:
            self._pin("before", bounds.from_version - 1, "fromVersion")
        self.committed = commit_time(self.table, self.version)
        return self.version

    def close(self) -> None:
        """Nothing to release (the process-backed reader has a process to end)."""

    def _pin(self, name: str, version: int, parameter: str) -> None:
        try:
            self.table.pin(name, version)
        except VersionUnavailable as exc:
            raise BadRange(parameter, f"the journal's {exc} -- Delta keeps a version's log"
                                      " entries for delta.logRetentionDuration (1 hour by"
                                      " default), so older versions cannot be replayed") from None

    def next_batch(self) -> list[JournaledMessage]:
        """The next page of messages, in message id order; [] when there are no more."""
        assert self.version >= 0, "open() first"
        while not self._done:
            wanted = self.batch_size
            if self.limit is not None:
                wanted = min(wanted, self.limit - self.read)
            if wanted <= 0:
                self._done = True
                break
            page = self.table.query(self._ids_sql(wanted))
            if page.num_rows < wanted:
                self._done = True
            if not page.num_rows:               # (an empty result may have no columns at all)
                break
            ids = page.column("message_id").to_pylist()
            times = page.column("enqueued_at").to_pylist()
            self._after = ids[-1]
            found = self._bodies(ids)
            batch = []
            for message_id, enqueued_at in zip(ids, times):
                row = found.get(message_id)
                if row is None:
                    self.missing.append(message_id)
                    continue
                batch.append(JournaledMessage(message_id, enqueued_at, *row))
            if batch:
                self.read += len(batch)
                return batch
        return []

    def _ids_sql(self, wanted: int) -> str:
        """The next page of message ids enqueued on the queue within the bounds (and when)."""
        bounds = self.bounds
        queue = _literal(self.queue)
        where = [f"event = '{ENQUEUE}'", f"queue = {queue}", f"message_id > {self._after}"]
        if bounds.from_time is not None:
            where.append(f'"at" >= {_timestamp(bounds.from_time)}')
        if bounds.to_time is not None:
            where.append(f'"at" < {_timestamp(bounds.to_time)}')
        if bounds.from_version:
            # committed after from_version - 1: not among that version's enqueue rows
            where.append(f"""message_id NOT IN (
                SELECT message_id FROM before WHERE event = '{ENQUEUE}' AND queue = {queue}
                AND message_id > {self._after})""")
        return f"""SELECT message_id, MIN("at") AS enqueued_at FROM t
                   WHERE {' AND '.join(where)}
                   GROUP BY message_id ORDER BY message_id LIMIT {wanted}"""

    def _bodies(self, ids: list[int]) -> dict[int, tuple[str, str, datetime | None, bytes, str, bytes]]:
        """The body rows of ``ids`` (whichever queue's enqueue stored them)."""
        listed = ", ".join(str(i) for i in ids)
        rows = self.table.query(f"""
            SELECT message_id, exchange, routing_key, published_at, body,
                   {FORMAT_SQL} AS message_format, {NATIVE_SQL} AS native
            FROM t WHERE body IS NOT NULL AND message_id BETWEEN {ids[0]} AND {ids[-1]}
            AND message_id IN ({listed})""")
        found: dict[int, tuple[str, str, datetime | None, bytes, str, bytes]] = {}
        if not rows.num_rows:
            return found
        columns = [rows.column(name).to_pylist() for name in
                   ("message_id", "exchange", "routing_key", "published_at", "body",
                    "message_format", "native")]
        for message_id, exchange, key, published, body, tag, native in zip(*columns):
            found.setdefault(message_id, (exchange or "", key or "", published, body, tag,
                                          native or b""))
        return found


class QueueHistoryProcess:
    """A :class:`QueueHistory` that reads in a child process of its own; the same interface.

    delta-rs holds the interpreter lock while it loads a version and while
    DataFusion runs a query (measured: a thread ticking every 5 ms went
    unscheduled for up to ~1 s while a page was read from a journal of 400
    files), so a reader in a thread of the broker would stall its event loop
    for as long.  Each call here waits for the child over a pipe, which lets
    the lock go: call it from a worker thread.  The child is started
    (``spawn``) by :meth:`open` and ended by :meth:`close`.
    """

    def __init__(self, location: Location, storage_options: dict[str, str] | None, queue: str,
                 bounds: ReplayRange, *, limit: int | None = None,
                 batch_size: int = BATCH_SIZE) -> None:
        self._arguments = (location, storage_options, queue, bounds, limit, batch_size)
        self._executor: ProcessPoolExecutor | None = None
        self.queue = queue
        self.version = -1
        self.committed: datetime | None = None
        self.read = 0
        self.missing: list[int] = []

    def _call(self, work: Callable[[], T]) -> T:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn"), initializer=_start_reader,
                initargs=self._arguments)
        try:
            return self._executor.submit(work).result()
        except BrokenProcessPool as exc:
            raise TableReadFailed(f"the process reading the journal ended: {exc}") from None

    def open(self) -> int:
        self.version, self.committed = self._call(_open_reader)
        return self.version

    def next_batch(self) -> list[JournaledMessage]:
        batch, missing = self._call(_next_page)
        self.read += len(batch)
        self.missing += missing
        return batch

    def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


#: the reader of a child process started by QueueHistoryProcess (one reader per process)
_reader: QueueHistory | None = None


def _start_reader(location: Location, storage_options: dict[str, str] | None, queue: str,
                  bounds: ReplayRange, limit: int | None, batch_size: int) -> None:
    global _reader
    _reader = QueueHistory(TableVersions(location, storage_options), queue, bounds, limit=limit,
                           batch_size=batch_size)


def _open_reader() -> tuple[int, datetime | None]:
    assert _reader is not None
    return _reader.open(), _reader.committed


def _next_page() -> tuple[list[JournaledMessage], list[int]]:
    assert _reader is not None
    known = len(_reader.missing)
    return _reader.next_batch(), _reader.missing[known:]


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (DataFusion: quotes doubled, no backslash escapes)."""
    return "'" + text.replace("'", "''") + "'"


def _timestamp(moment: datetime) -> str:
    """An aware datetime as a DataFusion UTC microsecond timestamp literal (the ``at`` column's type)."""
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return f"arrow_cast({micros}, 'Timestamp(Microsecond, Some(\"UTC\"))')"


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
