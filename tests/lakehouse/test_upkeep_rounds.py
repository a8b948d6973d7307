"""The upkeep's rounds with bounded work: streamed rewrites and a watermark walked in steps.

Compaction and history retention stream rows from the old files to the new
one a row group at a time (:mod:`lakehouse.file_rewrite`); the recovery
watermark walks a bounded number of windows a round and the next round goes
on from there.  Each must give what the whole-at-once way gives: the same
rows, the same statistics, the same watermark in the end, never past a live
message on the way.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakehouse.file_rewrite as file_rewrite
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.file_rewrite import read_batches, write_batches_synced
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.journal_upkeep import JournalMaintenance
from lakehouse.journal_windows import Window, lowest_live_id, step_watermark
from lakehouse.journal_writer import read_watermark
from lakehouse.maintenance import TableMaintenance
from lakehouse.retention import purge_settled_history

from .test_upkeep_windows import BASE, HOUR, journal, model_expired, model_watermark, random_journal, row

SCHEMA = pa.schema([("id", pa.int64(), False), ("at", pa.timestamp("us", tz="UTC")), ("body", pa.binary())])


def numbered(start: int, count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()),
                     "at": pa.array([BASE + dt.timedelta(seconds=i) for i in range(start, start + count)],
                                    SCHEMA.field("at").type),
                     "body": [b"x" * (i % 7) for i in range(start, start + count)]}, schema=SCHEMA)


# -- streamed rewrites -------------------------------------------------------------------

def test_batches_are_written_in_row_groups_of_the_bound_with_their_statistics(tmp_path: Path) -> None:
    source = numbered(10, 25)
    pieces = [b for t in (source.slice(0, 4), source.slice(4, 1), source.slice(5, 20)) for b in t.to_batches()]
    written = write_batches_synced(iter(pieces), tmp_path / "out.parquet", SCHEMA, compression="zstd",
                                   keep=["id", "at"], rows=6)
    back = pq.ParquetFile(tmp_path / "out.parquet")
    assert [back.metadata.row_group(i).num_rows for i in range(back.num_row_groups)] == [6, 6, 6, 6, 1]
    assert back.read().equals(source)
    assert written.rows == 25 and written.size == (tmp_path / "out.parquet").stat().st_size
    # the bounds of each piece written, two rows each: what the add action's statistics come from
    ids = written.bounds.column("id").to_pylist()
    assert min(ids) == 10 and max(ids) == 34 and len(ids) < 25
    assert written.null_counts == {"id": 0, "at": 0}


def test_a_file_of_an_older_schema_reads_with_the_new_columns_null(tmp_path: Path) -> None:
    pq.write_table(numbered(0, 5).drop_columns(["body"]), tmp_path / "old.parquet")
    batches = list(read_batches(tmp_path / "old.parquet", SCHEMA, rows=2))
    assert [b.num_rows for b in batches] == [2, 2, 1]
    rows = pa.Table.from_batches(batches)
    assert rows.schema == SCHEMA and rows.column("body").null_count == 5
    assert rows.column("id").to_pylist() == [0, 1, 2, 3, 4]


def test_compaction_streams_the_files_into_one_with_the_same_rows_and_statistics(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_rewrite, "REWRITE_ROWS", 7)
    table = AppendOnlyTable(tmp_path / "t", SCHEMA, stats_column="id", time_stats_column="at")
    table.open()
    for start in range(0, 60, 6):
        table.append(numbered(start, 6))
    upkeep = TableMaintenance(table, compact_min_files=4)
    assert upkeep.compact() == 10
    state = upkeep.log_state()
    (name, add), = state.adds.items()
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 60
    assert stats["minValues"]["id"] == 0 and stats["maxValues"]["id"] == 59
    assert stats["nullCount"] == {"id": 0, "at": 0}
    assert add["size"] == (table.path / name).stat().st_size
    compacted = pq.ParquetFile(table.path / name)
    assert max(compacted.metadata.row_group(i).num_rows for i in range(compacted.num_row_groups)) == 7
    assert table.read("SELECT * FROM t ORDER BY id").cast(SCHEMA).equals(numbered(0, 60))


def test_retention_streamed_in_small_batches_removes_what_the_model_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_rewrite, "REWRITE_ROWS", 3)
    commits = random_journal(5, commits=20)
    rows = [r for c in commits for r in c]
    cutoff = BASE + 12 * HOUR
    expired = set(model_expired(rows, cutoff))
    assert expired
    table = journal(tmp_path, commits)
    removed = purge_settled_history(table, cutoff, window=4)
    left = table.read("SELECT event, queue, message_id, first_message_id FROM t").to_pylist()
    assert removed == len(rows) - len(left) > 0
    wanted = sorted((r["event"], r["queue"], r["message_id"]) for r in rows if r["first_message_id"] is None
                    and (r["message_id"] not in expired or r["event"] == "queue_deleted"))
    assert sorted((r["event"], r["queue"], r["message_id"]) for r in left if r["first_message_id"] is None) == wanted
    last = sorted((table.path / "_delta_log").glob("*.json"))[-1].read_text()
    metrics = next(json.loads(line)["commitInfo"]["operationMetrics"] for line in last.splitlines()
                   if "commitInfo" in line)
    assert int(metrics["numAddedFiles"]) > 0            # some files kept rows: rewritten in batches
    # the survivors' files say what they hold
    for add in pa.table(table.delta_table().get_add_actions(flatten=True)).to_pylist():
        ids = pq.read_table(table.path / add["path"], columns=["message_id"]).column("message_id")
        assert add["num_records"] == len(ids)
        assert add["min.message_id"] == min(ids.to_pylist())


# -- the watermark in steps ---------------------------------------------------------------

def test_the_watermark_walks_a_bounded_number_of_windows_and_goes_on_from_there(tmp_path: Path) -> None:
    table = journal(tmp_path, [[row("enqueue", "q", i, BASE) for i in range(1, 201)],
                               [row("settle", "q", i, BASE + HOUR, outcome="acked") for i in range(1, 71)]])
    seen: list[Window] = []
    steps = [step_watermark(table, table.uri, window=16, max_windows=2, observe=seen.append) for _ in range(3)]
    # windows (1,17) (17,33) hold nothing live: the step stops where the next one starts, 33
    assert steps == [(33, False), (65, False), (71, True)]
    assert seen == [(1, 17), (17, 33), (33, 49), (49, 65), (65, 81)]
    assert read_watermark(table.uri) == 71 == lowest_live_id(table, 0, window=1 << 18)
    assert step_watermark(table, table.uri, window=16, max_windows=2) == (71, True)


@pytest.mark.parametrize("seed", range(4))
def test_watermark_steps_of_random_journals_never_pass_a_live_message(tmp_path: Path, seed: int) -> None:
    commits = random_journal(seed, commits=18)
    rows = [r for c in commits for r in c]
    expected = model_watermark(rows)
    table = journal(tmp_path, commits)
    for _ in range(200):
        value, reached = step_watermark(table, table.uri, window=2, max_windows=1)
        assert value <= expected
        if reached:
            break
    assert value == expected


def test_the_upkeep_goes_on_with_a_walk_cut_short_without_new_commits(tmp_path: Path) -> None:
    table = journal(tmp_path, [[row("enqueue", "q", i, BASE) for i in range(1, 101)],
                               [row("settle", "q", i, BASE, outcome="acked") for i in range(1, 51)]])
    upkeep = JournalMaintenance(table, history_hours=10_000, retention_hours=1, watermark_interval=3600,
                                watermark_windows=1, compact_min_files=1000)
    marks = []
    for _ in range(5):
        upkeep.run_once()
        marks.append(read_watermark(table.uri))
    # one window of 2**18 ids holds 1..100: reached in the first round; nothing after it
    assert marks == [51] * 5 and upkeep.watermark_rounds == 1
    assert "watermark" in upkeep.phase_peaks


def test_the_upkeep_steps_through_small_windows_round_by_round(tmp_path: Path) -> None:
    table = journal(tmp_path, [[row("enqueue", "q", i, BASE) for i in range(1, 101)],
                               [row("settle", "q", i, BASE, outcome="acked") for i in range(1, 51)]])
    upkeep = JournalMaintenance(table, history_hours=10_000, retention_hours=1, watermark_interval=3600,
                                watermark_window=10, watermark_windows=2, compact_min_files=1000)
    marks = []
    for _ in range(4):
        upkeep.run_once()
        marks.append(read_watermark(table.uri))
    assert marks == [21, 41, 51, 51]            # two windows a round, then nothing to walk
    assert upkeep.watermark_rounds == 3


# -- the key scan --------------------------------------------------------------------------

def test_a_window_reads_only_the_row_groups_that_can_hold_its_rows(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from lakehouse.journal_keys import KeyScan, live_ids

    from lakehouse.journal_writer import JOURNAL_STATISTICS

    table = AppendOnlyTable(tmp_path / "journal", JOURNAL_SCHEMA, stats_column="message_id")
    table.parquet_options["write_statistics"] = [*JOURNAL_STATISTICS]     # as the journal's writer does
    table.open()
    for rows in ([[row("enqueue", "q", i, BASE) for i in range(start, start + 10)] for start in range(1, 101, 10)]
                 + [[row("settle", "q", i, BASE + HOUR, outcome="acked") for i in range(11, 16)]]):
        table.append(pa.Table.from_pylist(rows, schema=JOURNAL_SCHEMA))
    read: list[int] = []
    real = pq.ParquetFile.read_row_group

    def counted(self: pq.ParquetFile, index: int, *args: object, **kwargs: object) -> pa.Table:
        read.append(index)
        return real(self, index, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    keys = KeyScan.of(table.path)
    rows = keys.window_rows(11, 21)
    # ids 11..20 are in the second file; the settlements' file reaches the window's low: read;
    # the file of 1..10 ends below the window and the later files hold only later enqueues
    assert len(read) == 2
    assert sorted(rows.column("message_id").to_pylist()) == sorted([*range(11, 16), *range(11, 21)])
    assert live_ids(rows, 11, 21).tolist() == list(range(16, 21))
    read.clear()
    assert keys.first_enqueued(1) == 1 and len(read) == 1     # the lowest file answers; no other is read
    assert keys.highest_id(0) == 100 and len(read) == 1       # from the files' statistics alone


def test_ranges_deletions_and_queues_decide_the_live_ids_of_a_window() -> None:
    from lakehouse.journal_keys import live_ids

    rows = pa.Table.from_pylist([
        {"event": "enqueue", "queue": "a", "message_id": i, "first_message_id": None} for i in range(10, 20)
    ] + [{"event": "enqueue", "queue": "b", "message_id": 12, "first_message_id": None},
         {"event": "settle", "queue": "a", "message_id": 25, "first_message_id": 8},     # a: 10..19 all
         {"event": "enqueue", "queue": "c", "message_id": 18, "first_message_id": None},
         {"event": "queue_deleted", "queue": "c", "message_id": 18, "first_message_id": None},
         {"event": "enqueue", "queue": "c", "message_id": 19, "first_message_id": None},
         {"event": "settle", "queue": "b", "message_id": 11, "first_message_id": None}])  # not b's 12
    assert live_ids(rows, 10, 20).tolist() == [12, 19]
    assert live_ids(rows, 13, 20).tolist() == [19]
    assert live_ids(rows.slice(0, 10), 10, 20).tolist() == list(range(10, 20))


def test_the_upkeep_process_keeps_pandas_out() -> None:
    import subprocess
    import sys

    code = ("import sys; from lakehouse.journal_upkeep import keep_out_pandas; keep_out_pandas()\n"
            "import numpy as np, pyarrow as pa\n"
            "from lakehouse.journal_windows import sorted_member_mask\n"
            "mask = sorted_member_mask(pa.array(np.arange(5)), np.array([1, 3]))\n"
            "assert mask.to_pylist() == [False, True, False, True, False], mask\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


def test_live_ids_match_queues_across_the_files_a_window_read() -> None:
    from lakehouse.journal_keys import live_ids

    def rows(event: str, queue: str, message_id: int) -> pa.Table:
        return pa.table({"event": [event], "queue": [queue], "message_id": [message_id],
                         "first_message_id": pa.array([None], pa.int64())})

    # one table per file read, each with its own queues: "b" is settled in a file without "a"
    read = pa.concat_tables([rows("enqueue", "a", 5), rows("enqueue", "b", 5), rows("settle", "b", 5),
                             rows("enqueue", "c", 6), rows("settle", "a", 6)])
    assert live_ids(read, 0, 10).tolist() == [5, 6]
    assert live_ids(pa.concat_tables([read, rows("settle", "a", 5), rows("settle", "c", 6)]), 0, 10).tolist() == []


def test_retention_asks_nothing_while_no_row_is_older_than_the_cutoff(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import lakehouse.retention as retention

    # the files' statistics carry the rows' times, as the journal's do
    table = AppendOnlyTable(tmp_path / "journal", JOURNAL_SCHEMA, stats_column="message_id", time_stats_column="at")
    table.open()
    for rows in ([row("enqueue", "q", i, BASE + HOUR) for i in range(1, 6)],
                 [row("settle", "q", i, BASE + HOUR, outcome="acked") for i in range(1, 6)]):
        table.append(pa.Table.from_pylist(rows, schema=JOURNAL_SCHEMA))
    asked: list[dt.datetime] = []
    real = retention.superseded_producer_rows

    def counted(table_: AppendOnlyTable, cutoff: dt.datetime) -> pa.Table:
        asked.append(cutoff)
        return real(table_, cutoff)

    monkeypatch.setattr(retention, "superseded_producer_rows", counted)
    assert purge_settled_history(table, BASE + HOUR) == 0 and asked == []     # every row is from BASE + HOUR
    assert purge_settled_history(table, BASE + 2 * HOUR) == 10 and len(asked) == 1
