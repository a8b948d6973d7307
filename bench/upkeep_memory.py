"""The journal upkeep's memory: peak RSS of each of its rounds, each in a fresh process.

    python -m bench.upkeep_memory build /tmp/j/journal --messages 3000000       # a backlog, all live
    python -m bench.upkeep_memory build /tmp/j/journal --messages 3000000 --settled 1000000 --old
    python -m bench.upkeep_memory measure /tmp/j/journal                        # this worktree's code
    python -m bench.upkeep_memory measure /tmp/j/journal --code /path/to/other/checkout

``build`` writes a journal table directly (no broker): ``--messages`` ``enqueue``
rows of ``--body`` random bytes into one queue, in commits of ``--commit-rows``
(60,000: about the size of the files compaction leaves; 500: a file per
commit, as when compaction lags behind the publishers), then ``settle`` rows for the
first ``--settled`` of them (``--old``: dated 30 days back, so history
retention removes them).  The journal writer's table properties are used.

``measure`` runs each of the upkeep's rounds -- ``watermark`` (the recovery
watermark from 0: the watermark file is removed first), ``expired`` (which
messages history retention would remove, a 7-day cut-off), ``checkpoint``,
``compact`` (one compaction round) -- in a fresh Python process (``--code``
first on its ``PYTHONPATH``), and reports each one's peak RSS
(``getrusage`` ``ru_maxrss``), the peak of a process that only imported the
same modules and opened the table (``baseline``; started and set up as
the code under test starts its upkeep process: ``upkeep_environment``,
``lean_process``), and the difference per live
message.  ``purge`` (retention's rewrite) changes the table: it runs only when
named with ``--phases``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

MIB = 1 << 20
PHASES = ("baseline", "watermark", "expired", "checkpoint", "compact")


def build(location: str, messages: int, body: int, commit_rows: int, settled: int, old: bool) -> None:
    import numpy as np
    import pyarrow as pa

    from lakehouse.journal_schema import JOURNAL_SCHEMA
    from lakehouse.journal_writer import open_journal_table

    table = open_journal_table(location, 1)
    rng = np.random.default_rng(7)
    at = dt.datetime.now(dt.timezone.utc) - (dt.timedelta(days=30) if old else dt.timedelta(0))
    started = time.monotonic()

    def commit(columns: dict[str, object], count: int) -> None:
        base = {name: pa.nulls(count, JOURNAL_SCHEMA.field(name).type) for name in JOURNAL_SCHEMA.names}
        base.update({"vhost": pa.array(["v"] * count), "at": pa.array([at] * count, JOURNAL_SCHEMA.field("at").type)})
        base.update(columns)  # type: ignore[arg-type]
        table.append(pa.Table.from_arrays([base[n] for n in JOURNAL_SCHEMA.names], schema=JOURNAL_SCHEMA))

    for first in range(1, messages + 1, commit_rows):
        count = min(commit_rows, messages + 1 - first)
        offsets = pa.array(np.arange(0, (count + 1) * body, body, dtype=np.int32))
        bodies = pa.BinaryArray.from_buffers(pa.binary(), count, [None, offsets.buffers()[1],
                                                                  pa.py_buffer(rng.bytes(count * body))])
        commit({"event": pa.array(["enqueue"] * count), "queue": pa.array(["q"] * count),
                "message_id": pa.array(np.arange(first, first + count, dtype=np.int64)),
                "exchange": pa.array([""] * count), "routing_key": pa.array(["q"] * count),
                "published_at": pa.array([at] * count, JOURNAL_SCHEMA.field("published_at").type),
                "body": bodies, "message_format": pa.array(["amqp-0-9-1"] * count)}, count)
        print(f"  {first + count - 1:,} enqueued ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    for first in range(1, settled + 1, commit_rows):
        count = min(commit_rows, settled + 1 - first)
        commit({"event": pa.array(["settle"] * count), "queue": pa.array(["q"] * count),
                "message_id": pa.array(np.arange(first, first + count, dtype=np.int64)),
                "delivery_count": pa.array([1] * count, pa.int32()),
                "outcome": pa.array(["acked"] * count)}, count)
    table.close()


def phase(name: str, location: str) -> dict[str, object]:
    """Run one round in this process; its peak RSS."""
    from lakehouse import journal_upkeep
    from lakehouse.journal_upkeep import JournalMaintenance
    from lakehouse.journal_writer import advance_watermark, journal_table, watermark_path
    from lakehouse.retention import expired_message_ids

    getattr(journal_upkeep, "lean_process", lambda: None)()      # as the upkeep process sets itself up
    table = journal_table(location, 1)
    table.open()
    maintenance = JournalMaintenance(table, history_hours=168, retention_hours=1)
    opened = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cpu = time.process_time()
    result: object = None
    if name == "watermark":
        path = watermark_path(location)
        if path is not None:
            path.unlink(missing_ok=True)
        result = advance_watermark(table)
    elif name == "expired":
        result = len(expired_message_ids(table, dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=7)))
    elif name == "purge":
        from lakehouse.retention import purge_settled_history
        result = purge_settled_history(table, dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=7))
    elif name == "checkpoint":
        maintenance.checkpoint()
    elif name == "compact":
        result = maintenance.compact()
    elif name != "baseline":
        raise SystemExit(f"no phase {name!r}")
    return {"phase": name, "opened": opened, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "cpu_s": round(time.process_time() - cpu, 2), "result": result}


#: the environment the code under test starts its upkeep process with (none before it said)
_UPKEEP_ENVIRONMENT = """
import json
try:
    from lakehouse.journal_upkeep import upkeep_environment
except ImportError:
    upkeep_environment = dict
print(json.dumps(upkeep_environment()))
"""


def measure(location: str, code: str, phases: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([code, os.environ.get("PYTHONPATH", "")]))
    env.update(json.loads(subprocess.run([sys.executable, "-c", _UPKEEP_ENVIRONMENT], env=env, check=True,
                                         capture_output=True, text=True).stdout.strip().splitlines()[-1]))
    live = None
    results = []
    for name in phases:
        # run as a script: this file from here, the upkeep's modules from --code
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "phase", name, location],
                             env=env, capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    from lakehouse.journal_writer import journal_table
    table = journal_table(location, 1)
    table.open()
    counts = table.read("SELECT COUNT(*) AS n, MAX(message_id) AS top FROM t").to_pylist()[0]
    watermark = next((r["result"] for r in results if r["phase"] == "watermark"), None)
    if watermark is not None and counts["top"] is not None:
        live = counts["top"] + 1 - int(watermark)           # build's journals: everything above it is live
    base = next((r["peak"] for r in results if r["phase"] == "baseline"), None)
    print(f"journal {location}: {counts['n']:,} rows, highest id {counts['top']:,}; code {code}")
    print(f"{'phase':<11} {'peak RSS MiB':>12} {'over baseline':>14} {'B/live msg':>11} {'CPU s':>7}  result")
    for r in results:
        over = r["peak"] - base if base is not None else None
        per = f"{over / live:,.0f}" if over is not None and live else "-"
        print(f"{r['phase']:<11} {r['peak'] / MIB:>12,.0f} {over / MIB if over is not None else 0:>14,.0f}"
              f" {per:>11} {r['cpu_s']:>7}  {r['result']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("location")
    b.add_argument("--messages", type=int, default=3_000_000)
    b.add_argument("--body", type=int, default=1024)
    b.add_argument("--commit-rows", type=int, default=60_000)
    b.add_argument("--settled", type=int, default=0)
    b.add_argument("--old", action="store_true")
    m = sub.add_parser("measure")
    m.add_argument("location")
    m.add_argument("--code", default=str(Path(__file__).resolve().parent.parent))
    m.add_argument("--phases", default=",".join(PHASES))
    p = sub.add_parser("phase")
    p.add_argument("name")
    p.add_argument("location")
    a = parser.parse_args(argv)
    if a.command == "build":
        build(a.location, a.messages, a.body, a.commit_rows, a.settled, a.old)
    elif a.command == "measure":
        measure(a.location, a.code, a.phases.split(","))
    else:
        print(json.dumps(phase(a.name, a.location)))


if __name__ == "__main__":
    main()
