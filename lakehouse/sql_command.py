"""``deltamq sql``: run Spark SQL against a broker's data directory and print a table.

Works whether the broker is running or not: it only reads the Delta tables.
Standard output carries the table only; standard error one line per problem
(or Spark's message for a query it refuses, with the query excerpt) and the
progress of a first run's download.  What the JVM prints (Spark's log4j log,
the JVM's warnings) goes to ``~/.cache/deltamq/spark.log``, Maven's output to
``~/.cache/deltamq/maven.log``; no Ivy resolution runs at all.

While ``deltamq spark serve`` serves the data directory (or
``$DELTAMQ_SPARK_REMOTE`` names a Spark Connect server), the query goes to
that warm server instead: no JVM starts, the same views answer, the output
is the same.  A server that does not accept connections is skipped with one
line on standard error; ``--local`` always starts a local session.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

#: pyspark's loggers that print a query's failure, in JSON, besides raising it
_QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sql = commands.add_parser(
        "sql", help="query a broker's Delta tables with Spark SQL",
        description="Run a Spark SQL query over the Delta tables of a data directory (running"
                    " broker or not) and print the result as a table. Views: config_history,"
                    " configuration, link_termini, journal, queue_history, live_messages,"
                    " dead_letters.")
    sql.add_argument("query", help='the SQL, e.g. "SELECT category, count(*) FROM configuration GROUP BY 1"')
    sql.add_argument("--data-dir", default=os.environ.get("DELTAMQ_DATA_DIR", "./data"),
                     help="the broker's data directory (default: $DELTAMQ_DATA_DIR or ./data)")
    sql.add_argument("--limit", type=int, default=1000, help="most rows to print (default 1000)")
    sql.add_argument("--local", action="store_true",
                     help="start a local Spark session even when `deltamq spark serve` serves the directory")
    sql.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from lakehouse.delta_jars import FetchFailed, cache_dir
    from lakehouse.prerequisites import MissingPrerequisite, require_java

    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        return _fail(f"no data directory at {data_dir} (give --data-dir DIR or set DELTAMQ_DATA_DIR)")
    spark = None if args.local else _remote_session(data_dir)
    if spark is not None:
        return _print_query(spark, args.query, args.limit)
    jvm_log = cache_dir() / "spark.log"
    try:
        require_java()
        spark = _start_session(data_dir, jvm_log)
    except (MissingPrerequisite, FetchFailed) as exc:
        return _fail(str(exc))
    except Exception as exc:                     # the JVM did not start, or died starting
        return _fail(f"Spark did not start: {_message(exc)} (Spark's output: {jvm_log})")
    return _print_query(spark, args.query, args.limit)


def _print_query(spark: Any, query: str, limit: int) -> int:
    """Run ``query``, print its first ``limit`` rows as a table, stop the session."""
    try:
        frame = spark.sql(query)
        got = frame.limit(limit).collect()
        # the names from a row when there is one: asking the frame is one more analysis of the
        # query (a round trip to a Spark Connect server, and Delta's log looked at again)
        columns = list(got[0].__fields__) if got else frame.columns
        rows = [[_text(v) for v in row] for row in got]
    except Exception as exc:                     # Spark's AnalysisException and friends
        return _fail(_message(exc))
    finally:
        spark.stop()
    print(format_table(columns, rows))
    return 0


def _remote_session(data_dir: Path) -> Any:
    """A session on the Spark Connect server of ``data_dir``, if one runs and answers."""
    from lakehouse.connect_server import find_server, remote_session

    try:
        server = find_server(data_dir)
    except ValueError as exc:                    # $DELTAMQ_SPARK_REMOTE is no sc:// address
        _fail(f"{exc}: using a local Spark session")
        return None
    if server is None:
        return None
    if not server.answering():
        _fail(f"the Spark Connect server at {server.address} does not answer: using a local Spark session")
        return None
    _quiet_query_context_loggers()
    return remote_session(server)


def _quiet_query_context_loggers() -> None:
    from pyspark.logger import PySparkLogger

    for name in _QUERY_CONTEXT_LOGGERS:           # the message is printed once, by _fail
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _start_session(data_dir: Path, jvm_log: Path) -> Any:
    from lakehouse.spark import spark_session

    _quiet_query_context_loggers()
    return spark_session(data_dir, app_name="deltamq-sql", jvm_log=jvm_log,
                         progress=lambda line: print(f"deltamq sql: {line}", file=sys.stderr, flush=True))


def _message(exc: Exception) -> str:
    """Spark's own text for a failure: its error class and message, with the query excerpt."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if isinstance(exc, PySparkException):
        text = str(exc)                          # without the JVM's stack trace (not enabled)
    elif isinstance(exc, Py4JJavaError):
        text = str(exc.java_exception.toString())
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text.strip() or type(exc).__name__


def _fail(message: str) -> int:
    print(f"deltamq sql: {message}", file=sys.stderr)
    return 1


def _text(value: Any) -> str:
    return "NULL" if value is None else str(value)


def format_table(columns: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |", line]
    out += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |" for r in rows]
    out += [line, f"({len(rows)} row{'s' if len(rows) != 1 else ''})"]
    return "\n".join(out)
