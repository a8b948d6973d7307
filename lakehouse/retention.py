"""History retention of the journal: rows of messages settled long ago are removed.

The journal keeps every event of every persistent message, so Spark can query
what flowed.  After the retention period (7 days by default) a message that
has left every queue it reached -- acked, dead-lettered, expired, purged, its
queue deleted -- has served that purpose: :func:`purge_settled_history`
removes all of its rows.  Live messages are never touched, however old.
An exactly-once producer's ``producer_sequence`` rows older than the cut-off
go too, except its highest (:mod:`lakehouse.producer_rows`).

Which messages: a query over the table (DataFusion) finds each message
whose every queue entry ended (a ``settle`` row, or a later ``queue_deleted``
of its queue) before the cut-off, one window of message ids at a time
(:mod:`lakehouse.journal_windows`: memory bounded by the window, not by the
journal), and only up to the highest id an ending row older than the cut-off
names.  Which files: only those whose
``message_id`` range (the file statistics the writer records) reaches the
oldest of those messages are read; a file holding some of their rows is
rewritten without them.  The swap is one commit whose ``remove`` and ``add``
actions say ``dataChange=false``: the rows it drops were appended more than
the retention period ago, so every Spark stream that is not further behind
than that (which vacuum already requires) has read them, and must not read
the survivors again.  The table stays append-only for every reader.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .delta_table import AppendOnlyTable
from .file_rewrite import read_batches, read_columns, write_batches_synced
from .journal_keys import KeyScan
from .journal_schema import QUEUE_DELETED
from .journal_windows import WINDOW_IDS, WindowObserver, expired_ids, sorted_member_mask
from .log_state import LogState
from .producer_rows import PRODUCER_SEQUENCE, superseded_mask, superseded_producer_rows

__all__ = ["purge_settled_history", "expired_message_ids"]

log = logging.getLogger(__name__)

#: rows about queues and producers, not messages: retention keeps them (built when used: an
#: array built from Python objects makes pyarrow import pandas, which the upkeep process keeps out)
_MARKERS = (QUEUE_DELETED, PRODUCER_SEQUENCE)


def expired_message_ids(table: AppendOnlyTable, cutoff: dt.datetime, *, window: int = WINDOW_IDS,
                        observe: WindowObserver | None = None) -> pa.Array:
    """Ids of messages whose every queue entry ended before ``cutoff`` (UTC), sorted.

    Asked one window of ``window`` message ids at a time (:func:`lakehouse.journal_windows.expired_ids`).
    """
    return pa.array(expired_ids(table, cutoff, window=window, observe=observe), pa.int64())


def _ranges_ended(keys: pa.Table, drop: pa.Array, expired: npt.NDArray[np.int64]) -> pa.Array:
    """``drop`` with its range rows decided: dropped only when every message of the range ended.

    A range row (``first_message_id`` set) stands for many messages; one whose
    last message ended may still cover another one live in some other queue,
    whose settlement in this queue must stay.  ``expired`` is sorted.
    """
    firsts = keys.column("first_message_id")
    ranged = pc.fill_null(pc.is_valid(firsts), False)
    if not pc.any(ranged).as_py():
        return drop
    first = np.asarray(pc.fill_null(firsts, 0).to_numpy(), np.int64)
    last = np.asarray(pc.fill_null(keys.column("message_id"), 0).to_numpy(), np.int64)
    # every id of [first, last] is among the expired ones: as many of them as the range holds
    inside = np.searchsorted(expired, last, side="right") - np.searchsorted(expired, first, side="left")
    return pc.if_else(ranged, pa.array(inside == last - first + 1), drop)


#: what :func:`~lakehouse.producer_rows.superseded_producer_rows` answers, when it is not asked
_NO_PRODUCER_ROWS = pa.schema([("queue", pa.string()), ("delivery_count", pa.int32()), ("message_id", pa.int64())])

#: the columns that decide whether a row goes (bodies are not read for that)
_KEY_COLUMNS = ("message_id", "event", "queue", "delivery_count", "first_message_id")


def _drop_mask(keys: pa.Table, expired: npt.NDArray[np.int64], superseded: pa.Table) -> pa.Array:
    """Which of the rows (``keys``: at least their :data:`_KEY_COLUMNS`) retention removes."""
    # queue_deleted markers stay: they are what keeps a deleted queue's messages away;
    # producer sequences too, each producer's highest: it is what keeps a replayed batch out
    drop = pc.and_(sorted_member_mask(keys.column("message_id"), expired),
                   pc.invert(pc.is_in(keys.column("event"), value_set=pa.array(_MARKERS, pa.string()))))
    if "first_message_id" in keys.column_names:
        drop = _ranges_ended(keys, drop, expired)
    if superseded.num_rows:
        drop = pc.or_(drop, superseded_mask(keys, superseded))
    return pc.fill_null(drop, False)


def _rows_dropped(path: Path, expired: npt.NDArray[np.int64], superseded: pa.Table) -> tuple[int, int]:
    """(rows of the data file at ``path`` retention removes, rows it has): its key columns
    read a batch at a time, no bodies (most files have nothing to drop)."""
    dropped = total = 0
    for batch in read_columns(path, _KEY_COLUMNS):
        dropped += pc.sum(_drop_mask(pa.Table.from_batches([batch]), expired, superseded)).as_py() or 0
        total += batch.num_rows
    return dropped, total


def purge_settled_history(table: AppendOnlyTable, cutoff: dt.datetime,
                          state: LogState | None = None, *, window: int = WINDOW_IDS) -> int:
    """Remove every row of messages that ended before ``cutoff``; the number of rows removed.

    ``state`` is the table's log as maintenance keeps it (read afresh without it);
    ``window``: message ids per query (:mod:`lakehouse.journal_windows`).
    Why by hand and not delta-rs's ``DeltaTable.delete(predicate)``: its
    commit removes files with ``dataChange=true``, which stops every Spark
    stream reading the journal (Delta Spark's streaming source fails on it),
    and which the table's ``delta.appendOnly`` forbids: on a journal table
    delta-rs 1.6 refuses with "The transaction includes Remove action with
    data change but Delta table is append-only" (``python -m
    bench.delta_maintenance``).
    """
    if state is None:
        state = LogState(table.path)
        state.load()
    else:
        state.catch_up()
    table.check(state)
    table.observe(state.version)                       # the appender may be another process
    keys = KeyScan(table.path, state)
    expired = expired_ids(table, cutoff, window=window, keys=keys)
    # no row older than the cut-off (the files' statistics say so): no query at all
    superseded = (superseded_producer_rows(table, cutoff) if keys.has_rows_before(cutoff)
                  else _NO_PRODUCER_ROWS.empty_table())
    if not len(expired) and not superseded.num_rows:
        return 0
    newest = max(int(expired[-1]) if len(expired) else -1,
                 pc.max(superseded.column("message_id")).as_py() if superseded.num_rows else -1)
    removed_rows = 0
    removes: list[dict[str, object]] = []
    adds: list[dict[str, object]] = []
    now_ms = int(time.time() * 1000)
    for name, add in list(state.adds.items()):
        size = int(add.get("size") or 0)
        low = (json.loads(add.get("stats") or "{}").get("minValues") or {}).get("message_id")
        if low is not None and low > newest:
            continue                                   # only younger messages in this file
        path = table.path / unquote(name)
        dropped, total = _rows_dropped(path, expired, superseded)
        if not dropped:
            continue
        removes.append({"path": name, "deletionTimestamp": now_ms, "dataChange": False,
                        "extendedFileMetadata": True, "partitionValues": {}, "size": size})
        if dropped < total:
            # the survivors, streamed a batch at a time into the new file (lakehouse.file_rewrite)
            new_name = f"part-{uuid.uuid4()}-c000.zstd.parquet"
            kept = (batch.filter(pc.invert(_drop_mask(pa.Table.from_batches([batch]), expired, superseded)))
                    for batch in read_batches(path, table.schema))
            written = write_batches_synced(kept, table.path / new_name, table.schema, compression="zstd",
                                           keep=table.stats_columns())
            adds.append(written.add_action(table, new_name, now_ms=now_ms))
        removed_rows += dropped
    if not removes:
        return 0
    table.commit_actions([
        {"commitInfo": {"timestamp": now_ms, "operation": "DELETE",
                        "operationParameters": {"predicate": json.dumps(
                            f"message settled before {cutoff.isoformat()}")},
                        "isBlindAppend": False,
                        "operationMetrics": {"numDeletedRows": str(removed_rows),
                                             "numRemovedFiles": str(len(removes)),
                                             "numAddedFiles": str(len(adds))}}},
        *({"add": add} for add in adds),
        *({"remove": remove} for remove in removes),
    ])
    log.info("journal %s: removed %d rows of %d messages settled before %s", table.path,
             removed_rows, len(expired), cutoff.isoformat())
    return removed_rows
