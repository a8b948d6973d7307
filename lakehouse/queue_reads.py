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

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal_schema import ENQUEUE, FORMAT_SQL, JOURNAL_SCHEMA
from lakehouse.journal_writer import LIVE_CTES, has_ranges, journal_sql, read_watermark

__all__ = ["MESSAGE_COLUMNS", "MESSAGE_SCHEMA_DDL", "MESSAGE_ARROW_SCHEMA", "MissingMessages", "read_messages", "live_messages",
           "slices"]

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
    """
    if not ids:
        return MESSAGE_ARROW_SCHEMA.empty_table()
    first, last = ids[0], ids[-1]
    sql = (f"SELECT message_id, exchange, routing_key, properties, headers, published_at, body,"
           f" {FORMAT_SQL} AS message_format FROM t"
           f" WHERE message_id >= {int(first)} AND message_id <= {int(last)}"
           f" AND event = '{ENQUEUE}' AND body IS NOT NULL")
    read = journal(location, storage_options).read(sql)
    # DataFusion answers with view types (string_view, binary_view): plain ones to filter and hand on
    found = pa.table({name: read.column(name).cast(MESSAGE_ARROW_SCHEMA.field(name).type)
                      for name in _READ_COLUMNS})
    found = found.filter(pc.is_in(found.column("message_id"), value_set=pa.array(ids, pa.int64())))
    found = found.sort_by("message_id")
    got = found.column("message_id")
    if found.num_rows != len(ids):
        missing = sorted(set(ids) - set(got.to_pylist()))
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise MissingMessages(f"the journal at {location} holds no body for {len(missing)} message(s) of"
                              f" queue '{queue}' ({shown}): removed by its history retention, or the"
                              " option 'path' names another virtual host's journal")
    counts = [deliveries.get(message_id, 0) for message_id in got.to_pylist()] if deliveries \
        else [0] * found.num_rows
    count_array = pa.array(counts, pa.int32())
    columns = {
        "message_id": got,
        "queue": pa.array([queue] * found.num_rows, pa.string()),
        "body": found.column("body"),
        "exchange": found.column("exchange"),
        "routing_key": found.column("routing_key"),
        "properties": found.column("properties"),
        "headers": found.column("headers"),
        "published_at": found.column("published_at"),
        "delivery_count": count_array,
        "redelivered": pc.greater(count_array, 0),
        "message_format": found.column("message_format"),
    }
    return pa.table([columns[f.name] for f in MESSAGE_ARROW_SCHEMA], schema=MESSAGE_ARROW_SCHEMA)


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


def slices(ids: list[int], parts: int, least: int = 1000) -> list[list[int]]:
    """``ids`` (ascending) cut into at most ``parts`` runs of consecutive ids, none under ``least``."""
    if not ids:
        return []
    count = max(1, min(parts, len(ids) // max(least, 1)))
    size = -(-len(ids) // count)
    return [ids[start:start + size] for start in range(0, len(ids), size)]
