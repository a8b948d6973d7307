"""Deferred checksum files: written off the commit path, at most every interval, never wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse import checksum_writer, log_commit
from lakehouse.checksum_writer import ChecksumWriter
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.log_commit import CommittedUnsynced
from lakehouse.version_checksum import ChecksumFigures, checksum_file
from tests.waiting import wait_until

SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])
REPO = Path(__file__).resolve().parents[2]


def batch(start: int, count: int) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + count)),
                     "body": [b"y" * (i % 7) for i in range(start, start + count)]}, schema=SCHEMA)


def opened(path: Path) -> AppendOnlyTable:
    table = AppendOnlyTable(path, SCHEMA)
    table.open()
    return table


def written_versions(table: AppendOnlyTable) -> list[int]:
    return sorted(int(p.name[:20]) for p in (table.path / "_delta_log").glob("*.crc"))


def delta_rs_figures(table: AppendOnlyTable, version: int) -> tuple[int, int]:
    sizes = DeltaTable(str(table.path), version=version).get_add_actions(flatten=True).column("size_bytes")
    return len(sizes), sum(sizes.to_pylist())


def deferred_append(table: AppendOnlyTable, rows: pa.Table) -> int:
    """As the journal writer's publisher: commit, answer, then the checksum figures."""
    version = table.append(rows, defer_checksum=True)
    table.write_deferred_checksum()
    return version


def test_back_to_back_commits_write_a_checksum_at_most_every_interval_and_always_the_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checksum_writer, "INTERVAL", 0.2)
    table = opened(tmp_path / "t")
    first = table.version
    started = time.monotonic()
    versions = [deferred_append(table, batch(i * 5, 5)) for i in range(40)]
    took = time.monotonic() - started
    last = versions[-1]
    # once commits pause the newest version gets its checksum, without a flush or a close
    wait_until(lambda: last in written_versions(table), timeout=5, what="the last version's checksum")
    written = [v for v in written_versions(table) if v > first]
    assert len(written) <= took / 0.2 + 2, (written, took)
    assert len(written) < len(versions)
    for version in written:                   # each says what its own version holds
        figures = json.loads(checksum_file(table.path / "_delta_log", version).read_text())
        assert (figures["numFiles"], figures["tableSizeBytes"]) == delta_rs_figures(table, version)
    table.close()


def test_figures_are_frozen_with_their_version(tmp_path: Path) -> None:
    table = opened(tmp_path / "t")
    version = table.append(batch(0, 3))
    assert table._checksum is not None
    frozen = table._checksum.figures()
    table.append(batch(3, 30))                # the live figures move on
    assert table._checksum.version == version + 1
    os.unlink(checksum_file(table.path / "_delta_log", version))
    frozen.write()                            # written late: still version's own figures
    figures = json.loads(checksum_file(table.path / "_delta_log", version).read_text())
    assert (figures["numFiles"], figures["tableSizeBytes"]) == delta_rs_figures(table, version)
    assert not (table.path / "_delta_log" / f"{version + 2:020d}.crc").exists()
    table.close()


def test_only_the_newest_figures_handed_are_written(tmp_path: Path) -> None:
    table = opened(tmp_path / "t")
    assert table._checksum is not None
    log_dir = table.path / "_delta_log"
    for name in log_dir.glob("*.crc"):
        name.unlink()
    writer = ChecksumWriter("t", interval=60.0)
    writer.hand(ChecksumFigures(log_dir, 0, 0, 0, {}, {}))
    wait_until(lambda: writer.written == 0, what="the first checksum")   # no write before: at once
    newer = ChecksumFigures(log_dir, 2, 20, 2, {"id": "m"}, {"minReaderVersion": 1})
    writer.hand(ChecksumFigures(log_dir, 1, 10, 1, {}, {}))
    writer.hand(newer)
    writer.hand(ChecksumFigures(log_dir, 1, 10, 1, {}, {}))   # older than what is pending: ignored
    time.sleep(0.1)
    assert writer.written == 0                 # within the interval: nothing more yet
    writer.close()                             # ... but what is pending is written on close
    assert writer.written == 2
    assert sorted(p.name[:20] for p in log_dir.glob("*.crc")) == [f"{0:020d}", f"{2:020d}"]
    assert json.loads(checksum_file(log_dir, 2).read_text())["tableSizeBytes"] == 20
    assert not list(log_dir.glob(".deltamq-*"))   # no temporary file left
    table.close()


def test_no_checksum_for_a_version_whose_name_is_not_durable(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    table = opened(tmp_path / "t")
    log_dir = table.path / "_delta_log"
    real = log_commit.fsync_path

    def failing(path: Path) -> None:
        if path == log_dir:
            raise OSError(5, "I/O error")
        real(path)

    monkeypatch.setattr(log_commit, "fsync_path", failing)
    with pytest.raises(CommittedUnsynced) as raised:
        table.append(batch(0, 2), defer_checksum=True)
    table.write_deferred_checksum()
    assert table.flush_checksums() is None
    assert not checksum_file(log_dir, raised.value.version).exists()
    table.close()


def test_every_checksum_file_follows_its_versions_durable_link(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The order the journal's writer makes: link, fsync of ``_delta_log``, answer, checksum."""
    monkeypatch.setattr(checksum_writer, "INTERVAL", 0.0)
    table = opened(tmp_path / "t")
    log_dir = table.path / "_delta_log"
    durable: set[int] = set()
    checked: list[tuple[int, bool]] = []
    real_fsync, real_write = log_commit.fsync_path, ChecksumFigures.write

    def fsync(path: Path) -> None:
        real_fsync(path)
        if path == log_dir:
            durable.update(int(p.name[:20]) for p in log_dir.glob("*.json"))

    def write(self: ChecksumFigures) -> Path:
        checked.append((self.version, self.version in durable))
        return real_write(self)

    monkeypatch.setattr(log_commit, "fsync_path", fsync)
    monkeypatch.setattr(ChecksumFigures, "write", write)
    for i in range(20):
        deferred_append(table, batch(i, 1))
    table.flush_checksums()
    assert checked and all(ok for _, ok in checked), checked
    table.close()


def test_closing_the_table_writes_the_pending_checksum(tmp_path: Path) -> None:
    table = opened(tmp_path / "t")
    table.append(batch(0, 1), defer_checksum=True)
    table.write_deferred_checksum()
    writer = table._checksum_writer
    assert writer is not None
    writer.interval = 60.0
    last = deferred_append(table, batch(1, 1))
    table.close()
    assert checksum_file(table.path / "_delta_log", last).exists()


def test_the_checksum_thread_runs_at_normal_priority_in_the_writer_process(tmp_path: Path) -> None:
    probe = """
import os, sys
from pathlib import Path
from lakehouse import writer_priority as w
from lakehouse.checksum_writer import ChecksumWriter
from lakehouse.data_file_pool import DataFilePool
applied = w.enable_in_this_process()
writer = ChecksumWriter("t")
pool = DataFilePool(Path(sys.argv[1]))
names = {0: "other", os.SCHED_RR: "rr", os.SCHED_FIFO: "fifo"}
policy = lambda t: names.get(os.sched_getscheduler(t.native_id) & ~os.SCHED_RESET_ON_FORK, "?")
print(applied, w.policy_name(), policy(writer._thread), policy(pool._thread))
writer.close(); pool.close()
"""
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), "DELTAMQ_JOURNAL_WRITER_PRIORITY": "rr"},
                          cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    applied, main, checksums, pool = done.stdout.split()
    if applied != "True":
        pytest.skip("this user may not use real-time scheduling")
    assert (main, checksums, pool) == ("rr", "other", "other")
    assert not list(tmp_path.iterdir())      # the pool's files went with it
