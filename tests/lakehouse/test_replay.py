"""Replay's reading side (lakehouse.replay): one queue's journaled messages between two
versions or two times, from a journal the broker's own journal code wrote."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.protocol.amqp0_9_1.properties import FORMAT, encode_properties
from lakehouse.journal import DeltaMessageJournal
from lakehouse.replay import BadRange, JournaledMessage, JournalHistory, QueueHistoryProcess


def persistent(body: bytes, exchange: str = "", routing_key: str = "rk", **props: Any) -> Message:
    properties = MessageProperties(delivery_mode=2, **props)
    return Message(exchange=exchange, routing_key=routing_key, body=body, properties=properties,
                   native=encode_properties(properties), format=FORMAT, arrival=time.monotonic())


class Journaled:
    """A namespace with a journal written in-process: :meth:`commit` makes one Delta version."""

    def __init__(self, path: Path, *queues: str) -> None:
        self.namespace = Namespace("v")
        self.journal = DeltaMessageJournal(path, "v")
        self.journal.open()
        self.namespace.journal = self.journal
        self.queues = {name: self.namespace.declare_queue(name, durable=True)[0] for name in queues}

    def commit(self) -> int:
        """Commit what was journaled since the last commit (one Delta commit); its version."""
        self.journal.close()                    # no loop: the open group is committed here
        self.journal.open()
        return self.journal.table.version

    def history(self) -> JournalHistory:
        """The journal's history read in this process (the broker's reads in a child)."""
        return JournalHistory(self.journal.table.uri)

    def read(self, queue: str, *, batch_size: int = 500, **bounds: Any) -> list[JournaledMessage]:
        reader = self.history().queue(queue, batch_size=batch_size, **bounds)
        reader.open()
        found: list[JournaledMessage] = []
        while batch := reader.next_batch():
            assert len(batch) <= batch_size
            found += batch
        return found

    def close(self) -> None:
        self.journal.close()


@pytest.fixture
def journaled(tmp_path: Path) -> Any:
    journaled = Journaled(tmp_path / "journal", "q", "other", "it's")
    yield journaled
    journaled.close()


def bodies(found: list[JournaledMessage]) -> list[bytes]:
    return [m.body for m in found]


def test_versions_select_the_enqueues_those_commits_added(journaled: Journaled) -> None:
    q, other = journaled.queues["q"], journaled.queues["other"]
    q.enqueue(persistent(b"m1"))
    q.enqueue(persistent(b"m2"))
    first = journaled.commit()
    fanned = persistent(b"m4", exchange="fan", routing_key="k", headers={"h": 1}, message_id="id-4",
                        content_type="text/plain", priority=3)
    q.enqueue(persistent(b"m3"))
    other.enqueue(fanned)                   # the body goes on other's row ...
    q.enqueue(fanned)                       # ... and q's row only names the message
    q.settle(q.get())                       # type: ignore[arg-type]   # m1 acked: still history
    second = journaled.commit()
    q.enqueue(persistent(b"m5"))
    third = journaled.commit()
    assert first < second < third

    assert bodies(journaled.read("q", from_version=second, to_version=second)) == [b"m3", b"m4"]
    assert bodies(journaled.read("q", from_version=second)) == [b"m3", b"m4", b"m5"]
    assert bodies(journaled.read("q", to_version=first)) == [b"m1", b"m2"]
    assert bodies(journaled.read("q", from_version=0)) == [b"m1", b"m2", b"m3", b"m4", b"m5"]
    assert bodies(journaled.read("q", from_version=third, to_version=third)) == [b"m5"]
    assert bodies(journaled.read("other", from_version=second)) == [b"m4"]

    # the fanned-out message, whole, from the other queue's row
    got = journaled.read("q", from_version=second, to_version=second)[1]
    assert (got.exchange, got.routing_key, got.message_format) == ("fan", "k", "amqp-0-9-1")
    assert got.native == fanned.native_for(FORMAT)
    assert FORMAT.decode(got.native) == fanned.properties
    assert got.message_id == fanned.journal_id


def test_times_select_enqueues_from_the_first_included_to_the_second_excluded(
        journaled: Journaled) -> None:
    q, other = journaled.queues["q"], journaled.queues["other"]
    early = persistent(b"early")
    before = datetime.now(timezone.utc)
    q.enqueue(early)
    journaled.commit()
    middle = datetime.now(timezone.utc)
    q.enqueue(persistent(b"late"))
    other.enqueue(early)                    # reached other later: when it reached *that* queue counts
    journaled.commit()
    after = datetime.now(timezone.utc)

    assert bodies(journaled.read("q", from_time=before, to_time=middle)) == [b"early"]
    assert bodies(journaled.read("q", from_time=middle, to_time=after)) == [b"late"]
    assert bodies(journaled.read("q", from_time=middle)) == [b"late"]
    assert bodies(journaled.read("q", to_time=middle)) == [b"early"]
    assert bodies(journaled.read("other", from_time=middle)) == [b"early"]
    assert journaled.read("other", to_time=middle) == []
    assert journaled.read("q", from_time=after) == []
    # times and versions together: both bounds hold
    assert journaled.read("q", from_time=middle, to_version=1) == []
    # a time with another offset means the same instant
    shifted = middle.astimezone(timezone(timedelta(hours=-5)))
    assert bodies(journaled.read("q", from_time=shifted)) == [b"late"]


def test_pages_keep_message_id_order_and_limit_counts_messages(journaled: Journaled) -> None:
    q = journaled.queues["q"]
    for i in range(7):
        q.enqueue(persistent(b"%d" % i))
    journaled.commit()
    expected = [b"%d" % i for i in range(7)]
    assert bodies(journaled.read("q", from_version=0, batch_size=2)) == expected
    reader = journaled.history().queue("q", from_version=0, batch_size=3, limit=5)
    reader.open()
    pages = []
    while batch := reader.next_batch():
        pages.append(bodies(batch))
    assert pages == [[b"0", b"1", b"2"], [b"3", b"4"]]
    assert reader.read == 5


def test_the_version_read_is_pinned_when_the_reader_opens(journaled: Journaled) -> None:
    q = journaled.queues["q"]
    q.enqueue(persistent(b"old"))
    pinned = journaled.commit()
    reader = journaled.history().queue("q", from_version=0, batch_size=1)
    assert reader.open() == pinned
    q.enqueue(persistent(b"replayed into the same queue"))
    journaled.commit()
    assert bodies(reader.next_batch()) == [b"old"]
    assert reader.next_batch() == []


def test_queue_names_are_literals_not_sql(journaled: Journaled) -> None:
    journaled.queues["it's"].enqueue(persistent(b"quoted"))
    journaled.queues["q"].enqueue(persistent(b"not this one"))
    journaled.commit()
    assert bodies(journaled.read("it's", from_version=0)) == [b"quoted"]
    assert journaled.read("q' OR '1'='1", from_version=0) == []


@pytest.mark.parametrize("bounds, parameter, text", [
    ({}, None, "at least one bound"),
    ({"from_version": 3, "to_version": 2}, "toVersion", "before fromVersion 3"),
    ({"from_version": -1}, "fromVersion", "not a version"),
    ({"to_version": 99}, "toVersion", "not committed yet: the journal's newest version is"),
    ({"from_version": 99}, "fromVersion", "not committed yet"),
    ({"from_time": datetime(2026, 1, 2, tzinfo=timezone.utc),
      "to_time": datetime(2026, 1, 1, tzinfo=timezone.utc)}, "toTime", "is not after fromTime"),
    ({"from_time": datetime(2026, 1, 1)}, "fromTime", "no time zone"),
])
def test_bad_bounds_name_the_bound_at_fault(journaled: Journaled, bounds: dict[str, Any],
                                            parameter: str | None, text: str) -> None:
    journaled.queues["q"].enqueue(persistent(b"x"))
    journaled.commit()
    reader = journaled.history().queue("q", **bounds)
    with pytest.raises(BadRange) as refused:
        reader.open()
    assert refused.value.parameter == parameter and text in str(refused.value)


def test_a_version_whose_log_entry_is_gone_is_refused(journaled: Journaled) -> None:
    """Delta's log clean-up removes old commit files once a checkpoint covers them."""
    q = journaled.queues["q"]
    for i in range(3):
        q.enqueue(persistent(b"%d" % i))
        journaled.commit()
    journaled.journal.table.checkpoint()
    log = Path(journaled.journal.table.uri) / "_delta_log"
    (log / f"{1:020d}.json").unlink()           # what cleanup_metadata does to old entries
    (log / f"{0:020d}.json").unlink()
    reader = journaled.history().queue("q", from_version=2)
    with pytest.raises(BadRange) as refused:
        reader.open()
    assert refused.value.parameter == "fromVersion"
    assert "logRetentionDuration" in str(refused.value)
    newest = journaled.journal.table.version
    assert bodies(journaled.read("q", to_version=newest))  # the newest is still readable


def test_commit_times_come_from_the_log(journaled: Journaled) -> None:
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    journaled.queues["q"].enqueue(persistent(b"x"))
    version = journaled.commit()
    committed = journaled.history().commit_time(version)
    assert committed is not None and before <= committed <= datetime.now(timezone.utc)
    assert journaled.history().commit_time(version + 100) is None


def test_the_brokers_reader_runs_in_a_process_of_its_own_with_the_same_pages(
        journaled: Journaled) -> None:
    """delta-rs holds the interpreter lock while it reads: the broker's reader is a child
    process (journal.history()), which gives the same pages and errors as one in-process."""
    q, other = journaled.queues["q"], journaled.queues["other"]
    fanned = persistent(b"fanned")
    other.enqueue(fanned)
    for body in (b"a", b"b"):
        q.enqueue(persistent(body))
    q.enqueue(fanned)
    version = journaled.commit()
    reader = journaled.journal.history().queue("q", from_version=0, batch_size=2)
    assert isinstance(reader, QueueHistoryProcess)
    try:
        assert reader.open() == version and reader.committed is not None
        pages = []
        while batch := reader.next_batch():
            pages.append(batch)
    finally:
        reader.close()
    assert pages == [journaled.read("q", from_version=0)[:2], journaled.read("q", from_version=0)[2:]]
    assert [bodies(page) for page in pages] == [[b"fanned", b"a"], [b"b"]]    # message id order
    assert reader.read == 3 and reader.missing == []
    refused = journaled.journal.history().queue("q", from_version=5, to_version=4)
    try:
        with pytest.raises(BadRange) as error:
            refused.open()
    finally:
        refused.close()
    assert error.value.parameter == "toVersion" and "4 is before fromVersion 5" in str(error.value)
