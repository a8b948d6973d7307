"""DeltaMQ's own table maintenance against delta-rs's operations, on the same tables.

    python -m bench.delta_maintenance            # ~2 min on 2 cores
    python -m bench.delta_maintenance --rounds 20

Each part runs both ways on identical tables (copies, or in turns on one
table) in one go, interleaved, and prints what each did and how long it took:

* **checkpoint** of a table with many compacted-away files, 20 commits after
  the last checkpoint: :meth:`lakehouse.maintenance.TableMaintenance.checkpoint`
  (from a :class:`~lakehouse.log_state.LogState` kept up to date) against
  delta-rs ``create_checkpoint`` on a fresh handle, and on a handle kept and
  brought up to date with ``update_incremental``;
* **compaction** of a table holding small files (one per commit) and medium
  ones (earlier compactions): :meth:`TableMaintenance.compact` against
  ``optimize.compact(target_size)``: files and bytes rewritten, time;
* **vacuum** of files compacted away: which files each deletes, for a file
  removed a minute ago (a Spark stream a few minutes behind still reads it)
  and one whose removal is older than the tombstones the checkpoint keeps;
* **retention**: whether ``DeltaTable.delete`` can remove rows of an
  append-only table at all.

The figures are for the docstrings of lakehouse.maintenance and
lakehouse.retention; absolute times depend on the machine, the ratios less.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.log_state import commit_file
from lakehouse.maintenance import TableMaintenance

SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])
SMALL = 64 << 10          # the bench's "small file" (1 MiB in the journal): keeps tables small
TARGET = 4 << 20


def batch(start: int, rows: int) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + rows)),
                     "body": [os.urandom(256) for _ in range(rows)]}, schema=SCHEMA)


def journal_like(path: Path, commits: int, rows: int = 20, **properties: str) -> AppendOnlyTable:
    table = AppendOnlyTable(path, SCHEMA, stats_column="message_id", checkpoint_interval=1 << 30,
                            properties={"delta.deletedFileRetentionDuration": "interval 5 minutes",
                                        **properties})
    table.open()
    for i in range(commits):
        table.append(batch(i * rows, rows))
    return table


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):7.1f} ms  min {min(values):7.1f}  max {max(values):7.1f}"


def bench_checkpoint(root: Path, rounds: int, since: int, padding: int = 0) -> None:
    """``padding``: as many more entries in ``_delta_log`` (a journal keeps every commit of its
    log retention there: tens of thousands), as empty files named like old checksum files."""
    table = journal_like(root / f"checkpoint-{since}-{padding}", 400)
    for number in range(padding):
        (table.path / "_delta_log" / f"{number:020d}.crc.padding").touch()
    maintenance = TableMaintenance(table, compact_min_files=8, small_file_size=SMALL,
                                   target_file_size=TARGET, max_files_per_round=40)
    while maintenance.compact():
        pass
    maintenance.checkpoint()
    kept = DeltaTable(str(table.path))
    ours: list[float] = []
    fresh: list[float] = []
    incremental: list[float] = []
    commit = 10_000
    for _ in range(rounds):
        for way, figures in (("ours", ours), ("fresh", fresh), ("incremental", incremental)):
            for _ in range(since):
                table.append(batch(commit, 20))
                commit += 20
            if way == "ours":
                figures.append(timed(maintenance.checkpoint))
            elif way == "fresh":
                figures.append(timed(lambda: DeltaTable(str(table.path)).create_checkpoint()))
            else:
                def kept_handle() -> None:
                    kept.update_incremental()
                    kept.create_checkpoint()
                figures.append(timed(kept_handle))
    state = maintenance.log_state()
    print(f"checkpoint, {len(state.adds)} live files, {len(state.removes)} tombstones,"
          f" {table.version} versions, {since} commits since the last checkpoint,"
          f" {sum(1 for _ in (table.path / '_delta_log').iterdir())} entries in _delta_log"
          f" ({rounds} rounds each):")
    print(f"  LogState (ours)                  {summary(ours)}")
    print(f"  delta-rs, fresh handle           {summary(fresh)}")
    print(f"  delta-rs, update_incremental     {summary(incremental)}")


def two_tier_table(path: Path) -> None:
    """8 medium files (earlier compactions) and 40 small ones (one commit each)."""
    table = journal_like(path, 0)
    maintenance = TableMaintenance(table, compact_min_files=40, small_file_size=SMALL,
                                   target_file_size=TARGET)
    commit = 0
    for _ in range(8):
        for _ in range(40):
            table.append(batch(commit, 20))
            commit += 20
        assert maintenance.compact() == 40
    for _ in range(40):
        table.append(batch(commit, 20))
        commit += 20


def bench_compaction(root: Path, rounds: int) -> None:
    template = root / "compaction"
    two_tier_table(template)
    results: dict[str, list[tuple[int, int, float]]] = {"ours": [], "delta-rs": []}
    for index in range(rounds):
        for way in ("ours", "delta-rs"):
            copy = root / f"compaction-{way}-{index}"
            shutil.copytree(template, copy)
            table = AppendOnlyTable(copy, SCHEMA, stats_column="message_id")
            table.open()
            before = {p.name: p.stat().st_size for p in copy.glob("*.parquet")}
            if way == "ours":
                maintenance = TableMaintenance(table, compact_min_files=32, small_file_size=SMALL,
                                               target_file_size=TARGET, merge_min_files=8)
                took = timed(maintenance.compact)
            else:
                took = timed(lambda: DeltaTable(str(copy)).optimize.compact(target_size=TARGET))
            log = [json.loads(line) for line in commit_file(copy / "_delta_log", table.version + 1
                                                            if way == "delta-rs" else table.version)
                   .read_text().splitlines()]
            removed = [a["remove"]["path"] for a in log if "remove" in a]
            results[way].append((len(removed), sum(before[name] for name in removed), took))
            shutil.rmtree(copy)
    print(f"compaction of 8 medium + 40 small files ({rounds} rounds each):")
    for way, figures in results.items():
        files, size, _ = figures[0]
        print(f"  {way:9s} rewrites {files:3d} files, {size / 1024:8.0f} KiB;"
              f" {summary([took for _, _, took in figures])}")


def bench_vacuum(root: Path) -> None:
    """Files written 3 h ago, removed 1 min (R), 30 min (H) and 3 h (O) ago.

    The tombstones of H and O are older than the checkpoint keeps (5 minutes,
    as in the journal); the upkeep process's LogState, which saw H removed,
    remembers it.
    """
    template = root / "vacuum"
    table = journal_like(template, 6)
    state_files = sorted(p.name for p in template.glob("*.parquet") if p.stat().st_size)
    recent, half, old = state_files[0], state_files[1], state_files[2]
    now_ms = int(time.time() * 1000)
    upkeep = TableMaintenance(table, retention_hours=2)
    upkeep.log_state()
    for name, when in ((old, now_ms - 3 * 3_600_000), (half, now_ms - 1_800_000),
                       (recent, now_ms - 60_000)):
        table.commit_actions([{"commitInfo": {"timestamp": now_ms, "operation": "OPTIMIZE"}},
                              {"remove": {"path": name, "deletionTimestamp": when, "dataChange": False,
                                          "extendedFileMetadata": True, "partitionValues": {},
                                          "size": (template / name).stat().st_size}}])
    upkeep.checkpoint()                           # drops the tombstones older than 5 minutes
    three_hours_ago = time.time() - 3 * 3600
    for path in template.glob("*.parquet"):
        os.utime(path, (three_hours_ago, three_hours_ago))

    def ours(copy: Path) -> None:
        """The upkeep process's own vacuum: its LogState, pointed at the copy."""
        state = upkeep.log_state()
        state.path, state.log_dir = copy, copy / "_delta_log"
        upkeep.table = _opened(copy)
        upkeep.vacuum_local()
        state.path, state.log_dir = template, template / "_delta_log"
        upkeep.table = table

    ways: dict[str, Callable[[Path], object]] = {
        "ours (vacuum_local)": ours,
        "ours, after a restart": lambda copy: TableMaintenance(_opened(copy), retention_hours=2).vacuum_local(),
        "delta-rs vacuum": lambda copy: DeltaTable(str(copy)).vacuum(
            retention_hours=2, dry_run=False, enforce_retention_duration=False),
        "delta-rs vacuum full": lambda copy: DeltaTable(str(copy)).vacuum(
            retention_hours=2, dry_run=False, enforce_retention_duration=False, full=True),
    }
    print("vacuum, retention 2 h; files written 3 h ago, removed 1 min (R), 30 min (H), 3 h (O) ago:")
    for way, vacuum in ways.items():
        copy = root / "vacuum-copy"
        shutil.copytree(template, copy)
        vacuum(copy)
        kept = {label: (copy / name).exists() for label, name in (("R", recent), ("H", half), ("O", old))}
        print(f"  {way:22s} " + ", ".join(f"{label} {'kept' if there else 'deleted'}"
                                          for label, there in kept.items()))
        shutil.rmtree(copy)


def _opened(path: Path) -> AppendOnlyTable:
    table = AppendOnlyTable(path, SCHEMA)
    table.open()
    return table


def bench_retention(root: Path) -> None:
    table = journal_like(root / "retention", 3)
    try:
        DeltaTable(str(table.path)).delete("message_id < 10")
        outcome = "allowed"
    except Exception as exc:                          # what delta-rs says
        outcome = f"refused: {str(exc).splitlines()[0][:100]}"
    print(f"retention: delta-rs delete on an append-only table: {outcome}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--padding", type=int, default=20_000,
                        help="extra _delta_log entries for the last checkpoint run (default 20000)")
    parser.add_argument("--since", default="20,200",
                        help="commits between checkpoints, comma-separated (default 20,200)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deltamq-maintenance-") as temp:
        root = Path(temp)
        bench_retention(root)
        bench_vacuum(root)
        bench_compaction(root, args.rounds)
        for since in (int(n) for n in args.since.split(",")):
            bench_checkpoint(root, args.rounds, since)
        bench_checkpoint(root, args.rounds, 20, args.padding)


if __name__ == "__main__":
    main()
