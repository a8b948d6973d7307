"""The journal's writer process: appends group commits to the Delta table and keeps it fit.

The broker's event loop runs on one core at close to 100% under load.  A
writer *thread* in the same process must take Python's global interpreter
lock between every system call of a commit (Parquet write, fsyncs, link), and
each time it waits for the loop to let go of it -- up to the 5 ms switch
interval.  Measured: a commit that takes 3-4 ms alone took 9 ms at the median
and 28 ms at p99 under load, and confirm latency followed.  So the writer is a
child process with an interpreter of its own, on the other core:

* the broker hands it groups over a pipe: the rows as plain values
  (pickled), prefixed by ``>II`` (group number, byte length); building the
  Arrow table -- properties decoded to text, headers to JSON -- happens here
  too (:class:`RowEncoder`), off the broker's loop;
* it appends each group as one fsynced Delta commit in two stages
  (:mod:`lakehouse.commit_pipeline`): staged here -- the Parquet file and the
  commit's content written and fsynced -- then published in order by a
  thread -- linked into the log and the log fsynced -- so the next group is
  staged while the one before is published.  It answers ``>IB`` (group
  number, status): 2 = staged (the broker may send the next group), then
  0 = durable or 1 = failed, followed on failure by ``>I`` and the error text;
* its threads run ahead of normal work (``SCHED_RR``, when permitted:
  :mod:`lakehouse.writer_priority`), so a commit does not wait for a core
  behind the broker's loop and its clients;
* it starts the table's upkeep (checkpoints, compaction, history retention,
  vacuum) as a process of its own at a lower priority
  (:mod:`lakehouse.journal_upkeep`), so none of that touches the broker's
  interpreter or the writer's, and tells it when a checkpoint is due;
* a frame with no rows is a *probe*, sent while commits fail: it writes and
  fsyncs a small file in the table's directory and removes it
  (:meth:`~lakehouse.delta_table.AppendOnlyTable.probe`), answering as for a
  commit, so the broker learns the disk has room again without sending it
  every message that arrives meanwhile;
* a frame with group number 0 asks it to end the upkeep process and exit; so
  does the end of its input (the broker went away).

Run as ``python -m lakehouse.journal_writer <table location> <history hours> <log hours> <vhost>``:
rows of messages that ended more than ``history hours`` ago are removed;
Delta's own history (log entries, files compacted away) is kept ``log hours``.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import struct
import sys
import time
from typing import BinaryIO

from pathlib import Path
from typing import Any, Callable, Optional

import pyarrow as pa

from broker.cpu_placement import place_writer_process
from broker.messaging.message import MessageProperties
from broker.messaging.message_format import MessageFormat, format_for
from broker.messaging.records import to_json_value

from .commit_pipeline import ERROR_LENGTH, PROBE, REPLY, Publisher, Work
from .commit_trace import WriterTrace, writer_trace
from .delta_table import AppendOnlyTable, add_missing_columns, fsync_path, is_uri
from .log_commit import ROUNDS
from .writer_priority import enable_in_this_process
from .journal_schema import (DELIVER, ENQUEUE, JOURNAL_SCHEMA, QUEUE_DELETED, RANGE_IDS_DATAFUSION, RANGE_IDS_SPARK,
                             REQUEUE, SETTLE, TIMESTAMP, upgrade_note)

__all__ = ["RowEncoder", "PlainRow", "describe", "journal_table", "open_journal_table", "REQUEST", "REPLY",
           "ERROR_LENGTH", "main", "LIVE_CTES", "journal_sql", "journal_source", "has_ranges"]

log = logging.getLogger("lakehouse.journal_writer")

REQUEST = struct.Struct(">II")        # group number, length of the pickled rows
#: seconds: a commit slower than this is logged (DELTAMQ_JOURNAL_SLOW_COMMIT_MS)
SLOW_COMMIT = float(os.environ.get("DELTAMQ_JOURNAL_SLOW_COMMIT_MS", "500")) / 1000
#: seconds a thread of the writer runs before another waiting for the interpreter gets it
SWITCH_INTERVAL = 0.0002

#: (exchange, routing_key, published_at epoch seconds, body, format tag, native metadata bytes)
PlainMessage = tuple[str, str, float, bytes, str, bytes]
#: (event, queue, message_id, at epoch seconds, tx_id, delivery_count, outcome, reason, message,
#: first_message_id: a range row's first id, else None)
PlainRow = tuple[str, str, int, float, Optional[int], Optional[int], Optional[str], Optional[str],
                 Optional[PlainMessage], Optional[int]]

_PROPERTY_NAMES = tuple(name for name in MessageProperties.__dataclass_fields__ if name != "headers")
_CACHE_LIMIT = 10_000


#: what a message's native bytes say, as journal columns: (properties as text pairs, headers JSON)
Described = tuple[list[tuple[str, str]], Optional[str]]


class RowEncoder:
    """Turns plain rows into a table of JOURNAL_SCHEMA, decoding metadata with a cache.

    Decoding goes through the message format registry, so the writer process
    resolves each format by its tag without importing any protocol engine.
    """

    def __init__(self, vhost: str) -> None:
        self.vhost = vhost
        self._cache: dict[tuple[str, bytes], Described] = {}
        self._formats: dict[str, MessageFormat] = {}

    def table(self, rows: list[PlainRow]) -> pa.Table:
        count = len(rows)
        events, queues, ids, ats, txs, counts, outcomes, reasons, messages, firsts = zip(*rows)
        exchanges: list[Optional[str]] = [None] * count
        keys: list[Optional[str]] = [None] * count
        published: list[Optional[float]] = [None] * count
        bodies: list[Optional[bytes]] = [None] * count
        formats: list[Optional[str]] = [None] * count
        natives: list[Optional[bytes]] = [None] * count
        props: list[Optional[list[tuple[str, str]]]] = [None] * count
        headers: list[Optional[str]] = [None] * count
        cache = self._cache
        for index, message in enumerate(messages):
            if message is None:
                continue
            exchanges[index], keys[index], published[index], bodies[index], tag, native = message
            formats[index] = tag
            natives[index] = native
            props[index], headers[index] = cache.get((tag, native)) or self._describe(tag, native)
        columns = [
            pa.array([self.vhost] * count, pa.string()),
            _timestamps(ats),
            pa.array(events, pa.string()),
            pa.array(queues, pa.string()),
            pa.array(ids, pa.int64()),
            pa.array(txs, pa.int64()),
            pa.array(counts, pa.int32()),
            pa.array(outcomes, pa.string()),
            pa.array(reasons, pa.string()),
            pa.array(exchanges, pa.string()),
            pa.array(keys, pa.string()),
            _timestamps(published),
            pa.array(bodies, pa.binary()),
            pa.array(props, JOURNAL_SCHEMA.field("properties").type),
            pa.array(headers, pa.string()),
            pa.nulls(count, pa.binary()),          # properties_raw: schema 1 only
            pa.array(formats, pa.string()),
            pa.array(natives, pa.binary()),
            pa.array(firsts, pa.int64()),
        ]
        return pa.Table.from_arrays(columns, schema=JOURNAL_SCHEMA)

    def _describe(self, tag: str, native: bytes) -> Described:
        """The common view's columns, decoded and cached (by format and native bytes)."""
        cache = self._cache
        formats = self._formats
        fmt = formats.get(tag) or formats.setdefault(tag, format_for(tag))
        described = describe(fmt.decode(native))
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[(tag, native)] = described
        return described


def describe(view: MessageProperties) -> Described:
    """A common view as the journal's columns (see :data:`Described`)."""
    pairs = [(name, str(value)) for name in _PROPERTY_NAMES
             if (value := getattr(view, name)) is not None]
    header_json = (json.dumps(to_json_value(view.headers), ensure_ascii=False, sort_keys=True)
                   if view.headers else None)
    return pairs, header_json


def _timestamps(seconds: Any) -> pa.Array:
    """Epoch seconds (float; None: null) as UTC microsecond timestamps, truncated toward zero.

    In Python rather than by three compute kernels: for a group's tens of rows
    each kernel's call costs more than the arithmetic (117 -> 39 µs for 80 rows).
    """
    return pa.array([None if value is None else int(value * 1_000_000.0) for value in seconds], TIMESTAMP)


#: The live messages of the journal (``live``: queue, message_id), and their deliveries,
#: over ``j``: the rows from the recovery watermark on; ``events`` has their deliveries and
#: settlements with range rows expanded.  Fill in with :func:`journal_sql`.
LIVE_CTES = f"""
WITH j AS (
    SELECT * FROM {{source}} WHERE message_id >= {{watermark}}
), events AS (
    SELECT event, queue, message_id, delivery_count FROM j
    WHERE first_message_id IS NULL AND event IN ('{DELIVER}', '{REQUEUE}', '{SETTLE}')
    UNION ALL
    SELECT event, queue, {{range_ids}} AS message_id, delivery_count FROM j
    WHERE first_message_id IS NOT NULL
), deleted AS (
    SELECT queue, MAX(message_id) AS upto FROM j WHERE event = '{QUEUE_DELETED}' GROUP BY queue
), settled AS (
    SELECT DISTINCT queue, message_id FROM events WHERE event = '{SETTLE}'
), delivered AS (
    SELECT queue, message_id, MAX(delivery_count) AS deliveries FROM events
    WHERE event IN ('{DELIVER}', '{REQUEUE}') GROUP BY queue, message_id
), enqueued AS (
    SELECT e.queue, e.message_id FROM j e LEFT JOIN deleted d ON e.queue = d.queue
    WHERE e.event = '{ENQUEUE}' AND (d.upto IS NULL OR e.message_id > d.upto)
), live AS (
    SELECT e.queue, e.message_id FROM enqueued e
    LEFT JOIN settled s ON s.queue = e.queue AND s.message_id = e.message_id
    WHERE s.message_id IS NULL
)"""

#: the journal ``t`` of a schema without ``first_message_id`` (no range rows), for :func:`journal_sql`
_WITHOUT_RANGES = "(SELECT *, CAST(NULL AS BIGINT) AS first_message_id FROM t)"


def journal_sql(template: str, watermark: int, *, spark: bool = False, ranges: bool = True) -> str:
    """``template`` (built on :data:`LIVE_CTES`) for the journal ``t`` from ``watermark`` on.

    ``spark``: Spark SQL, else DataFusion's (they expand range rows by different
    functions); ``ranges``: the table has the column ``first_message_id`` (schema 3).
    """
    return template.format(watermark=int(watermark), range_ids=RANGE_IDS_SPARK if spark else RANGE_IDS_DATAFUSION,
                           source=journal_source(ranges))


def journal_source(ranges: bool) -> str:
    """What SQL reads as the journal ``t``: the table, padded with ``first_message_id`` unless it has it."""
    return "t" if ranges else _WITHOUT_RANGES


def has_ranges(table: AppendOnlyTable) -> bool:
    """Whether the open journal ``table`` has schema 3's ``first_message_id`` (it may hold range rows)."""
    return any(field.name == "first_message_id" for field in table.delta_table().schema().fields)


def watermark_path(location: str | Path) -> Path | None:
    """Where the recovery watermark of the journal at ``location`` is kept (local tables only).

    Beside the table, not in it: vacuum deletes what the Delta log does not know.
    """
    if is_uri(location):
        return None
    path = Path(location)
    return path.with_name(path.name + ".watermark")


def read_watermark(location: str | Path) -> int:
    """The lowest message id recovery must read from: every message below it has ended."""
    path = watermark_path(location)
    try:
        return int(path.read_text()) if path is not None else 0
    except (OSError, ValueError):
        return 0


def advance_watermark(table: AppendOnlyTable, *, window: int | None = None,
                      observe: Callable[[tuple[int, int]], None] | None = None) -> int:
    """Move the watermark up to the lowest live message id (committed data only); the new value.

    Asked one window of ``window`` message ids at a time (:mod:`lakehouse.journal_windows`:
    the upkeep's memory stays bounded however long the backlog); ``observe`` is told each window.
    """
    from .journal_windows import WINDOW_IDS, lowest_live_id     # it imports this module

    current = read_watermark(table.uri)
    path = watermark_path(table.uri)
    if path is None:
        return current
    floor = lowest_live_id(table, current, window=window or WINDOW_IDS, observe=observe)
    if floor is None or floor <= current:
        return current
    write_watermark(path, floor)
    return floor


def write_watermark(path: Path, floor: int) -> None:
    """Replace the watermark file at ``path`` with ``floor``, durably (written, synced, renamed)."""
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(str(floor))
    fsync_path(temp)
    os.replace(temp, path)
    fsync_path(path.parent)


#: how long a local journal's checkpoints keep the tombstones of files compacted away.  Every
#: Spark query rebuilds the table's state from the checkpoint, tombstones included (an hour of
#: full load would be ~360,000); the files themselves stay for the log retention
#: (TableMaintenance.vacuum_local), so streams that far behind still read them.
LOCAL_TOMBSTONE_RETENTION = "interval 5 minutes"


def open_journal_table(location: str, log_retention_hours: int) -> AppendOnlyTable:
    """The journal's table at ``location``, open, created if new, and at the current schema.

    A table of an older schema gets the newer columns by one metadata commit (see
    :mod:`lakehouse.journal_schema`); its rows stay as they are.
    """
    table = journal_table(location, log_retention_hours)
    table.open()
    added = add_missing_columns(table)
    if added:
        log.info("journal %s: %s", location, upgrade_note(added))
    return table


def journal_table(location: str, log_retention_hours: int) -> AppendOnlyTable:
    """The journal's table at ``location`` (created with these properties if new)."""
    retention = f"interval {log_retention_hours} hours"
    # on object storage, delta-rs's vacuum deletes only files whose tombstones it still sees
    tombstones = retention if is_uri(location) else LOCAL_TOMBSTONE_RETENTION
    table = AppendOnlyTable(location, JOURNAL_SCHEMA, name="journal", stats_column="message_id",
                            time_stats_column="at",
                            properties={"delta.logRetentionDuration": retention,
                                        "delta.deletedFileRetentionDuration": tombstones})
    # the Parquet statistics readers use: message_id and at (skipping), event and body (flow to
    # disk skips the row groups of settlements by them: lakehouse.message_pages)
    table.parquet_options["write_statistics"] = [*JOURNAL_STATISTICS]
    return table


#: the journal's columns whose Parquet statistics an appended file carries
JOURNAL_STATISTICS = ("message_id", "at", "event", "body")


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    if data is None or len(data) < size:
        return None
    return data


def serve(table: AppendOnlyTable, encoder: RowEncoder, requests: BinaryIO, replies: BinaryIO,
          trace: WriterTrace | None = None) -> None:
    """Append every group read from ``requests`` and answer on ``replies``, until told to stop.

    Each group is staged here (its Parquet file and commit content written and
    fsynced) while the group before it is published by a
    :class:`~lakehouse.commit_pipeline.Publisher` thread, which answers for
    each in order.  A failed commit is answered with its error (the broker
    logs it, once per change of state); only an unexpected kind of error gets
    a traceback here, once per run of failures.
    """
    publisher = Publisher(table, replies, SLOW_COMMIT, trace)
    try:
        while True:
            header = _read_exactly(requests, REQUEST.size)
            if header is None:
                return
            number, length = REQUEST.unpack(header)
            if number == 0:
                return
            payload = _read_exactly(requests, length) if length else b""
            if payload is None:
                return
            if not payload:                     # a probe while commits fail: is there room again?
                publisher.staged(number, PROBE)
                continue
            work: Work
            traced = trace.received(number) if trace is not None else None
            try:
                started = time.perf_counter()
                batch = encoder.table(pickle.loads(payload))
                if trace is not None and traced is not None:
                    trace.mark(traced, "encoded")
                work = (table.stage(batch), started)
                if trace is not None and traced is not None:
                    trace.stage_done(traced, ROUNDS.stage)
            except Exception as exc:            # answered in its turn, after the groups before it
                work = exc
            publisher.staged(number, work)
    finally:
        publisher.close()                       # what was staged is published and answered


def _traced(trace: WriterTrace, due: Callable[[], None]) -> Callable[[], None]:
    def checkpoint_due() -> None:
        trace.event("checkpoint_due")
        due()
    return checkpoint_due


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    location, history_hours, log_hours, vhost = args[0], int(args[1]), int(args[2]), args[3]
    # The broker decides when this process ends (a stop frame, or the end of the pipe
    # when the broker is gone): Ctrl-C or a SIGTERM to the broker's process group must
    # not kill it halfway through a commit while the broker is still shutting down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # the publisher thread wakes from its fsync while the main thread encodes the next group:
    # it must get the interpreter back within a fraction of a commit, not Python's 5 ms
    sys.setswitchinterval(SWITCH_INTERVAL)
    place_writer_process()              # off the event loop's CPUs: broker.cpu_placement
    enable_in_this_process()            # threads ahead of normal work: lakehouse.writer_priority
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s journal-writer: %(message)s")
    from .journal_upkeep import UpkeepProcess          # it imports this module

    table = open_journal_table(location, log_hours)
    table.pool_data_files()             # data files created ahead, off the commit path (local tables)
    upkeep = UpkeepProcess(location, history_hours, log_hours)
    trace = writer_trace()
    table.on_checkpoint_due = upkeep.checkpoint_due if trace is None else _traced(trace, upkeep.checkpoint_due)
    try:
        serve(table, RowEncoder(vhost), sys.stdin.buffer, sys.stdout.buffer, trace)
    finally:
        table.on_checkpoint_due = None
        upkeep.close()
        if trace is not None:
            trace.close()
        table.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
