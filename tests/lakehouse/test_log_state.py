"""LogState: the table's state from its log, read once, and the checkpoints written from it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.log_state import CHECKPOINT_SCHEMA, LogState, parse_interval_ms
from lakehouse.maintenance import TableMaintenance
from tests.waiting import wait_until

SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])


def batch(start: int, count: int) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + count)),
                     "body": [b"x%d" % i for i in range(start, start + count)]}, schema=SCHEMA)


def table_with(tmp_path: Path, appends: int, **properties: str) -> AppendOnlyTable:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA, stats_column="message_id", checkpoint_interval=1000,
                            properties=properties)
    table.open()
    for i in range(appends):
        table.append(batch(i * 10, 10))
    return table


def delta_rs_files(table: AppendOnlyTable) -> set[str]:
    return {uri.rsplit("/", 1)[-1] for uri in DeltaTable(str(table.path)).file_uris()}


def test_the_state_follows_appends_and_compaction_like_delta_rs(tmp_path: Path) -> None:
    table = table_with(tmp_path, 6)
    state = LogState(table.path)
    state.load()
    assert state.version == table.version == 6
    assert set(state.adds) == delta_rs_files(table)
    TableMaintenance(table, compact_min_files=3).compact()
    table.append(batch(100, 5))
    assert state.catch_up() == 2                                   # the compaction and the append
    assert set(state.adds) == delta_rs_files(table)
    assert len(state.adds) == 2 and len(state.removes) == 6


def test_a_checkpoint_written_from_the_state_is_what_delta_rs_reads(tmp_path: Path) -> None:
    table = table_with(tmp_path, 8)
    maintenance = TableMaintenance(table, compact_min_files=4)
    assert maintenance.compact() == 8
    table.append(batch(500, 3))
    maintenance.checkpoint()
    log_dir = table.path / "_delta_log"
    last = json.loads((log_dir / "_last_checkpoint").read_text())
    assert last["version"] == table.version == 10
    written = pq.read_table(log_dir / f"{table.version:020d}.checkpoint.parquet")
    assert written.schema == CHECKPOINT_SCHEMA
    assert last["numOfAddFiles"] == 2 and last["size"] == written.num_rows == 2 + 8 + 2   # + protocol, metadata
    # delta-rs starts from it: remove every commit file before it, as log clean-up would
    for version in range(table.version):
        (log_dir / f"{version:020d}.json").unlink()
    assert DeltaTable(str(table.path)).version() == table.version
    assert set(delta_rs_files(table)) == set(maintenance.log_state().adds)
    ids = table.read("SELECT message_id FROM t ORDER BY message_id").column(0).to_pylist()
    assert ids == list(range(80)) + [500, 501, 502]
    reloaded = LogState(table.path)                                # and so does a new state
    reloaded.load()
    assert reloaded.adds == maintenance.log_state().adds
    original = maintenance.log_state().metadata or {}
    assert reloaded.metadata == {k: v for k, v in original.items() if v is not None}
    assert reloaded.removes.keys() == maintenance.log_state().removes.keys()


def test_expired_tombstones_are_left_out_of_the_checkpoint(tmp_path: Path) -> None:
    table = table_with(tmp_path, 4, **{"delta.deletedFileRetentionDuration": "interval 1 seconds"})
    maintenance = TableMaintenance(table, compact_min_files=4)
    assert maintenance.compact() == 4
    state = maintenance.log_state()
    assert len(state.removes) == 4
    time.sleep(1.1)                          # the 1 s tombstone retention runs out (what is tested)
    table.append(batch(40, 1))
    maintenance.checkpoint()
    checkpoint = pq.read_table(table.path / "_delta_log" / f"{table.version:020d}.checkpoint.parquet")
    assert checkpoint.column("remove").null_count == checkpoint.num_rows      # no tombstone left
    assert state.removes == {}


def test_delta_intervals_parse_to_milliseconds() -> None:
    assert parse_interval_ms("interval 1 hours") == 3_600_000
    assert parse_interval_ms("interval 7 days") == 7 * 86_400_000
    assert parse_interval_ms("INTERVAL 30 minute") == 1_800_000
    with pytest.raises(ValueError):
        parse_interval_ms("1 hour")


def test_the_upkeep_process_checkpoints_on_request_and_is_replaced_when_it_dies(tmp_path: Path) -> None:
    import os
    import signal

    from lakehouse.journal_upkeep import UpkeepProcess

    table = table_with(tmp_path, 3)
    upkeep = UpkeepProcess(table.path, 168, 1)
    log_dir = table.path / "_delta_log"

    def checkpointed(version: int) -> bool:
        checkpoint = log_dir / f"{version:020d}.checkpoint.parquet"

        def written() -> bool:
            if checkpoint.exists():
                return True
            upkeep.checkpoint_due()
            return False
        return bool(wait_until(written, 60, interval=0.2, what=f"the checkpoint of version {version}"))

    def exited(pid: int) -> bool:   # without reaping it: the upkeep notices by itself
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    try:
        assert checkpointed(table.version)
        os.kill(upkeep.pid, signal.SIGKILL)
        pid = upkeep.pid
        wait_until(lambda: exited(pid), what="the killed upkeep process to exit")
        table.append(batch(100, 1))
        assert checkpointed(table.version)               # by a new process
        assert upkeep.starts == 2
    finally:
        upkeep.close()
