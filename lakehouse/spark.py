"""SparkSessions with Delta Lake configured, and views over a broker's tables.

Spark runs in processes of its own, never inside the broker.  Delta Spark's
jars are not on PyPI: :mod:`lakehouse.delta_jars` fetches the few that
pyspark lacks once, with Maven, and sessions get them as ``spark.jars``
(no Ivy resolution at start-up).

Views registered in every session built with a data directory, over every
virtual host node found in it (a column ``node`` tells them apart):

* ``config_history`` — every change to durable configuration, in order;
* ``configuration``  — the current durable configuration (last save per id);
* ``link_termini``   — current AMQP 1.0 link termini;
* ``journal``        — every row of the message journal (lakehouse.journal_schema);
* ``queue_history``  — one row per message per queue it was enqueued on: the
  message (exchange, routing key, headers, properties, body, published_at,
  from the one row that stores the body) and what became of it there
  (enqueued_at, settled_at, dead_lettered_at, outcome, delivery_count).
  ``outcome`` is the settle row's, ``'deleted'`` for a message its queue's
  deletion took, NULL while the message is live;
* ``live_messages``  — the ``queue_history`` rows of live messages, with
  ``redelivered`` (it has been delivered at least once);
* ``dead_letters``   — the ``queue_history`` rows of dead-lettered messages,
  with the settle row's ``reason``.

A group of views is only created when at least one node has its table; views
of a group no node has are dropped, so a session re-pointed at another data
directory never shows the old one's rows.

The data directory may be an object-store location, ``s3://bucket/prefix``,
the parent of the nodes' ``storePath``: the session then reads through
Hadoop's S3A with the broker's ``AWS_*`` variables
(:mod:`lakehouse.spark_object_store`).  ``DELTAMQ_SPARK_MASTER`` names a
cluster's master for the sessions built here (default ``local[2]``).

``stream_journal`` is a Structured Streaming source over one node's journal.

Sessions built here list local Delta logs with
``io.deltamq.spark.SequentialLocalLogStore`` (``lakehouse/jvm``; compiled
with the JDK's ``javac`` on first use, into ``~/.cache/deltamq``): Delta's
own local log store lists the whole ``_delta_log`` directory on every
snapshot update, and a journal's holds tens of thousands of commits within
its log retention (each 20,000 entries cost a query ~0.6 s here).  Other
Spark sessions can use it too: add the jar to ``spark.jars`` and set
``spark.delta.logStore.file.impl`` to the class.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.delta_jars import Progress, cache_dir, delta_jars, spark_jars_dir, write_stderr
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.spark_object_store import is_object_store, object_store_jars, object_store_tables, s3a_settings

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import DataFrame, SparkSession

#: the log store sessions use for local tables (see the module's docstring)
LOG_STORE_CLASS = "io.deltamq.spark.SequentialLocalLogStore"
_LOG_STORE_SOURCE = Path(__file__).with_name("jvm") / "SequentialLocalLogStore.java"

log = logging.getLogger(__name__)


def log_store_jar(jars: list[Path]) -> Path | None:
    """The jar of :data:`LOG_STORE_CLASS` (built on first use against ``jars``' delta-storage); None without a JDK."""
    try:
        source = _LOG_STORE_SOURCE.read_bytes()
    except OSError:
        log.warning("%s is missing: Spark sessions list Delta logs with Delta's own store", _LOG_STORE_SOURCE)
        return None
    storage = next((jar for jar in jars if jar.name.startswith("delta-storage-")), None)
    if storage is None:
        log.warning("no delta-storage jar: Spark sessions list Delta logs with Delta's own store")
        return None
    digest = hashlib.sha256(source + str(storage).encode() + version("pyspark").encode()).hexdigest()[:16]
    jar = cache_dir() / f"deltamq-log-store-{digest}.jar"
    if jar.exists():
        return jar
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar_tool is None:
        log.warning("no javac/jar: Spark sessions list Delta logs with Delta's own store")
        return None
    spark_jars = spark_jars_dir()
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="deltamq-log-store-") as build:
        try:
            subprocess.run([javac, "-nowarn", "-d", build, "-cp", f"{storage}{os.pathsep}{spark_jars}/*",
                            str(_LOG_STORE_SOURCE)], check=True, capture_output=True, timeout=300)
            temp = jar.with_suffix(f".{os.getpid()}.tmp")
            subprocess.run([jar_tool, "cf", str(temp), "-C", build, "io"], check=True, capture_output=True,
                           timeout=120)
            os.replace(temp, jar)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("could not build the Delta log store (%s): Spark sessions list Delta logs"
                        " with Delta's own store", exc)
            return None
    return jar


def spark_session(data_dir: str | Path | None = None, *, app_name: str = "deltamq",
                  jvm_log: Path | None = None, progress: Progress = write_stderr,
                  jars: Sequence[Path] = (), settings: Iterable[tuple[str, str]] = (),
                  shared_views: bool = False) -> SparkSession:
    """A local SparkSession with Delta configured (and the broker's views, given a data dir).

    With ``jvm_log``, the JVM's own output (its start-up warnings and Spark's
    log4j log) goes to that file rather than this process's terminal; a
    session already running keeps its JVM and its output.  ``progress`` gets
    a line per jar fetched on a first use (:func:`lakehouse.delta_jars.delta_jars`).
    ``jars`` are added to Delta's, ``settings`` override the defaults
    (:func:`session_settings`); ``shared_views``: see :func:`register_views`.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    # Python workers -- UDFs, the deltamq data source's planner and readers -- run this
    # interpreter (its packages: pyarrow, deltalake, lakehouse), not whatever 'python3' is
    # first on PATH; the JVM started below inherits the setting
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    remote = is_object_store(data_dir)     # an s3:// location: S3A and its jars too
    active = SparkContext._active_spark_context
    if remote and active is not None and not active.getConf().get("spark.hadoop.fs.s3a.impl"):
        raise RuntimeError(f"cannot read {data_dir}: this process's Spark started without object-storage"
                           " support (S3A), which can only be added when Spark starts; read it from a"
                           " new process, or build the first session with the s3:// location")
    all_jars = [*delta_jars(progress), *(object_store_jars(progress) if remote else []), *jars]
    conf = SparkConf(loadDefaults=False).setAll(
        session_settings(app_name, all_jars) + (s3a_settings() if remote else []))
    conf.setAll(list(settings))
    if jvm_log is not None and SparkContext._active_spark_context is None:
        _start_spark_context(conf, jvm_log)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from lakehouse.spark_datasource import DeltaMQDataSource

    spark.dataSource.register(DeltaMQDataSource)    # format("deltamq"): queues as sources and sinks
    if data_dir is not None:
        register_views(spark, data_dir if remote else Path(data_dir), shared=shared_views)
    return spark


def _start_spark_context(conf: SparkConf, jvm_log: Path) -> None:
    """Start Spark's JVM with its stdout and stderr going to ``jvm_log``."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    jvm_log.parent.mkdir(parents=True, exist_ok=True)
    with open(jvm_log, "wb") as output:        # the JVM keeps its own copy of the descriptor
        # popen_kwargs is pyspark's documented way to capture the gateway JVM's output
        gateway = launch_gateway(conf, popen_kwargs={"stdout": output, "stderr": output})
    SparkContext(conf=conf, gateway=gateway)


def session_settings(app_name: str, jars: list[Path]) -> list[tuple[str, str]]:
    """The Spark settings of the sessions built here, given the Delta jars to add."""
    # DELTAMQ_SPARK_MASTER: a cluster's master URL (docker-compose.yml's spark://spark-master:7077)
    settings = [("spark.app.name", app_name), ("spark.master", os.environ.get("DELTAMQ_SPARK_MASTER") or "local[2]")]
    jar = log_store_jar(jars)
    if jar is not None:
        jars = [*jars, jar]
        settings.append(("spark.delta.logStore.file.impl", LOG_STORE_CLASS))
    return settings + [
        ("spark.jars", ",".join(str(j) for j in jars)),
        ("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension"),
        ("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"),
        ("spark.sql.session.timeZone", "UTC"),
        ("spark.ui.enabled", "false"),
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.sql.shuffle.partitions", "4"),
        # rebuilding a Delta snapshot after every new version (the journal gets many)
        # is a Spark job of its own, over the checkpoint's rows (live files and the
        # tombstones of files compacted away): one partition instead of 50, and its
        # result cached as objects rather than serialised (measured on a journal with
        # 6,000 tombstones: each about a quarter off a ~1.1 s query)
        ("spark.databricks.delta.snapshotPartitions", "1"),
        ("spark.databricks.delta.snapshotCache.storageLevel", "MEMORY_ONLY"),
        # Delta's own plans over its log (snapshot state, data skipping) are wide: with
        # whole-stage code generation they compile new Java classes for every new version
        # a query sees, then the JIT compiles them again; plans this wide are evaluated
        # without it (bench D3: ~10% off each query, ~15% less CPU), while queries over
        # the broker's tables and views (under 40 columns, nested ones counted) keep it
        ("spark.sql.codegen.maxFields", "40"),
        # a local session's heap is small: the serial collector spares the two cores
        # G1's concurrent threads (queries ~5-10% faster here)
        ("spark.driver.extraJavaOptions", "-XX:+UseSerialGC"),
        # adaptive execution re-plans every query at run time: on a local session over
        # the broker's tables that costs more than it saves (bench D3: 1.2 s -> 1.0 s)
        ("spark.sql.adaptive.enabled", "false"),
    ]


def _tables(data_dir: Path | str, table: str) -> list[tuple[str, str]]:
    """(node name, table location) for every node directory (or object-store prefix) holding ``table``."""
    if is_object_store(data_dir):
        return object_store_tables(str(data_dir), table)
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        return []
    return sorted((node.name, str((node / table).resolve())) for node in data_dir.iterdir()
                  if (node / table / "_delta_log").is_dir())


#: columns journal schemas 2 and 3 added, as Spark SQL types: a node's table of an older schema
#: (written by an older release, never opened since) shows them as NULL in the views
_JOURNAL_NEWER_COLUMNS = {"message_format": "STRING", "native": "BINARY", "first_message_id": "BIGINT"}

#: the journal view's ``message_id``: a range row (schema 3) becomes one row per id of its range
_EXPANDED_ID = ("explode(CASE WHEN first_message_id IS NULL THEN array(message_id)"
                " ELSE sequence(first_message_id, message_id) END) AS message_id")


def _journal_union(spark: SparkSession, data_dir: Path | str) -> str | None:
    """The journal tables of every node, each padded to the newest schema, range rows expanded."""
    parts = []
    for node, location in _tables(data_dir, "journal"):
        if "'" in node or "`" in location:
            continue
        present = set(spark.read.format("delta").load(str(location)).columns)
        columns = ", ".join(_EXPANDED_ID if name == "message_id" and "first_message_id" in present
                            else name if name in present or name not in _JOURNAL_NEWER_COLUMNS
                            else f"CAST(NULL AS {_JOURNAL_NEWER_COLUMNS[name]}) AS {name}"
                            for name in JOURNAL_SCHEMA.names)
        parts.append(f"SELECT '{node}' AS node, {columns} FROM delta.`{location}`")
    return " UNION ALL ".join(parts) if parts else None


def _union(spark: SparkSession, data_dir: Path | str, table: str) -> str | None:
    parts = [f"SELECT '{node}' AS node, * FROM delta.`{location}`"
             for node, location in _tables(data_dir, table) if "'" not in node and "`" not in location]
    return " UNION ALL ".join(parts) if parts else None


# The message views share these CTEs.  ``messages`` has one row per enqueue (a
# message in a queue), with what all three views show and a little more:
#
# * ``enqueued``: each enqueue row, with the earliest ``queue_deleted`` row of its
#   queue whose message_id is at least the message's (the deletion that took it);
# * ``bodies``: the one row per message (per node and vhost: ids are numbered per
#   virtual host) that stores it, whatever the fan-out;
# * ``fates``: per message and queue, its deliveries and its settle row (there
#   is at most one: outcome and reason are only ever set on it).
#
# settled_at is the settle row's time, else the deletion's; it is NULL exactly
# while the message is live.
_MESSAGES = """
    WITH enqueued AS (
        SELECT e.node, e.vhost, e.queue, e.message_id, e.at AS enqueued_at, min(d.at) AS deleted_at
        FROM journal e
        LEFT JOIN journal d
          ON d.event = 'queue_deleted' AND d.node = e.node AND d.vhost = e.vhost
         AND d.queue = e.queue AND d.message_id >= e.message_id
        WHERE e.event = 'enqueue'
        GROUP BY e.node, e.vhost, e.queue, e.message_id, e.at
    ), bodies AS (
        SELECT node, vhost, message_id, exchange, routing_key, headers, properties, body, published_at
        FROM journal WHERE body IS NOT NULL
    ), fates AS (
        SELECT node, vhost, queue, message_id,
               max(at) FILTER (WHERE event = 'settle') AS settled_at,
               max(outcome) AS outcome,
               max(reason) AS reason,
               max(delivery_count) FILTER (WHERE event = 'settle') AS settled_count,
               max(delivery_count) FILTER (WHERE event <> 'settle') AS delivered_count,
               count_if(event <> 'settle') > 0 AS delivered
        FROM journal WHERE event IN ('deliver', 'requeue', 'settle')
        GROUP BY node, vhost, queue, message_id
    ), messages AS (
        SELECT e.node, e.vhost, e.queue, e.message_id,
               b.exchange, b.routing_key, b.headers, b.properties, b.body, b.published_at,
               e.enqueued_at,
               coalesce(f.settled_at, e.deleted_at) AS settled_at,
               CASE WHEN f.outcome = 'dead_lettered' THEN f.settled_at END AS dead_lettered_at,
               CASE WHEN f.settled_at IS NOT NULL THEN f.outcome
                    WHEN e.deleted_at IS NOT NULL THEN 'deleted' END AS outcome,
               coalesce(f.settled_count, f.delivered_count, 0) AS delivery_count,
               coalesce(f.delivered, false) AS delivered,
               f.reason
        FROM enqueued e
        LEFT JOIN bodies b USING (node, vhost, message_id)
        LEFT JOIN fates f USING (node, vhost, queue, message_id)
    )"""

_QUEUE_HISTORY_COLUMNS = """node, vhost, queue, message_id, exchange, routing_key, headers, properties, body,
           published_at, enqueued_at, settled_at, dead_lettered_at, outcome, delivery_count"""

_MESSAGE_VIEWS = {
    "queue_history": f"SELECT {_QUEUE_HISTORY_COLUMNS} FROM messages",
    "live_messages": f"SELECT {_QUEUE_HISTORY_COLUMNS}, delivered AS redelivered FROM messages"
                     " WHERE settled_at IS NULL",
    "dead_letters": f"SELECT {_QUEUE_HISTORY_COLUMNS}, reason FROM messages WHERE outcome = 'dead_lettered'",
}

JOURNAL_VIEWS = ("journal", *_MESSAGE_VIEWS)
ALL_VIEWS = ("config_history", "configuration", "link_termini", *JOURNAL_VIEWS)


def view_sources(data_dir: Path | str) -> list[tuple[str, str]]:
    """(node, table) for every table the views read: they change when this does."""
    return [(node, table) for table in ("config", "link_termini", "journal")
            for node, _ in _tables(data_dir, table)]


def register_views(spark: SparkSession, data_dir: Path | str, *, shared: bool = False) -> list[str]:
    """Create the broker's views over ``data_dir``; return their names.

    ``data_dir`` is a local directory, or an ``s3://bucket/prefix`` location (the
    nodes' ``storePath`` parent; :mod:`lakehouse.spark_object_store`).  The views
    are temporary views of ``spark`` alone, or with ``shared`` views of the
    session catalog's current database, seen by every session of the
    application -- those Spark Connect opens for its clients among them (a
    Connect client's session is a new session of the server's).
    """
    view = "VIEW" if shared else "TEMP VIEW"
    created = []
    history = _union(spark, data_dir, "config")
    if history is not None:
        spark.sql(f"CREATE OR REPLACE {view} config_history AS {history}")
        spark.sql(f"""
            CREATE OR REPLACE {view} configuration AS
            SELECT node, id, category, parent_id, attributes, changed_at FROM (
                SELECT *, row_number() OVER (PARTITION BY node, id ORDER BY seq DESC) AS newest
                FROM config_history) WHERE newest = 1 AND op = 'save'""")
        created += ["config_history", "configuration"]
    termini = _union(spark, data_dir, "link_termini")
    if termini is not None:
        spark.sql(f"""
            CREATE OR REPLACE {view} link_termini AS
            SELECT node, role, remote_container_id, link_name, terminus, changed_at FROM (
                SELECT *, row_number() OVER (PARTITION BY node, role, remote_container_id, link_name
                                             ORDER BY seq DESC) AS newest
                FROM ({termini})) WHERE newest = 1 AND op = 'save'""")
        created.append("link_termini")
    journal = _journal_union(spark, data_dir)
    if journal is not None:
        _register_journal_views(spark, journal, view)
        created += list(JOURNAL_VIEWS)
    for name in ALL_VIEWS:
        if name not in created:
            if shared:
                spark.sql(f"DROP VIEW IF EXISTS {name}")
            else:
                spark.catalog.dropTempView(name)
    return created


def _register_journal_views(spark: SparkSession, journal: str, view: str) -> None:
    spark.sql(f"CREATE OR REPLACE {view} journal AS {journal}")
    for name, select in _MESSAGE_VIEWS.items():
        spark.sql(f"CREATE OR REPLACE {view} {name} AS {_MESSAGES}\n    {select}")


def stream_journal(spark: SparkSession, data_dir: str | Path, node: str) -> DataFrame:
    """A Structured Streaming source over one node's journal (``<data_dir>/<node>/journal``).

    Every row appended to the journal is emitted once (per checkpoint).  The
    table is append-only (``delta.appendOnly``), so the Delta source needs no
    options: it only ever sees commits that add data, and compaction
    (``optimize.compact()``) writes its add/remove actions with
    ``dataChange=false``, which the source skips rather than re-reading the
    compacted rows or failing.  Keep ``vacuum`` retention above the slowest
    stream's lag, or the stream loses the files it has yet to read.
    """
    path = Path(data_dir) / node / "journal"
    if not (path / "_delta_log").is_dir():
        raise FileNotFoundError(f"no journal table at {path}")
    return spark.readStream.format("delta").load(str(path.resolve()))
