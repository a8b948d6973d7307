"""The journal's key columns, read file by file and row group by row group: the watermark's scan.

The recovery watermark (:func:`lakehouse.journal_windows.lowest_live_id`)
asks, for one window of message ids, which of its messages are still live.
Asked through DataFusion (delta-rs's query engine), the answer cost memory
that grew with the number of data files the table had: with 6,000 files of
500 messages (compaction lagging behind a fast publisher), one window's query
peaked 290 MiB above a process that had only opened the table, and the
``MIN``/``MAX`` queries that find the windows 150 MiB, though the rows it
joined were those of one window.  Planning and scanning thousands of files
at once holds each file's metadata and read-ahead buffers.

:class:`KeyScan` reads the same rows with pyarrow's Parquet reader instead:
one file at a time, one row group at a time, only the key columns (``event``,
``queue``, ``message_id``, ``first_message_id``), skipping the files and row
groups their statistics rule out (the ``add`` actions' ``message_id``
min/max, the row groups' ``message_id`` and ``event`` min/max), and keeping
only the rows the window needs.  Its memory is one row group's keys plus
the window's rows, whatever the number of files.  The answer is computed
with numpy from those rows (:func:`live_ids`), as the SQL it replaces did
(:data:`lakehouse.journal_writer.LIVE_CTES`: a message is live in a queue
from its ``enqueue`` until a ``settle`` of it, or a ``queue_deleted`` of its
queue naming its id or a later one).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .journal_schema import ENQUEUE, QUEUE_DELETED, SETTLE
from .log_state import LogState

__all__ = ["KeyScan", "live_ids"]

#: the columns the watermark reads
KEYS = ("event", "queue", "message_id", "first_message_id")
_KEY_SCHEMA = pa.schema([("event", pa.string()), ("queue", pa.string()), ("message_id", pa.int64()),
                         ("first_message_id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])


class _File:
    """One live data file and its ``message_id`` bounds (None: the ``add`` action has no statistics)."""

    __slots__ = ("path", "low", "high", "oldest")

    def __init__(self, path: Path, add: dict[str, Any]) -> None:
        self.path = path
        stats = json.loads(add.get("stats") or "{}")
        self.low: int | None = (stats.get("minValues") or {}).get("message_id")
        self.high: int | None = (stats.get("maxValues") or {}).get("message_id")
        oldest = (stats.get("minValues") or {}).get("at")
        #: the earliest ``at`` of its rows (None: not recorded)
        self.oldest = dt.datetime.fromisoformat(oldest) if isinstance(oldest, str) else None


class KeyScan:
    """The key columns of one version of a local journal (its live files, as ``state`` lists them)."""

    def __init__(self, table_path: Path, state: LogState) -> None:
        self.files = [_File(table_path / unquote(name), add) for name, add in state.adds.items()]
        # lowest ids first: a search for the lowest enqueued id stops at the first file past it
        self.files.sort(key=lambda f: (f.low if f.low is not None else -1))
        self.version = state.version

    @classmethod
    def of(cls, table_path: Path) -> KeyScan:
        """The scan of the table at ``table_path`` as its log says now."""
        state = LogState(table_path)
        state.load()
        return cls(table_path, state)

    def highest_id(self, start: int) -> int | None:
        """The highest ``message_id`` of the rows from ``start`` on (None: no such row)."""
        best: int | None = None
        for file in self.files:
            if file.high is not None:
                if file.high >= start and (best is None or file.high > best):
                    best = file.high
                continue
            for keys in self._row_groups(file, ("message_id",), start, None):
                ids = pc.filter(keys.column("message_id"), pc.greater_equal(keys.column("message_id"), start))
                top = pc.max(ids).as_py()
                if top is not None and (best is None or top > best):
                    best = int(top)
        return best

    def first_enqueued(self, start: int) -> int | None:
        """The lowest id from ``start`` on that an ``enqueue`` row names (None: none)."""
        best: int | None = None
        for file in self.files:
            if best is not None and file.low is not None and file.low >= best:
                break                              # files come lowest first: none lower past here
            for keys in self._row_groups(file, ("event", "message_id"), start, best, enqueue_only=True):
                ids = pc.filter(keys.column("message_id"),
                                pc.and_(pc.equal(keys.column("event"), ENQUEUE),
                                        pc.greater_equal(keys.column("message_id"), start)))
                low = pc.min(ids).as_py()
                if low is not None and (best is None or low < best):
                    best = int(low)
        return best

    def has_rows_before(self, cutoff: dt.datetime) -> bool:
        """Whether some row may be dated before ``cutoff`` (from the files' statistics alone)."""
        return any(file.oldest is None or file.oldest < cutoff for file in self.files)

    def highest_ended_before(self, cutoff: dt.datetime) -> int | None:
        """The highest id a ``settle`` or ``queue_deleted`` row dated before ``cutoff`` names
        (None: none): files and row groups whose rows are all newer are skipped."""
        best: int | None = None
        for file in self.files:
            if file.oldest is not None and file.oldest >= cutoff:
                continue
            for keys in self._row_groups(file, ("event", "message_id", "at"), -(1 << 62), None, before=cutoff):
                ended = pc.and_(pc.is_in(keys.column("event"), value_set=pa.array([SETTLE, QUEUE_DELETED])),
                                pc.less(keys.column("at"), pa.scalar(cutoff, _KEY_SCHEMA.field("at").type)))
                top = pc.max(pc.filter(keys.column("message_id"), pc.fill_null(ended, False))).as_py()
                if top is not None and (best is None or top > best):
                    best = int(top)
        return best

    def window_rows(self, low: int, high: int) -> pa.Table:
        """The rows the window ``[low, high)`` is decided by: its ids' ``enqueue`` rows, the
        ``settle`` rows naming one of its ids (single ids, or ranges overlapping it), and the
        ``queue_deleted`` rows from ``low`` on."""
        kept: list[pa.Table] = []
        for file in self.files:
            if file.high is not None and file.high < low:
                continue
            for keys in self._row_groups(file, KEYS, low, None, window_high=high):
                ids, first, event = keys.column("message_id"), keys.column("first_message_id"), keys.column("event")
                in_window = pc.and_(pc.greater_equal(ids, low), pc.less(ids, high))
                reaches = pc.and_(pc.greater_equal(ids, low), pc.fill_null(pc.less(first, high), False))
                wanted = pc.or_(
                    pc.and_(pc.is_in(event, value_set=pa.array([ENQUEUE, SETTLE])), in_window),
                    pc.or_(pc.and_(pc.equal(event, SETTLE), reaches),
                           pc.and_(pc.equal(event, QUEUE_DELETED), pc.greater_equal(ids, low))))
                rows = keys.filter(pc.fill_null(wanted, False))
                if rows.num_rows:
                    kept.append(rows)
        if not kept:
            return pa.schema([_KEY_SCHEMA.field(name) for name in KEYS]).empty_table()
        return pa.concat_tables(kept)

    def _row_groups(self, file: _File, columns: tuple[str, ...], start: int, below: int | None, *,
                    enqueue_only: bool = False, window_high: int | None = None,
                    before: dt.datetime | None = None) -> Iterator[pa.Table]:
        """The ``columns`` of the row groups of ``file`` that may hold rows from ``start`` on
        (and, with ``below``, under it), in the key schema: the rest are skipped by their
        statistics.  ``enqueue_only``: only row groups that may hold ``enqueue`` rows.
        ``window_high``: row groups of ``enqueue`` rows only, all at or past it, are skipped;
        ``before``: row groups whose rows are all dated from it on are skipped."""
        try:
            source = pq.ParquetFile(file.path)
        except FileNotFoundError:                  # vacuumed since the log was read: nothing live in it
            return
        try:
            names = source.schema_arrow.names
            present = [c for c in columns if c in names]
            for index in range(source.metadata.num_row_groups):
                ids, events = _bounds(source, index, "message_id"), _bounds(source, index, "event")
                if ids is not None and (ids[1] < start or (below is not None and ids[0] >= below)):
                    continue
                if enqueue_only and events is not None and not events[0] <= ENQUEUE <= events[1]:
                    continue
                if (window_high is not None and ids is not None and events == (ENQUEUE, ENQUEUE)
                        and ids[0] >= window_high):
                    continue
                if before is not None:
                    stamps = _bounds(source, index, "at")
                    if stamps is not None and stamps[0] >= before:
                        continue
                group = source.read_row_group(index, columns=present, use_threads=False)
                yield _conform(group, columns)
        finally:
            source.close()


def _bounds(source: pq.ParquetFile, index: int, column: str) -> tuple[Any, Any] | None:
    """The min and max of ``column`` in row group ``index`` (None: not recorded)."""
    group = source.metadata.row_group(index)
    for i in range(group.num_columns):
        chunk = group.column(i)
        if chunk.path_in_schema == column:
            stats = chunk.statistics
            if stats is None or not stats.has_min_max:
                return None
            return stats.min, stats.max
    return None


def _conform(rows: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """``rows`` with ``columns`` in the key schema's types (a column the file lacks: null)."""
    arrays = []
    for name in columns:
        field = _KEY_SCHEMA.field(name)
        if name in rows.column_names:
            column = rows.column(name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.chunked_array([pa.nulls(rows.num_rows, field.type)]))
    return pa.table(arrays, schema=pa.schema([_KEY_SCHEMA.field(name) for name in columns]))


def live_ids(rows: pa.Table, low: int, high: int) -> npt.NDArray[np.int64]:
    """The ids of ``[low, high)`` live in some queue, sorted, from the window's rows
    (:meth:`KeyScan.window_rows`)."""
    size = high - low
    event = rows.column("event")
    queues = pc.dictionary_encode(rows.column("queue").combine_chunks())    # one dictionary for all
    queue = np.asarray(pc.fill_null(queues.indices, -1).to_numpy(zero_copy_only=False), np.int64)
    ids = np.asarray(pc.fill_null(rows.column("message_id"), 0).to_numpy(), np.int64)
    first = rows.column("first_message_id")
    ranged = np.asarray(pc.fill_null(pc.is_valid(first), False).to_numpy(zero_copy_only=False), bool)
    firsts = np.asarray(pc.fill_null(first, 0).to_numpy(), np.int64)

    def where(name: str) -> npt.NDArray[np.bool_]:
        return np.asarray(pc.fill_null(pc.equal(event, name), False).to_numpy(zero_copy_only=False), bool)

    enqueue, settle, deleted = where(ENQUEUE), where(SETTLE), where(QUEUE_DELETED)
    # a queue deletion ends every entry of its queue up to the id it names
    upto = np.full(len(queues.dictionary) + 1, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(upto, queue[deleted], ids[deleted])
    entries = enqueue & (ids >= low) & (ids < high)
    entries &= ids > upto[queue]
    enqueued = queue[entries] * size + (ids[entries] - low)
    # settlements: single ids, and each range's ids within the window
    single = settle & ~ranged & (ids >= low) & (ids < high)
    spans = settle & ranged
    starts = np.maximum(firsts[spans], low)
    ends = np.minimum(ids[spans], high - 1)
    counts = np.maximum(ends - starts + 1, 0)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    expanded = np.repeat(queue[spans] * size + (starts - low), counts) + offsets
    settled = np.concatenate([queue[single] * size + (ids[single] - low), expanded])
    live = np.setdiff1d(enqueued, settled)
    return np.unique(live % size + low) if len(live) else np.empty(0, np.int64)
