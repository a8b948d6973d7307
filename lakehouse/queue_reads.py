"""Reading a queue's messages from the journal by message id: what Spark's executors run.

The Spark consumer (:mod:`lakehouse.spark_source`) learns *which* messages
it has from the broker (a grant: message ids) and reads *what* they are from
the journal's Delta files, here, with delta-rs: no JVM, no broker, one task
per slice of ids, as many tasks at once as the cluster has cores.  Message
ids grow per virtual host and every group commit is one file whose
``message_id`` statistics bound it, so a slice ``[first, last]`` of ids
opens only the few files whose bounds overlap it (delta-rs skips the rest
by their statistics).

:func:`live_messages` is the browsing side: the ids of a queue's live
messages (the journal's view of them: persistent messages not settled),
with how often each was delivered.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from broker.messaging import id_ranges as ranges_of

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.delta_versions import FollowedTable, TableReadFailed
from lakehouse.journal_schema import ENQUEUE, FORMAT_SQL, JOURNAL_SCHEMA
from lakehouse.journal_writer import LIVE_CTES, has_ranges, journal_sql, read_watermark

__all__ = ["MESSAGE_COLUMNS", "MESSAGE_SCHEMA_DDL", "MESSAGE_ARROW_SCHEMA", "JournalReader", "MissingMessages",
           "journal_reader", "live_messages", "range_slices", "read_messages"]

#: the columns of a consumed or browsed message, in order (names as the journal and views have them)
MESSAGE_COLUMNS = ("message_id", "queue", "body", "exchange", "routing_key", "properties", "headers",
                   "published_at", "delivery_count", "redelivered", "message_format")

#: the same as a Spark schema
MESSAGE_SCHEMA_DDL = ("message_id BIGINT, queue STRING, body BINARY, exchange STRING, routing_key STRING,"
                      " properties MAP<STRING, STRING>, headers STRING, published_at TIMESTAMP,"
                      " delivery_count INT, redelivered BOOLEAN, message_format STRING")

#: the same in Arrow (what the executors hand Spark)
MESSAGE_ARROW_SCHEMA = pa.schema([
    pa.field("message_id", pa.int64()),
    pa.field("queue", pa.string()),
    pa.field("body", pa.binary()),
    pa.field("exchange", pa.string()),
    pa.field("routing_key", pa.string()),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("headers", pa.string()),
    pa.field("published_at", pa.timestamp("us", tz="UTC")),
    pa.field("delivery_count", pa.int32()),
    pa.field("redelivered", pa.bool_()),
    pa.field("message_format", pa.string()),
])


#: what read_messages takes from the journal's rows
_READ_COLUMNS = ("message_id", "exchange", "routing_key", "properties", "headers", "published_at", "body",
                 "message_format")


class MissingMessages(LookupError):
    """Messages the journal holds no body for (removed by retention, or another journal)."""


def journal(location: str, storage_options: dict[str, str] | None = None) -> AppendOnlyTable:
    """The journal table at ``location``, for reading."""
    return AppendOnlyTable(location, JOURNAL_SCHEMA, name="journal", stats_column="message_id",
                           storage_options=storage_options)


def read_messages(location: str, queue: str, ids: list[int], deliveries: dict[int, int],
                  storage_options: dict[str, str] | None = None) -> pa.Table:
    """The messages ``ids`` (ascending) of ``queue``: a table of :data:`MESSAGE_ARROW_SCHEMA`.

    ``deliveries``: how often each message was delivered from the queue
    before (absent: never), the rows' ``delivery_count``.  Raises
    :class:`MissingMessages` naming the ids the journal has no body for.
    Opens the journal afresh; :class:`JournalReader` keeps it open.
    """
    return JournalReader(location, storage_options).read(queue, ranges_of.id_ranges(ids), deliveries)


def _count(ranges: Sequence[Sequence[int]]) -> int:
    return sum(last - first + 1 for first, last in ranges)


#: above this many ranges a read bounds the ids by the first and last and filters the rest in Arrow
_MAX_SQL_RANGES = 32


class JournalReader:
    """Reads messages by id from one journal, its Delta snapshot kept between reads.

    What an executor's Python worker keeps (:func:`journal_reader`): opening
    the journal replays its log from the last checkpoint -- every data file
    of the table -- which costs more than reading a slice of messages.  The
    messages of a grant were journaled before it was answered, so a kept
    snapshot that lacks some of them (or names a file compaction removed)
    is brought up to date and read again, once.
    """

    def __init__(self, location: str, storage_options: dict[str, str] | None = None) -> None:
        self.location = location
        self._table = FollowedTable(location, storage_options)

    @property
    def version(self) -> int:
        """The journal's version this reader reads (-1: not opened yet)."""
        return self._table.version

    def read(self, queue: str, ranges: Sequence[Sequence[int]], deliveries: dict[int, int]) -> pa.Table:
        """The messages of ``ranges`` (``[first, last]``, ascending) of ``queue``, as :func:`read_messages`."""
        wanted = _count(ranges)
        if not wanted:
            return MESSAGE_ARROW_SCHEMA.empty_table()
        fresh = self._table.version < 0
        try:
            found = self._find(ranges)
        except TableReadFailed:
            if fresh:
                raise
            found = None                            # a file of the kept snapshot is gone: read anew
        if not fresh and (found is None or found.num_rows != wanted):
            self._table.refresh()
            found = self._find(ranges)
        assert found is not None
        if found.num_rows != wanted:
            got = set(found.column("message_id").to_pylist())
            missing = [i for first, last in ranges for i in range(first, last + 1) if i not in got]
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise MissingMessages(f"the journal at {self.location} holds no body for {len(missing)} message(s)"
                                  f" of queue '{queue}' ({shown}): removed by its history retention, or the"
                                  " option 'path' names another virtual host's journal")
        return _messages(queue, found, deliveries)

    def _find(self, ranges: Sequence[Sequence[int]]) -> pa.Table:
        """The enqueue rows of the ids in ``ranges``, sorted by id (plain Arrow types)."""
        if len(ranges) <= _MAX_SQL_RANGES:
            where = " OR ".join(f"(message_id >= {int(first)} AND message_id <= {int(last)})"
                                for first, last in ranges)
        else:
            where = f"message_id >= {int(ranges[0][0])} AND message_id <= {int(ranges[-1][1])}"
        sql = (f"SELECT message_id, exchange, routing_key, properties, headers, published_at, body,"
               f" {FORMAT_SQL} AS message_format FROM t"
               f" WHERE ({where}) AND event = '{ENQUEUE}' AND body IS NOT NULL")
        read = self._table.query(sql)
        if not read.num_columns:
            return pa.table({name: pa.array([], MESSAGE_ARROW_SCHEMA.field(name).type) for name in _READ_COLUMNS})
        # DataFusion answers with view types (string_view, binary_view): plain ones to filter and hand on
        found = pa.table({name: read.column(name).cast(MESSAGE_ARROW_SCHEMA.field(name).type)
                          for name in _READ_COLUMNS})
        if len(ranges) > _MAX_SQL_RANGES:
            ids = pa.array([i for first, last in ranges for i in range(first, last + 1)], pa.int64())
            found = found.filter(pc.is_in(found.column("message_id"), value_set=ids))
        return found.sort_by("message_id")


def _messages(queue: str, found: pa.Table, deliveries: dict[int, int]) -> pa.Table:
    """The rows ``found`` (sorted by id) as :data:`MESSAGE_ARROW_SCHEMA`."""
    got = found.column("message_id")
    rows = found.num_rows
    counts = pa.array([deliveries.get(message_id, 0) for message_id in got.to_pylist()], pa.int32()) \
        if deliveries else pa.nulls(rows, pa.int32()).fill_null(0)
    columns = {
        "message_id": got,
        "queue": pa.repeat(pa.scalar(queue, pa.string()), rows),
        "body": found.column("body"),
        "exchange": found.column("exchange"),
        "routing_key": found.column("routing_key"),
        "properties": found.column("properties"),
        "headers": found.column("headers"),
        "published_at": found.column("published_at"),
        "delivery_count": counts,
        "redelivered": pc.greater(counts, 0),
        "message_format": found.column("message_format"),
    }
    return pa.table([columns[f.name] for f in MESSAGE_ARROW_SCHEMA], schema=MESSAGE_ARROW_SCHEMA)


_readers: dict[tuple[str, tuple[tuple[str, str], ...]], JournalReader] = {}


def journal_reader(location: str, storage_options: dict[str, str] | None = None) -> JournalReader:
    """This process's :class:`JournalReader` of the journal at ``location`` (one per journal, kept)."""
    key = (location, tuple(sorted((storage_options or {}).items())))
    reader = _readers.get(key)
    if reader is None:
        reader = _readers[key] = JournalReader(location, storage_options)
    return reader


def live_messages(location: str, queue: str,
                  storage_options: dict[str, str] | None = None) -> tuple[list[int], dict[int, int]]:
    """The ids of ``queue``'s live messages in the journal, ascending, and their deliveries so far.

    The second value maps the ids of messages delivered before to their deliveries.
    """
    quoted = queue.replace("'", "''")
    table = journal(location, storage_options)
    sql = journal_sql(LIVE_CTES, read_watermark(location), ranges=has_ranges(table)) + f"""
    SELECT l.message_id, COALESCE(v.deliveries, 0) AS deliveries FROM live l
    LEFT JOIN delivered v ON v.queue = l.queue AND v.message_id = l.message_id
    WHERE l.queue = '{quoted}' ORDER BY l.message_id"""
    rows = table.read(sql)
    if not rows.num_rows:
        return [], {}
    ids = rows.column("message_id").to_pylist()
    counts = rows.column("deliveries").to_pylist()
    return ids, {i: n for i, n in zip(ids, counts) if n}


def range_slices(ranges: Sequence[Sequence[int]], parts: int, least: int = 1000) -> list[list[list[int]]]:
    """``ranges`` (``[first, last]``, ascending) cut into at most ``parts`` slices of about as many ids
    each, none under ``least`` ids (one task's share of a batch), without listing the ids."""
    total = _count(ranges)
    if not total:
        return []
    count = max(1, min(parts, total // max(least, 1)))
    size = -(-total // count)
    out: list[list[list[int]]] = [[]]
    room = size
    for first, last in ranges:
        while first <= last:
            if not room:
                out.append([])
                room = size
            end = min(last, first + room - 1)
            out[-1].append([first, end])
            room -= end - first + 1
            first = end + 1
    return out
