"""The Delta message journal: group commit on a real event loop, the table's rows, recovery."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any


from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.protocol.amqp0_9_1.properties import FORMAT, encode_properties
from lakehouse.journal import DeltaMessageJournal
from tests.waiting import wait_until_async


def persistent(body: bytes, **props: Any) -> Message:
    properties = MessageProperties(delivery_mode=2, **props)
    return Message(exchange="", routing_key="rk", body=body, properties=properties,
                   native=encode_properties(properties), format=FORMAT,
                   arrival=time.monotonic())


def open_journal(path: Path, ns: Namespace) -> DeltaMessageJournal:
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    ns.journal = journal
    return journal


def rows(journal: DeltaMessageJournal, where: str = "true") -> list[dict[str, Any]]:
    return journal.table.read(f"SELECT * FROM t WHERE {where} ORDER BY message_id, at").to_pylist()


def test_events_of_one_loop_iteration_become_one_durable_commit(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queues = [ns.declare_queue(f"q{i}", durable=True)[0] for i in range(3)]

    async def main() -> list[int]:
        journal.attach_loop(asyncio.get_running_loop())
        seen: list[int] = []
        for i in range(30):
            queues[i % 3].enqueue(persistent(b"m%d" % i))
        group = journal.pending
        assert group is not None and not group.done
        durable = asyncio.Event()

        def on_durable() -> None:
            # what is reported durable is readable by a fresh reader at that moment
            seen.append(len(rows(journal)))
            durable.set()
        group.when_durable(on_durable)
        await asyncio.wait_for(durable.wait(), 10)
        return seen

    version_before = journal.table.version
    assert asyncio.run(main()) == [30]
    from deltalake import DeltaTable

    # one commit, made by the writer process
    assert DeltaTable(str(journal.path)).version() == version_before + 1 and journal.commits == 1
    journal.close()


def test_rows_hold_body_once_properties_as_text_and_headers_as_json(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    a, b = ns.declare_queue("a", durable=True)[0], ns.declare_queue("b", durable=True)[0]
    m = persistent(b"body", headers={"n": 1, "s": "x", "raw": b"\x00"}, message_id="id-1", priority=3)
    a.enqueue(m)
    b.enqueue(m)
    entry = a.get()
    assert entry is not None
    a.settle(entry)
    journal.close()
    got = rows(journal)
    assert [(r["event"], r["queue"], r["message_id"]) for r in got] == [
        ("enqueue", "a", 1), ("enqueue", "b", 1), ("settle", "a", 1)]
    first = got[0]
    assert first["body"] == b"body" and got[1]["body"] is None
    assert dict(first["properties"]) == {"delivery_mode": "2", "priority": "3", "message_id": "id-1"}
    assert json.loads(first["headers"]) == {"n": 1, "s": "x", "raw": {"$bytes": "AA=="}}
    assert first["native"] == m.native_for(FORMAT) and first["message_format"] == "amqp-0-9-1"
    assert first["properties_raw"] is None                      # schema 1's column
    assert got[2]["outcome"] == "acked" and got[2]["delivery_count"] == 1
    # the deliver event was settled within the same group: only the settle is written
    assert not rows(journal, "event = 'deliver'")


def test_recovery_restores_live_messages_in_order_with_redelivered_flags(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    q = ns.declare_queue("q", durable=True)[0]
    other = ns.declare_queue("other", durable=True)[0]
    gone = ns.declare_queue("gone", durable=True)[0]
    messages = [persistent(b"%d" % i, headers={"i": i}) for i in range(6)]
    for message in messages:
        q.enqueue(message)
    other.enqueue(messages[5])                        # fanned out: one message in two queues
    gone.enqueue(persistent(b"lost"))
    q.settle(q.get())                                 # type: ignore[arg-type]   # 0 acked
    held = q.get()                                    # 1 delivered, never settled
    q.release(q.get())                                # type: ignore[arg-type]   # 2 requeued
    records = ns.records()
    ns.delete_queue("gone")
    journal.close()
    assert held is not None

    fresh = Namespace("v")
    journal = open_journal(tmp_path / "journal", fresh)
    fresh.restore([r for r in records if r["name"] != "gone"])
    assert journal.recover(fresh) == 6
    q2 = fresh.queues["q"]
    got = []
    while (entry := q2.get(no_ack=True)) is not None:
        got.append((entry.message.body, entry.redelivered, entry.delivery_count, entry.message.headers["i"]))
    assert got == [(b"1", True, 1, 1), (b"2", True, 1, 2), (b"3", False, 0, 3), (b"4", False, 0, 4),
                   (b"5", False, 0, 5)]
    shared = fresh.queues["other"].get()
    assert shared is not None and shared.message.body == b"5"
    # the deleted queue's message does not come back when a queue of that name is declared again
    fresh.declare_queue("gone", durable=True)
    journal.close()
    again = Namespace("v")
    journal = open_journal(tmp_path / "journal", again)
    again.restore(fresh.records())
    journal.recover(again)
    assert again.queues["gone"].message_count == 0
    journal.close()


def test_recovered_messages_keep_ttl_and_new_ids_continue(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    q = ns.declare_queue("q", durable=True, arguments={"x-message-ttl": 3_600_000})[0]
    q.enqueue(persistent(b"a"))
    records = ns.records()
    journal.close()
    fresh = Namespace("v")
    journal = open_journal(tmp_path / "journal", fresh)
    fresh.restore(records)
    journal.recover(fresh)
    q2 = fresh.queues["q"]
    deadline = q2.next_deadline()
    assert deadline is not None and 3500 < deadline - fresh.clock() <= 3600
    q2.enqueue(persistent(b"b"))
    assert [m.journal_id for m in q2._fresh] == [1, 2]   # ids are not reused after a restart
    journal.close()


def test_a_writer_process_that_dies_fails_its_group_and_is_replaced(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    q = ns.declare_queue("q", durable=True)[0]

    async def main() -> tuple[BaseException | None, BaseException | None]:
        journal.attach_loop(asyncio.get_running_loop())
        writer = journal._writer
        assert writer is not None
        os.kill(writer.pid, signal.SIGSTOP)           # frozen: it cannot commit what it gets
        q.enqueue(persistent(b"lost"))
        first = journal.pending
        assert first is not None
        await wait_until_async(lambda: journal.figures.in_flight_since is not None,
                               what="the group handed off to the frozen writer")
        os.kill(writer.pid, signal.SIGKILL)
        done = asyncio.Event()
        first.when_durable(done.set)
        await asyncio.wait_for(done.wait(), 10)
        q.enqueue(persistent(b"kept"))                # the next group goes to a new writer
        second = journal.pending
        assert second is not None
        done = asyncio.Event()
        second.when_durable(done.set)
        await asyncio.wait_for(done.wait(), 30)
        return first.error, second.error

    first_error, second_error = asyncio.run(main())
    assert isinstance(first_error, OSError) and second_error is None
    journal.close()
    assert [r["body"] for r in rows(journal, "body IS NOT NULL")] == [b"kept"]


def test_recovery_reads_from_the_watermark_and_finds_the_same_messages(tmp_path: Path) -> None:
    from lakehouse.journal_writer import advance_watermark, read_watermark

    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    q = ns.declare_queue("q", durable=True)[0]
    for i in range(6):
        q.enqueue(persistent(b"%d" % i))
    for _ in range(3):
        q.settle(q.get())                             # type: ignore[arg-type]   # ids 1-3 end
    held = q.get()                                    # id 4 is out with a consumer: still live
    assert held is not None
    records = ns.records()
    journal.close()
    journal.table.open()
    assert read_watermark(journal.path) == 0
    assert advance_watermark(journal.table) == 4      # the lowest live id
    assert read_watermark(journal.path) == 4
    assert advance_watermark(journal.table) == 4      # idempotent

    fresh = Namespace("v")
    journal = open_journal(tmp_path / "journal", fresh)
    fresh.restore(records)
    assert journal.recover(fresh) == 3
    got = [(e.message.body, e.redelivered) for e in iter(lambda: fresh.queues["q"].get(no_ack=True), None)]
    assert got == [(b"3", True), (b"4", False), (b"5", False)]
    journal.close()
