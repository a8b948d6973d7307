"""``deltamq spark snapshot``: write a snapshot of every queue's live messages, for fast restarts.

For each virtual host node (every node of a data directory, the ones named
with ``--node``, or one ``--store-path``), a Spark job pins the journal's
latest version ``V``, computes the live messages as of ``V`` (Delta time
travel, ``versionAsOf``) with the SQL recovery uses
(:data:`lakehouse.snapshot.LIVE_MESSAGES_SQL`), and appends them to
``<storePath>/journal_snapshot`` as one Delta commit (layout:
:mod:`lakehouse.snapshot`).  The broker may be running meanwhile: it keeps
appending after ``V`` and never waits for the job; the next time it starts,
it reads the newest snapshot and only the journal rows committed after it.
Then all but the ``--keep`` newest snapshots are deleted (their files go
with vacuum, an hour later, so a broker starting meanwhile can still read
them).  A journal unchanged since the newest snapshot gets no new one.

Output: one line per node on standard output; errors on standard error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .delta_table import Location, child_location, is_uri, local_path
from .delta_versions import query_table, table_identity
from .journal_schema import JOURNAL_SCHEMA
from .journal_writer import journal_sql, read_watermark
from .snapshot import (BOUNDS_SQL, DELETION, DELETIONS_SQL, HEADER, LIVE_MESSAGES_SQL, MESSAGE,
                       SNAPSHOT_SCHEMA, SNAPSHOT_SCHEMA_VERSION, snapshot_headers, snapshot_location)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["add_command", "write_snapshot", "SnapshotWritten", "spark_type", "SNAPSHOT_PROPERTIES"]

#: properties of a new snapshot table: removed snapshots' files stay an hour for brokers
#: reading them; no deletion vectors (a broker reads it with delta-rs)
SNAPSHOT_PROPERTIES = {"delta.deletedFileRetentionDuration": "interval 1 hours",
                       "delta.logRetentionDuration": "interval 7 days",
                       "delta.enableDeletionVectors": "false"}
#: the temporary view the SQL of lakehouse.snapshot reads: the journal at the pinned version
_JOURNAL_VIEW = "t"


@dataclass(frozen=True)
class SnapshotWritten:
    """What :func:`write_snapshot` did for one node."""

    journal_version: int
    messages: int
    queues: int
    written: bool                  # False: the newest snapshot was already of that version
    removed: int                   # older snapshots deleted (--keep)
    seconds: float


def add_command(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snapshot = jobs.add_parser(
        "snapshot", help="snapshot every queue's live messages, so brokers restart from it",
        description="Compute every queue's live messages from the journal at its latest version and write"
                    " them to the node's journal_snapshot table (one Delta commit). A broker starting"
                    " later reads the newest snapshot plus the journal rows committed after it, so its"
                    " restart time depends on the live messages, not on the history. Safe while the"
                    " broker runs. Run it more often than the journal's log retention"
                    " (DELTAMQ_JOURNAL_LOG_RETENTION_HOURS, 1 hour by default): an older snapshot is"
                    " not used.")
    where = snapshot.add_mutually_exclusive_group()
    where.add_argument("--data-dir", default=None,
                       help="a broker's data directory: every node in it (default: $DELTAMQ_DATA_DIR or ./data)")
    where.add_argument("--store-path", default=None,
                       help="one node's storePath: a directory or an object-storage URI (s3://bucket/node)")
    snapshot.add_argument("--node", action="append", default=[],
                          help="only this node of the data directory (repeatable)")
    snapshot.add_argument("--keep", type=int, default=2,
                          help="snapshots to keep per node, the new one included (default 2)")
    snapshot.set_defaults(run=_run)


def _stores(args: argparse.Namespace) -> list[tuple[str, Location]] | str:
    """(name, storePath) of the nodes to snapshot, or the error to print."""
    if args.keep < 1:
        return f"--keep must be at least 1 (got {args.keep})"
    if args.store_path is not None:
        if args.node:
            return "give --node with --data-dir, not with --store-path"
        location: Location = args.store_path if is_uri(args.store_path) else local_path(args.store_path)
        journal = child_location(location, "journal")
        try:
            table_identity(journal)
        except FileNotFoundError:
            return f"no journal table at {journal} (is {args.store_path} a node's storePath?)"
        return [(str(args.store_path), location)]
    data_dir = Path(args.data_dir or os.environ.get("DELTAMQ_DATA_DIR", "./data"))
    if not data_dir.is_dir():
        return f"no data directory at {data_dir} (give --data-dir DIR, or --store-path)"
    nodes = sorted((node.name, node) for node in data_dir.iterdir()
                   if (node / "journal" / "_delta_log").is_dir())
    if args.node:
        unknown = sorted(set(args.node) - {name for name, _ in nodes})
        if unknown:
            return (f"no node {', '.join(unknown)} with a journal in {data_dir}"
                    f" (nodes: {', '.join(name for name, _ in nodes) or 'none'})")
        nodes = [(name, path) for name, path in nodes if name in args.node]
    if not nodes:
        return f"no node with a journal in {data_dir}"
    return [(name, path) for name, path in nodes]


def _run(args: argparse.Namespace) -> int:
    from lakehouse.delta_jars import FetchFailed, cache_dir
    from lakehouse.prerequisites import MissingPrerequisite, require_java
    from lakehouse.spark import spark_session
    from lakehouse.spark_object_store import is_object_store, object_store_jars, s3a_settings

    stores = _stores(args)
    if isinstance(stores, str):
        return _fail(stores)
    jvm_log = cache_dir() / "spark.log"

    def progress(line: str) -> None:
        print(f"deltamq spark snapshot: {line}", file=sys.stderr, flush=True)
    try:
        require_java()
        # S3A can only join a JVM when it starts: with a node in object storage, bring it
        remote = any(is_object_store(location) for _, location in stores)
        spark = spark_session(app_name="deltamq-snapshot", jvm_log=jvm_log, progress=progress,
                              jars=object_store_jars(progress) if remote else (),
                              settings=s3a_settings() if remote else ())
    except (MissingPrerequisite, FetchFailed) as exc:
        return _fail(str(exc))
    except Exception as exc:                     # the JVM did not start
        return _fail(f"Spark did not start: {exc} (Spark's output: {jvm_log})")
    failed = 0
    try:
        for name, location in stores:
            try:
                done = write_snapshot(spark, location, keep=args.keep)
            except Exception as exc:             # one node's failure does not stop the others
                failed += 1
                print(f"deltamq spark snapshot: {name}: {_message(exc)}", file=sys.stderr)
                continue
            what = (f"snapshot of journal version {done.journal_version}: {done.messages} live messages in"
                    f" {done.queues} queues" if done.written else
                    f"journal unchanged since the snapshot of version {done.journal_version}")
            removed = f", {done.removed} older removed" if done.removed else ""
            print(f"{name}: {what}{removed} ({done.seconds:.1f} s)", flush=True)
    finally:
        spark.stop()
    return 1 if failed else 0


def write_snapshot(spark: SparkSession, store: Location, *, keep: int = 2) -> SnapshotWritten:
    """Snapshot the journal of the node whose storePath is ``store``; keep the ``keep`` newest snapshots."""
    started = time.perf_counter()
    journal = child_location(store, "journal")
    target = snapshot_location(journal)
    version, journal_id = table_identity(journal)         # pinned: the broker may append meanwhile
    try:
        headers = snapshot_headers(target)
    except FileNotFoundError:
        headers = []
    if headers and headers[0].version == version and headers[0].journal_id == journal_id:
        return SnapshotWritten(version, 0, 0, False, _keep(spark, target, keep),
                               time.perf_counter() - started)
    _require_file_system(spark, journal)
    frame = spark.read.format("delta").option("versionAsOf", version).load(spark_path(journal))
    for field in JOURNAL_SCHEMA:                            # a journal of an older schema: nulls
        if field.name not in frame.columns:
            frame = frame.withColumn(field.name, _null(field.type))
    frame.createOrReplaceTempView(_JOURNAL_VIEW)
    # every message below the watermark had ended; below the lowest live one too: the rows
    # with bodies are then read only from the files at or above it (their message_id stats)
    watermark = read_watermark(journal)
    bounds = spark.sql(journal_sql(BOUNDS_SQL, watermark, spark=True)).first()
    assert bounds is not None                                # scalar subqueries: one row
    if bounds["lowest_live"] is not None:
        watermark = max(watermark, int(bounds["lowest_live"]))
    rows = _snapshot_rows(spark, version, watermark, journal_id, bounds["message_id"], bounds["tx_id"])
    _create_table(spark, target)
    rows.write.format("delta").mode("append").save(spark_path(target))
    spark.catalog.dropTempView(_JOURNAL_VIEW)
    counted = query_table(target, f"""
        SELECT COUNT(*) AS messages, COUNT(DISTINCT queue) AS queues FROM t
        WHERE snapshot_version = {version} AND kind = '{MESSAGE}'""").to_pylist()[0]
    return SnapshotWritten(version, int(counted["messages"]), int(counted["queues"]), True,
                           _keep(spark, target, keep), time.perf_counter() - started)


def _snapshot_rows(spark: SparkSession, version: int, watermark: int, journal_id: str,
                   highest_message: int | None, highest_tx: int | None) -> DataFrame:
    from pyspark.sql import functions as F

    messages = (spark.sql(journal_sql(LIVE_MESSAGES_SQL, watermark, spark=True))
                .withColumnRenamed("deliveries", "delivery_count").withColumn("kind", F.lit(MESSAGE)))
    deletions = spark.sql(journal_sql(DELETIONS_SQL, watermark, spark=True)).withColumn("kind", F.lit(DELETION))
    header = spark.createDataFrame(
        [(HEADER, highest_message, journal_id, highest_tx, dt.datetime.now(dt.timezone.utc),
          SNAPSHOT_SCHEMA_VERSION)],
        "kind string, message_id bigint, journal_id string, highest_tx_id bigint, created_at timestamp,"
        " snapshot_schema int")
    rows = (messages.unionByName(deletions, allowMissingColumns=True)
            .unionByName(header, allowMissingColumns=True)
            .withColumn("snapshot_version", F.lit(version)))
    return rows.select(*[F.col(f.name).cast(spark_type(f.type)).alias(f.name) for f in SNAPSHOT_SCHEMA])


def _create_table(spark: SparkSession, target: Location) -> None:
    columns = ", ".join(f"{f.name} {spark_type(f.type)}{'' if f.nullable else ' NOT NULL'}"
                        for f in SNAPSHOT_SCHEMA)
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in SNAPSHOT_PROPERTIES.items())
    spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{spark_path(target)}` ({columns}) USING delta"
              f" PARTITIONED BY (snapshot_version) TBLPROPERTIES ({properties})")


def _keep(spark: SparkSession, target: Location, keep: int) -> int:
    """Delete all but the ``keep`` newest snapshots; how many went."""
    try:
        versions = [h.version for h in snapshot_headers(target)]
    except FileNotFoundError:
        return 0
    if len(versions) <= keep:
        return 0
    oldest_kept = versions[keep - 1]
    path = spark_path(target)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE snapshot_version < {oldest_kept}")
    spark.sql(f"VACUUM delta.`{path}`")       # files removed more than the retention (1 hour) ago
    return len(versions) - keep


def _require_file_system(spark: SparkSession, location: Location) -> None:
    """Raise RuntimeError, saying what is missing, when Spark cannot read ``location``'s object store."""
    if not str(location).startswith("s3://"):
        return
    try:
        # the jars of spark.jars are on the context class loader, not on the one py4j's Class.forName uses
        jvm = spark.sparkContext._jvm
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(  # type: ignore[union-attr]
            "org.apache.hadoop.fs.s3a.S3AFileSystem")
    except Exception:
        raise RuntimeError(
            f"{location}: this Spark session cannot read S3 (its classpath lacks Hadoop's S3A file"
            " system: the org.apache.hadoop:hadoop-aws jar of Spark's Hadoop version and the AWS SDK"
            " bundle it names); run the job where Spark has them") from None


def spark_path(location: Location) -> str:
    """``location`` as Spark names it: an absolute local path, or ``s3a://`` for ``s3://``."""
    if is_uri(location):
        text = str(location)
        return "s3a://" + text[len("s3://"):] if text.startswith("s3://") else text
    return str(local_path(location).resolve())


def spark_type(arrow: pa.DataType) -> str:
    """The Spark SQL type of a column of the broker's Arrow schemas."""
    if pa.types.is_timestamp(arrow):
        return "timestamp"
    if pa.types.is_map(arrow):
        return f"map<{spark_type(arrow.key_type)},{spark_type(arrow.item_type)}>"
    names = {pa.string(): "string", pa.binary(): "binary", pa.int64(): "bigint", pa.int32(): "int",
             pa.bool_(): "boolean", pa.float64(): "double"}
    if arrow not in names:
        raise TypeError(f"no Spark type for {arrow}")
    return names[arrow]


def _null(arrow: pa.DataType) -> Any:
    from pyspark.sql import functions as F

    return F.lit(None).cast(spark_type(arrow))


def _message(exc: Exception) -> str:
    from lakehouse.sql_command import _message as spark_message

    return spark_message(exc)


def _fail(message: str) -> int:
    print(f"deltamq spark snapshot: {message}", file=sys.stderr)
    return 1
