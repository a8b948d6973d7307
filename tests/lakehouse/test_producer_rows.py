"""Producer sequences in the Delta journal: one commit with the messages, recovered at start, kept by retention."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa

from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.messaging.producer_sequences import ProducerMark
from broker.protocol.amqp0_9_1.properties import FORMAT, encode_properties
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal import DeltaMessageJournal
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.producer_rows import read_producer_sequences
from lakehouse.retention import purge_settled_history


def persistent(body: bytes) -> Message:
    properties = MessageProperties(delivery_mode=2)
    return Message(exchange="", routing_key="q", body=body, properties=properties,
                   native=encode_properties(properties), format=FORMAT, arrival=time.monotonic())


def opened(path: Path) -> tuple[Namespace, DeltaMessageJournal]:
    ns = Namespace("v")
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    ns.journal = journal
    ns.declare_queue("q", durable=True)
    return ns, journal


def commit_batch(ns: Namespace, journal: DeltaMessageJournal, producer: str, sequence: int,
                 bodies: list[bytes]) -> None:
    """What tx.commit does for a marked transaction (the engine's part is tested in tests/unit)."""
    journal.begin_transaction()
    for body in bodies:
        ns.queues["q"].enqueue(persistent(body))
    journal.producer_committed(producer, sequence)
    journal.end_transaction()


def test_the_sequence_is_committed_with_the_messages_and_recovered(tmp_path: Path) -> None:
    ns, journal = opened(tmp_path / "journal")
    commit_batch(ns, journal, "query/0", 4, [b"a", b"b"])
    journal.close()                                  # one group: one commit
    assert journal.commits == 1
    rows = journal.table.read("SELECT event, queue, message_id, tx_id, delivery_count FROM t"
                              " ORDER BY event, message_id").to_pylist()
    assert [(r["event"], r["queue"], r["message_id"], r["tx_id"]) for r in rows] == [
        ("enqueue", "q", 1, 1), ("enqueue", "q", 2, 1), ("producer_sequence", "query/0", 2, 1)]
    assert rows[-1]["delivery_count"] == 4           # the sequence

    ns, journal = opened(tmp_path / "journal")       # the broker restarts
    journal.recover(ns)
    assert ns.producers.committed() == {"query/0": 4}
    commit_batch(ns, journal, "query/0", 5, [b"c"])
    commit_batch(ns, journal, "query/1", 9, [])
    journal.close()

    ns, journal = opened(tmp_path / "journal")
    journal.recover(ns)
    assert ns.producers.committed() == {"query/0": 5, "query/1": 9}
    assert ns.producers.admit(ProducerMark("query/0", 5)) is not None    # a replay after the restart
    assert ns.producers.admit(ProducerMark("query/0", 6)) is None
    assert ns.queues["q"].message_count == 3
    journal.close()


def test_retention_keeps_each_producers_highest_sequence(tmp_path: Path) -> None:
    old = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    recent = old + dt.timedelta(days=10)

    def row(event: str, queue: str, message_id: int = 1, at: dt.datetime = old, **extra: object) -> dict[str, object]:
        base: dict[str, object] = {name: None for name in JOURNAL_SCHEMA.names}
        base.update(vhost="v", event=event, queue=queue, message_id=message_id, at=at, **extra)
        return base

    table = AppendOnlyTable(tmp_path / "journal", JOURNAL_SCHEMA, stats_column="message_id")
    table.open()
    table.append(pa.Table.from_pylist([
        row("enqueue", "q", body=b"1", tx_id=1), row("producer_sequence", "query/0", tx_id=1, delivery_count=1),
        row("settle", "q", outcome="acked"),
        row("producer_sequence", "query/0", delivery_count=2),       # superseded, old: goes
        row("producer_sequence", "query/1", delivery_count=5),       # old, but its producer's last: stays
    ], schema=JOURNAL_SCHEMA))
    table.append(pa.Table.from_pylist([
        row("producer_sequence", "query/0", 7, recent, delivery_count=3),
        row("producer_sequence", "query/2", 7, recent, delivery_count=1),   # recent: stays
        row("producer_sequence", "query/2", 7, recent, delivery_count=2),
    ], schema=JOURNAL_SCHEMA))
    # the message's two rows and query/0's rows 1 and 2
    assert purge_settled_history(table, old + dt.timedelta(days=1)) == 4
    assert table.read("SELECT queue, delivery_count FROM t ORDER BY queue, delivery_count").to_pylist() == [
        {"queue": "query/0", "delivery_count": 3}, {"queue": "query/1", "delivery_count": 5},
        {"queue": "query/2", "delivery_count": 1}, {"queue": "query/2", "delivery_count": 2}]
    assert read_producer_sequences(table) == {"query/0": 3, "query/1": 5, "query/2": 2}
