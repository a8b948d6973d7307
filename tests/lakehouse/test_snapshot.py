"""Recovery from a snapshot plus the journal's tail gives what recovery from the whole journal gives."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from broker.messaging.namespace import Namespace
from lakehouse.journal import DeltaMessageJournal
from lakehouse.log_state import appended_files
from lakehouse.maintenance import TableMaintenance
from lakehouse.snapshot import (LIVE_SCHEMA, UnusableSnapshot, apply_tail, recover_live,
                                snapshot_headers, snapshot_location)

from .snapshot_support import (build_varied_journal, commit, full_live, persistent, snapshot_rows_with_datafusion,
                               snapshot_with_datafusion)


@pytest.fixture
def varied(tmp_path: Path) -> tuple[DeltaMessageJournal, Namespace]:
    journal, ns = build_varied_journal(tmp_path / "node" / "journal")
    commit(journal)
    return journal, ns


def from_snapshot(journal: DeltaMessageJournal, version: int | None = None) -> list[dict[str, Any]]:
    return recover_live(journal.table, snapshot_version=version).live.to_pylist()


def test_snapshot_plus_tail_equals_full_recovery_from_every_version(
        varied: tuple[DeltaMessageJournal, Namespace]) -> None:
    journal, _ = varied
    last = journal.table.version
    expected = full_live(journal)
    # the journal really is varied: redelivered, shared, dead-lettered, re-declared queues
    assert {(r["queue"], r["body"], r["deliveries"]) for r in expected} >= {
        ("orders", b"order-1", 1), ("orders", b"shared", 0), ("work", b"work-1", 1),
        ("doomed", b"doomed-1", 0), ("orders", b"tx-0", 0), ("orders", b"last", 0),
        ("stream", b"stream-3", 1), ("stream", b"stream-6", 0)}
    # ... a lease consumer's two grants and one settlement, each one range row
    ranged = journal.table.read("SELECT event, message_id - first_message_id + 1 AS n FROM t"
                                " WHERE first_message_id IS NOT NULL ORDER BY event").to_pylist()
    assert ranged == [{"event": "deliver", "n": 3}] * 2 + [{"event": "settle", "n": 3}]
    assert not any(r["queue"] == "stream" and r["body"] in (b"stream-0", b"stream-2") for r in expected)
    assert any(r["queue"] == "dead" and r["body"] == b"work-0" for r in expected) is False   # acked there
    assert not any(r["queue"] in ("scratch", "audit") for r in expected)
    for version in range(0, last + 1):
        snapshot_with_datafusion(journal.path, version)
    assert [h.version for h in snapshot_headers(snapshot_location(journal.path))] == list(range(last, -1, -1))
    for version in range(0, last + 1):
        assert from_snapshot(journal, version) == expected, f"snapshot of version {version}"
    journal.close()


def test_the_newest_snapshot_is_used_and_restores_the_queues(
        varied: tuple[DeltaMessageJournal, Namespace], caplog: pytest.LogCaptureFixture) -> None:
    journal, ns = varied
    snapshot_with_datafusion(journal.path, 1)
    snapshot_with_datafusion(journal.path, 4)
    records = ns.records()
    journal.close()
    restored = {}
    for use in (False, True):
        fresh = Namespace("v")
        again = DeltaMessageJournal(journal.path, "v")
        again.use_snapshots = use
        again.open()
        fresh.journal = again
        fresh.restore(records)
        with caplog.at_level(logging.INFO, logger="lakehouse.journal"):
            caplog.clear()
            count = again.recover(fresh)
        restored[use] = (count, {name: [(e.message.body, e.redelivered, e.delivery_count, e.message.journal_id,
                                         e.message.properties.content_type)
                                        for e in q.browse()]
                                 for name, q in fresh.queues.items()})
        if use:
            assert "from the snapshot of version 4" in caplog.text
        again.close()
    assert restored[True] == restored[False]
    assert restored[True][1]["orders"][:2] == [(b"order-1", True, 1, 2, None), (b"order-3", False, 0, 4, None)]


def test_messages_published_and_settled_after_the_snapshot_are_recovered(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = DeltaMessageJournal(tmp_path / "journal", "v")
    journal.open()
    ns.journal = journal
    q = ns.declare_queue("q", durable=True)[0]
    for i in range(5):
        q.enqueue(persistent(b"before-%d" % i))
    commit(journal)
    snapshot_with_datafusion(journal.path, journal.table.version)
    q.settle(q.get())                                       # type: ignore[arg-type]  # a snapshot message acked
    q.enqueue(persistent(b"after-0"))
    q.enqueue(persistent(b"after-1"))
    commit(journal)
    taken = [q.get() for _ in range(5)]                     # before-1..4 and after-0 delivered
    assert None not in taken
    q.settle(taken[4])                                      # type: ignore[arg-type]  # after-0 acked
    q.release(taken[0])                                     # type: ignore[arg-type]  # before-1 requeued
    commit(journal)
    got = from_snapshot(journal)
    assert got == full_live(journal)
    assert [(r["body"], r["deliveries"] > 0) for r in got] == [
        (b"before-1", True), (b"before-2", True), (b"before-3", True), (b"before-4", True), (b"after-1", False)]
    journal.close()


def test_tail_rows_in_files_compaction_merged_are_still_read(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = DeltaMessageJournal(tmp_path / "journal", "v")
    journal.open()
    ns.journal = journal
    q = ns.declare_queue("q", durable=True)[0]
    for i in range(4):
        q.enqueue(persistent(b"m%d" % i))
        commit(journal)
    snapshot_with_datafusion(journal.path, journal.table.version)
    for i in range(4, 8):
        q.enqueue(persistent(b"m%d" % i))
        commit(journal)
    q.settle(q.get())                                       # type: ignore[arg-type]
    commit(journal)
    maintenance = TableMaintenance(journal.table, compact_min_files=2, merge_min_files=100)
    assert maintenance.compact() >= 9                       # files before and after the snapshot, merged
    assert from_snapshot(journal) == full_live(journal)
    assert [r["body"] for r in from_snapshot(journal)] == [b"m%d" % i for i in range(1, 8)]
    journal.close()


def test_a_tail_compacted_after_the_snapshot_is_read_from_the_compacted_file(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = DeltaMessageJournal(tmp_path / "journal", "v")
    journal.open()
    ns.journal = journal
    q = ns.declare_queue("q", durable=True)[0]
    q.enqueue(persistent(os.urandom(2 << 20)))              # a file too big to count as small
    commit(journal)
    snapshot_with_datafusion(journal.path, journal.table.version)
    for i in range(4):
        q.enqueue(persistent(b"m%d" % i))
        commit(journal)
    q.settle(q.get())                                       # type: ignore[arg-type]  # the big one acked
    commit(journal)
    assert TableMaintenance(journal.table, compact_min_files=2).compact() == 5
    found = recover_live(journal.table)
    assert found.tail_files == 1                            # the compacted file, not the five it merged
    assert found.live.to_pylist() == full_live(journal)
    assert [r["body"] for r in found.live.to_pylist()] == [b"m%d" % i for i in range(4)]
    journal.close()


def test_a_snapshot_older_than_the_log_is_not_used(varied: tuple[DeltaMessageJournal, Namespace],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    journal, ns = varied
    snapshot_with_datafusion(journal.path, 2)
    # the log clean-up's way: a checkpoint, then commits before it dropped
    journal.table.checkpoint()
    (journal.path / "_delta_log" / f"{3:020d}.json").rename(journal.path / "commit-3.json")
    with pytest.raises(UnusableSnapshot, match="log retention"):
        recover_live(journal.table)
    (journal.path / "commit-3.json").rename(journal.path / "_delta_log" / f"{3:020d}.json")
    # a file the tail appended, compacted into another with older rows, then vacuumed
    assert TableMaintenance(journal.table, compact_min_files=2).compact()
    name = [line for line in (journal.path / "_delta_log" / f"{4:020d}.json").read_text().splitlines()
            if '"add"' in line][0].split('"path":"')[1].split('"')[0]
    (journal.path / name).rename(tmp_path_of(journal) / "gone.parquet")
    with pytest.raises(UnusableSnapshot, match="vacuumed"):
        recover_live(journal.table)
    with caplog.at_level(logging.INFO, logger="lakehouse.journal"):
        live = journal.live_messages()                      # the broker's way: the whole journal instead
    said = [r for r in caplog.records if r.name == "lakehouse.journal"]
    assert len(said) == 1 and said[0].levelname == "WARNING"
    assert "snapshot not used" in said[0].message and "vacuumed" in said[0].message
    (tmp_path_of(journal) / "gone.parquet").rename(journal.path / name)
    assert live.cast(LIVE_SCHEMA).to_pylist() == full_live(journal)
    journal.close()


def tmp_path_of(journal: DeltaMessageJournal) -> Path:
    return Path(journal.path).parent


def test_torn_and_invalid_snapshots_are_never_used(varied: tuple[DeltaMessageJournal, Namespace]) -> None:
    journal, _ = varied
    expected = full_live(journal)
    location = Path(snapshot_location(journal.path))
    snapshot_with_datafusion(journal.path, 3)
    # a job killed while writing version 5: its files are there, its commit is not
    rows = snapshot_rows_with_datafusion(journal.path, 5)
    (location / "snapshot_version=5").mkdir()
    pq.write_table(rows.drop_columns(["snapshot_version"]).slice(0, 2),
                   location / "snapshot_version=5" / "part-00000-torn.snappy.parquet")
    assert from_snapshot(journal) == expected
    assert [h.version for h in snapshot_headers(location)] == [3]
    # rows of a newer version without their header (not a snapshot the job wrote): not one either
    write_deltalake(str(location), rows.filter(pc.not_equal(rows.column("kind"), "snapshot")),
                    mode="append", partition_by=["snapshot_version"])
    assert [h.version for h in snapshot_headers(location)] == [3]
    assert from_snapshot(journal) == expected
    # a header of an unknown layout version
    future = snapshot_rows_with_datafusion(journal.path, 6)
    future = future.set_column(future.schema.get_field_index("snapshot_schema"), "snapshot_schema",
                               pa.array([99 if k == "snapshot" else None for k in
                                         future.column("kind").to_pylist()], pa.int32()))
    write_deltalake(str(location), future, mode="append", partition_by=["snapshot_version"])
    with pytest.raises(UnusableSnapshot, match="layout 99"):
        recover_live(journal.table)
    assert journal.live_messages().cast(LIVE_SCHEMA).to_pylist() == expected
    journal.close()


def test_a_snapshot_of_another_journal_or_of_another_schema_is_not_used(tmp_path: Path) -> None:
    journal, _ = build_varied_journal(tmp_path / "node" / "journal")
    commit(journal)
    snapshot_with_datafusion(journal.path, journal.table.version)
    expected = full_live(journal)
    journal.close()
    # the journal is lost and started afresh: the old snapshot must not bring its messages back
    shutil.rmtree(journal.path)
    fresh = DeltaMessageJournal(journal.path, "v")
    fresh.open()
    with pytest.raises(UnusableSnapshot, match="another journal table"):
        recover_live(fresh.table)
    assert fresh.live_messages().num_rows == 0
    fresh.close()
    assert expected
    # a table at the snapshot's place that is not a snapshot table
    other = tmp_path / "other" / "journal"
    journal2, _ = build_varied_journal(other)
    commit(journal2)
    write_deltalake(str(snapshot_location(other)), pa.table({"something": [1, 2]}))
    with pytest.raises(UnusableSnapshot, match="cannot be read"):
        recover_live(journal2.table)
    assert journal2.live_messages().num_rows == len(full_live(journal2))
    journal2.close()


def test_a_tail_of_events_recovery_does_not_know_leaves_the_snapshot_as_it_is() -> None:
    live = pa.table({"queue": ["q"], "message_id": [1], "deliveries": [0], "exchange": [""],
                     "routing_key": ["q"], "published_at": [None], "body": [b"x"],
                     "message_format": ["amqp-0-9-1"], "native": [b""]}, schema=LIVE_SCHEMA)
    tail = pa.table({"event": pa.array(["some_future_event"]), "queue": ["q"], "message_id": [1],
                     "delivery_count": pa.array([None], pa.int32())})
    assert apply_tail(live, pa.table({"queue": pa.array([], pa.string()), "upto": pa.array([], pa.int64())}),
                      tail) is live


def test_following_the_log_reads_appends_and_refuses_removed_data() -> None:
    commits = [[{"commitInfo": {}}, {"add": {"path": "a.parquet", "dataChange": True}}],
               [{"add": {"path": "ab.parquet", "dataChange": False}},          # compaction
                {"remove": {"path": "a.parquet", "dataChange": False}}],
               [{"metaData": {"id": "x"}}],
               [{"add": {"path": "b.parquet", "dataChange": True}}]]
    assert appended_files(commits) == ["a.parquet", "b.parquet"]
    # a compaction of files that are all in the run: its output is read instead of them
    optimize = [{"commitInfo": {"operation": "OPTIMIZE"}}, {"add": {"path": "bc.parquet", "dataChange": False}},
                {"remove": {"path": "b.parquet", "dataChange": False}},
                {"remove": {"path": "c.parquet", "dataChange": False}}]
    run = [[{"add": {"path": "b.parquet", "dataChange": True}}], [{"add": {"path": "c.parquet", "dataChange": True}}]]
    assert appended_files([*run, optimize]) == ["bc.parquet"]
    # one that also merged a file from before the run: the run's own files are read
    assert appended_files([run[1], optimize]) == ["c.parquet"]
    retention = [{"commitInfo": {"operation": "DELETE"}}, {"add": {"path": "b2.parquet", "dataChange": False}},
                 {"remove": {"path": "b.parquet", "dataChange": False}}]
    assert appended_files([run[0], retention]) == ["b.parquet"]
    with pytest.raises(ValueError, match="removed data file a.parquet"):
        appended_files([[{"remove": {"path": "a.parquet", "dataChange": True}}]])
