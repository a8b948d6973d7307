"""Spark over the message journal: the message views, and streaming the journal."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.maintenance import TableMaintenance
from lakehouse.journal_schema import JOURNAL_SCHEMA

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def T(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


PROPS = {"content_type": "text/plain", "delivery_mode": "2"}
HEADERS = {"tenant": "acme", "attempt": 1, "tags": ["a", "b"]}


def row(event: str, queue: str, message_id: int, at: datetime, **columns: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict.fromkeys(JOURNAL_SCHEMA.names)
    values.update(vhost="/", at=at, event=event, queue=queue, message_id=message_id, **columns)
    return values


def message(queue: str, message_id: int, at: datetime, body: bytes, **columns: Any) -> dict[str, Any]:
    """The enqueue row that stores the message."""
    columns.setdefault("exchange", "amq.direct")
    columns.setdefault("routing_key", queue)
    return row("enqueue", queue, message_id, at, published_at=at, body=body, **columns)


def write(path: Path, commits: list[list[dict[str, Any]]]) -> AppendOnlyTable:
    table = AppendOnlyTable(path, JOURNAL_SCHEMA)
    table.open()
    for commit in commits:
        table.append(pa.Table.from_pylist(commit, schema=JOURNAL_SCHEMA))
    return table


ALPHA = [
    [   # message 1 fanned out to orders and audit (body stored once), 2..4 to orders, 5 to scratch
        message("orders", 1, T(1), b"one", exchange="amq.topic", routing_key="order.new",
                properties=list(PROPS.items()), headers=json.dumps(HEADERS)),
        row("enqueue", "audit", 1, T(1)),
        message("orders", 2, T(1), b"two"),
        message("orders", 3, T(1), b"three"),
        message("orders", 4, T(1), b"four"),
        message("scratch", 5, T(1), b"five"),
    ],
    [
        row("deliver", "orders", 1, T(2), delivery_count=1),
        row("deliver", "audit", 1, T(2), delivery_count=1),
        row("deliver", "orders", 2, T(2), delivery_count=1),
        row("deliver", "orders", 3, T(2), delivery_count=1),
    ],
    [
        row("settle", "orders", 1, T(3), delivery_count=1, outcome="acked"),
        row("settle", "audit", 1, T(3), delivery_count=1, outcome="dead_lettered", reason="rejected"),
        row("requeue", "orders", 2, T(3), delivery_count=1),
    ],
    [
        row("deliver", "orders", 2, T(4), delivery_count=2),
        row("settle", "orders", 2, T(4), delivery_count=2, outcome="acked"),
    ],
    [row("queue_deleted", "scratch", 5, T(5))],
    [message("scratch", 6, T(6), b"six")],                          # scratch declared again
    [row("queue_deleted", "scratch", 6, T(7)), row("queue_deleted", "audit", 6, T(7))],
    [message("scratch", 7, T(8), b"seven")],                        # after both deletions: live
]

BETA = [    # the same vhost name and message ids as alpha's: nodes must not mix
    [message("orders", 1, T(1), b"beta-one"), message("orders", 2, T(1), b"beta-two")],
    [row("deliver", "orders", 1, T(2), delivery_count=1)],
    [row("requeue", "orders", 1, T(3), delivery_count=1), row("deliver", "orders", 1, T(3), delivery_count=2)],
    [row("settle", "orders", 1, T(4), delivery_count=2, outcome="dead_lettered", reason="delivery_limit")],
]

QUEUE_HISTORY_COLUMNS = ["node", "vhost", "queue", "message_id", "exchange", "routing_key", "headers",
                         "properties", "body", "published_at", "enqueued_at", "settled_at",
                         "dead_lettered_at", "outcome", "delivery_count"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("journal-data")
    for node, commits in (("alpha", ALPHA), ("beta", BETA)):
        write(root / node / "journal", commits).close()
    return root


@pytest.fixture(scope="module")
def spark(data_dir: Path) -> Any:
    """The Spark session, with the views over ``data_dir``.

    Not stopped here: ``getOrCreate`` hands the same session to the other Spark
    test modules (which register their own views in it), and the last user stops it.
    """
    from lakehouse.spark import spark_session

    return spark_session(data_dir)


def test_register_views_creates_the_journal_views(spark: Any, data_dir: Path, tmp_path: Path) -> None:
    from lakehouse.spark import register_views

    try:
        assert register_views(spark, tmp_path) == []           # no node has a journal: views dropped
        assert not spark.catalog.tableExists("journal")
        assert not spark.catalog.tableExists("live_messages")
    finally:
        names = register_views(spark, data_dir)
    assert names == ["journal", "queue_history", "live_messages", "dead_letters"]


def test_journal_view_is_every_row_of_every_node(spark: Any) -> None:
    journal = spark.table("journal")
    assert journal.columns == ["node", *JOURNAL_SCHEMA.names]
    counts = {r.node: r.n for r in spark.sql("SELECT node, count(*) AS n FROM journal GROUP BY node").collect()}
    assert counts == {"alpha": sum(map(len, ALPHA)), "beta": sum(map(len, BETA))}


def test_queue_history_is_one_row_per_message_per_queue(spark: Any) -> None:
    history = spark.table("queue_history")
    assert history.columns == QUEUE_HISTORY_COLUMNS
    actual = history.select("node", "vhost", "queue", "message_id", "body", "enqueued_at", "settled_at",
                            "dead_lettered_at", "outcome", "delivery_count")
    expected = spark.createDataFrame([
        ("alpha", "/", "orders", 1, b"one", T(1), T(3), None, "acked", 1),
        ("alpha", "/", "audit", 1, b"one", T(1), T(3), T(3), "dead_lettered", 1),
        ("alpha", "/", "orders", 2, b"two", T(1), T(4), None, "acked", 2),             # requeued, acked
        ("alpha", "/", "orders", 3, b"three", T(1), None, None, None, 1),              # delivered, live
        ("alpha", "/", "orders", 4, b"four", T(1), None, None, None, 0),               # never delivered
        ("alpha", "/", "scratch", 5, b"five", T(1), T(5), None, "deleted", 0),        # earliest deletion
        ("alpha", "/", "scratch", 6, b"six", T(6), T(7), None, "deleted", 0),
        ("alpha", "/", "scratch", 7, b"seven", T(8), None, None, None, 0),
        ("beta", "/", "orders", 1, b"beta-one", T(1), T(4), T(4), "dead_lettered", 2),
        ("beta", "/", "orders", 2, b"beta-two", T(1), None, None, None, 0),
    ], "node string, vhost string, queue string, message_id long, body binary, enqueued_at timestamp,"
       " settled_at timestamp, dead_lettered_at timestamp, outcome string, delivery_count int")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_fanned_out_message_is_in_both_queues_with_its_one_body(spark: Any) -> None:
    bodies = spark.sql("SELECT count(*) FROM journal WHERE node = 'alpha' AND message_id = 1"
                       " AND body IS NOT NULL").first()[0]
    assert bodies == 1
    actual = spark.sql("""
        SELECT queue, exchange, routing_key, body, published_at FROM queue_history
        WHERE node = 'alpha' AND message_id = 1""")
    expected = spark.createDataFrame(
        [("orders", "amq.topic", "order.new", b"one", T(1)), ("audit", "amq.topic", "order.new", b"one", T(1))],
        "queue string, exchange string, routing_key string, body binary, published_at timestamp")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_headers_and_properties_pass_through(spark: Any) -> None:
    history = spark.table("queue_history")
    assert dict(history.dtypes)["properties"] == "map<string,string>"
    assert dict(history.dtypes)["headers"] == "string"
    rows = spark.sql("SELECT queue, headers, properties FROM queue_history"
                     " WHERE node = 'alpha' AND message_id = 1").collect()
    assert len(rows) == 2
    for r in rows:
        assert json.loads(r.headers) == HEADERS
        assert r.properties == PROPS
    plain = spark.sql("SELECT headers, properties FROM queue_history"
                      " WHERE node = 'alpha' AND message_id = 4").first()
    assert plain.headers is None and plain.properties is None


def test_live_messages_are_the_unsettled_undeleted_ones(spark: Any) -> None:
    live = spark.table("live_messages")
    assert live.columns == [*QUEUE_HISTORY_COLUMNS, "redelivered"]
    actual = live.select("node", "queue", "message_id", "body", "delivery_count", "outcome", "redelivered")
    expected = spark.createDataFrame([
        ("alpha", "orders", 3, b"three", 1, None, True),
        ("alpha", "orders", 4, b"four", 0, None, False),
        ("alpha", "scratch", 7, b"seven", 0, None, False),
        ("beta", "orders", 2, b"beta-two", 0, None, False),
    ], "node string, queue string, message_id long, body binary, delivery_count int, outcome string,"
       " redelivered boolean")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_dead_letters_carry_the_reason(spark: Any) -> None:
    dead = spark.table("dead_letters")
    assert dead.columns == [*QUEUE_HISTORY_COLUMNS, "reason"]
    actual = dead.select("node", "queue", "message_id", "body", "dead_lettered_at", "delivery_count", "reason")
    expected = spark.createDataFrame([
        ("alpha", "audit", 1, b"one", T(3), 1, "rejected"),
        ("beta", "orders", 1, b"beta-one", T(4), 2, "delivery_limit"),
    ], "node string, queue string, message_id long, body binary, dead_lettered_at timestamp,"
       " delivery_count int, reason string")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_stream_journal_reads_every_row_once_across_compaction_and_restart(spark: Any, tmp_path: Path) -> None:

    from lakehouse.spark import stream_journal

    root, checkpoint = tmp_path / "data", tmp_path / "checkpoint"
    path = root / "gamma" / "journal"
    next_id = iter(range(1, 1000))
    written: list[int] = []

    def commit(table: AppendOnlyTable, n: int) -> None:
        ids = [next(next_id) for _ in range(n)]
        table.append(pa.Table.from_pylist([message("q", i, T(i), b"m%d" % i) for i in ids], schema=JOURNAL_SCHEMA))
        written.extend(ids)

    seen: list[int] = []

    def collect(batch: Any, batch_id: int) -> None:
        seen.extend(r.message_id for r in batch.select("message_id").collect())

    def start(**trigger: Any) -> Any:
        return (stream_journal(spark, root, "gamma").writeStream.foreachBatch(collect)
                .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())

    table = write(path, [])
    commit(table, 3)
    commit(table, 2)
    query = start(processingTime="500 milliseconds")
    try:
        query.processAllAvailable()
        assert sorted(seen) == written
        commit(table, 4)
        commit(table, 1)
        query.processAllAvailable()
        assert sorted(seen) == written

        # the broker's own compaction (the journal's maintenance thread): dataChange=false add/remove
        maintenance = TableMaintenance(table, compact_min_files=2)
        assert maintenance.compact() == 4
        maintenance.checkpoint()                                   # ours (pyarrow), read by Spark below
        assert (path / "_delta_log" / f"{table.version:020d}.checkpoint.parquet").exists()
        commit(table, 2)                                           # the writer's handle predates it
        query.processAllAvailable()
        assert query.exception() is None and query.isActive
        assert sorted(seen) == written                             # compacted rows not re-read
    finally:
        query.stop()
    assert query.exception() is None

    commit(table, 3)                                               # while no stream runs
    before = len(seen)
    query = start(availableNow=True)
    try:
        query.awaitTermination(300)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(seen[before:]) == written[-3:]                    # only the new rows
    assert sorted(seen) == written

    batch = spark.read.format("delta").load(str(path)).select("message_id").collect()
    assert sorted(r.message_id for r in batch) == written          # compaction lost and duplicated nothing
    table.close()


def test_stream_journal_needs_a_journal(spark: Any, tmp_path: Path) -> None:
    from lakehouse.spark import stream_journal

    with pytest.raises(FileNotFoundError):
        stream_journal(spark, tmp_path, "nobody")


def test_sessions_find_log_entries_by_name_not_by_listing_the_log(spark: Any, tmp_path: Path) -> None:
    """The session's log store looks commits up version by version from the checkpoint.

    A stray commit file far beyond the end of the log is something only a
    listing of ``_delta_log`` can see; Delta's own local store would take it
    for the latest version and fail on the gap.  Ours never meets it.
    """
    from lakehouse.spark import LOG_STORE_CLASS

    assert spark.conf.get("spark.delta.logStore.file.impl") == LOG_STORE_CLASS
    path = tmp_path / "journal"
    table = write(path, [[message("q", i, T(i), b"m%d" % i)] for i in range(1, 6)])
    maintenance = TableMaintenance(table, compact_min_files=2)
    maintenance.compact()
    maintenance.checkpoint()
    table.append(pa.Table.from_pylist([message("q", 6, T(6), b"m6")], schema=JOURNAL_SCHEMA))
    for version in range(maintenance.log_state().checkpoint_version):   # log clean-up's work
        (path / "_delta_log" / f"{version:020d}.json").unlink()
    (path / "_delta_log" / f"{table.version + 1000:020d}.json").write_text("not a commit\n")
    ids = spark.read.format("delta").load(str(path)).select("message_id").collect()
    assert sorted(r.message_id for r in ids) == [1, 2, 3, 4, 5, 6]
    table.close()


def test_files_carry_time_bounds_so_spark_skips_old_files_by_time(spark: Any, tmp_path: Path) -> None:
    from lakehouse.journal_writer import journal_table

    path = tmp_path / "timed" / "journal"
    table = journal_table(str(path), 1)
    table.open()
    old = datetime(2025, 1, 1, 0, 0, 0, 123456, tzinfo=timezone.utc)
    new = datetime(2025, 6, 1, 0, 0, 0, 999999, tzinfo=timezone.utc)
    for i, at in enumerate((old, new), start=1):
        table.append(pa.Table.from_pylist([message("q", i, at, b"m%d" % i)], schema=JOURNAL_SCHEMA))
    adds = [json.loads(line)["add"] for version in (1, 2)
            for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
            if "add" in line]
    stats = [json.loads(add["stats"]) for add in adds]
    # to the millisecond, widened: the minimum rounded down, the maximum up
    assert stats[0]["minValues"]["at"] == "2025-01-01T00:00:00.123Z"
    assert stats[0]["maxValues"]["at"] == "2025-01-01T00:00:00.124Z"
    assert stats[1]["maxValues"]["at"] == "2025-06-01T00:00:01.000Z"
    exact = spark.read.format("delta").load(str(path)).where(f"at = TIMESTAMP '{old.isoformat()}'")
    assert [r.message_id for r in exact.select("message_id").collect()] == [1]   # not skipped wrongly
    (path / adds[0]["path"]).unlink()              # only a scan that skips it by time still works
    recent = spark.read.format("delta").load(str(path)).where(f"at >= TIMESTAMP '{new.isoformat()}'")
    assert [r.message_id for r in recent.select("message_id").collect()] == [2]
    table.close()


def test_range_rows_show_one_row_per_message_in_every_view(spark: Any, data_dir: Path, tmp_path: Path) -> None:
    """A lease consumer's grants and settlement (range rows, schema 3) read as per-message rows."""
    from lakehouse.spark import register_views

    ranges = tmp_path / "ranges"
    write(ranges / "gamma" / "journal", [
        [message("stream", i, T(1), b"s%d" % i) for i in range(1, 7)],
        [row("deliver", "stream", 3, T(2), delivery_count=1, first_message_id=1),
         row("deliver", "stream", 6, T(2), delivery_count=1, first_message_id=4)],
        [row("settle", "stream", 3, T(3), delivery_count=1, outcome="acked", reason="consumer:job",
             first_message_id=1)],
    ]).close()
    try:
        register_views(spark, ranges)
        journal = spark.sql("SELECT event, message_id, first_message_id FROM journal"
                            " WHERE event <> 'enqueue' ORDER BY event, message_id").collect()
        assert [(r.event, r.message_id, r.first_message_id) for r in journal] == [
            ("deliver", 1, 1), ("deliver", 2, 1), ("deliver", 3, 1), ("deliver", 4, 4), ("deliver", 5, 4),
            ("deliver", 6, 4), ("settle", 1, 1), ("settle", 2, 1), ("settle", 3, 1)]
        history = spark.sql("SELECT message_id, outcome, settled_at, delivery_count FROM queue_history"
                            " ORDER BY message_id").collect()
        assert [(r.message_id, r.outcome, r.settled_at is not None, r.delivery_count) for r in history] == [
            (1, "acked", True, 1), (2, "acked", True, 1), (3, "acked", True, 1),
            (4, None, False, 1), (5, None, False, 1), (6, None, False, 1)]
        live = spark.sql("SELECT message_id, body, redelivered FROM live_messages ORDER BY message_id").collect()
        assert [(r.message_id, r.body, r.redelivered) for r in live] == [
            (4, b"s4", True), (5, b"s5", True), (6, b"s6", True)]
    finally:
        register_views(spark, data_dir)
