"""SparkSessions with Delta Lake configured, and views over a broker's tables.

Spark runs in processes of its own, never inside the broker.  Delta Spark's
jars are not on PyPI: the project fetches ``io.delta:delta-spark_2.13`` (the
version of the installed ``delta-spark`` package) and its dependencies from
Maven Central into ``~/.m2`` with ``mvn dependency:get``; Spark's Ivy resolver
reads ``~/.m2`` first, so ``spark.jars.packages`` then resolves offline
(../shared/notes/lakehouse-facts.md).

Views registered in every session built with a data directory, over every
virtual host node found in it (a column ``node`` tells them apart):

* ``config_history`` — every change to durable configuration, in order;
* ``configuration``  — the current durable configuration (last save per id);
* ``link_termini``   — current AMQP 1.0 link termini.

The message views (``journal``, ``queue_history``, ``live_messages``,
``dead_letters``) arrive with the message journal.
"""

from __future__ import annotations

import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCALA_VERSION = "2.13"


def delta_artifact() -> str:
    """The Maven coordinate of the Delta Spark jar matching the installed delta-spark."""
    return f"io.delta:delta-spark_{SCALA_VERSION}:{version('delta-spark')}"


def _local_jar(artifact: str) -> Path:
    group, name, ver = artifact.split(":")
    return Path.home() / ".m2" / "repository" / Path(*group.split(".")) / name / ver / f"{name}-{ver}.jar"


def ensure_delta_jars() -> None:
    """Fetch Delta Spark's jars into ~/.m2 unless they are already there."""
    artifact = delta_artifact()
    if _local_jar(artifact).exists():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Maven (mvn) is needed once to fetch {artifact} from Maven Central")
    subprocess.run([mvn, "-q", "-B", "dependency:get", f"-Dartifact={artifact}"], check=True, timeout=600)


def spark_session(data_dir: str | Path | None = None, *, app_name: str = "deltamq") -> SparkSession:
    """A local SparkSession with Delta configured (and the broker's views, given a data dir)."""
    ensure_delta_jars()
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(app_name).master("local[2]")
             .config("spark.jars.packages", delta_artifact())
             .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
             .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if data_dir is not None:
        register_views(spark, Path(data_dir))
    return spark


def _tables(data_dir: Path, table: str) -> list[tuple[str, Path]]:
    """(node name, table path) for every node directory holding ``table``."""
    if not data_dir.is_dir():
        return []
    return sorted((node.name, node / table) for node in data_dir.iterdir()
                  if (node / table / "_delta_log").is_dir())


def _union(spark: SparkSession, data_dir: Path, table: str) -> str | None:
    parts = [f"SELECT '{node}' AS node, * FROM delta.`{path.resolve()}`"
             for node, path in _tables(data_dir, table) if "'" not in node and "`" not in str(path)]
    return " UNION ALL ".join(parts) if parts else None


def register_views(spark: SparkSession, data_dir: Path) -> list[str]:
    """Create the broker's temporary views over ``data_dir``; return their names."""
    created = []
    history = _union(spark, data_dir, "config")
    if history is not None:
        spark.sql(f"CREATE OR REPLACE TEMP VIEW config_history AS {history}")
        spark.sql("""
            CREATE OR REPLACE TEMP VIEW configuration AS
            SELECT node, id, category, parent_id, attributes, changed_at FROM (
                SELECT *, row_number() OVER (PARTITION BY node, id ORDER BY seq DESC) AS newest
                FROM config_history) WHERE newest = 1 AND op = 'save'""")
        created += ["config_history", "configuration"]
    termini = _union(spark, data_dir, "link_termini")
    if termini is not None:
        spark.sql(f"""
            CREATE OR REPLACE TEMP VIEW link_termini AS
            SELECT node, role, remote_container_id, link_name, terminus, changed_at FROM (
                SELECT *, row_number() OVER (PARTITION BY node, role, remote_container_id, link_name
                                             ORDER BY seq DESC) AS newest
                FROM ({termini})) WHERE newest = 1 AND op = 'save'""")
        created.append("link_termini")
    return created
