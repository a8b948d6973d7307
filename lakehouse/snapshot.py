"""Snapshots of the journal: every queue's live messages as of one journal version.

Recovering from the whole journal costs what its history costs: one query
over every row, however few messages are still live.  A *snapshot* holds the
result of that query at a journal version ``V``; a broker then starts from
the newest snapshot plus the journal's *tail* (the rows committed after
``V``), so a restart reads what is live, not what flowed.

``deltamq spark snapshot`` (:mod:`lakehouse.snapshot_command`) writes the
snapshots; the broker reads them (:func:`recover_live`, called by
:meth:`lakehouse.journal.DeltaMessageJournal.recover`) through delta-rs.

The ``journal_snapshot`` table
------------------------------
At ``<storePath>/journal_snapshot``, beside the journal, partitioned by
``snapshot_version``.  Each snapshot is one Delta commit (so a job that dies
half way leaves nothing a reader sees) holding three kinds of rows:

=====================  ==================  =================================================
column                 type                meaning
=====================  ==================  =================================================
``snapshot_version``   int64 (partition)   the journal version ``V`` the snapshot is of
``kind``               string              ``snapshot`` (one header row), ``message`` (a
                                           live message in a queue) or ``queue_deleted``
``queue``              string              the queue (null on the header)
``message_id``         int64               ``message``: the message; ``queue_deleted``: the
                                           highest id its deletions took; header: the
                                           highest message id in the journal at ``V``
``delivery_count``     int32               ``message``: deliveries from the queue so far
                                           (more than 0: it comes back redelivered)
``exchange``           string              \\
``routing_key``        string               | ``message`` only: the message as the journal
``published_at``       timestamp[us, UTC]   | stores it (its body row), on every queue's
``body``               binary               | row of a message that reached several
``message_format``     string               | (``message_format`` and ``native`` already
``native``             binary              /  resolved for rows of journal schema 1)
``journal_id``         string              header: the journal's Delta table id
                                           (``metaData.id``): a snapshot of another table
                                           of the same name is never used
``highest_tx_id``      int64               header: the highest transaction id at ``V``
``created_at``         timestamp[us, UTC]  header: when the job wrote it
``snapshot_schema``    int32               header: this layout's version (1)
=====================  ==================  =================================================

The newest header wins.  It is used when its layout version is known, its
``journal_id`` is the journal's and the tail can be read: every commit after
``V`` still in the journal's log and every data file they appended still on
disk (Delta's log retention, ``DELTAMQ_JOURNAL_LOG_RETENTION_HOURS``, and
vacuum decide how long: a snapshot must be younger than that).  Otherwise the
broker logs why, once, and recovers from the whole journal.

The tail is read by following the log, not by scanning the table: the data
files that commits ``V+1 ..`` appended (``add`` with ``dataChange=true``),
read even if compaction has since merged them into other files
(:func:`lakehouse.log_state.appended_files`).  Its rows are applied to the
snapshot with the journal's own definition of *live*
(:mod:`lakehouse.journal_schema`): enqueues add entries, settles remove them,
``queue_deleted`` removes a queue's entries up to its id, deliveries raise
the count.  The result is, row for row, what the full query returns
(:data:`LIVE_MESSAGES_SQL`: the job computes snapshots with the same SQL).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from .delta_table import AppendOnlyTable, Location, child_location, is_uri, local_path
from .delta_versions import query_table, table_filesystem, table_identity
from .journal_schema import (DELIVER, ENQUEUE, FORMAT_SQL, JOURNAL_SCHEMA, NATIVE_SQL, QUEUE_DELETED,
                             REQUEUE, SETTLE, TIMESTAMP)
from .journal_writer import LIVE_CTES
from .log_state import appended_files, read_commits

__all__ = ["SNAPSHOT_TABLE", "SNAPSHOT_SCHEMA", "SNAPSHOT_SCHEMA_VERSION", "LIVE_SCHEMA", "LIVE_MESSAGES_SQL",
           "DELETIONS_SQL", "BOUNDS_SQL", "HEADER", "MESSAGE", "DELETION", "SnapshotHeader",
           "SnapshotRecovery", "UnusableSnapshot", "snapshot_location", "snapshot_headers", "recover_live",
           "apply_tail", "read_tail", "expand_ranges"]

log = logging.getLogger(__name__)

#: the snapshot table's name, beside the journal in the node's store
SNAPSHOT_TABLE: Final = "journal_snapshot"
#: the layout version written in each header row
SNAPSHOT_SCHEMA_VERSION: Final = 1
#: the values of ``kind``
HEADER: Final = "snapshot"
MESSAGE: Final = "message"
DELETION: Final = "queue_deleted"

SNAPSHOT_SCHEMA: Final = pa.schema([
    pa.field("snapshot_version", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("queue", pa.string()),
    pa.field("message_id", pa.int64()),
    pa.field("delivery_count", pa.int32()),
    pa.field("exchange", pa.string()),
    pa.field("routing_key", pa.string()),
    pa.field("published_at", TIMESTAMP),
    pa.field("body", pa.binary()),
    pa.field("message_format", pa.string()),
    pa.field("native", pa.binary()),
    pa.field("journal_id", pa.string()),
    pa.field("highest_tx_id", pa.int64()),
    pa.field("created_at", TIMESTAMP),
    pa.field("snapshot_schema", pa.int32()),
])

#: the live messages as recovery takes them: one row per message per queue, in
#: (message_id, queue) order (what :data:`LIVE_MESSAGES_SQL` returns)
LIVE_SCHEMA: Final = pa.schema([
    pa.field("queue", pa.string()),
    pa.field("message_id", pa.int64()),
    pa.field("deliveries", pa.int64()),
    pa.field("exchange", pa.string()),
    pa.field("routing_key", pa.string()),
    pa.field("published_at", TIMESTAMP),
    pa.field("body", pa.binary()),
    pa.field("message_format", pa.string()),
    pa.field("native", pa.binary()),
])

#: every live message of the journal ``t`` (from the recovery watermark: fill it in with
#: :func:`lakehouse.journal_writer.journal_sql`); SQL that DataFusion (recovery) and Spark (the
#: job) both run, but for the function expanding range rows
LIVE_MESSAGES_SQL: Final = LIVE_CTES + f"""
, bodies AS (
    SELECT message_id, exchange, routing_key, published_at, body,
           {FORMAT_SQL} AS message_format, {NATIVE_SQL} AS native FROM j
    WHERE event = '{ENQUEUE}' AND body IS NOT NULL
)
SELECT l.queue, l.message_id, COALESCE(v.deliveries, 0) AS deliveries, b.exchange,
       b.routing_key, b.published_at, b.body, b.message_format, b.native
FROM live l
JOIN bodies b ON b.message_id = l.message_id
LEFT JOIN delivered v ON v.queue = l.queue AND v.message_id = l.message_id"""

#: per deleted queue, the highest message id its deletions took (:func:`~lakehouse.journal_writer.journal_sql`)
DELETIONS_SQL: Final = LIVE_CTES + "\nSELECT queue, upto AS message_id FROM deleted"

#: the lowest live message id (``lowest_live``: every message below it has ended, so it is a
#: watermark of its own), and the highest message and transaction ids of the journal ``t``
#: (:func:`~lakehouse.journal_writer.journal_sql`)
BOUNDS_SQL: Final = LIVE_CTES + """
SELECT (SELECT MIN(message_id) FROM live) AS lowest_live, (SELECT MAX(message_id) FROM t) AS message_id,
       (SELECT MAX(tx_id) FROM t) AS tx_id"""

#: the journal columns the tail is read with
_TAIL_COLUMNS = ("event", "queue", "message_id", "delivery_count", "exchange", "routing_key", "published_at",
                 "body", "properties_raw", "message_format", "native", "first_message_id")
_KEYS = ["queue", "message_id"]
#: a snapshot's deletion marks: per queue, the highest message id its deletions took
_MARKS = pa.schema([("queue", pa.string()), ("upto", pa.int64())])
_BODY_COLUMNS = ["exchange", "routing_key", "published_at", "body", "message_format", "native"]


class UnusableSnapshot(Exception):
    """The newest snapshot cannot be used; the message says why (recovery reads the whole journal)."""


@dataclass(frozen=True)
class SnapshotHeader:
    """One snapshot's header row."""

    version: int
    journal_id: str | None
    highest_message_id: int | None
    highest_tx_id: int | None
    created_at: dt.datetime | None
    schema: int | None


@dataclass(frozen=True)
class SnapshotRecovery:
    """What :func:`recover_live` found: the live messages, and how it got them."""

    header: SnapshotHeader
    #: the live messages (:data:`LIVE_SCHEMA`)
    live: pa.Table
    #: the journal's version the result is of
    journal_version: int
    #: journal rows read after the snapshot, and the data files that held them
    tail_rows: int
    tail_files: int


def snapshot_location(journal: Location) -> Location:
    """Where the snapshots of the journal at ``journal`` are: ``journal_snapshot`` beside it."""
    if is_uri(journal):
        return child_location(str(journal).rstrip("/").rsplit("/", 1)[0], SNAPSHOT_TABLE)
    return local_path(journal).with_name(SNAPSHOT_TABLE)


def snapshot_headers(location: Location, storage_options: dict[str, str] | None = None) -> list[SnapshotHeader]:
    """The snapshots in the table at ``location``, newest first; FileNotFoundError without a table."""
    rows = query_table(location, f"""
        SELECT snapshot_version, journal_id, message_id, highest_tx_id, created_at, snapshot_schema
        FROM t WHERE kind = '{HEADER}' ORDER BY snapshot_version DESC""",
                       storage_options=storage_options).to_pylist()
    return [SnapshotHeader(int(r["snapshot_version"]), r["journal_id"], r["message_id"], r["highest_tx_id"],
                           r["created_at"], r["snapshot_schema"]) for r in rows]


def read_tail(journal: Location, after: int, upto: int,
              storage_options: dict[str, str] | None = None) -> tuple[pa.Table, int]:
    """The journal rows committed in versions ``after+1 .. upto``; and how many files held them.

    Raises :class:`UnusableSnapshot` when one of those commits is gone from the
    log, or a file they appended is gone (vacuumed), or one of them removed data.
    """
    filesystem = table_filesystem(journal, storage_options)
    try:
        commits = read_commits(filesystem, after + 1, upto)
    except FileNotFoundError as exc:
        raise UnusableSnapshot(f"the journal's log no longer has every commit after version {after}"
                               f" (older than its log retention): {exc}") from None
    try:
        files = appended_files(commits)
    except ValueError as exc:
        raise UnusableSnapshot(f"the journal changed after version {after}: {exc}") from None
    schema = pa.schema([JOURNAL_SCHEMA.field(name) for name in _TAIL_COLUMNS])
    names = [unquote(path) for path in files]
    if any("://" in name or name.startswith("/") for name in names):
        raise UnusableSnapshot(f"the journal names a data file outside its directory: {names[0]}")
    try:
        # columns a file lacks (written before the journal gained them) read as null
        rows = (ds.dataset(names, schema=schema, format="parquet", filesystem=filesystem).to_table()
                if names else schema.empty_table())
    except FileNotFoundError as exc:
        raise UnusableSnapshot(f"a file the journal appended after version {after} is gone (vacuumed):"
                               f" {exc}") from None
    return rows, len(files)


def recover_live(journal: AppendOnlyTable, *, snapshot_version: int | None = None) -> SnapshotRecovery:
    """The journal's live messages from its newest snapshot (or the one of ``snapshot_version``) and its tail.

    FileNotFoundError: there is no snapshot table, or no snapshot in it.
    :class:`UnusableSnapshot`: there is one, but it cannot be used (the message says why).
    """
    options = journal.storage_options
    location = snapshot_location(journal.uri)
    try:
        headers = snapshot_headers(location, options)
    except FileNotFoundError:
        raise
    except Exception as exc:                   # a table of another layout, unreadable files, ...
        raise UnusableSnapshot(f"the snapshot table {location} cannot be read: {exc}") from None
    if snapshot_version is not None:
        headers = [h for h in headers if h.version == snapshot_version]
    if not headers:
        raise FileNotFoundError(f"no snapshot in {location}")
    header = headers[0]
    if header.schema != SNAPSHOT_SCHEMA_VERSION:
        raise UnusableSnapshot(f"snapshot of version {header.version} has layout {header.schema};"
                               f" this release reads layout {SNAPSHOT_SCHEMA_VERSION}")
    journal_version, journal_id = table_identity(journal.uri, options)
    if header.journal_id != journal_id:
        raise UnusableSnapshot(f"snapshot of version {header.version} is of another journal table"
                               f" (id {header.journal_id}, the journal's is {journal_id})")
    if header.version > journal_version:
        raise UnusableSnapshot(f"snapshot of version {header.version} is newer than the journal"
                               f" (version {journal_version})")
    tail, files = read_tail(journal.uri, header.version, journal_version, options)
    try:
        live = _snapshot_rows(location, header.version, options)
        deletions = query_table(location, f"""
            SELECT queue, message_id AS upto FROM t
            WHERE snapshot_version = {header.version} AND kind = '{DELETION}'""", storage_options=options)
    except Exception as exc:
        raise UnusableSnapshot(f"snapshot of version {header.version} cannot be read: {exc}") from None
    deletions = deletions.cast(_MARKS) if deletions.num_rows else _MARKS.empty_table()
    result = apply_tail(live, deletions, tail)
    return SnapshotRecovery(header, result, journal_version, tail.num_rows, files)


def _snapshot_rows(location: Location, version: int, options: dict[str, str] | None) -> pa.Table:
    rows = query_table(location, f"""
        SELECT queue, message_id, delivery_count AS deliveries, {", ".join(_BODY_COLUMNS)} FROM t
        WHERE snapshot_version = {version} AND kind = '{MESSAGE}'
        ORDER BY message_id, queue""", storage_options=options)
    if not rows.num_rows:
        return LIVE_SCHEMA.empty_table()
    return rows.cast(LIVE_SCHEMA)


def apply_tail(live: pa.Table, deletions: pa.Table, tail: pa.Table) -> pa.Table:
    """The live messages after ``tail`` (journal rows) happened to those of a snapshot.

    ``live``: the snapshot's messages (:data:`LIVE_SCHEMA`, in order);
    ``deletions``: its ``queue``/``upto`` rows.  The same answer as
    :data:`LIVE_MESSAGES_SQL` over the journal up to the tail's end.
    """
    tail = expand_ranges(tail)
    event = tail.column("event")
    settled = _distinct_keys(tail.filter(pc.equal(event, SETTLE)))
    delivered = (tail.filter(pc.is_in(event, pa.array([DELIVER, REQUEUE])))
                 .select([*_KEYS, "delivery_count"]).cast(pa.schema([("queue", pa.string()),
                                                                      ("message_id", pa.int64()),
                                                                      ("delivery_count", pa.int64())]))
                 .group_by(_KEYS).aggregate([("delivery_count", "max")]))
    tail_deleted = (tail.filter(pc.equal(event, QUEUE_DELETED)).select(_KEYS)
                    .rename_columns(["queue", "upto"]).cast(_MARKS))
    enqueued = tail.filter(pc.equal(event, ENQUEUE))
    if not (settled.num_rows or delivered.num_rows or tail_deleted.num_rows or enqueued.num_rows):
        return live
    # the snapshot's entries the tail did not end, their deliveries raised
    kept = live.filter(_survivors(live, settled, tail_deleted))
    kept = kept.set_column(2, "deliveries", _raised(kept, delivered, kept.column("deliveries")))
    # the tail's own entries, with their bodies: from the tail (the message's first enqueue is
    # in the same commit), else from a message the snapshot holds; none: not recovered (a join)
    every_deletion = pa.concat_tables([deletions, tail_deleted])
    keys = enqueued.select(_KEYS).filter(_survivors(enqueued, settled, every_deletion))
    bodies = enqueued.filter(pc.is_valid(enqueued.column("body")))
    from_tail = pa.table({
        "message_id": bodies.column("message_id"), "exchange": bodies.column("exchange"),
        "routing_key": bodies.column("routing_key"), "published_at": bodies.column("published_at"),
        "body": bodies.column("body"),
        "message_format": pc.coalesce(bodies.column("message_format"), pa.scalar("amqp-0-9-1")),
        "native": pc.coalesce(bodies.column("native"), bodies.column("properties_raw"))})
    parts = []
    for source in (from_tail, live):
        if not keys.num_rows:
            break
        where = pc.index_in(keys.column("message_id"), value_set=source.column("message_id"))
        found = pc.is_valid(where)
        hit, where = keys.filter(found), where.filter(found)
        parts.append(pa.table({"queue": hit.column("queue"), "message_id": hit.column("message_id"),
                               "deliveries": _raised(hit, delivered, pa.array([0] * hit.num_rows, pa.int64())),
                               **{name: source.column(name).combine_chunks().take(where)
                                  for name in _BODY_COLUMNS}}, schema=LIVE_SCHEMA))
        keys = keys.filter(pc.invert(found))
    added = pa.concat_tables(parts) if parts else LIVE_SCHEMA.empty_table()
    added = added.sort_by([("message_id", "ascending"), ("queue", "ascending")])
    result = pa.concat_tables([kept, added])
    if kept.num_rows and added.num_rows and \
            added.column("message_id")[0].as_py() <= kept.column("message_id")[-1].as_py():
        result = result.sort_by([("message_id", "ascending"), ("queue", "ascending")])
    return result


def expand_ranges(rows: pa.Table) -> pa.Table:
    """``rows`` (journal rows) with each range row replaced by one row per message id of its range.

    The ids run from ``first_message_id`` to ``message_id``; the other columns are
    the range row's.  Rows without ``first_message_id`` (or a table without the
    column) stay as they are.
    """
    if "first_message_id" not in rows.column_names:
        return rows
    first = rows.column("first_message_id")
    ranged = pc.is_valid(first)
    if not pc.any(ranged).as_py():
        return rows
    ranges = rows.filter(ranged)
    firsts = ranges.column("first_message_id").combine_chunks().cast(pa.int64())
    lengths = pc.add(pc.subtract(ranges.column("message_id").combine_chunks().cast(pa.int64()), firsts), 1)
    if pc.any(pc.less(lengths, 1)).as_py():
        raise ValueError("a journal range row whose first_message_id is above its message_id")
    ends = pc.cumulative_sum(lengths)
    total = ends[-1].as_py()
    starts = pc.subtract(ends, lengths)             # each range's first position among the ids
    parents = pc.list_parent_indices(pa.LargeListArray.from_arrays(pa.concat_arrays(
        [pa.array([0], pa.int64()), ends]), pa.nulls(total)))
    positions = pa.array(range(total), pa.int64())
    ids = pc.add(pc.subtract(positions, starts.take(parents)), firsts.take(parents))
    expanded = ranges.take(parents)
    for name, values in (("message_id", ids), ("first_message_id", pa.nulls(total, pa.int64()))):
        field = rows.schema.field(name)
        expanded = expanded.set_column(expanded.column_names.index(name), field, values.cast(field.type))
    return pa.concat_tables([rows.filter(pc.invert(ranged)), expanded])


def _distinct_keys(rows: pa.Table) -> pa.Table:
    return rows.select(_KEYS).group_by(_KEYS).aggregate([])


def _numbered(rows: pa.Table) -> pa.Table:
    """``rows``' keys with each row's position (``row``)."""
    return pa.table({"queue": rows.column("queue"), "message_id": rows.column("message_id"),
                     "row": pa.array(range(rows.num_rows), pa.int64())})


def _survivors(rows: pa.Table, settled: pa.Table, deletions: pa.Table) -> pa.Array:
    """A mask of ``rows`` whose (queue, message_id) no ``settled`` key and no deletion ended."""
    ended: list[pa.Array] = []
    if rows.num_rows and settled.num_rows:
        ended.append(_numbered(rows).join(settled, _KEYS, join_type="left semi").column("row").combine_chunks())
    if rows.num_rows and deletions.num_rows:
        upto = deletions.group_by("queue").aggregate([("upto", "max")])
        hit = _numbered(rows).join(upto, "queue", join_type="inner")
        ended.append(hit.filter(pc.less_equal(hit.column("message_id"), hit.column("upto_max")))
                     .column("row").combine_chunks())
    positions = pa.array(range(rows.num_rows), pa.int64())
    if not ended:
        return pc.is_valid(positions)
    return pc.invert(pc.is_in(positions, value_set=pa.concat_arrays(ended)))


def _raised(rows: pa.Table, delivered: pa.Table, current: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``current`` deliveries of ``rows``, raised to the tail's highest ``delivery_count`` per key."""
    current = current.combine_chunks() if isinstance(current, pa.ChunkedArray) else current
    if not rows.num_rows or not delivered.num_rows:
        return current
    hit = _numbered(rows).join(delivered, _KEYS, join_type="inner").sort_by("row")
    if not hit.num_rows:
        return current
    at = hit.column("row").combine_chunks()
    counts = pc.max_element_wise(current.take(at), pc.fill_null(hit.column("delivery_count_max"), 0))
    mask = pc.is_in(pa.array(range(rows.num_rows), pa.int64()), value_set=at)
    return pc.replace_with_mask(current, mask, counts.combine_chunks()
                                if isinstance(counts, pa.ChunkedArray) else counts)

