"""``deltamq sql``: run Spark SQL against a broker's data directory and print a table.

Works whether the broker is running or not: it only reads the Delta tables.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


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
    sql.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from lakehouse.spark import spark_session

    spark = spark_session(args.data_dir, app_name="deltamq-sql")
    try:
        frame = spark.sql(args.query)
        columns = frame.columns
        rows = [[_text(v) for v in row] for row in frame.limit(args.limit).collect()]
    except Exception as exc:                     # Spark's AnalysisException and friends
        print(f"deltamq sql: {type(exc).__name__}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(format_table(columns, rows))
    return 0


def _text(value: Any) -> str:
    return "NULL" if value is None else str(value)


def format_table(columns: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |", line]
    out += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |" for r in rows]
    out += [line, f"({len(rows)} row{'s' if len(rows) != 1 else ''})"]
    return "\n".join(out)
