"""A journal table written by the release before message formats (journal schema 1).

``fixtures/journal_v1`` was written by that release (``fixtures/make_journal_v1.py``
says with which code and what it holds).  The broker of today must open it,
move it to schema 2 by a metadata commit, recover its live messages exactly,
keep writing to it, and the Spark views must read it, upgraded or not.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from lakehouse.journal import DeltaMessageJournal
from lakehouse.journal_schema import JOURNAL_SCHEMA

FIXTURE = Path(__file__).parent / "fixtures" / "journal_v1"
SCHEMA_1 = JOURNAL_SCHEMA.names[:JOURNAL_SCHEMA.names.index("properties_raw") + 1]


def copy_of_fixture(target: Path) -> Path:
    shutil.copytree(FIXTURE, target)
    return target


def declare(ns: Namespace) -> None:
    """The fixture's durable queues (``gone`` was deleted before the table was closed)."""
    ns.declare_queue("dlq", durable=True)
    ns.declare_queue("orders", durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    ns.declare_queue("audit", durable=True)


def open_journal(path: Path, ns: Namespace) -> DeltaMessageJournal:
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    ns.journal = journal
    return journal


def drain(ns: Namespace, queue: str) -> list[tuple[bytes, int, Message]]:
    got = []
    while (entry := ns.queues[queue].get(no_ack=True)) is not None:
        got.append((entry.message.body, entry.delivery_count, entry.message))
    return got


def test_the_fixture_is_schema_1() -> None:
    from deltalake import DeltaTable

    table = DeltaTable(str(FIXTURE))
    assert [f.name for f in table.schema().fields] == SCHEMA_1 and table.version() == 1


def test_opening_adds_schema_2_columns_by_one_metadata_commit(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    path = copy_of_fixture(tmp_path / "journal")
    journal = open_journal(path, Namespace("v"))
    journal.close()
    table = DeltaTable(str(path))
    assert [f.name for f in table.schema().fields] == JOURNAL_SCHEMA.names
    assert table.version() == 2
    assert table.history(1)[0]["operation"] == "ADD COLUMN"
    old = journal.table.read("SELECT message_format, native, properties_raw FROM t WHERE body IS NOT NULL")
    assert set(old.column("message_format").to_pylist()) == {None}
    assert set(old.column("native").to_pylist()) == {None}
    assert None not in old.column("properties_raw").to_pylist()
    # opening again changes nothing
    open_journal(path, Namespace("v")).close()
    assert DeltaTable(str(path)).version() == 2


def test_recovery_of_a_schema_1_table(tmp_path: Path) -> None:
    ns = Namespace("v")
    declare(ns)
    journal = open_journal(copy_of_fixture(tmp_path / "journal"), ns)
    assert journal.recover(ns) == 6
    orders = drain(ns, "orders")
    assert [(body, count) for body, count, _ in orders] == [
        (b"m2", 1), (b"m3", 1), (b"m4", 0), (b"m5", 0)]
    m4 = orders[2][2]
    assert m4.format_tag == "amqp-0-9-1" and m4.persistent and m4.priority == 5
    props = m4.properties
    assert (props.headers, props.content_type, props.message_id, props.correlation_id,
            props.timestamp) == ({"k": "v", "n": 7}, "application/json", "id-4", "c-4", 1700000000)
    assert m4.expires_at is not None and m4.expires_at - m4.arrival == pytest.approx(3153600000)
    assert [body for body, _, _ in drain(ns, "audit")] == [b"m5"]
    (dead,) = drain(ns, "dlq")
    assert dead[0] == b"m7"
    death = dead[2].headers["x-death"][0]
    assert (death["queue"], death["reason"], death["count"]) == ("orders", "rejected", 1)
    journal.close()


def test_a_schema_1_table_takes_new_messages_and_recovers_both(tmp_path: Path) -> None:
    path = copy_of_fixture(tmp_path / "journal")
    ns = Namespace("v")
    journal = open_journal(path, ns)
    declare(ns)                                   # after the journal: durable queues journal
    journal.recover(ns)
    props = MessageProperties(delivery_mode=2, headers={"new": True}, priority=1)
    ns.queues["audit"].enqueue(Message(exchange="", routing_key="audit", body=b"m9",
                                       properties=props, arrival=time.monotonic()))
    journal.close()
    row = journal.table.read("SELECT * FROM t WHERE message_id = 9").to_pylist()[0]
    assert row["message_format"] == "amqp-0-9-1" and row["native"] and row["properties_raw"] is None
    fresh = Namespace("v")
    declare(fresh)
    journal = open_journal(path, fresh)
    assert journal.recover(fresh) == 7
    audit = drain(fresh, "audit")
    assert [body for body, _, _ in audit] == [b"m5", b"m9"]
    assert audit[1][2].headers == {"new": True}
    journal.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_spark_views_read_schema_1_tables_upgraded_or_not(tmp_path: Path) -> None:
    from lakehouse.spark import register_views, spark_session

    data_dir = tmp_path / "data"
    copy_of_fixture(data_dir / "old" / "journal")                  # never opened since
    upgraded = copy_of_fixture(data_dir / "new" / "journal")
    open_journal(upgraded, Namespace("v")).close()
    spark = spark_session(data_dir)
    register_views(spark, data_dir)

    def rows(sql: str) -> list[dict[str, Any]]:
        return [r.asDict() for r in spark.sql(sql).collect()]

    for node in ("old", "new"):
        live = rows(f"SELECT queue, body, redelivered FROM live_messages WHERE node = '{node}'"
                    " ORDER BY message_id, queue")
        assert [(r["queue"], bytes(r["body"]), r["redelivered"]) for r in live] == [
            ("dlq", b"m7", False), ("orders", b"m2", True), ("orders", b"m3", True),
            ("orders", b"m4", False), ("audit", b"m5", False), ("orders", b"m5", False)]
        (m4,) = rows(f"SELECT properties, headers FROM queue_history WHERE node = '{node}'"
                     " AND body = X'6d34'")
        assert m4["properties"]["priority"] == "5" and json.loads(m4["headers"]) == {"k": "v", "n": 7}
        (dead,) = rows(f"SELECT queue, reason FROM dead_letters WHERE node = '{node}'")
        assert (dead["queue"], dead["reason"]) == ("orders", "rejected")
    formats = rows("SELECT DISTINCT node, message_format FROM journal")
    assert {(r["node"], r["message_format"]) for r in formats} == {("old", None), ("new", None)}
