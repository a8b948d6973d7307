"""Group commit: records accumulate while a commit is in flight; callbacks follow durability."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.group_commit import GroupCommitWriter

SCHEMA = pa.schema([pa.field("writer", pa.int64(), nullable=False), pa.field("n", pa.int64(), nullable=False)])


class SlowTable(AppendOnlyTable):
    """Makes each commit take a while, as a loaded disk would, so groups form."""

    def append(self, rows: pa.Table) -> int:
        time.sleep(0.02)
        return super().append(rows)


def test_concurrent_submissions_share_commits_and_keep_their_order(tmp_path: Path) -> None:
    table = SlowTable(tmp_path / "t", SCHEMA)
    table.open()
    writer = GroupCommitWriter(table, dispatch=lambda fn: fn())
    writer.start()
    acknowledged: list[tuple[int, int, int]] = []      # (writer, n, rows visible to a fresh reader)
    done = threading.Event()
    lock = threading.Lock()

    def submitter(w: int) -> None:
        for n in range(50):
            def on_durable(error: BaseException | None, w: int = w, n: int = n) -> None:
                assert error is None
                # what is reported durable is on disk: a fresh reader sees it
                visible = AppendOnlyTable(tmp_path / "t", SCHEMA).read(
                    "SELECT count(*) AS c FROM t WHERE writer = %d AND n = %d" % (w, n)).column(0)[0].as_py()
                with lock:
                    acknowledged.append((w, n, visible))
                    if len(acknowledged) == 200:
                        done.set()
            writer.submit([{"writer": w, "n": n}], on_durable)

    threads = [threading.Thread(target=submitter, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done.wait(60)
    writer.close()
    assert writer.committed_rows == 200
    assert writer.commits < 200 / 2, f"{writer.commits} commits for 200 submissions: no grouping"
    assert all(visible == 1 for _w, _n, visible in acknowledged)
    for w in range(4):   # each submitter hears back in the order it submitted
        assert [n for aw, n, _v in acknowledged if aw == w] == list(range(50))
    rows = table.read("SELECT writer, n FROM t").to_pylist()
    assert sorted((r["writer"], r["n"]) for r in rows) == [(w, n) for w in range(4) for n in range(50)]


def test_a_failed_commit_is_reported_to_every_waiter(tmp_path: Path) -> None:
    class BrokenTable(AppendOnlyTable):
        def append(self, rows: pa.Table) -> int:
            raise OSError("disk full")

    table = BrokenTable(tmp_path / "t", SCHEMA)
    table.open()
    writer = GroupCommitWriter(table, dispatch=lambda fn: fn())
    writer.start()
    errors: list[BaseException | None] = []
    got = threading.Event()
    writer.submit([{"writer": 1, "n": 1}], lambda e: (errors.append(e), got.set()))
    assert got.wait(10)
    assert isinstance(errors[0], OSError)
    writer.submit([{"writer": 1, "n": 2}], lambda e: errors.append(e))   # the writer goes on
    writer.close()
    assert len(errors) == 2


def test_close_commits_what_is_queued_and_refuses_more(tmp_path: Path) -> None:
    table = AppendOnlyTable(tmp_path / "t", SCHEMA)
    table.open()
    writer = GroupCommitWriter(table, dispatch=lambda fn: fn())
    writer.start()
    writer.submit([{"writer": 0, "n": i} for i in range(10)])
    writer.close()
    assert table.read("SELECT count(*) AS c FROM t").column(0)[0].as_py() == 10
    with pytest.raises(RuntimeError):
        writer.submit([{"writer": 0, "n": 11}])
