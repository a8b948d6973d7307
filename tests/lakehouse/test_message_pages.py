"""Reading paged-out messages back from the journal's files by id (lakehouse.message_pages).

Every journal here is written by the broker's own journal code
(:class:`~lakehouse.journal.DeltaMessageJournal`, one Delta commit per group),
and what :class:`MessagePages` reads is checked against the messages sent and
against :class:`~lakehouse.queue_reads.JournalReader` (DataFusion SQL).
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.protocol.amqp0_9_1.properties import FORMAT, encode_properties
from broker.protocol.amqp1_0.message_format import message_from_transfer
from broker.protocol.amqp1_0.sections import encode_sections
from broker.protocol.amqp1_0.types import ApplicationProperties, Data, Header, Properties, Symbol
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal import DeltaMessageJournal
from lakehouse.journal_schema import JOURNAL_SCHEMA, NATIVE_SQL
from lakehouse.maintenance import TableMaintenance
from lakehouse.message_pages import MessagePages, PagesMissing, StoredMessage
from lakehouse.queue_reads import JournalReader, MissingMessages

from .snapshot_support import build_varied_journal, commit

FIXTURE_V1 = Path(__file__).parent / "fixtures" / "journal_v1"
LEASE = 60.0


def message_0_9_1(k: int) -> Message:
    properties = MessageProperties(delivery_mode=2, content_type="text/plain", headers={"k": k},
                                   correlation_id=f"c-{k}")
    return Message(exchange="ex", routing_key=f"rk.{k % 5}", body=b"body-%d " % k + bytes(k % 7) * 3,
                   properties=properties, native=encode_properties(properties), format=FORMAT,
                   arrival=time.monotonic())


def message_1_0(k: int) -> Message:
    payload = encode_sections([Header(durable=True), Properties(message_id=f"m-{k}", content_type=Symbol("text/x")),
                               ApplicationProperties({"k": k}), Data(b"one-oh-%d" % k)])
    return message_from_transfer(payload, exchange="amq.topic", routing_key=f"sensors.{k}", arrival=time.monotonic())


def write_journal(path: Path, commits: int, per_commit: int) -> tuple[list[Message], DeltaMessageJournal, Namespace]:
    """``commits`` group commits (a data file each) of ``per_commit`` messages to queue 'q'; every
    third an AMQP 1.0 message, every fourth also routed to queue 'r' (its body on q's row only)."""
    ns = Namespace("v")
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    ns.journal = journal
    q = ns.declare_queue("q", durable=True)[0]
    r = ns.declare_queue("r", durable=True)[0]
    sent: list[Message] = []
    for n in range(commits):
        for i in range(per_commit):
            k = n * per_commit + i
            message = message_1_0(k) if k % 3 == 0 else message_0_9_1(k)
            q.enqueue(message)
            if k % 4 == 1:
                r.enqueue(message)
            sent.append(message)
        commit(journal)
    return sent, journal, ns


def as_journal_reader_reads(path: Path, ids: list[int]) -> list[tuple[Any, ...]]:
    """What JournalReader (DataFusion SQL) says of ``ids``, with the native bytes, in StoredMessage's terms."""
    rows = JournalReader(str(path)).read("q", [[i, i] for i in ids], {}).to_pylist()
    table = AppendOnlyTable(path, JOURNAL_SCHEMA).read(
        f"SELECT message_id, {NATIVE_SQL} AS native FROM t WHERE event = 'enqueue' AND body IS NOT NULL")
    natives = dict(zip(table.column("message_id").to_pylist(), table.column("native").to_pylist()))
    return [(r["message_id"], r["exchange"], r["routing_key"], r["published_at"].timestamp(), r["message_format"],
             natives[r["message_id"]] or b"", r["body"]) for r in rows]


def plain(messages: list[StoredMessage]) -> list[tuple[Any, ...]]:
    return [(m.message_id, m.exchange, m.routing_key, round(m.published_at, 6), m.message_format, m.native, m.body)
            for m in messages]


def rounded(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [(*row[:3], round(row[3], 6), *row[4:]) for row in rows]


def expected(sent: list[Message]) -> list[tuple[Any, ...]]:
    """The messages as sent: (id, exchange, routing key, format, native, body)."""
    return [(m.journal_id, m.exchange, m.routing_key, *m.native(), m.body) for m in sent]


def without_time(messages: list[StoredMessage]) -> list[tuple[Any, ...]]:
    return [(m.message_id, m.exchange, m.routing_key, m.message_format, m.native, m.body) for m in messages]


def data_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.parquet"))


def test_every_message_of_many_files_reads_back_intact_in_runs(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, _ = write_journal(path, 12, 20)
    journal.close()
    assert len(data_files(path)) == 12
    assert {m.native()[0] for m in sent} == {"amqp-0-9-1", "amqp-1.0"}
    ids = [m.journal_id for m in sent]
    assert ids == list(range(1, 241))
    pages = MessagePages(path)
    got: list[StoredMessage] = []
    for start in range(0, len(ids), 7):                   # runs of 7 consecutive ids, across files
        got += pages.read(ids[start:start + 7])
    assert without_time(got) == expected(sent)
    assert pages.pages_read == 12                         # each file decoded once, then served from memory
    assert plain(got) == rounded(as_journal_reader_reads(path, ids))
    assert all(abs(m.published_at - time.time()) < 600 for m in got)


def test_a_read_picks_scattered_ids_and_fanned_out_messages_have_one_body(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, _ = write_journal(path, 5, 10)
    journal.close()
    table = AppendOnlyTable(path, JOURNAL_SCHEMA)
    fanned = table.read("SELECT message_id, COUNT(*) AS n, COUNT(body) AS bodies FROM t"
                        " WHERE event = 'enqueue' GROUP BY message_id HAVING COUNT(*) > 1").to_pylist()
    assert fanned and all(row["bodies"] == 1 for row in fanned)
    wanted = [2, 3, 17, 18, 19, 33, 50]
    got = MessagePages(path, cache_bytes=0).read(wanted)
    assert without_time(got) == expected([sent[i - 1] for i in wanted])
    assert plain(got) == rounded(as_journal_reader_reads(path, wanted))


def test_the_varied_journal_reads_as_the_journal_reader_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal, _ = build_varied_journal(path)            # acks, requeues, a transaction, dead letters, range rows
    journal.close()
    ids = AppendOnlyTable(path, JOURNAL_SCHEMA).read(
        "SELECT message_id FROM t WHERE event = 'enqueue' AND body IS NOT NULL ORDER BY message_id"
    ).column("message_id").to_pylist()
    assert len(ids) > 10
    assert AppendOnlyTable(path, JOURNAL_SCHEMA).read(
        "SELECT COUNT(*) AS n FROM t WHERE first_message_id IS NOT NULL").column("n")[0].as_py() > 0
    assert plain(MessagePages(path).read(ids)) == rounded(as_journal_reader_reads(path, ids))


def test_ids_the_journal_does_not_hold_are_named(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, _ = write_journal(path, 3, 10)
    journal.close()
    pages = MessagePages(path)
    with pytest.raises(MissingMessages) as raised:
        pages.read([0, 5, 6, 31, 40])
    assert isinstance(raised.value, PagesMissing) and raised.value.ids == [0, 31, 40]
    assert "3 message(s) (0, 31, 40)" in str(raised.value)
    assert without_time(pages.read([5, 6])) == expected(sent[4:6])     # the reader is still fine
    assert pages.read([]) == []
    with pytest.raises(ValueError):
        pages.read([6, 5])


def test_messages_committed_after_the_index_was_read_are_found(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, ns = write_journal(path, 2, 10)
    pages = MessagePages(path)
    assert without_time(pages.read([1, 2])) == expected(sent[:2])
    refreshes = pages.refreshes
    later = [message_0_9_1(1000 + i) for i in range(10)]
    for message in later:
        ns.queues["q"].enqueue(message)
    commit(journal)
    journal.close()
    assert without_time(pages.read([m.journal_id for m in later])) == expected(later)
    assert pages.refreshes == refreshes + 1
    assert without_time(pages.read([3, 4])) == expected(sent[2:4])
    assert pages.refreshes == refreshes + 1              # within the index: no need to read the log


def test_files_of_settlements_are_never_decoded(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, ns = write_journal(path, 2, 10)
    q = ns.queues["q"]
    for _ in range(2):                                    # two commits of acks of messages 1-10
        for _ in range(5):
            entry = q.get()
            assert entry is not None
            q.settle(entry)
        commit(journal)
    grant = ns.leases.grant(ns.queues["r"], "job", "s", 5, LEASE)         # a range row over the ids
    assert grant.message_ids
    commit(journal)
    journal.close()
    assert len(data_files(path)) == 5
    pages = MessagePages(path)
    assert without_time(pages.read([m.journal_id for m in sent])) == expected(sent)
    assert pages.pages_read == 2


def test_a_reader_follows_compaction_and_vacuum(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, _ = write_journal(path, 6, 10)
    journal.close()
    pages = MessagePages(path, cache_bytes=0)            # keeps no page: every read goes to the files
    assert without_time(pages.read([1, 2, 3])) == expected(sent[:3])
    old = set(data_files(path))
    table = AppendOnlyTable(path, JOURNAL_SCHEMA, name="journal", stats_column="message_id")
    table.open()
    assert TableMaintenance(table, compact_min_files=2).compact() == 6
    # before vacuum, the reader's index names the removed files, which are still there
    assert without_time(pages.read([11, 12])) == expected(sent[10:12])
    table.vacuum_remote(0)
    table.close()
    assert not old & set(data_files(path)) and len(data_files(path)) == 1
    refreshes = pages.refreshes
    assert without_time(pages.read([m.journal_id for m in sent])) == expected(sent)
    assert pages.refreshes == refreshes + 1
    fresh = MessagePages(path)
    assert without_time(fresh.read([m.journal_id for m in sent])) == expected(sent)


def test_delta_rs_compaction_rewrites_are_read_too(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, _ = write_journal(path, 4, 10)
    journal.close()
    pages = MessagePages(path, cache_bytes=0)
    assert without_time(pages.read([1])) == expected(sent[:1])
    table = AppendOnlyTable(path, JOURNAL_SCHEMA, name="journal")
    assert table.compact_remote(1 << 30) == 4
    table.vacuum_remote(0)
    assert without_time(pages.read([m.journal_id for m in sent])) == expected(sent)


def test_the_cache_is_bounded_by_bytes(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, _ = write_journal(path, 8, 10)
    journal.close()
    one = MessagePages(path)
    one.read([1])
    page = one.cached_bytes
    assert page > 0
    pages = MessagePages(path, cache_bytes=3 * page)
    assert without_time(pages.read([m.journal_id for m in sent])) == expected(sent)
    assert 0 < pages.cached_bytes <= 3 * page
    assert pages.pages_read == 8
    pages.read([75, 76])                                  # the last files' pages are still there
    assert pages.pages_read == 8
    pages.read([1])                                       # the first file's was dropped
    assert pages.pages_read == 9


def test_a_reader_starts_again_from_the_checkpoint_when_commits_after_it_were_cleaned_up(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, ns = write_journal(path, 2, 5)
    pages = MessagePages(path)
    assert without_time(pages.read([1])) == expected(sent[:1])
    later: list[Message] = []
    for n in range(4):
        batch = [message_0_9_1(100 + 5 * n + i) for i in range(5)]
        for message in batch:
            ns.queues["q"].enqueue(message)
        later += batch
        commit(journal)
    journal.close()
    table = AppendOnlyTable(path, JOURNAL_SCHEMA, name="journal")
    table.checkpoint()
    latest = table.delta_table().version()
    kept = pages.version
    assert latest - kept > 2
    log_dir = path / "_delta_log"
    for version in range(kept + 2, latest):          # log clean-up under way: a gap after the next commit
        for suffix in (".json", ".crc"):
            (log_dir / f"{version:020d}{suffix}").unlink(missing_ok=True)
    assert without_time(pages.read([m.journal_id for m in later])) == expected(later)


def test_rows_of_schema_1_read_their_native_bytes_from_properties_raw(tmp_path: Path) -> None:
    path = tmp_path / "journal_v1"
    shutil.copytree(FIXTURE_V1, path)
    rows = AppendOnlyTable(path, JOURNAL_SCHEMA).read(
        "SELECT message_id, exchange, routing_key, body, properties_raw FROM t"
        " WHERE event = 'enqueue' AND body IS NOT NULL ORDER BY message_id").to_pylist()
    assert rows
    ids = [row["message_id"] for row in rows]
    as_written = [(r["message_id"], r["exchange"], r["routing_key"], "amqp-0-9-1", r["properties_raw"], r["body"])
                  for r in rows]
    assert without_time(MessagePages(path).read(ids)) == as_written         # a table still at schema 1
    ns = Namespace("v")
    journal = DeltaMessageJournal(path, "v")
    journal.open()                                       # schema 1 -> 3: new columns, null in old rows
    ns.journal = journal
    new = message_1_0(7)
    ns.declare_queue("extra", durable=True)[0].enqueue(new)
    journal.close()
    table = AppendOnlyTable(path, JOURNAL_SCHEMA, name="journal", stats_column="message_id")
    table.open()
    # the upkeep's compaction: one file of both schemas' rows, the old ones with null message_format and native
    assert TableMaintenance(table, compact_min_files=2).compact() == 2
    table.vacuum_remote(0)
    table.close()
    assert len(data_files(path)) == 1
    got = MessagePages(path).read([*ids, new.journal_id])
    assert without_time(got) == [*as_written, *expected([new])]
    assert plain(got) == rounded(as_journal_reader_reads(path, [*ids, new.journal_id]))


def test_two_threads_reading_at_once_each_get_their_messages(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    sent, journal, _ = write_journal(path, 6, 10)
    journal.close()
    pages = MessagePages(path, cache_bytes=0)            # every read decodes: the threads meet in the files
    results: dict[int, list[tuple[Any, ...]]] = {}

    def reader(number: int) -> None:
        got: list[StoredMessage] = []
        for _ in range(5):
            got = []
            for start in range(number, 60, 8):           # thread 0: ids 1-4, 9-12, ...; thread 1: 5-8, ...
                got += pages.read([m.journal_id for m in sent[start:start + 4]])
        results[number] = without_time(got)

    threads = [threading.Thread(target=reader, args=(n,)) for n in (0, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for n in (0, 4):
        assert results[n] == expected([m for start in range(n, 60, 8) for m in sent[start:start + 4]])
