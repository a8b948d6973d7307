"""Following the journal for the dead-letter processor (:mod:`lakehouse.dlq_journal`), without Spark.

The journal here is written by the broker's own appender
(:class:`lakehouse.delta_table.AppendOnlyTable`, one commit per append, as the
broker's group commits are), with the rows the broker writes when it
dead-letters a message: the copy's ``enqueue`` into each queue the dead-letter
exchange routed it to, its body on the first.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.dlq_journal import PROGRESS_FILE, JournalFollower, JournalGone, Progress
from lakehouse.journal_schema import ENQUEUE, JOURNAL_SCHEMA, SETTLE
from lakehouse.log_state import read_commit

T0 = datetime.datetime(2026, 11, 24, 7, 0, tzinfo=datetime.timezone.utc)


def row(event: str, queue: str, message_id: int, *, body: bytes | None = None, second: float = 0,
        vhost: str = "default", **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {name: None for name in JOURNAL_SCHEMA.names}
    values.update(vhost=vhost, at=T0 + datetime.timedelta(seconds=second), event=event, queue=queue,
                  message_id=message_id)
    if body is not None:
        values.update(body=body, exchange="dlx", routing_key="work", properties=[("delivery_mode", "2")],
                      headers='{"x-death": []}', message_format="amqp-0-9-1", native=b"native-" + body)
    values.update(extra)
    return values


@pytest.fixture
def journal(tmp_path: Path) -> AppendOnlyTable:
    table = AppendOnlyTable(tmp_path / "journal", JOURNAL_SCHEMA, name="journal", stats_column="message_id")
    table.open()
    return table


def commit(journal: AppendOnlyTable, *rows: dict[str, Any]) -> int:
    return journal.append(pa.Table.from_pylist(list(rows), JOURNAL_SCHEMA))


def test_a_stretch_of_commits_gives_its_dead_letters_with_their_stored_message(journal: AppendOnlyTable) -> None:
    first = commit(journal, row(ENQUEUE, "work", 1, body=b"order"))
    # message 1 dies: its copy (message 2) reaches both dead-letter queues, its body on the first row
    dead = commit(journal, row(SETTLE, "work", 1, outcome="dead_lettered"),
                  row(ENQUEUE, "b.dlq", 2, body=b"order", second=2), row(ENQUEUE, "a.dlq", 2, second=1))
    other = commit(journal, row(ENQUEUE, "work", 3, body=b"not dead"),
                   row(ENQUEUE, "a.dlq", 4, body=b"elsewhere", vhost="other"))
    follower = JournalFollower(journal.path, ["a.dlq", "b.dlq"])
    assert follower.read_range(0, first) == []
    [letter] = follower.read_range(first, dead)
    assert (letter.vhost, letter.message_id, letter.dead_letter_queue, letter.dead_lettered_at) == (
        "default", 2, "a.dlq", T0 + datetime.timedelta(seconds=1))
    assert (letter.body, letter.native, letter.message_format, letter.exchange, letter.routing_key) == (
        b"order", b"native-order", "amqp-0-9-1", "dlx", "work")
    assert letter.properties == [("delivery_mode", "2")] and letter.headers == '{"x-death": []}'
    assert [(d.vhost, d.message_id) for d in follower.read_range(0, other)] == [("default", 2), ("other", 4)]
    # one virtual host's only
    assert [d.message_id for d in JournalFollower(journal.path, ["a.dlq"], "other").read_range(0, other)] == [4]
    # the whole journal as of a version: the same dead letters as the stretches up to it
    assert follower.read_as_of(other) == follower.read_range(0, other)
    assert follower.read_as_of(dead) == follower.read_range(0, dead)


def test_a_dead_letter_whose_message_row_is_in_an_earlier_commit_is_found(journal: AppendOnlyTable) -> None:
    stored = commit(journal, row(ENQUEUE, "held", 7, body=b"kept"))
    arrived = commit(journal, row(ENQUEUE, "a.dlq", 7, second=5))
    [letter] = JournalFollower(journal.path, ["a.dlq"]).read_range(stored, arrived)
    assert (letter.message_id, letter.body, letter.dead_lettered_at) == (7, b"kept", T0 + datetime.timedelta(seconds=5))


def test_the_newest_commit_is_found_by_probing_names(journal: AppendOnlyTable) -> None:
    follower = JournalFollower(journal.path, ["a.dlq"])
    assert follower.newest_after(0, 10) == 0
    last = [commit(journal, row(ENQUEUE, "a.dlq", n, body=b"x")) for n in range(1, 6)][-1]
    assert last == 5 and follower.newest_after(0, 10) == 5 and follower.newest_after(0, 3) == 3
    assert follower.newest_after(2, 10) == 5 and follower.has_commit(5) and not follower.has_commit(6)
    version, journal_id = follower.identity()
    assert version == 5 and journal_id


def test_a_stretch_the_log_or_the_disk_no_longer_holds_raises_journal_gone(journal: AppendOnlyTable) -> None:
    first = commit(journal, row(ENQUEUE, "a.dlq", 1, body=b"x"))
    second = commit(journal, row(ENQUEUE, "a.dlq", 2, body=b"y"))
    follower = JournalFollower(journal.path, ["a.dlq"])
    [added] = [a["add"]["path"] for a in read_commit(journal.path / "_delta_log", second) if "add" in a]
    (journal.path / added).unlink()             # vacuumed
    with pytest.raises(JournalGone, match="gone"):
        follower.read_range(first, second)
    (journal.path / "_delta_log" / f"{first:020d}.json").unlink()      # log clean-up
    with pytest.raises(JournalGone, match="no longer holds"):
        follower.read_range(0, second)


def test_progress_is_saved_and_read_back(tmp_path: Path) -> None:
    assert Progress.load(tmp_path / "checkpoint") is None
    Progress("journal-id", 41).save(tmp_path / "checkpoint")
    Progress("journal-id", 42).save(tmp_path / "checkpoint")
    assert Progress.load(tmp_path / "checkpoint") == Progress("journal-id", 42)
    (tmp_path / "checkpoint" / PROGRESS_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="not a checkpoint"):
        Progress.load(tmp_path / "checkpoint")


def test_an_append_recording_a_transaction_version_is_made_once_and_survives_checkpoints(tmp_path: Path) -> None:
    """``append_once``: the processor's curated appends, Delta idempotent writes done with delta-rs."""
    from lakehouse.delta_table import append_once, transaction_version
    from lakehouse.delta_versions import query_table

    schema = pa.schema([pa.field("n", pa.int64(), nullable=False)])
    table = AppendOnlyTable(tmp_path / "curated", schema, checkpoint_interval=10)
    table.open()                               # created with delta.checkpointInterval = 10
    assert transaction_version(table.path, "job") is None
    for version in range(1, 13):               # past a checkpoint (delta-rs's post-commit hook)
        assert append_once(table.path, pa.table({"n": [version]}, schema), "job", version)
    assert list((table.path / "_delta_log").glob("*.checkpoint.parquet"))
    assert transaction_version(table.path, "job") == 12
    assert not append_once(table.path, pa.table({"n": [99]}, schema), "job", 12)   # written already
    assert not append_once(table.path, pa.table({"n": [98]}, schema), "job", 7)    # an older one
    assert append_once(table.path, pa.table({"n": [97]}, schema), "other job", 7)  # another app id's own
    rows = sorted(query_table(table.path, "SELECT n FROM t").column("n").to_pylist())
    assert rows == [*range(1, 13), 97]
