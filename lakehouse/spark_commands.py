"""``deltamq spark <job>``: the Spark jobs that take part in the broker's work.

Each job is a module of :mod:`lakehouse` with an ``add_command(jobs)``
function that adds its sub-command to the ``spark`` group; :data:`JOBS`
names them.  ``deltamq spark`` without a job prints the group's help and
exits with 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: the modules that contribute a ``deltamq spark`` sub-command, in --help order
JOBS: tuple[str, ...] = ("lakehouse.serve_command", "lakehouse.dlq_command", "lakehouse.snapshot_command")


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spark = commands.add_parser(
        "spark", help="run a Spark job over the broker's Delta tables",
        description="Spark jobs that consume, repair, snapshot and serve the broker's data."
                    " Each runs in a Spark session of its own and needs a JDK.")
    jobs = spark.add_subparsers(title="jobs", metavar="JOB")
    spark.set_defaults(run=lambda args: _no_job(spark))
    for module in JOBS:
        importlib.import_module(module).add_command(jobs)


def _no_job(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2
