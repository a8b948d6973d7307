"""The journal writer's cost per commit, stage by stage: where a durable message's commit time goes.

Builds groups as the broker hands them to its writer process -- the pickled
plain rows of ``--messages`` durable AMQP 1.0 transfers (256-byte bodies,
enqueued through the real engine and journal) and as many ``settle`` rows --
and commits them one after the other to a real journal table in a temporary
directory (``--directory``: on another file system), in this process, as the
writer process does.  For each commit it notes CPU time (``time.process_time``:
this process, its fsync threads included) and wall time of each stage:

* ``rows``: unpickling the group;
* ``encode``: the Arrow table (:class:`lakehouse.journal_writer.RowEncoder`);
* ``stage``: the Parquet file and the commit's content written, fsynced with
  the table directory (one round);
* ``publish``: the commit linked into ``_delta_log`` and the log fsynced;
* ``checksum``: the version's checksum file (after the answer; no one waits).

A checkout without the staged commit (``stage``/``publish``) is measured as
``append`` (stage + publish together).  Prints JSON: per stage p50 / p99 of CPU
and wall in ms, and the totals per commit::

    python bench/journal_commit.py [--commits 300] [--messages 40] [--profile]

``background_cpu_ms_mean``: the CPU of the table's background threads (data files created
ahead, checksum files), in the totals but not on a commit's path.

Run with one checkout and then another on ``PYTHONPATH`` to compare them.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pickle
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))                 # after PYTHONPATH: it names the checkout measured


def groups(directory: Path, count: int, messages: int) -> list[bytes]:
    """``count`` pickled groups of ``messages`` enqueues (real 1.0 messages) and as many settlements."""
    from bench.journal_clients import durable_sender
    from tests.unit.protocol.amqp1_0.engine_client import message_payload

    sender, journal = durable_sender(directory / "source")
    sent = 0
    payloads = []
    for _ in range(count):
        for _ in range(messages):
            sender.transfer(0, sent, message_payload(time.monotonic().hex().encode().ljust(256, b"."),
                                                     durable=True))
            sent += 1
        rows = journal._plain(journal._group.rows)
        journal._group.rows = []
        now = time.time()
        settles = [("settle", "q", row[2], now, None, 1, "acked", None, None, None) for row in rows]
        payloads.append(pickle.dumps(rows + settles, protocol=pickle.HIGHEST_PROTOCOL))
    return payloads


def _quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    pick = lambda f: round(ordered[min(len(ordered) - 1, int(len(ordered) * f))] * 1e3, 3)  # noqa: E731
    return pick(0.5), pick(0.99)


def _background_ns(table: Any) -> int:
    """CPU (ns) the table's background threads (data file pool, checksum files) have used so far."""
    total = 0
    for owner in (getattr(table, "_data_files", None), getattr(table, "_checksum_writer", None)):
        thread = getattr(owner, "_thread", None)
        if thread is None or thread.native_id is None:
            continue
        try:
            total += int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def run(payloads: list[bytes], directory: Path, profile: bool, pool: bool = True,
        pool_batch: int | None = None) -> dict[str, Any]:
    from lakehouse.journal_writer import RowEncoder, open_journal_table

    table = open_journal_table(str(directory / "journal"), 1)
    table.on_checkpoint_due = lambda: None     # the upkeep process's work: not a commit's
    if pool and hasattr(table, "pool_data_files"):
        table.pool_data_files(**({"batch": pool_batch} if pool_batch else {}))   # as the writer process does
    encoder = RowEncoder("v")
    staged = hasattr(table, "stage") and hasattr(table, "publish")
    figures: dict[str, tuple[list[float], list[float]]] = {}

    def timed(stage: str, work: Callable[[], Any]) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        result = work()
        cpus, walls = figures.setdefault(stage, ([], []))
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
        return result

    profiler = cProfile.Profile() if profile else None
    background = 0
    for index, payload in enumerate(payloads):
        if index == len(payloads) // 10:
            background = _background_ns(table)
            if profiler is not None:
                profiler.enable()              # after the warm-up
        rows = timed("rows", lambda: pickle.loads(payload))
        batch = timed("encode", lambda: encoder.table(rows))
        if staged:
            prepared = timed("stage", lambda: table.stage(batch))
            timed("publish", lambda: table.publish(prepared, defer_checksum=True))
        else:
            timed("append", lambda: table.append(batch, defer_checksum=True))
        timed("checksum", table.write_deferred_checksum)
    if profiler is not None:
        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(40)
    warm = len(payloads) // 10
    result: dict[str, Any] = {"commits": len(payloads) - warm, "load_average": round(os.getloadavg()[0], 2)}
    cpu_total = [0.0] * (len(payloads) - warm)
    wall_total = [0.0] * (len(payloads) - warm)
    for stage, (cpus, walls) in figures.items():
        cpus, walls = cpus[warm:], walls[warm:]
        result[stage] = {"cpu_ms_p50_p99": _quantiles(cpus), "wall_ms_p50_p99": _quantiles(walls)}
        for i, (cpu, wall) in enumerate(zip(cpus, walls)):
            cpu_total[i] += cpu
            wall_total[i] += wall
    result["total"] = {"cpu_ms_p50_p99": _quantiles(cpu_total), "wall_ms_p50_p99": _quantiles(wall_total),
                       "cpu_ms_mean": round(sum(cpu_total) / len(cpu_total) * 1e3, 3)}
    # of which the background threads (normal priority, not on the commit's path), per commit
    background_ms = (_background_ns(table) - background) / 1e6 / len(cpu_total)
    result["total"]["background_cpu_ms_mean"] = round(background_ms, 3)
    result["total"]["commit_path_cpu_ms_mean"] = round(sum(cpu_total) / len(cpu_total) * 1e3 - background_ms, 3)
    table.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--messages", type=int, default=40, help="durable messages per group (2 rows each)")
    parser.add_argument("--directory", type=Path, default=None, help="where the table goes (default: a temp dir)")
    parser.add_argument("--profile", action="store_true", help="cProfile of the commits, to stderr")
    parser.add_argument("--no-pool", action="store_true", help="appends create their own data files")
    parser.add_argument("--pool-batch", type=int, default=None, help="data files created ahead at a time")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="deltamq-journal-commit-", dir=args.directory) as directory:
        payloads = groups(Path(directory), args.commits, args.messages)
        print(json.dumps(run(payloads, Path(directory), args.profile, not args.no_pool,
                             args.pool_batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
