"""Checksum files (<version>.crc) written with our commits: right figures, read by Delta Spark."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.maintenance import TableMaintenance, prune_checksum_files
from lakehouse.version_checksum import checksum_file

SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])


def batch(start: int, count: int) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + count)),
                     "body": [b"x" * (i % 50) for i in range(start, start + count)]}, schema=SCHEMA)


def crc(table: AppendOnlyTable, version: int) -> dict:
    return json.loads(checksum_file(table.path / "_delta_log", version).read_text())


def appended_then_compacted_by_another(path: Path, commits: int) -> tuple[AppendOnlyTable, AppendOnlyTable]:
    """``commits`` appends, then a compaction through a table object of its own (as the upkeep
    process makes them); (the appender's table, the compacting one)."""
    table = AppendOnlyTable(path, SCHEMA)
    table.open()
    for i in range(commits):
        table.append(batch(i * 10, 10))
    other = AppendOnlyTable(path, SCHEMA)
    other.open()
    assert TableMaintenance(other, compact_min_files=4).compact() == commits
    return table, other


def delta_rs_figures(table: AppendOnlyTable) -> tuple[int, int]:
    adds = pa.table(DeltaTable(str(table.path)).get_add_actions(flatten=True))
    return adds.num_rows, sum(adds.column("size_bytes").to_pylist())


def test_each_commit_has_a_checksum_with_the_tables_figures(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    for i in range(7):
        version = table.append(batch(i * 10, 10 + i))
        found = crc(table, version)
        assert (found["numFiles"], found["tableSizeBytes"]) == delta_rs_figures(table)
    log = [json.loads(line) for line in (table.path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()]
    assert found["metadata"] == next(a["metaData"] for a in log if "metaData" in a)
    assert found["protocol"] == next(a["protocol"] for a in log if "protocol" in a)
    assert found["numMetadata"] == found["numProtocol"] == 1


def test_commits_of_another_writer_in_between_are_counted(tmp_path: Path) -> None:
    table, other = appended_then_compacted_by_another(tmp_path / "t", 12)
    version = table.append(batch(1000, 3))
    assert version == other.version + 1
    found = crc(table, version)
    assert (found["numFiles"], found["tableSizeBytes"]) == delta_rs_figures(table) == (2, found["tableSizeBytes"])
    # the compaction's own commit got one too, from the other object
    assert crc(table, other.version)["numFiles"] == 1


def test_a_reopened_table_starts_from_its_log(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA, checkpoint_interval=5)
    table.open()
    for i in range(8):
        table.append(batch(i * 10, 10))
    TableMaintenance(table).checkpoint()
    table.close()
    again = AppendOnlyTable(tmp_path / "t", SCHEMA, checkpoint_interval=5)
    again.open()
    version = again.append(batch(500, 1))
    assert (crc(again, version)["numFiles"], crc(again, version)["tableSizeBytes"]) == delta_rs_figures(again)


def test_a_failure_stops_checksums_rather_than_writing_a_wrong_one(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    table.append(batch(0, 5))
    other = AppendOnlyTable(tmp_path / "t", SCHEMA)
    other.open()
    gap = other.append(batch(5, 5))
    table.observe(gap)
    os.unlink(table.path / "_delta_log" / f"{gap:020d}.json")   # the commit in between is unreadable
    version = table.append(batch(10, 5))
    assert not checksum_file(table.path / "_delta_log", version).exists()
    assert not checksum_file(table.path / "_delta_log", table.append(batch(20, 1))).exists()


def test_checkpoints_drop_the_checksums_before_them(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA, checkpoint_interval=1000)
    table.open()
    for i in range(30):
        table.append(batch(i, 1))
    log_dir = table.path / "_delta_log"
    maintenance = TableMaintenance(table)
    maintenance.checkpoint()                 # the first: it drops those of every earlier version
    for i in range(5):
        table.append(batch(100 + i, 1))
    maintenance.checkpoint()
    left = sorted(int(p.name[:20]) for p in log_dir.glob("*.crc"))
    assert left == [35]
    # one left behind (say by a writer preempted between its commit and its checksum)
    checksum_file(log_dir, 3).write_text("{}")
    assert prune_checksum_files(log_dir) == 1
    assert sorted(int(p.name[:20]) for p in log_dir.glob("*.crc")) == [35]


@pytest.fixture(scope="module")
def spark() -> object:
    from lakehouse.spark import spark_session

    return spark_session()              # the session an earlier module left running, if any


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_delta_spark_reads_our_checksums(tmp_path: Path, spark) -> None:  # type: ignore[no-untyped-def]
    table, _ = appended_then_compacted_by_another(tmp_path / "t", 6)
    version = table.append(batch(60, 5))
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table.path))
    checksum = delta_log.readChecksum(version, jvm.scala.Option.empty())   # (version, file status hint)
    assert checksum.isDefined()
    read = checksum.get()
    assert (read.numFiles(), read.tableSizeBytes()) == delta_rs_figures(table)
    assert read.metadata().id() == DeltaTable(str(table.path)).metadata().id
    rows = spark.sql(f"SELECT count(*), max(message_id) FROM delta.`{table.path}`").collect()[0]
    assert (rows[0], rows[1]) == (65, 64)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table.path}`").collect()[0]
    assert detail["numFiles"] == delta_rs_figures(table)[0]


def test_the_journal_writer_writes_a_commits_checksum_after_answering(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    version = table.append(batch(0, 3), defer_checksum=True)
    log_dir = table.path / "_delta_log"
    assert not checksum_file(log_dir, version).exists()
    table.write_deferred_checksum()                  # handed to the table's checksum thread
    assert table.flush_checksums() == version
    assert crc(table, version)["numFiles"] == 1
    table.write_deferred_checksum()                  # nothing left to write: no-op
    table.close()


def test_a_reader_that_lists_the_log_mid_commit_opens_the_table_once_the_commit_is_whole(tmp_path: Path) -> None:
    """The journal writes ``N.json`` then ``N.crc`` every few milliseconds: a reader listing the log in
    between may see a ``.crc`` newer than every ``.json``, which delta-rs refuses; open_delta lists again."""
    import threading

    from deltalake.exceptions import DeltaError

    from lakehouse.delta_table import open_delta

    table = AppendOnlyTable(tmp_path / "t", SCHEMA, name="t")
    table.open()
    table.append(pa.table({"message_id": [1], "body": [b"a"]}, schema=SCHEMA))
    log = tmp_path / "t" / "_delta_log"
    newest = max(int(f.stem) for f in log.glob("*.json"))
    ahead = log / f"{newest + 1:020d}.crc"             # what a listing mid-commit shows
    ahead.write_text((log / f"{newest:020d}.crc").read_text())
    with pytest.raises(DeltaError, match="is newer than log segment version"):
        DeltaTable(str(tmp_path / "t"))

    def complete_the_commit() -> None:
        time.sleep(0.05)
        table.append(pa.table({"message_id": [2], "body": [b"b"]}, schema=SCHEMA))   # the .json, then the .crc
    writer = threading.Thread(target=complete_the_commit)
    writer.start()
    opened = open_delta(str(tmp_path / "t"))
    writer.join()
    assert opened.version() == newest + 1
    assert sorted(opened.to_pyarrow_table().column("message_id").to_pylist()) == [1, 2]
    table.close()
