"""Data files created ahead of appends: names durable first, never stale, never vacuumed in use."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse import data_file_pool, log_commit
from lakehouse.data_file_pool import DataFilePool
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.log_state import LogState
from lakehouse.maintenance import FRESH_FILES_KEPT, TableMaintenance
from lakehouse.paged_recovery import _data_bytes
from tests.waiting import wait_until

SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])


def batch(start: int, count: int) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + count)),
                     "body": [b"z" * (i % 9) for i in range(start, start + count)]}, schema=SCHEMA)


def pooled_table(path: Path, **pool: object) -> AppendOnlyTable:
    table = AppendOnlyTable(path, SCHEMA)
    table.open()
    table.pool_data_files(**pool)              # type: ignore[arg-type]
    assert table._data_files is not None
    wait_until(lambda: len(table._data_files or ()) > 0, what="the first batch")
    return table


def data_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.parquet")}


def live_files(table: AppendOnlyTable) -> set[str]:
    return {Path(uri).name for uri in DeltaTable(str(table.path)).file_uris()}


def ids(table: AppendOnlyTable) -> list[int]:
    return sorted(DeltaTable(str(table.path)).to_pyarrow_table().column("message_id").to_pylist())


def _described(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def test_a_pooled_name_is_fsynced_with_its_directory_before_it_is_handed_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    durable: set[str] = set()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if Path(_described(fd)) == tmp_path:   # the directory: every name in it is durable now
            durable.update(p.name for p in tmp_path.iterdir())

    monkeypatch.setattr(os, "fsync", fsync)
    pool = DataFilePool(tmp_path, batch=4)
    taken = []
    for _ in range(12):
        path = wait_until(pool.take, what="a pooled file")
        assert path.name in durable, path
        assert path.stat().st_size == 0 and path.name.startswith("part-")
        assert path.name.endswith("-c000.snappy.parquet")
        taken.append(path)
    assert pool.batches >= 3                    # one directory fsync per batch, not per file
    pool.close()
    assert set(tmp_path.iterdir()) == set(taken)   # what was not taken is gone


def test_an_append_fills_a_pooled_file_and_leaves_the_directory_out_of_its_fsync_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = pooled_table(tmp_path / "t", batch=8)
    rounds: list[list[str]] = []
    real = log_commit.fsync_together

    def noted(descriptors: list[int]) -> None:
        rounds.append([_described(fd) for fd in descriptors])
        real(descriptors)

    monkeypatch.setattr(log_commit, "fsync_together", noted)
    pooled = {p.name for p in (table.path).glob("*.parquet")} - live_files(table)
    version = table.append(batch(0, 10))
    (name,) = [n for n in live_files(table) if n in pooled]
    assert (table.path / name).stat().st_size > 0
    assert str(table.path) not in rounds[-1]    # its name was durable already
    assert len(rounds[-1]) == 2                  # the data file's content and the commit's
    assert ids(table) == list(range(10)) and version == table.version
    # without the pool an append creates its file and fsyncs the directory in the same round
    table.close_background()
    table.append(batch(10, 1))
    assert str(table.path) in rounds[-1] and len(rounds[-1]) == 3
    table.close()
    assert data_files(table.path) == live_files(table)   # the pool's leftovers went on close


def test_a_pooled_file_gone_before_its_append_is_replaced_by_one_of_its_own(tmp_path: Path) -> None:
    table = pooled_table(tmp_path / "t", batch=8)
    for name in data_files(table.path):
        os.unlink(table.path / name)           # say, vacuumed by another tool
    for i in range(3):
        table.append(batch(i, 1))
    assert ids(table) == [0, 1, 2]
    assert all((table.path / name).stat().st_size > 0 for name in live_files(table))
    table.close()
    assert data_files(table.path) == live_files(table)


def test_pooled_files_older_than_the_limit_are_deleted_not_used(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(data_file_pool, "_boot_clock", lambda: clock[0])
    pool = DataFilePool(tmp_path, batch=4, max_age=60.0)
    wait_until(lambda: len(pool) == 4, what="a batch")
    first = set(tmp_path.iterdir())
    clock[0] += 61.0                             # the batch is now too old to hand out
    assert pool.take() is None
    wait_until(lambda: not (first & set(tmp_path.iterdir())), what="the stale files deleted")
    fresh = wait_until(pool.take, what="a new batch")   # the append wanted one: replaced
    assert fresh not in first and fresh.exists()
    # idle: files that age out are deleted, and replaced only if an append took one since the
    # last batch -- it did (fresh): once more, then not at all
    def age_out() -> None:
        clock[0] += 61.0
        with pool._condition:
            pool._condition.notify()

    age_out()
    wait_until(lambda: pool.batches == 3 and len(pool) == 4, what="one more batch")
    age_out()
    wait_until(lambda: set(tmp_path.iterdir()) == {fresh}, what="the idle pool emptied")
    time.sleep(0.1)
    assert set(tmp_path.iterdir()) == {fresh} and len(pool) == 0 and pool.batches == 3
    pool.close()


def test_a_pooled_file_is_never_old_enough_for_vacuum() -> None:
    # vacuum deletes a file the log never named only when written more than FRESH_FILES_KEPT ago
    # and more than the retention (whole hours) ago; a pooled file is handed out younger than MAX_AGE
    assert data_file_pool.MAX_AGE * 2 <= FRESH_FILES_KEPT


def test_vacuum_with_no_retention_keeps_the_pool_and_deletes_what_compaction_removed(tmp_path: Path) -> None:
    table = pooled_table(tmp_path / "t", batch=8)
    for i in range(4):
        table.append(batch(i, 1))
    maintenance = TableMaintenance(table, compact_min_files=2, retention_hours=0)
    maintenance.compact()
    removed = set(maintenance.log_state().removed_at)
    waiting = data_files(table.path) - live_files(table) - removed
    assert waiting and removed                    # the pool's files, and those compacted away
    maintenance.vacuum()
    assert all((table.path / name).exists() for name in waiting)
    assert not any((table.path / name).exists() for name in removed)
    table.append(batch(10, 1))                    # the pool still serves appends
    assert ids(table) == [0, 1, 2, 3, 10]
    table.close()


def test_empty_files_left_by_a_crash_are_harmless_and_vacuumed_in_time(tmp_path: Path) -> None:
    table = pooled_table(tmp_path / "t", batch=8)
    for i in range(3):
        table.append(batch(i * 2, 2))
    pool = table._data_files
    assert pool is not None
    with pool._condition:                        # a crash: the pool stops, nothing deletes its files
        pool._closed = True
        pool._condition.notify()
    pool._thread.join()
    table._data_files = None
    left = data_files(table.path) - live_files(table)
    assert left and all((table.path / name).stat().st_size == 0 for name in left)
    # readers go by the log, not the directory
    reader = AppendOnlyTable(tmp_path / "t", SCHEMA)
    reader.open()
    assert sorted(reader.read("SELECT message_id FROM t").column("message_id").to_pylist()) == list(range(6))
    state = LogState(table.path)
    state.load()
    assert set(state.adds) == live_files(table)
    assert _data_bytes(table.path) == sum((table.path / n).stat().st_size for n in live_files(table))
    maintenance = TableMaintenance(reader, retention_hours=1)
    assert maintenance.vacuum_local() == 0        # new: maybe an append's
    for name in left:
        then = time.time() - 2 * 3600
        os.utime(table.path / name, (then, then))
    assert maintenance.vacuum_local() == len(left)
    assert data_files(table.path) == live_files(table)
    assert ids(reader) == list(range(6))
    table.close()


def test_a_remote_table_has_no_pool() -> None:
    table = AppendOnlyTable("s3://bucket/prefix/t", SCHEMA)
    table.pool_data_files()
    assert table._data_files is None
