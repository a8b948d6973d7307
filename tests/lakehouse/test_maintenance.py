"""Checkpoints, compaction (dataChange=false) and vacuum, alongside a live appender."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.maintenance import TableMaintenance, table_files

SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])


def batch(start: int, count: int) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + count)),
                     "body": [b"x%d" % i for i in range(start, start + count)]}, schema=SCHEMA)


def all_ids(table: AppendOnlyTable) -> list[int]:
    return table.read("SELECT message_id FROM t ORDER BY message_id").column(0).to_pylist()


def test_compaction_swaps_small_files_for_one_without_changing_data(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA, stats_column="message_id")
    table.open()
    for i in range(20):
        table.append(batch(i * 10, 10))
    assert table_files(table.path) == 20
    maintenance = TableMaintenance(table, compact_min_files=5)
    assert maintenance.compact() == 20
    assert table_files(table.path) == 1
    assert all_ids(table) == list(range(200))
    commit = (table.path / "_delta_log" / f"{table.version:020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in commit]
    assert {a["commitInfo"]["operation"] for a in actions if "commitInfo" in a} == {"OPTIMIZE"}
    # Spark's streaming source ignores it: no action of the commit changes data
    assert all(a[k]["dataChange"] is False for a in actions for k in ("add", "remove") if k in a)
    table.append(batch(200, 5))                      # the appender carries on after it
    assert all_ids(table) == list(range(205))
    assert maintenance.compact() == 0                # two files: not worth it yet


def test_appends_racing_compaction_and_checkpoints_lose_nothing(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA, stats_column="message_id", checkpoint_interval=10)
    table.open()
    maintenance = TableMaintenance(table, compact_min_files=4, poll_interval=0.01)
    maintenance.start()
    errors: list[BaseException] = []

    def append() -> None:
        try:
            for i in range(150):
                table.append(batch(i * 3, 3))
        except BaseException as exc:           # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=append)
    thread.start()
    thread.join(120)
    maintenance.close()
    assert not errors
    assert all_ids(table) == list(range(450))
    assert maintenance.compactions >= 1 and maintenance.checkpoints >= 1
    assert (table.path / "_delta_log" / "_last_checkpoint").exists()
    assert DeltaTable(str(table.path)).version() == table.version


def test_vacuum_deletes_files_compacted_away_once_retention_has_passed(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    for i in range(6):
        table.append(batch(i, 1))
    maintenance = TableMaintenance(table, compact_min_files=2, retention_hours=0)
    maintenance.compact()
    maintenance.vacuum()
    assert len(list(table.path.glob("*.parquet"))) == 1
    assert all_ids(table) == list(range(6))


def _age(path: Path, hours: float) -> None:
    then = time.time() - hours * 3600
    os.utime(path, (then, then))


def test_files_stay_for_the_retention_after_their_tombstones_expire(tmp_path: Path) -> None:
    # checkpoints keep tombstones 1 s; files must stay for the retention (1 h) after removal
    table = AppendOnlyTable(tmp_path / "t", SCHEMA,
                            properties={"delta.deletedFileRetentionDuration": "interval 1 seconds"})
    table.open()
    for i in range(4):
        table.append(batch(i, 1))
    old = sorted(table.path.glob("*.parquet"))
    for path in old:
        _age(path, 2)                              # written two hours ago ...
    maintenance = TableMaintenance(table, compact_min_files=2, retention_hours=1)
    assert maintenance.compact() == 4              # ... removed now
    time.sleep(1.1)                                # the 1 s tombstone retention runs out
    maintenance.checkpoint()
    checkpoint = pq.read_table(next((table.path / "_delta_log").glob("*.checkpoint.parquet")))
    assert checkpoint.column("remove").null_count == checkpoint.num_rows   # tombstones expired
    assert maintenance.vacuum_local() == 0         # removed a moment ago: a reader may still need them
    assert all(path.exists() for path in old)
    # a restarted upkeep no longer knows when they were removed: it goes by their age
    table.append(batch(10, 1))
    fresh = TableMaintenance(table, compact_min_files=2, retention_hours=1)
    assert fresh.compact() == 2                    # the compacted file and the new one
    time.sleep(1.1)                                # ... and again
    fresh.checkpoint()
    restarted = TableMaintenance(table, retention_hours=1)
    assert restarted.vacuum_local() == 4           # the four old files; the two just removed stay
    assert not any(path.exists() for path in old)
    assert len(list(table.path.glob("*.parquet"))) == 3
    assert all_ids(table) == [0, 1, 2, 3, 10]


def test_vacuum_keeps_live_and_new_files(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    for i in range(3):
        table.append(batch(i, 1))
    for path in table.path.glob("*.parquet"):
        _age(path, 5)                              # old, but live
    stray = table.path / "part-uncommitted-c000.snappy.parquet"
    stray.write_bytes(b"being written")            # a writer's file before its commit
    assert TableMaintenance(table, retention_hours=1).vacuum_local() == 0
    _age(stray, 2)                                 # left behind by a crash long ago
    assert TableMaintenance(table, retention_hours=1).vacuum_local() == 1
    assert all_ids(table) == [0, 1, 2]
