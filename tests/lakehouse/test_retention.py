"""History retention: rows of messages that ended before the cut-off go; nothing live does."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.retention import expired_message_ids, purge_settled_history

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc)
DAY = dt.timedelta(days=1)


def row(event: str, queue: str, message_id: int, at: dt.datetime, **extra: Any) -> dict[str, Any]:
    base = {name: None for name in JOURNAL_SCHEMA.names}
    base.update(vhost="v", event=event, queue=queue, message_id=message_id, at=at, **extra)
    if event == "enqueue" and "body" in extra:
        base.update(exchange="", routing_key=queue, published_at=at)
    return base


def journal(tmp_path: Path, *commits: list[dict[str, Any]]) -> AppendOnlyTable:
    table = AppendOnlyTable(tmp_path / "journal", JOURNAL_SCHEMA, stats_column="message_id")
    table.open()
    for rows in commits:
        table.append(pa.Table.from_pylist(rows, schema=JOURNAL_SCHEMA))
    return table


def ids(table: AppendOnlyTable) -> list[tuple[str, int, str]]:
    return [(r["event"], r["message_id"], r["queue"]) for r in table.read(
        "SELECT event, message_id, queue FROM t ORDER BY message_id, event, queue").to_pylist()]


def test_only_messages_ended_everywhere_before_the_cutoff_are_removed(tmp_path: Path) -> None:
    old = NOW - 10 * DAY
    table = journal(tmp_path, [
        # 1: acked long ago in its only queue -> removed
        row("enqueue", "a", 1, old, body=b"1"), row("settle", "a", 1, old, outcome="acked"),
        # 2: fanned out; acked long ago in a, still live in b -> kept (all rows)
        row("enqueue", "a", 2, old, body=b"2"), row("enqueue", "b", 2, old),
        row("settle", "a", 2, old, outcome="acked"),
        # 3: old but never settled -> kept
        row("enqueue", "a", 3, old, body=b"3"), row("deliver", "a", 3, old, delivery_count=1),
    ], [
        # 4: settled yesterday -> within retention, kept
        row("enqueue", "a", 4, old, body=b"4"), row("settle", "a", 4, NOW - DAY, outcome="acked"),
        # 5: its queue was deleted long ago -> removed; the deletion marker stays
        row("enqueue", "c", 5, old, body=b"5"), row("queue_deleted", "c", 5, old),
    ])
    cutoff = NOW - 7 * DAY
    assert sorted(expired_message_ids(table, cutoff).to_pylist()) == [1, 5]
    assert purge_settled_history(table, cutoff) == 3
    assert ids(table) == [
        ("enqueue", 2, "a"), ("enqueue", 2, "b"), ("settle", 2, "a"),
        ("deliver", 3, "a"), ("enqueue", 3, "a"),
        ("enqueue", 4, "a"), ("settle", 4, "a"),
        ("queue_deleted", 5, "c")]
    bodies = table.read("SELECT message_id, body FROM t WHERE body IS NOT NULL ORDER BY message_id").to_pylist()
    assert bodies == [{"message_id": 2, "body": b"2"}, {"message_id": 3, "body": b"3"},
                      {"message_id": 4, "body": b"4"}]
    commit = table.path / "_delta_log" / f"{table.version:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    assert all(a[k]["dataChange"] is False for a in actions for k in ("add", "remove") if k in a)
    assert purge_settled_history(table, cutoff) == 0      # nothing more to do


def test_files_of_younger_messages_are_not_rewritten(tmp_path: Path) -> None:
    old = NOW - 10 * DAY
    table = journal(tmp_path,
                    [row("enqueue", "a", 1, old, body=b"1"), row("settle", "a", 1, old, outcome="acked")],
                    [row("enqueue", "a", 2, NOW, body=b"2")])
    from deltalake import DeltaTable

    before = set(DeltaTable(str(table.path)).file_uris())
    assert purge_settled_history(table, NOW - 7 * DAY) == 2
    after = set(DeltaTable(str(table.path)).file_uris())
    # the file of message 2 (ids above every expired one) is still the one referenced;
    # message 1's file is gone from the snapshot and nothing replaced it (no rows survived)
    assert len(before) == 2 and len(after) == 1 and after < before
    assert ids(table) == [("enqueue", 2, "a")]


def test_the_journals_maintenance_applies_retention_when_it_vacuums(tmp_path: Path) -> None:
    from broker.messaging.message import Message, MessageProperties
    from broker.messaging.namespace import Namespace
    from lakehouse.journal import DeltaMessageJournal
    from lakehouse.journal_upkeep import JournalMaintenance

    ns = Namespace("v")
    journal = DeltaMessageJournal(tmp_path / "journal", "v")
    journal.open()
    ns.journal = journal
    q = ns.declare_queue("q", durable=True)[0]
    for body in (b"acked", b"live"):
        q.enqueue(Message(exchange="", routing_key="q", body=body,
                          properties=MessageProperties(delivery_mode=2), arrival=0.0))
    q.settle(q.get())                                    # type: ignore[arg-type]
    journal.close()
    journal.table.open()
    JournalMaintenance(journal.table, history_hours=0, retention_hours=0).vacuum()
    assert [r["body"] for r in journal.table.read(
        "SELECT body FROM t WHERE body IS NOT NULL").to_pylist()] == [b"live"]
