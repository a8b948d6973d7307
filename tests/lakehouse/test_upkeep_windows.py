"""The upkeep's queries one window of message ids at a time: the same answers, bounded work.

The recovery watermark must never pass a live message (recovery reads from
it) and retention must never remove a live message's rows, whatever the
window: range rows cut by windows, settlements far later in the table than
their message, queues deleted (and declared again).  Each answer is checked
against a model computed in Python from the rows, and against the journal's
own recovery.  The memory-relevant behaviour is checked by the windows
queried: a backlog at the watermark costs one window; retention looks at no
window while nothing ended before its cut-off.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.journal_upkeep import JournalMaintenance
from lakehouse.journal_windows import Window, expired_ids, lowest_live_id, windows
from lakehouse.journal_writer import LIVE_CTES, advance_watermark, journal_sql, read_watermark, watermark_path
from lakehouse.retention import expired_message_ids, purge_settled_history

from .snapshot_support import build_varied_journal, commit, full_live

BASE = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
HOUR = dt.timedelta(hours=1)
QUEUES = ("a", "b", "c")

Row = dict[str, Any]


def row(event: str, queue: str, message_id: int, at: dt.datetime, first: int | None = None,
        **extra: Any) -> Row:
    base: Row = dict.fromkeys(JOURNAL_SCHEMA.names)
    base.update(vhost="v", event=event, queue=queue, message_id=message_id, at=at, first_message_id=first,
                **extra)
    if event == "enqueue":
        base.update(exchange="", routing_key=queue, published_at=at, body=b"%d" % message_id)
    return base


def journal(tmp_path: Path, commits: list[list[Row]]) -> AppendOnlyTable:
    table = AppendOnlyTable(tmp_path / "journal", JOURNAL_SCHEMA, stats_column="message_id")
    table.open()
    for rows in commits:
        if rows:
            table.append(pa.Table.from_pylist(rows, schema=JOURNAL_SCHEMA))
    return table


# -- the model: what the journal's rows say, computed row by row ------------------------

def entries_ended(rows: list[Row]) -> dict[tuple[str, int], dt.datetime | None]:
    """Each queue entry (queue, id) and when it ended (None: live)."""
    settled: dict[tuple[str, int], dt.datetime] = {}
    for r in rows:
        if r["event"] == "settle":
            first = r["first_message_id"] if r["first_message_id"] is not None else r["message_id"]
            for i in range(first, r["message_id"] + 1):
                key = (r["queue"], i)
                settled[key] = min(settled.get(key, r["at"]), r["at"])
    ended: dict[tuple[str, int], dt.datetime | None] = {}
    for r in rows:
        if r["event"] != "enqueue":
            continue
        key = (r["queue"], r["message_id"])
        deletions = [d["at"] for d in rows if d["event"] == "queue_deleted" and d["queue"] == r["queue"]
                     and d["message_id"] >= r["message_id"]]
        ended[key] = settled.get(key) or (min(deletions) if deletions else None)
    return ended


def model_watermark(rows: list[Row]) -> int:
    live = [i for (_, i), at in entries_ended(rows).items() if at is None]
    return min(live) if live else max(r["message_id"] for r in rows) + 1


def model_expired(rows: list[Row], cutoff: dt.datetime) -> list[int]:
    by_id: dict[int, list[dt.datetime | None]] = {}
    for (_, i), at in entries_ended(rows).items():
        by_id.setdefault(i, []).append(at)
    return sorted(i for i, ats in by_id.items()
                  if all(at is not None and at < cutoff for at in ats))


def random_journal(seed: int, commits: int = 14) -> list[list[Row]]:
    """Messages fanned out to one or two queues, settled later alone or by range rows (runs of
    consecutive ids of one queue), queue ``c`` deleted now and then and used again."""
    rng = random.Random(seed)
    out: list[list[Row]] = [[] for _ in range(commits)]
    waiting: dict[str, list[int]] = {q: [] for q in QUEUES}      # entries not settled yet, by queue
    next_id = 1
    for c in range(commits):
        at = BASE + c * HOUR
        for _ in range(rng.randint(0, 9)):
            for q in rng.sample(QUEUES, rng.randint(1, 2)):
                out[c].append(row("enqueue", q, next_id, at))
                waiting[q].append(next_id)
            next_id += 1
        for q in QUEUES:
            pending = waiting[q]
            while pending and rng.random() < 0.5:
                start = rng.randrange(len(pending))
                run = [pending[start]]
                while (start + len(run) < len(pending) and pending[start + len(run)] == run[-1] + 1
                       and rng.random() < 0.8):
                    run.append(pending[start + len(run)])
                del pending[start:start + len(run)]
                ranged = len(run) > 1 or rng.random() < 0.3
                out[c].append(row("settle", q, run[-1], at, first=run[0] if ranged else None, outcome="acked"))
        if rng.random() < 0.15:
            out[c].append(row("queue_deleted", "c", next_id - 1, at))
            waiting["c"] = []
    return out


# -- the watermark -----------------------------------------------------------------------

def test_the_watermark_never_passes_a_live_message_whatever_the_window(tmp_path: Path) -> None:
    late = BASE + 5 * HOUR
    commits = [
        [row("enqueue", "a", i, BASE) for i in range(1, 13)] + [row("enqueue", "b", 8, BASE)],
        [row("enqueue", "c", i, BASE) for i in range(13, 16)],
        # a range row settling 1..12 in a, cut by every window size below; 8 stays live in b
        [row("settle", "a", 12, late, first=1, outcome="acked")],
        [row("queue_deleted", "c", 15, late)],                  # 13..15 end with their queue
        [row("enqueue", "c", 16, late)],                        # c declared again: 16 live
    ]
    table = journal(tmp_path, commits)
    rows = [r for c in commits for r in c]
    assert model_watermark(rows) == 8
    for size in (1, 2, 3, 5, 7, 1000):
        assert lowest_live_id(table, 0, window=size) == 8, size
    more = [row("settle", "b", 8, late, outcome="acked")]   # 8 ends: the next live is 16, past c's deletion
    table.append(pa.Table.from_pylist(more, schema=JOURNAL_SCHEMA))
    assert model_watermark(rows + more) == 16
    for size in (1, 2, 4, 1000):
        assert lowest_live_id(table, 0, window=size) == 16, size
        assert lowest_live_id(table, 9, window=size) == 16, size


@pytest.mark.parametrize("seed", range(6))
def test_random_journals_watermark_and_expiry_agree_with_the_model(tmp_path: Path, seed: int) -> None:
    commits = random_journal(seed)
    table = journal(tmp_path, commits)
    rows = [r for c in commits for r in c]
    cutoff = BASE + 8 * HOUR
    expected_watermark, expected_expired = model_watermark(rows), model_expired(rows, cutoff)
    for size in (1, 3, 8, 1 << 18):
        assert lowest_live_id(table, 0, window=size) == expected_watermark, size
        assert expired_ids(table, cutoff, window=size).tolist() == expected_expired, size


def test_the_watermark_of_a_varied_journal_leaves_recovery_unchanged(tmp_path: Path) -> None:
    """Fan-out, transactions, dead letters, requeues, purges, queues deleted, range rows: at every
    commit, the windowed watermark is the whole-journal one and recovery from it reads the same."""
    journal_, _ = build_varied_journal(tmp_path / "journal")
    commit(journal_)
    table = journal_.table
    everything = full_live(journal_)
    whole = table.read(journal_sql(LIVE_CTES, 0) + " SELECT MIN(message_id) AS low FROM live").to_pylist()[0]["low"]
    assert whole is not None and whole > 1                  # some messages below it ended
    for size in (1, 2, 3, 1 << 18):
        path = watermark_path(table.uri)
        assert path is not None
        path.unlink(missing_ok=True)
        assert advance_watermark(table, window=size) == whole, size
        assert full_live(journal_) == everything, size      # recovery from the watermark: the same
    # retention of everything that ended (a cut-off in the future), 2 ids a query: the live stay whole
    assert purge_settled_history(table, dt.datetime.now(dt.timezone.utc) + HOUR, window=2) > 0
    assert full_live(journal_) == everything
    assert advance_watermark(table, window=2) == whole
    journal_.close()


def test_a_backlog_at_the_watermark_costs_one_window(tmp_path: Path) -> None:
    table = journal(tmp_path, [[row("enqueue", "q", i, BASE) for i in range(1, 201)]])
    seen: list[Window] = []
    assert advance_watermark(table, window=16, observe=seen.append) == 1
    assert seen == [(1, 17)]
    # 1..40 consumed: the watermark moves a window at a time, each 16 ids wide, and stops at 41
    table.append(pa.Table.from_pylist([row("settle", "q", i, BASE + HOUR, outcome="acked")
                                       for i in range(1, 41)], schema=JOURNAL_SCHEMA))
    seen.clear()
    assert advance_watermark(table, window=16, observe=seen.append) == 41
    assert seen == [(1, 17), (17, 33), (33, 49)]
    assert read_watermark(table.uri) == 41
    seen.clear()
    assert advance_watermark(table, window=16, observe=seen.append) == 41
    assert seen == [(41, 57)]


def test_windows_start_at_messages_and_skip_ids_without_any(tmp_path: Path) -> None:
    table = journal(tmp_path, [[row("enqueue", "q", i, BASE) for i in (*range(5, 15), 1000, 1001)],
                               [row("queue_deleted", "q", 2000, BASE)]])
    assert list(windows(table, 0, 2000, 4)) == [(5, 9), (9, 13), (13, 17), (1000, 1004)]
    assert list(windows(table, 10, 1000, 4)) == [(10, 14), (14, 18), (1000, 1004)]
    assert list(windows(table, 1002, 2000, 4)) == []
    with pytest.raises(ValueError):
        list(windows(table, 0, 10, 0))
    seen: list[Window] = []
    assert lowest_live_id(table, 0, window=4, observe=seen.append) == 2001    # all deleted
    assert seen == [(5, 9), (9, 13), (13, 17), (1000, 1004)]


def test_the_upkeep_skips_the_watermark_while_nothing_is_committed(tmp_path: Path) -> None:
    table = journal(tmp_path, [[row("enqueue", "q", i, BASE) for i in range(1, 6)],
                               [row("settle", "q", 1, BASE, outcome="acked")]])
    upkeep = JournalMaintenance(table, history_hours=10_000, retention_hours=1)
    upkeep.advance_watermark()
    upkeep.advance_watermark()
    assert upkeep.watermark_rounds == 1 and read_watermark(table.uri) == 2
    table.append(pa.Table.from_pylist([row("settle", "q", 2, BASE, outcome="acked")], schema=JOURNAL_SCHEMA))
    upkeep.advance_watermark()
    assert upkeep.watermark_rounds == 2 and read_watermark(table.uri) == 3


# -- retention ---------------------------------------------------------------------------

def test_retention_looks_at_no_window_while_nothing_ended_before_the_cutoff(tmp_path: Path) -> None:
    recent = BASE + 10 * HOUR
    table = journal(tmp_path, [[row("enqueue", "q", i, BASE) for i in range(1, 101)],
                               [row("settle", "q", i, recent, outcome="acked") for i in range(1, 51)]])
    seen: list[Window] = []
    cutoff = BASE + 5 * HOUR
    assert expired_message_ids(table, cutoff, window=8, observe=seen.append).to_pylist() == []
    assert seen == []
    # 1..30 ended before the cut-off (a range row for 21..30): only the windows up to 30 are read
    table.append(pa.Table.from_pylist([row("settle", "r", i, BASE, outcome="acked") for i in range(1, 21)]
                                      + [row("enqueue", "r", i, BASE) for i in range(1, 31)]
                                      + [row("settle", "r", 30, BASE, first=21, outcome="acked")],
                                      schema=JOURNAL_SCHEMA))
    assert expired_message_ids(table, cutoff, window=8, observe=seen.append).to_pylist() == []  # live in q
    assert seen == [(1, 9), (9, 17), (17, 25), (25, 33)]


def test_retention_with_small_windows_keeps_what_the_whole_journal_query_keeps(tmp_path: Path) -> None:
    commits = random_journal(11, commits=20)
    rows = [r for c in commits for r in c]
    cutoff = BASE + 12 * HOUR
    kept_by_size = []
    for size in (2, 1 << 18):
        table = journal(tmp_path / str(size), commits)
        purge_settled_history(table, cutoff, window=size)
        left = table.read("SELECT event, queue, message_id, first_message_id FROM t"
                          " ORDER BY message_id, event, queue, first_message_id").to_pylist()
        kept_by_size.append(left)
        # no row of a message still live (or ended after the cut-off) went
        expired = set(model_expired(rows, cutoff))
        wanted = sorted((r["event"], r["queue"], r["message_id"]) for r in rows
                        if r["first_message_id"] is None
                        and (r["message_id"] not in expired or r["event"] == "queue_deleted"))
        assert sorted((r["event"], r["queue"], r["message_id"]) for r in left
                      if r["first_message_id"] is None) == wanted
    assert kept_by_size[0] == kept_by_size[1]


def test_membership_in_sorted_ids_by_binary_search() -> None:
    import numpy as np

    from lakehouse.journal_windows import sorted_member_mask

    members = np.array([2, 5, 9], np.int64)
    values = pa.chunked_array([[1, 2, None], [9, 10, 5]], pa.int64())
    assert sorted_member_mask(values, members).to_pylist() == [False, True, False, True, False, True]
    assert sorted_member_mask(pa.array([0, 2], pa.int64()), np.empty(0, np.int64)).to_pylist() == [False, False]
