"""``deltamq spark snapshot``'s job, in a real Spark session: the rows it writes, and recovery from them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.messaging.namespace import Namespace
from lakehouse.delta_versions import query_table
from lakehouse.journal import DeltaMessageJournal
from lakehouse.snapshot import recover_live, snapshot_headers, snapshot_location

from .snapshot_support import build_varied_journal, commit, full_live, persistent, snapshot_rows_with_datafusion

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]   # Spark on a busy 2-core machine


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from lakehouse.spark import spark_session

    session = spark_session(app_name="deltamq-snapshot-test")
    yield session
    session.stop()


def written_rows(journal: Path, version: int) -> list[dict[str, Any]]:
    """The snapshot rows of ``version`` as stored, in a stable order, without the write time."""
    rows = query_table(snapshot_location(journal), f"SELECT * FROM t WHERE snapshot_version = {version}")
    out = []
    for row in rows.to_pylist():
        assert row.pop("created_at") is not None or row["kind"] != "snapshot"
        out.append(row)
    return sorted(out, key=lambda r: (r["kind"], r["message_id"] or 0, r["queue"] or ""))


def test_the_job_writes_the_live_messages_and_recovery_from_them_equals_full_recovery(
        spark: Any, tmp_path: Path) -> None:
    from lakehouse.snapshot_command import write_snapshot

    store = tmp_path / "node"
    journal, ns = build_varied_journal(store / "journal")
    commit(journal)
    version = journal.table.version
    before = dt.datetime.now(dt.timezone.utc)
    done = write_snapshot(spark, store, keep=2)
    assert done.written and done.journal_version == version
    expected_rows = snapshot_rows_with_datafusion(journal.path, version).to_pylist()
    for row in expected_rows:
        created = row.pop("created_at")
        assert created is None or created >= before - dt.timedelta(seconds=1)
    expected_rows.sort(key=lambda r: (r["kind"], r["message_id"] or 0, r["queue"] or ""))
    assert written_rows(journal.path, version) == expected_rows       # every column of every row
    assert done.messages == sum(1 for r in expected_rows if r["kind"] == "message") > 5
    assert done.queues == len({r["queue"] for r in expected_rows if r["kind"] == "message"})
    # nothing changed: no second snapshot of the same version
    again = write_snapshot(spark, store, keep=2)
    assert not again.written and [h.version for h in snapshot_headers(snapshot_location(journal.path))] == [version]

    # the broker goes on after the snapshot: publishes, acks, requeues, deletes a queue
    orders = ns.queues["orders"]
    taken = orders.get()
    assert taken is not None
    orders.settle(taken)
    orders.release(orders.get())                                       # type: ignore[arg-type]
    orders.enqueue(persistent(b"after-snapshot"))
    ns.delete_queue("work")
    commit(journal)
    tail_expected = full_live(journal)
    recovered = recover_live(journal.table)
    assert recovered.header.version == version and recovered.journal_version == journal.table.version
    assert recovered.live.to_pylist() == tail_expected
    assert any(r["body"] == b"after-snapshot" for r in tail_expected)

    # a newer snapshot, and --keep 1 removes the older one
    done = write_snapshot(spark, store, keep=1)
    assert done.written and done.removed == 1
    assert [h.version for h in snapshot_headers(snapshot_location(journal.path))] == [journal.table.version]
    assert recover_live(journal.table).live.to_pylist() == tail_expected
    journal.close()


def test_the_broker_restores_queues_from_the_jobs_snapshot(spark: Any, tmp_path: Path) -> None:
    from lakehouse.snapshot_command import write_snapshot

    store = tmp_path / "node"
    journal, ns = build_varied_journal(store / "journal")
    commit(journal)
    write_snapshot(spark, store)
    ns.queues["orders"].enqueue(persistent(b"tail"))
    records = ns.records()
    journal.close()
    contents = {}
    for use in (False, True):
        fresh = Namespace("v")
        again = DeltaMessageJournal(store / "journal", "v")
        again.use_snapshots = use
        again.open()
        fresh.journal = again
        fresh.restore(records)
        again.recover(fresh)
        contents[use] = {name: [(e.message.body, e.redelivered, e.message.journal_id, e.message.headers)
                                for e in q.browse()]
                         for name, q in fresh.queues.items()}
        again.close()
    assert contents[True] == contents[False]
    assert contents[True]["orders"][-1][0] == b"tail"


def test_a_session_without_s3a_is_refused_an_s3_node_with_a_message(spark: Any) -> None:
    """The shared session starts without S3A (no node in object storage): the job says what is missing."""
    from lakehouse.snapshot_command import _require_file_system

    _require_file_system(spark, "/a/local/node/journal")          # local: nothing to check
    with pytest.raises(RuntimeError, match="cannot read S3 .*hadoop-aws"):
        _require_file_system(spark, "s3://bucket/node/journal")
