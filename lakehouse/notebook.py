"""What the notebooks in ``notebooks/`` share: a Spark session over a broker's tables, and time buckets.

A notebook takes its data location from ``DELTAMQ_DATA_DIR`` (a local data
directory, or an ``s3://bucket/prefix`` holding the nodes' tables) and gets
its session from :func:`notebook_session`:

* with ``SPARK_REMOTE`` set (PySpark's own variable, e.g.
  ``sc://spark-connect:15002`` in docker-compose.yml), a Spark Connect
  session to that server, with the broker's views (the server's own when it
  shares them, else registered in this session);
* otherwise a local session (:func:`lakehouse.spark.spark_session`), its
  JVM's output in ``~/.cache/deltamq/notebook-spark.log`` rather than in
  the notebook.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.delta_jars import cache_dir
from lakehouse.spark import register_views, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the environment variable the notebooks take their data location from
DATA_DIR_ENV = "DELTAMQ_DATA_DIR"
#: bucket sizes (seconds) the plots pick from: about 60 buckets over the history shown
_NICE_SECONDS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


def notebook_session(data_dir: str | Path) -> SparkSession:
    """A session with the broker's views over ``data_dir``: Spark Connect if ``SPARK_REMOTE`` is set, else local."""
    from pyspark.sql import SparkSession

    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        spark = SparkSession.builder.remote(remote).getOrCreate()
        if not spark.catalog.tableExists("journal"):     # a server sharing its views has them already
            register_views(spark, str(data_dir) if "://" in str(data_dir) else Path(data_dir).resolve())
    elif "://" not in str(data_dir) and not Path(data_dir).is_dir():
        raise FileNotFoundError(f"no broker data directory at {Path(data_dir).resolve()}: set {DATA_DIR_ENV}"
                                " to the broker's --data-dir (or an s3://bucket/prefix of its nodes)")
    else:
        spark = spark_session(data_dir, app_name="deltamq-notebook", jvm_log=cache_dir() / "notebook-spark.log")
    if not spark.catalog.tableExists("journal"):
        raise LookupError(f"no node under {data_dir} has a journal table (<node>/journal): is it the broker's"
                          f" --data-dir, or the s3://bucket/prefix its nodes' storePath is under?")
    return spark


def bucket_seconds(span_seconds: float, buckets: int = 60) -> int:
    """A round bucket size (1 s, 2 s, 5 s, ... 1 day) giving about ``buckets`` buckets over ``span_seconds``."""
    wanted = max(span_seconds, 0.0) / max(buckets, 1)
    for size in _NICE_SECONDS:
        if size >= wanted:
            return size
    return int(math.ceil(wanted / 86400) * 86400)
