"""The journal's upkeep queries, one window of message ids at a time, so their memory is bounded.

The upkeep process (:mod:`lakehouse.journal_upkeep`) asks the journal two
questions: which is the lowest live message (the recovery watermark,
:func:`lowest_live_id`), and which messages ended before the history
retention's cut-off (:func:`expired_ids`).  Asked of the whole table at once,
both are hash joins of every ``enqueue`` row against every ``settle`` row: a
process whose memory grew with the journal, 2.7 GiB with ten million 1 KB
messages queued (about 260 bytes per message), though nothing changed but
the backlog.  So both are asked of one *window* of message ids
``[low, high)`` at a time:

* the rows joined are the ``enqueue`` and ``settle`` rows of the window's
  ids: a single-message row by its ``message_id``, a range row (schema 3,
  ``first_message_id`` to ``message_id``) when it overlaps the window, and
  then only for the ids it has in the window (the expansion is clamped to
  it, so a grant of a million ids costs what the window holds);
* a row about an id of the window can sit anywhere later in the table (a
  message settled days after it was published): each window scans the rows
  from its ``low`` on, and filters before it joins; the scan streams, only
  the join's input is held;
* ``queue_deleted`` rows end every earlier message of their queue: each
  window reads those from its ``low`` on (one row per deletion, few).

The watermark stops at the first window holding a live message: with a
backlog at the journal's head (the lowest live message stays put), that is
one window per round, however long the backlog.  Each window starts at an
``enqueue`` row's id, so a stretch of ids without messages costs none.  Retention only looks at ids
up to the highest one an ending row before the cut-off names (a message that
ended then has such a row, naming its id or a later one): none while nothing
ended that long ago.  Its answer, the expired ids, is a sorted ``int64``
array: 8 bytes per message it removes in that round.

The watermark's windows are read with pyarrow, file by file and row group by
row group, skipping what the statistics rule out (:mod:`lakehouse.journal_keys`):
through DataFusion its memory grew with the number of data files.  A round
walks :data:`WATERMARK_WINDOWS` windows at most (:func:`step_watermark`) and
the next goes on from there.  Retention's windows are still SQL (DataFusion),
over one delta-rs handle per question; they find the windows, and the
highest id that ended before the cut-off, with the key scan too.

Windows of one question may read successive versions of the table (the writer
keeps committing): a message that ended stays ended (the journal never
enqueues an id again once every queue has settled it), so each window's
answer still holds for the later versions.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .delta_table import AppendOnlyTable, TableSnapshot
from .journal_keys import KeyScan, live_ids
from .journal_schema import ENQUEUE, QUEUE_DELETED, SETTLE
from .journal_writer import journal_source, read_watermark, watermark_path, write_watermark

__all__ = ["WINDOW_IDS", "WATERMARK_WINDOWS", "Window", "windows", "lowest_live_id", "step_watermark",
           "expired_ids", "sorted_member_mask"]

#: message ids per window (DELTAMQ_JOURNAL_UPKEEP_WINDOW): what one join of the upkeep holds
#: at most, times the rows per id (one ``enqueue`` and one ``settle`` per queue reached)
WINDOW_IDS = int(os.environ.get("DELTAMQ_JOURNAL_UPKEEP_WINDOW", str(1 << 18)))

#: windows the watermark walks at most in one round (DELTAMQ_JOURNAL_UPKEEP_WATERMARK_WINDOWS);
#: the next round goes on from where this one stopped
WATERMARK_WINDOWS = int(os.environ.get("DELTAMQ_JOURNAL_UPKEEP_WATERMARK_WINDOWS", "4"))

#: what the queries read: the table (a fresh handle each time) or one snapshot of it
Source = AppendOnlyTable | TableSnapshot

#: ``[low, high)``: the message ids one query looks at
Window = tuple[int, int]
#: told of every window queried (tests check the work done is bounded by the window)
WindowObserver = Callable[[Window], None]

#: a range row's ids within the window ``[{low}, {high})`` (the row overlaps it), one row each
_CLAMPED_RANGE_IDS = ("unnest(generate_series("
                      "CASE WHEN first_message_id > {low} THEN first_message_id ELSE {low} END, "
                      "CASE WHEN message_id < {high} THEN message_id ELSE {high} - 1 END))")

#: the ids of the window ``[{low}, {high})`` whose every queue entry ended before ``{stamp}``
_EXPIRED_SQL = f"""
WITH j AS (
    SELECT event, queue, message_id, first_message_id, at FROM {{source}} WHERE message_id >= {{low}}
), enqueued AS (
    SELECT queue, message_id FROM j WHERE event = '{ENQUEUE}' AND message_id < {{high}}
), settled AS (
    SELECT queue, message_id, MIN(at) AS at FROM (
        SELECT queue, message_id, at FROM j
        WHERE event = '{SETTLE}' AND first_message_id IS NULL AND message_id < {{high}}
        UNION ALL
        SELECT queue, {_CLAMPED_RANGE_IDS} AS message_id, at FROM j
        WHERE event = '{SETTLE}' AND first_message_id IS NOT NULL AND first_message_id < {{high}}
    ) GROUP BY queue, message_id
), deleted AS (
    SELECT e.queue, e.message_id, MIN(d.at) AS at
    FROM enqueued e JOIN j d ON d.event = '{QUEUE_DELETED}' AND d.queue = e.queue
                             AND d.message_id >= e.message_id
    GROUP BY e.queue, e.message_id
), ended AS (
    SELECT e.message_id, COALESCE(s.at, x.at) AS ended_at
    FROM enqueued e
    LEFT JOIN settled s ON s.queue = e.queue AND s.message_id = e.message_id
    LEFT JOIN deleted x ON x.queue = e.queue AND x.message_id = e.message_id
)
SELECT message_id FROM ended GROUP BY message_id
HAVING COUNT(ended_at) = COUNT(*) AND MAX(ended_at) < TIMESTAMP '{{stamp}}'
"""

#: the highest id an ending row older than the cut-off names (NULL: no message ended before it)
_EXPIRY_BOUND_SQL = f"""
SELECT MAX(message_id) AS high FROM t
WHERE event IN ('{SETTLE}', '{QUEUE_DELETED}') AND at < TIMESTAMP '{{stamp}}'
"""


def _snapshot(source: Source) -> TableSnapshot:
    """One handle for all the queries of one question (each :meth:`AppendOnlyTable.read` opens
    the table again, reading the log and every file's statistics)."""
    return source if isinstance(source, TableSnapshot) else source.snapshot()


def _keys(source: Source | KeyScan) -> KeyScan | None:
    """The key scan of a local table (None: on object storage, or a snapshot: queries only)."""
    if isinstance(source, KeyScan):
        return source
    if isinstance(source, AppendOnlyTable) and not source.remote:
        return KeyScan.of(source.path)
    return None


def windows(source: Source | KeyScan, start: int, last: int, size: int) -> Iterator[Window]:
    """Windows of ``size`` ids from ``start`` to ``last``, lowest first, each starting at an
    ``enqueue`` row's id: ids no message has (removed by retention, or between a lone old
    message and the rest) cost no window."""
    if size < 1:
        raise ValueError(f"a window of {size} ids")
    keys = _keys(source)
    if keys is not None:
        first_enqueued = keys.first_enqueued
    else:
        snapshot = _snapshot(source)               # type: ignore[arg-type]   # not a KeyScan here

        def first_enqueued(start: int) -> int | None:
            return _scalar(snapshot, f"SELECT MIN(message_id) AS low FROM t WHERE event = '{ENQUEUE}'"
                                     f" AND message_id >= {int(start)}", "low")
    low = first_enqueued(start)
    while low is not None and low <= last:
        yield low, low + size
        low = first_enqueued(low + size)


def _scalar(snapshot: TableSnapshot, sql: str, column: str) -> int | None:
    result = snapshot.read(sql)
    if not result.num_rows or column not in result.column_names:
        return None
    value = result.column(column)[0].as_py()
    return None if value is None else int(value)


def _source_sql(snapshot: TableSnapshot) -> str:
    """What the queries read as the journal (padded with ``first_message_id`` before schema 3)."""
    return journal_source(any(field.name == "first_message_id" for field in snapshot.handle.schema().fields))


def lowest_live_id(source: AppendOnlyTable | KeyScan, start: int, *, window: int = WINDOW_IDS,
                   observe: WindowObserver | None = None) -> int | None:
    """The lowest live message id from ``start`` on, or one past the highest id when none is
    live; None when the table has no row from ``start`` on.  Windows from ``start`` up, until
    one holds a live message."""
    return _walk(_local_keys(source), start, window, observe, None)[0]


def _local_keys(source: AppendOnlyTable | KeyScan) -> KeyScan:
    keys = _keys(source)
    if keys is None:
        raise ValueError("the recovery watermark is kept for local journals only")
    return keys


def _walk(keys: KeyScan, start: int, window: int, observe: WindowObserver | None,
          max_windows: int | None) -> tuple[int | None, bool]:
    """:func:`lowest_live_id`, ``max_windows`` windows at most: (the answer, whether it is the
    lowest live id).  Stopped short, the answer is where the next window starts: every
    message below it has ended."""
    high = keys.highest_id(int(start))
    if high is None:
        return None, True
    walked = 0
    for bounds in windows(keys, int(start), high, window):
        if max_windows is not None and walked >= max_windows:
            return bounds[0], False
        if observe is not None:
            observe(bounds)
        live = live_ids(keys.window_rows(*bounds), *bounds)
        if len(live):
            return int(live[0]), True
        walked += 1
    return high + 1, True


def step_watermark(source: AppendOnlyTable | KeyScan, location: str | Path, *, window: int = WINDOW_IDS,
                   max_windows: int = WATERMARK_WINDOWS,
                   observe: WindowObserver | None = None) -> tuple[int, bool]:
    """Move the recovery watermark of the local journal at ``location`` up, ``max_windows``
    windows at most: (the watermark now, whether it reached the lowest live id).

    Not reached, the next call goes on from where this one stopped (the watermark file):
    a round's work is bounded however many messages ended since the last one.
    """
    current = read_watermark(location)
    path = watermark_path(location)
    if path is None:
        return current, True
    floor, reached = _walk(_local_keys(source), current, window, observe, max_windows)
    if floor is not None and floor > current:
        write_watermark(path, floor)
        current = floor
    return current, reached


def expired_ids(source: Source, cutoff: dt.datetime, *, window: int = WINDOW_IDS,
                observe: WindowObserver | None = None, keys: KeyScan | None = None) -> npt.NDArray[np.int64]:
    """Ids of messages whose every queue entry ended before ``cutoff`` (UTC), sorted.

    ``keys``: the key scan of the table's version to use (read afresh without it)."""
    stamp = cutoff.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    keys = keys or _keys(source)
    if keys is not None:
        high = keys.highest_ended_before(cutoff.astimezone(dt.timezone.utc))
    else:
        high = _scalar(_snapshot(source), _EXPIRY_BOUND_SQL.format(stamp=stamp), "high")
    found: list[npt.NDArray[np.int64]] = []
    if high is not None:
        snapshot = _snapshot(source)          # opened only when a window is to be queried
        sql = _source_sql(snapshot)
        for ids in windows(keys if keys is not None else snapshot, 0, high, window):
            if observe is not None:
                observe(ids)
            result = snapshot.read(_window_sql(_EXPIRED_SQL, sql, ids, stamp=stamp))
            if result.num_rows:
                found.append(result.column("message_id").to_numpy().astype(np.int64))
    if not found:
        return np.empty(0, np.int64)
    return np.sort(np.concatenate(found))


def _window_sql(template: str, source: str, bounds: Window, **values: str) -> str:
    low, high = bounds
    return template.format(source=source, low=int(low), high=int(high), **values)


def sorted_member_mask(values: pa.Array | pa.ChunkedArray, members: npt.NDArray[np.int64]) -> pa.Array:
    """Which of ``values`` (int64, nulls: no) are among ``members`` (sorted): a binary search
    each, not a hash set of ``members`` built for every call as ``pc.is_in`` does."""
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if not len(members):
        return pa.array(np.zeros(len(array), bool))
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool)
    ids = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    found = np.searchsorted(members, ids)
    hit = members[np.minimum(found, len(members) - 1)] == ids
    return pa.array(hit & valid)
