"""Range rows (journal schema 3): a lease consumer's grants and settlements, one row per range.

Written by the Delta journal, expanded again by recovery, the browse query,
the snapshot's tail and history retention; a table of schema 2 gains the
column by one metadata commit.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from broker.messaging.namespace import Namespace
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal import DeltaMessageJournal
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.queue_reads import live_messages
from lakehouse.retention import expired_message_ids, purge_settled_history
from lakehouse.snapshot import expand_ranges

from .snapshot_support import commit, full_live, persistent

LEASE = 60.0
SCHEMA_2 = pa.schema([field for field in JOURNAL_SCHEMA if field.name != "first_message_id"])


def journal_with_grants(path: Path) -> tuple[DeltaMessageJournal, Namespace]:
    """Queue ``stream`` with messages 1..7 (4 of another queue between them): two grants, one settled."""
    ns = Namespace("v")
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    ns.journal = journal
    stream = ns.declare_queue("stream", durable=True)[0]
    other = ns.declare_queue("other", durable=True)[0]
    for n in range(7):
        (other if n == 3 else stream).enqueue(persistent(b"m%d" % n))
    commit(journal)
    first = ns.leases.grant(stream, "job", "s1", 4, LEASE)     # 1, 2, 3, 5
    ns.leases.grant(stream, "job", "s1", 1, LEASE)             # 6: delivered, not settled
    ns.leases.settle(stream, "job", "s1", first.message_ids, LEASE)
    commit(journal)
    return journal, ns


def test_grants_and_settlements_are_range_rows_and_recovery_expands_them(tmp_path: Path) -> None:
    journal, ns = journal_with_grants(tmp_path / "journal")
    ranged = journal.table.read("""
        SELECT event, first_message_id, message_id, delivery_count, outcome, reason FROM t
        WHERE event <> 'enqueue' ORDER BY event, message_id""").to_pylist()
    assert ranged == [
        {"event": "deliver", "first_message_id": 1, "message_id": 3, "delivery_count": 1, "outcome": None,
         "reason": None},
        {"event": "deliver", "first_message_id": 5, "message_id": 5, "delivery_count": 1, "outcome": None,
         "reason": None},
        {"event": "deliver", "first_message_id": 6, "message_id": 6, "delivery_count": 1, "outcome": None,
         "reason": None},
        {"event": "settle", "first_message_id": 1, "message_id": 3, "delivery_count": 1, "outcome": "acked",
         "reason": "consumer:job"},
        {"event": "settle", "first_message_id": 5, "message_id": 5, "delivery_count": 1, "outcome": "acked",
         "reason": "consumer:job"}]
    live = [(r["queue"], r["message_id"], r["deliveries"]) for r in full_live(journal)]
    assert live == [("other", 4, 0), ("stream", 6, 1), ("stream", 7, 0)]
    assert live_messages(str(journal.path), "stream") == ([6, 7], {6: 1})
    records = ns.records()
    journal.close()
    fresh = Namespace("v")
    again = DeltaMessageJournal(journal.path, "v")
    again.open()
    fresh.journal = again
    fresh.restore(records)
    assert again.recover(fresh) == 3
    assert [(e.message.body, e.redelivered, e.delivery_count) for e in fresh.queues["stream"].browse()] == [
        (b"m5", True, 1), (b"m6", False, 0)]
    again.close()


def test_expanding_range_rows_gives_one_row_per_message() -> None:
    rows = pa.Table.from_pylist([
        {"event": "deliver", "queue": "q", "message_id": 9, "delivery_count": 1, "first_message_id": None},
        {"event": "settle", "queue": "q", "message_id": 4, "delivery_count": 2, "first_message_id": 2},
        {"event": "deliver", "queue": "r", "message_id": 7, "delivery_count": 1, "first_message_id": 7},
    ], schema=pa.schema([("event", pa.string()), ("queue", pa.string()), ("message_id", pa.int64()),
                         ("delivery_count", pa.int32()), ("first_message_id", pa.int64())]))
    expanded = expand_ranges(rows).to_pylist()
    assert [(r["event"], r["queue"], r["message_id"], r["delivery_count"], r["first_message_id"])
            for r in expanded] == [("deliver", "q", 9, 1, None), ("settle", "q", 2, 2, None),
                                   ("settle", "q", 3, 2, None), ("settle", "q", 4, 2, None),
                                   ("deliver", "r", 7, 1, None)]
    plain = rows.drop_columns(["first_message_id"])
    assert expand_ranges(plain) is plain


def test_a_schema_2_table_gains_the_range_column_by_one_metadata_commit(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from deltalake import DeltaTable

    path = tmp_path / "journal"
    old = AppendOnlyTable(path, SCHEMA_2, stats_column="message_id")
    old.open()
    row: dict[str, Any] = dict.fromkeys(SCHEMA_2.names)
    row.update(vhost="v", at=dt.datetime.now(dt.timezone.utc), event="enqueue", queue="q", message_id=1,
               exchange="", routing_key="q", published_at=dt.datetime.now(dt.timezone.utc), body=b"b",
               message_format="amqp-0-9-1", native=persistent(b"b").native()[1])
    old.append(pa.Table.from_pylist([row], schema=SCHEMA_2))
    old.close()
    assert live_messages(str(path), "q") == ([1], {})      # read at schema 2 (no range column)
    ns = Namespace("v")
    journal = DeltaMessageJournal(path, "v")
    with caplog.at_level(logging.INFO, logger="lakehouse.journal"):
        journal.open()
    assert "schema 2 -> 3, added columns first_message_id" in caplog.text
    assert [f.name for f in DeltaTable(str(path)).schema().fields] == JOURNAL_SCHEMA.names
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "ADD COLUMN"
    ns.journal = journal
    queue = ns.declare_queue("q", durable=True)[0]
    journal.recover(ns)
    grant = ns.leases.grant(queue, "job", "s", 5, LEASE)
    assert grant.message_ids == [1]
    ns.leases.settle(queue, "job", "s", [1], LEASE)
    journal.close()
    assert live_messages(str(path), "q") == ([], {})
    assert journal.table.read("SELECT first_message_id FROM t WHERE event = 'settle'").to_pylist() == [
        {"first_message_id": 1}]


def test_retention_removes_a_range_row_only_once_every_message_of_it_ended(tmp_path: Path) -> None:
    now = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc)
    old = now - dt.timedelta(days=10)

    def row(event: str, queue: str, message_id: int, **extra: Any) -> dict[str, Any]:
        base: dict[str, Any] = dict.fromkeys(JOURNAL_SCHEMA.names)
        base.update(vhost="v", event=event, queue=queue, message_id=message_id, at=old, **extra)
        return base

    table = AppendOnlyTable(tmp_path / "journal", JOURNAL_SCHEMA, stats_column="message_id")
    table.open()
    table.append(pa.Table.from_pylist([
        *(row("enqueue", "a", i, body=b"%d" % i) for i in range(1, 6)),
        row("enqueue", "b", 2),                                   # 2 also in b, live there
        row("deliver", "a", 3, first_message_id=1, delivery_count=1),
        row("settle", "a", 3, first_message_id=1, delivery_count=1, outcome="acked"),
        row("deliver", "a", 5, first_message_id=4, delivery_count=1),
        row("settle", "a", 5, first_message_id=4, delivery_count=1, outcome="acked"),
    ], schema=JOURNAL_SCHEMA))
    cutoff = now - dt.timedelta(days=7)
    assert sorted(expired_message_ids(table, cutoff).to_pylist()) == [1, 3, 4, 5]
    purge_settled_history(table, cutoff)
    left = table.read("SELECT event, queue, message_id, first_message_id FROM t"
                      " ORDER BY message_id, event, queue").to_pylist()
    # the range 1..3 stays (2 is live in b: its settlement in a must stay); 4..5 went whole
    assert [(r["event"], r["queue"], r["message_id"], r["first_message_id"]) for r in left] == [
        ("enqueue", "a", 2, None), ("enqueue", "b", 2, None),
        ("deliver", "a", 3, 1), ("settle", "a", 3, 1)]
    table.close()
