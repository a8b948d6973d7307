"""A varied journal, and snapshots of it computed the way ``deltamq spark snapshot`` computes them.

:func:`snapshot_with_datafusion` runs the job's SQL (:mod:`lakehouse.snapshot`) at a
pinned journal version with DataFusion instead of Spark, and writes the rows
with delta-rs in the job's layout: the tests of recovery need snapshots at
every version of a journal, and a Spark job per version would take minutes.
``tests/lakehouse/test_snapshot_spark.py`` checks that the Spark job writes
exactly these rows.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.protocol.amqp0_9_1.properties import FORMAT, encode_properties
from lakehouse.delta_versions import query_table, table_identity
from lakehouse.journal import DeltaMessageJournal
from lakehouse.journal_writer import journal_sql
from lakehouse.snapshot import (BOUNDS_SQL, DELETION, DELETIONS_SQL, HEADER, LIVE_MESSAGES_SQL, LIVE_SCHEMA,
                                MESSAGE, SNAPSHOT_SCHEMA, SNAPSHOT_SCHEMA_VERSION, snapshot_location)


def persistent(body: bytes, **props: Any) -> Message:
    properties = MessageProperties(delivery_mode=2, **props)
    return Message(exchange="", routing_key="rk", body=body, properties=properties,
                   native=encode_properties(properties), format=FORMAT, arrival=time.monotonic())


def commit(journal: DeltaMessageJournal) -> None:
    """Commit the open group now (no event loop: the journal commits in-process when closed)."""
    journal.close()
    journal.table.open()


def build_varied_journal(path: Path) -> tuple[DeltaMessageJournal, Namespace]:
    """A journal of many commits: fan-out, acks, requeues, held deliveries, a transaction,
    dead letters, a purge, a queue deleted and declared again, a queue deleted for good,
    a lease consumer's grants and settlement (range rows)."""
    ns = Namespace("v")
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    ns.journal = journal
    ns.declare_exchange("dlx", "fanout", durable=True)
    orders = ns.declare_queue("orders", durable=True)[0]
    audit = ns.declare_queue("audit", durable=True)[0]
    work = ns.declare_queue("work", durable=True, arguments={"x-dead-letter-exchange": "dlx"})[0]
    dead = ns.declare_queue("dead", durable=True)[0]
    ns.bind_queue("dead", "dlx", "")
    doomed = ns.declare_queue("doomed", durable=True)[0]
    scratch = ns.declare_queue("scratch", durable=True)[0]
    for i in range(6):
        orders.enqueue(persistent(b"order-%d" % i, headers={"i": i}))
    shared = persistent(b"shared", content_type="text/plain")
    orders.enqueue(shared)                                  # one message in two queues
    audit.enqueue(shared)
    for i in range(3):
        work.enqueue(persistent(b"work-%d" % i))
    doomed.enqueue(persistent(b"doomed-0"))
    scratch.enqueue(persistent(b"scratch-0"))
    commit(journal)                                         # version 1
    orders.settle(orders.get())                             # type: ignore[arg-type]  # order-0 acked
    held = orders.get()                                     # order-1 delivered, never settled
    assert held is not None
    orders.release(orders.get())                            # type: ignore[arg-type]  # order-2 requeued
    commit(journal)                                         # version 2
    journal.begin_transaction()
    orders.enqueue(persistent(b"tx-0"))
    orders.enqueue(persistent(b"tx-1"))
    taken = orders.get()                                    # order-2 again: its second delivery
    assert taken is not None
    orders.settle(taken)
    journal.end_transaction()
    commit(journal)                                         # version 3
    work.reject(work.get())                                 # type: ignore[arg-type]  # work-0 -> dead
    rejected = work.get()
    assert rejected is not None
    work.release(rejected)                                  # work-1 requeued
    commit(journal)                                         # version 4
    ns.delete_queue("doomed")
    doomed = ns.declare_queue("doomed", durable=True)[0]
    doomed.enqueue(persistent(b"doomed-1"))                 # after the deletion: live
    audit.settle(audit.get())                               # type: ignore[arg-type]  # shared leaves audit only
    commit(journal)                                         # version 5
    scratch.purge()
    ns.delete_queue("scratch")                              # gone for good
    for i in range(3):
        dead.enqueue(persistent(b"late-%d" % i))
    dead.settle(dead.get())                                 # type: ignore[arg-type]  # the dead letter acked
    commit(journal)                                         # version 6
    stream = ns.declare_queue("stream", durable=True)[0]    # a Spark job's queue: range rows
    for i in range(8):
        stream.enqueue(persistent(b"stream-%d" % i))
    commit(journal)                                         # version 7
    first = ns.leases.grant(stream, "job", "s1", 3, 60.0)
    ns.leases.grant(stream, "job", "s1", 3, 60.0)           # held: delivered, not settled
    ns.leases.settle(stream, "job", "s1", first.message_ids, 60.0)
    commit(journal)                                         # version 8
    orders.enqueue(persistent(b"last"))
    return journal, ns


def full_live(journal: DeltaMessageJournal) -> list[dict[str, Any]]:
    """The live messages as a full recovery reads them (no snapshot)."""
    use, journal.use_snapshots = journal.use_snapshots, False
    try:
        return journal.live_messages().cast(LIVE_SCHEMA).to_pylist()
    finally:
        journal.use_snapshots = use


def _ranged(journal: Path | str, version: int) -> bool:
    """Whether the journal at ``version`` has the column of range rows (schema 3)."""
    return "first_message_id" in query_table(journal, "SELECT * FROM t LIMIT 0", version=version).column_names


def snapshot_rows_with_datafusion(journal: Path | str, version: int) -> pa.Table:
    """The rows ``deltamq spark snapshot`` writes for the journal at ``version`` (no watermark file)."""
    highest = query_table(journal, journal_sql(BOUNDS_SQL, 0, ranges=_ranged(journal, version)), version=version).to_pylist()[0]
    watermark = highest["lowest_live"] or 0                 # as the job does
    messages = query_table(journal, journal_sql(LIVE_MESSAGES_SQL, watermark, ranges=_ranged(journal, version)), version=version)
    deletions = query_table(journal, journal_sql(DELETIONS_SQL, watermark, ranges=_ranged(journal, version)), version=version)
    _, journal_id = table_identity(journal)
    rows: list[dict[str, Any]] = []
    for row in messages.to_pylist():
        row["delivery_count"] = row.pop("deliveries")
        rows.append({**row, "kind": MESSAGE})
    rows += [{"kind": DELETION, **row} for row in deletions.to_pylist()]
    rows.append({"kind": HEADER, "message_id": highest["message_id"], "highest_tx_id": highest["tx_id"],
                 "journal_id": journal_id, "created_at": dt.datetime.now(dt.timezone.utc),
                 "snapshot_schema": SNAPSHOT_SCHEMA_VERSION})
    for row in rows:
        row["snapshot_version"] = version
    return pa.Table.from_pylist(rows, schema=SNAPSHOT_SCHEMA)


def snapshot_with_datafusion(journal: Path | str, version: int) -> None:
    """Append the snapshot of ``journal`` at ``version`` to its snapshot table (one commit)."""
    write_deltalake(str(snapshot_location(journal)), snapshot_rows_with_datafusion(journal, version),
                    mode="append", partition_by=["snapshot_version"])
