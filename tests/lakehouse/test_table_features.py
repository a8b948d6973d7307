"""A table's protocol and features are checked before DeltaMQ writes it (lakehouse.table_features).

Tables made by hand (a commit 0 written here) or by delta-rs, one per feature
DeltaMQ refuses; each refusal names the table and the feature, and leaves the
table as it was.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

from broker.errors import StoreFailed
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.log_state import LogState
from lakehouse.maintenance import TableMaintenance
from lakehouse.table_features import UnsupportedTable, check_table, table_features

SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])


def batch(start: int, count: int = 5) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + count)),
                     "body": [b"x"] * count}, schema=SCHEMA)


def hand_made(path: Path, protocol: dict[str, Any], *, configuration: dict[str, str] | None = None,
              column_metadata: dict[str, Any] | None = None) -> Path:
    """A table whose commit 0 carries ``protocol``, ``configuration`` and ``message_id``'s metadata."""
    log_dir = path / "_delta_log"
    log_dir.mkdir(parents=True)
    schema = {"type": "struct", "fields": [
        {"name": "message_id", "type": "long", "nullable": False, "metadata": column_metadata or {}},
        {"name": "body", "type": "binary", "nullable": True, "metadata": {}}]}
    actions = [
        {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "CREATE TABLE"}},
        {"protocol": protocol},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [],
                      "configuration": {"delta.appendOnly": "true", **(configuration or {})},
                      "createdTime": int(time.time() * 1000)}},
    ]
    (log_dir / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return path


def snapshot(path: Path) -> tuple[list[str], list[str]]:
    """What a refused open must not change: the files of the table and of its log."""
    return sorted(p.name for p in path.iterdir()), sorted(p.name for p in (path / "_delta_log").iterdir())


def refused(path: Path, feature: str) -> UnsupportedTable:
    """Open ``path`` as a DeltaMQ table: it must be refused for ``feature``, untouched."""
    before = snapshot(path)
    table = AppendOnlyTable(path, SCHEMA, name="journal")
    with pytest.raises(UnsupportedTable) as caught:
        table.open()
    assert caught.value.feature == feature and caught.value.table == "journal"
    assert f"Delta table 'journal' at {path}" in str(caught.value)
    assert f"'{feature}'" in str(caught.value) or feature == "protocol"
    assert snapshot(path) == before
    return caught.value


def opens_and_appends(path: Path) -> None:
    table = AppendOnlyTable(path, SCHEMA)
    table.open()
    version = table.append(batch(0))
    assert DeltaTable(str(path)).version() == version


# -- refused features, one table each -----------------------------------------------------

def test_deletion_vectors_enabled_by_delta_rs_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), batch(0), configuration={"delta.appendOnly": "true"})
    delta = DeltaTable(str(path))
    delta.alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    DeltaTable(str(path)).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    error = refused(path, "deletionVectors")
    assert "delta.enableDeletionVectors=true" in str(error)
    assert "REORG TABLE" in str(error)                  # what to do
    assert isinstance(error, StoreFailed)               # a store failure: the broker runs on


def test_files_with_deletion_vectors_are_refused_even_with_the_property_off(tmp_path: Path) -> None:
    path = hand_made(tmp_path / "t", {"minReaderVersion": 3, "minWriterVersion": 7,
                                      "readerFeatures": ["deletionVectors"],
                                      "writerFeatures": ["deletionVectors", "appendOnly"]})
    pq.write_table(batch(0), path / "part-0.parquet")
    add = {"path": "part-0.parquet", "partitionValues": {}, "size": 1, "modificationTime": 0,
           "dataChange": True, "deletionVector": {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f",
                                                  "sizeInBytes": 1, "cardinality": 1}}
    (path / "_delta_log" / f"{1:020d}.json").write_text(json.dumps({"add": add}) + "\n")
    assert "files with deletion vectors" in str(refused(path, "deletionVectors"))


def test_column_mapping_is_refused(tmp_path: Path) -> None:
    path = hand_made(tmp_path / "t", {"minReaderVersion": 2, "minWriterVersion": 5},
                     configuration={"delta.columnMapping.mode": "name",
                                    "delta.columnMapping.maxColumnId": "2"},
                     column_metadata={"delta.columnMapping.id": 1,
                                      "delta.columnMapping.physicalName": "col-1"})
    assert "delta.columnMapping.mode=name" in str(refused(path, "columnMapping"))


def test_check_constraints_added_by_delta_rs_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), batch(0), configuration={"delta.appendOnly": "true"})
    DeltaTable(str(path)).alter.add_constraint({"positive_id": "message_id >= 0"})
    assert "delta.constraints.positive_id" in str(refused(path, "checkConstraints"))


def test_invariants_are_refused(tmp_path: Path) -> None:
    path = hand_made(tmp_path / "t", {"minReaderVersion": 1, "minWriterVersion": 2},
                     column_metadata={"delta.invariants": json.dumps(
                         {"expression": {"expression": "message_id > 0"}})})
    assert "column message_id has delta.invariants" in str(refused(path, "invariants"))


def test_generated_columns_are_refused(tmp_path: Path) -> None:
    path = hand_made(tmp_path / "t", {"minReaderVersion": 1, "minWriterVersion": 4},
                     column_metadata={"delta.generationExpression": "1"})
    refused(path, "generatedColumns")


def test_identity_columns_are_refused(tmp_path: Path) -> None:
    path = hand_made(tmp_path / "t", {"minReaderVersion": 1, "minWriterVersion": 6},
                     column_metadata={"delta.identity.start": 1, "delta.identity.step": 1,
                                      "delta.identity.allowExplicitInsert": False})
    refused(path, "identityColumns")


@pytest.mark.parametrize("feature", ["rowTracking", "domainMetadata", "v2Checkpoint",
                                     "inCommitTimestamp", "clustering", "typeWidening",
                                     "icebergCompatV2", "checkpointProtection", "variantType",
                                     "allowColumnDefaults", "aFeatureFromTheFuture"])
def test_writer_features_deltamq_does_not_implement_are_refused(tmp_path: Path, feature: str) -> None:
    path = hand_made(tmp_path / "t", {"minReaderVersion": 1, "minWriterVersion": 7,
                                      "writerFeatures": ["appendOnly", feature]})
    assert "DROP FEATURE" in str(refused(path, feature))


def test_reader_features_are_checked_too(tmp_path: Path) -> None:
    path = hand_made(tmp_path / "t", {"minReaderVersion": 3, "minWriterVersion": 7,
                                      "readerFeatures": ["v2Checkpoint"],
                                      "writerFeatures": ["appendOnly"]})
    refused(path, "v2Checkpoint")


@pytest.mark.parametrize("reader, writer", [(4, 7), (1, 8)])
def test_protocol_versions_from_the_future_are_refused(tmp_path: Path, reader: int, writer: int) -> None:
    path = hand_made(tmp_path / "t", {"minReaderVersion": reader, "minWriterVersion": writer})
    assert f"(reader {reader}, writer {writer})" in str(refused(path, "protocol"))


# -- what is honoured ------------------------------------------------------------------

def test_a_table_deltamq_creates_is_writable(tmp_path: Path) -> None:
    opens_and_appends(tmp_path / "t")
    opens_and_appends(tmp_path / "t")


def test_features_in_the_protocol_but_unused_are_honoured(tmp_path: Path) -> None:
    """Legacy writer 6 implies constraints, generated and identity columns, column mapping:
    a table using none of them leaves a writer nothing to do."""
    opens_and_appends(hand_made(tmp_path / "a", {"minReaderVersion": 2, "minWriterVersion": 6}))
    opens_and_appends(hand_made(tmp_path / "b", {
        "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors", "timestampNtz", "vacuumProtocolCheck"],
        "writerFeatures": ["deletionVectors", "appendOnly", "invariants", "changeDataFeed",
                           "timestampNtz", "vacuumProtocolCheck"]},
        configuration={"delta.enableChangeDataFeed": "true"}))


def test_legacy_versions_expand_to_their_features() -> None:
    assert table_features({"minReaderVersion": 1, "minWriterVersion": 2}) == (
        frozenset(), frozenset({"appendOnly", "invariants"}))
    assert table_features({"minReaderVersion": 2, "minWriterVersion": 5})[0] == {"columnMapping"}
    assert table_features({"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["x"],
                           "writerFeatures": ["x", "y"]}) == (frozenset({"x"}), frozenset({"x", "y"}))


def test_nested_columns_are_looked_into() -> None:
    schema = {"type": "struct", "fields": [{"name": "outer", "nullable": True, "metadata": {}, "type": {
        "type": "struct", "fields": [{"name": "inner", "type": "long", "nullable": True,
                                      "metadata": {"delta.generationExpression": "1"}}]}}]}
    with pytest.raises(UnsupportedTable, match="column outer.inner has delta.generationExpression"):
        check_table("t", "/x", {"minReaderVersion": 1, "minWriterVersion": 4},
                    {"schemaString": json.dumps(schema), "configuration": {}})


# -- a table upgraded while DeltaMQ writes it ------------------------------------------

def foreign_commit(table: AppendOnlyTable, *actions: dict[str, Any]) -> None:
    """Another writer (Spark) commits the next version of ``table``."""
    state = LogState(table.path)
    state.load()
    commit = table.path / "_delta_log" / f"{state.version + 1:020d}.json"
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))


def enable_deletion_vectors(table: AppendOnlyTable) -> None:
    state = LogState(table.path)
    state.load()
    assert state.metadata is not None
    configuration = {**state.metadata["configuration"], "delta.enableDeletionVectors": "true"}
    foreign_commit(table, {"commitInfo": {"operation": "SET TBLPROPERTIES"}},
                   {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                 "readerFeatures": ["deletionVectors"],
                                 "writerFeatures": ["appendOnly", "deletionVectors", "invariants"]}},
                   {"metaData": {**state.metadata, "configuration": configuration}})


def test_an_upgrade_committed_while_appending_stops_the_appends(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA, name="journal")
    table.open()
    table.append(batch(0))
    enable_deletion_vectors(table)
    parquet_before = sorted(p.name for p in table.path.glob("*.parquet"))
    with pytest.raises(UnsupportedTable, match="'deletionVectors'"):
        table.append(batch(10))
    assert DeltaTable(str(table.path)).version() == 2            # nothing committed after it
    assert sorted(p.name for p in table.path.glob("*.parquet")) == parquet_before


def test_a_harmless_change_by_another_writer_is_taken_in(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    table.append(batch(0))
    state = LogState(table.path)
    state.load()
    assert state.metadata is not None
    configuration = {**state.metadata["configuration"], "delta.logRetentionDuration": "interval 3 days"}
    foreign_commit(table, {"commitInfo": {"operation": "SET TBLPROPERTIES"}},
                   {"metaData": {**state.metadata, "configuration": configuration}})
    assert table.append(batch(10)) == 3
    assert table.append(batch(20)) == 4


def test_maintenance_leaves_an_upgraded_table_alone(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    for i in range(4):
        table.append(batch(i * 10))
    maintenance = TableMaintenance(table, compact_min_files=2)
    maintenance.log_state()
    enable_deletion_vectors(table)
    with pytest.raises(UnsupportedTable):
        maintenance.compact()
    with pytest.raises(UnsupportedTable):
        maintenance.checkpoint()
    assert DeltaTable(str(table.path)).version() == 5
    assert not (table.path / "_delta_log" / "_last_checkpoint").exists()


def test_delta_rs_reading_gives_the_same_verdict(tmp_path: Path) -> None:
    """Object storage (and a log LogState cannot read) is checked from what delta-rs reads."""
    path = tmp_path / "t"
    write_deltalake(str(path), batch(0), configuration={"delta.appendOnly": "true"})
    table = AppendOnlyTable(path, SCHEMA, name="config")
    table._check_with_delta_rs(table.delta_table())                 # a plain table passes
    DeltaTable(str(path)).alter.add_constraint({"positive_id": "message_id >= 0"})
    with pytest.raises(UnsupportedTable, match="'checkConstraints'"):
        table._check_with_delta_rs(table.delta_table())


def test_the_maintenance_thread_logs_a_refusal_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    table.append(batch(0))
    maintenance = TableMaintenance(table, poll_interval=0.01)
    rounds: list[int] = []
    real_round = maintenance.run_once

    def counted_round() -> None:
        rounds.append(1)
        real_round()

    maintenance.run_once = counted_round  # type: ignore[method-assign]
    enable_deletion_vectors(table)
    with caplog.at_level(logging.INFO, logger="lakehouse.maintenance"):
        maintenance.start()
        try:
            deadline = time.monotonic() + 30
            while len(rounds) < 5 and time.monotonic() < deadline:
                maintenance.checkpoint_due()
                time.sleep(0.01)
        finally:
            maintenance.close()
    assert len(rounds) >= 5
    stopped = [r for r in caplog.records if "stopped" in r.getMessage()]
    assert len(stopped) == 1 and "'deletionVectors'" in stopped[0].getMessage()
    assert not (table.path / "_delta_log" / "_last_checkpoint").exists()
