"""What Spark's executors run: reading a queue's messages from the journal by message id (no JVM)."""

from __future__ import annotations

import datetime
import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pytest

from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.protocol.amqp0_9_1.properties import FORMAT, encode_properties
from lakehouse.journal import DeltaMessageJournal
from broker.messaging.leases import id_ranges
from lakehouse.lease_client import expand
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.queue_reads import (MESSAGE_COLUMNS, JournalReader, MissingMessages, journal_reader, live_messages,
                                   range_slices, read_messages)
from lakehouse.spark_source import QueueOptions


def persistent(body: bytes, **props: Any) -> Message:
    properties = MessageProperties(delivery_mode=2, **props)
    return Message(exchange="ex", routing_key="rk", body=body, properties=properties,
                   native=encode_properties(properties), format=FORMAT, arrival=time.monotonic())


def journal_of_commits(path: Path, commits: int, per_commit: int,
                       after_commit: Callable[[int], None] | None = None) -> Namespace:
    """A journal of ``commits`` group commits (one data file each) of ``per_commit`` messages to 'q'.

    ``after_commit(n)`` runs once commit ``n`` (from 0) is in the journal.
    """
    records: list[dict[str, Any]] = []
    ns = Namespace("v")
    for n in range(commits):
        ns = Namespace("v")
        journal = DeltaMessageJournal(path, "v")
        journal.open()
        ns.journal = journal
        if records:
            ns.restore(records)
        journal.recover(ns)
        queue = ns.declare_queue("q", durable=True)[0]
        for i in range(per_commit):
            queue.enqueue(persistent(b"m%d" % (n * per_commit + i), headers={"i": n * per_commit + i},
                                     content_type="text/plain"))
        records = ns.records()
        journal.close()                          # no event loop: one in-process commit
        if after_commit is not None:
            after_commit(n)
    return ns


def data_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.parquet"))


def test_messages_are_read_by_id_with_their_columns(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal_of_commits(path, 1, 5)
    table = read_messages(str(path), "q", [2, 4], {4: 3})
    assert table.column_names == list(MESSAGE_COLUMNS)
    rows = table.to_pylist()
    assert [(r["message_id"], r["body"], r["delivery_count"], r["redelivered"]) for r in rows] == \
        [(2, b"m1", 0, False), (4, b"m3", 3, True)]
    assert rows[0]["exchange"] == "ex" and rows[0]["routing_key"] == "rk" and rows[0]["queue"] == "q"
    assert json.loads(rows[0]["headers"]) == {"i": 1}
    assert dict(rows[0]["properties"])["content_type"] == "text/plain"
    assert rows[0]["message_format"] == "amqp-0-9-1" and rows[0]["published_at"] is not None


def test_a_slice_of_ids_opens_only_the_files_whose_id_bounds_overlap_it(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal_of_commits(path, 4, 10)              # ids 1-10, 11-20, 21-30, 31-40: a file each
    files = data_files(path)
    assert len(files) == 4
    oldest = min(files, key=lambda f: f.stat().st_mtime_ns)
    oldest.unlink()                               # ids 1-10: reading it now would fail
    table = read_messages(str(path), "q", list(range(21, 31)), {})
    assert table.column("body").to_pylist() == [b"m%d" % i for i in range(20, 30)]
    with pytest.raises(Exception):
        read_messages(str(path), "q", [3], {})


def test_a_kept_reader_reads_its_snapshot_and_catches_up_only_when_messages_are_missing(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    reader = JournalReader(str(path))
    seen: list[tuple[int, list[bytes]]] = []

    def read_newest(n: int) -> None:            # the ids commit n just added: beyond the kept snapshot
        table = reader.read("q", [[n * 10 + 1, n * 10 + 10]], {})
        seen.append((reader.version, table.column("body").to_pylist()))

    journal_of_commits(path, 3, 10, after_commit=read_newest)
    assert [bodies for _, bodies in seen] == [[b"m%d" % i for i in range(n * 10, n * 10 + 10)] for n in range(3)]
    versions = [version for version, _ in seen]
    assert versions == sorted(versions) and len(set(versions)) == 3
    kept = reader.version
    assert reader.read("q", [[5, 7], [12, 12]], {7: 2}).to_pydict()["delivery_count"] == [0, 0, 2, 0]
    assert reader.version == kept                # all there: the log was not read again
    assert journal_reader(str(path)) is journal_reader(str(path))


def test_a_kept_reader_reads_again_when_its_files_were_compacted_away(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal_of_commits(path, 3, 10)
    reader = JournalReader(str(path))
    assert reader.read("q", [[1, 30]], {}).num_rows == 30
    kept = reader.version
    table = AppendOnlyTable(path, JOURNAL_SCHEMA, name="journal")
    assert table.compact_remote(1 << 30) == 3
    table.vacuum_remote(0)                       # the kept snapshot's three files are gone
    assert reader.read("q", [[11, 20]], {}).column("body").to_pylist() == [b"m%d" % i for i in range(10, 20)]
    assert reader.version > kept


def test_a_kept_reader_opens_the_journal_afresh_when_the_commits_after_its_snapshot_were_cleaned_up(
        tmp_path: Path) -> None:
    path = tmp_path / "journal"
    reader = JournalReader(str(path))
    table = AppendOnlyTable(path, JOURNAL_SCHEMA, name="journal")
    checkpoints: list[int] = []

    def read_first_then_checkpoint(n: int) -> None:
        if n == 0:
            assert reader.read("q", [[1, 10]], {}).num_rows == 10
        if n == 3:
            table.checkpoint()
            checkpoints.append(table.delta_table().version())

    journal_of_commits(path, 6, 10, after_commit=read_first_then_checkpoint)
    kept, [checkpoint] = reader.version, checkpoints
    # log clean-up under way: it removes the commits the checkpoint holds, in no particular order
    # (here all but the first after the kept snapshot), so the commits left have a gap
    assert checkpoint - kept > 2
    log_dir = path / "_delta_log"
    for version in range(kept + 2, checkpoint):
        for suffix in (".json", ".crc"):
            (log_dir / f"{version:020d}{suffix}").unlink(missing_ok=True)
    assert reader.read("q", [[51, 60]], {}).column("body").to_pylist() == [b"m%d" % i for i in range(50, 60)]
    assert reader.version == table.delta_table().version()


def enqueue_rows(ids: list[int]) -> pa.Table:
    """Journal rows enqueueing messages ``ids`` (bodies ``b"x<id>"``) on queue 'q'."""
    count = len(ids)
    columns = {field.name: pa.nulls(count, field.type) for field in JOURNAL_SCHEMA}
    columns.update(vhost=pa.array(["v"] * count), event=pa.array(["enqueue"] * count),
                   queue=pa.array(["q"] * count), message_id=pa.array(ids, pa.int64()),
                   at=pa.array([datetime.datetime.now(datetime.timezone.utc)] * count,
                               JOURNAL_SCHEMA.field("at").type),
                   body=pa.array([b"x%d" % i for i in ids], pa.binary()))
    return pa.table([columns[field.name] for field in JOURNAL_SCHEMA], schema=JOURNAL_SCHEMA)


def test_a_kept_reader_that_lists_the_log_mid_commit_reads_once_the_commit_is_whole(tmp_path: Path) -> None:
    """The journal writes ``N.json`` then ``N.crc``: bringing a kept snapshot up to date between the
    two (delta-rs refuses the listing) opens the journal afresh, listing again until the commit is whole."""
    table = AppendOnlyTable(tmp_path / "journal", JOURNAL_SCHEMA, name="journal")
    table.open()
    table.append(enqueue_rows([1, 2]))
    reader = JournalReader(str(tmp_path / "journal"))
    assert reader.read("q", [[1, 2]], {}).num_rows == 2
    log_dir = tmp_path / "journal" / "_delta_log"
    newest = max(int(f.stem) for f in log_dir.glob("*.json"))
    (log_dir / f"{newest + 1:020d}.crc").write_text((log_dir / f"{newest:020d}.crc").read_text())

    def complete_the_commit() -> None:
        time.sleep(0.05)
        table.append(enqueue_rows([3, 4]))       # the .json, then the .crc
    writer = threading.Thread(target=complete_the_commit)
    writer.start()
    try:
        assert reader.read("q", [[3, 4]], {}).column("body").to_pylist() == [b"x3", b"x4"]
    finally:
        writer.join()
    assert reader.version == newest + 1
    table.close()


def test_ids_without_a_body_are_named(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal_of_commits(path, 1, 3)
    with pytest.raises(MissingMessages, match=r"1 message\(s\) of queue 'q' \(7\)"):
        read_messages(str(path), "q", [2, 7], {})


def test_live_messages_are_the_unsettled_ones_with_their_deliveries(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    ns = journal_of_commits(path, 1, 4)
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    fresh = Namespace("v")
    fresh.journal = journal
    fresh.restore(ns.records())
    journal.recover(fresh)
    queue = fresh.queues["q"]
    first = queue.get()
    assert first is not None
    queue.settle(first)                           # 1 acked
    second = queue.get()
    assert second is not None
    queue.release(second)                         # 2 delivered once, back in the queue
    journal.close()
    assert live_messages(str(path), "q") == ([2, 3, 4], {2: 1})
    assert live_messages(str(path), "other") == ([], {})


def test_slices_and_ranges() -> None:
    parts = range_slices([[1, 5000]], 4)
    assert parts == [[[1, 1250]], [[1251, 2500]], [[2501, 3750]], [[3751, 5000]]]
    assert range_slices([[0, 9]], 4) == [[[0, 9]]]             # under 1,000 ids: one task
    assert range_slices([], 4) == []
    # ranges are cut where a slice is full, and never listed id by id
    parts = range_slices([[1, 1500], [2001, 2100], [3001, 3400]], 2)
    assert parts == [[[1, 1000]], [[1001, 1500], [2001, 2100], [3001, 3400]]]
    parts = range_slices([[1, 999_999], [2_000_001, 2_000_001]], 3)
    assert [sum(last - first + 1 for first, last in part) for part in parts] == [333_334, 333_334, 333_332]
    assert parts[-1][-1] == [2_000_001, 2_000_001]
    assert id_ranges([1, 2, 3, 7, 9, 10]) == [[1, 3], [7, 7], [9, 10]]
    assert expand([[1, 3], [7, 7]]) == [1, 2, 3, 7]


def test_options_say_what_to_fix() -> None:
    with pytest.raises(ValueError, match="option 'queue' is required"):
        QueueOptions.parse({})
    with pytest.raises(ValueError, match="option 'maxMessagesPerBatch' must be an integer"):
        QueueOptions.parse({"queue": "q", "maxMessagesPerBatch": "many"})
    with pytest.raises(ValueError, match="option 'leaseSeconds' must be at least 1"):
        QueueOptions.parse({"queue": "q", "leaseSeconds": "0"})
    options = QueueOptions.parse({"queue": "orders", "vhost": "shop"})
    assert (options.node, options.consumer, options.max_messages, options.lease_seconds) == \
        ("shop", "spark-orders", 10_000, 60)
    assert options.client("s").queue_url == "http://127.0.0.1:8080/api/latest/queue/shop/shop/orders"
    with pytest.raises(ValueError, match="give the option 'path'"):
        options.journal(None)
