"""A commit's content written to a file without a name (O_TMPFILE) and linked into place."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse import log_commit
from lakehouse.delta_table import AppendOnlyTable

SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])


def batch(start: int, count: int) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + count)),
                     "body": [b"a" * (i % 5) for i in range(start, start + count)]}, schema=SCHEMA)


def anonymous(path: Path) -> AppendOnlyTable:
    table = AppendOnlyTable(path, SCHEMA)
    table.open()
    table.anonymous_commits = True
    return table


def ids(path: Path) -> list[int]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("message_id").to_pylist())


def log_names(table: AppendOnlyTable) -> list[str]:
    return sorted(os.listdir(table.path / "_delta_log"))


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_commits_are_linked_from_unnamed_files_and_leave_nothing_behind(tmp_path: Path) -> None:
    table = anonymous(tmp_path / "t")
    before = open_descriptors()
    staged = table.stage(batch(0, 3))
    assert isinstance(staged, log_commit.StagedAppend) and staged.commit >= 0
    assert not staged.temp.exists()             # no name until it is linked
    assert not [n for n in log_names(table) if n.startswith(".")]
    version = table.publish(staged)
    for i in range(1, 5):
        table.append(batch(i * 3, 3))
    assert table.anonymous_commits              # still: the file system has O_TMPFILE
    assert ids(table.path) == list(range(15))
    assert not [n for n in log_names(table) if n.startswith(".")]
    assert open_descriptors() <= before         # every commit's descriptor closed
    assert version == 1
    table.close()


def test_put_if_absent_holds_for_an_unnamed_commit(tmp_path: Path) -> None:
    table = anonymous(tmp_path / "t")
    staged = table.stage(batch(0, 2))
    other = AppendOnlyTable(tmp_path / "t", SCHEMA)
    other.open()
    taken = other.append(batch(100, 1))         # another writer takes the version first
    version = table.publish(staged)
    assert version == taken + 1
    assert ids(table.path) == [0, 1, 100]
    assert not [n for n in log_names(table) if n.startswith(".")]
    table.close()


def test_a_discarded_unnamed_commit_leaves_no_file_and_no_descriptor(tmp_path: Path) -> None:
    table = anonymous(tmp_path / "t")
    before = open_descriptors()
    names = log_names(table)
    staged = table.stage(batch(0, 2))
    assert isinstance(staged, log_commit.StagedAppend)
    staged.discard()
    assert open_descriptors() == before
    assert log_names(table) == names
    assert not staged.data.exists()
    table.close()


def test_a_failed_link_closes_the_descriptor_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = anonymous(tmp_path / "t")
    staged = table.stage(batch(0, 2))
    assert isinstance(staged, log_commit.StagedAppend)
    closed: list[int] = []
    real_close = os.close

    def close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    def link(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "close", close)
    monkeypatch.setattr(os, "link", link)
    commit = staged.commit
    with pytest.raises(OSError, match="I/O error"):
        table.publish(staged)
    assert closed.count(commit) == 1
    assert not staged.data.exists()             # not committed: its data file went too
    monkeypatch.undo()
    table.close()


def test_without_o_tmpfile_commits_go_through_a_named_temporary_file(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    table = anonymous(tmp_path / "t")
    real_open = os.open

    def no_tmpfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "not supported")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_tmpfile)
    table.append(batch(0, 2))
    table.append(batch(2, 2))
    assert not table.anonymous_commits          # said once, then named files
    monkeypatch.undo()
    assert ids(table.path) == [0, 1, 2, 3]
    assert not [n for n in log_names(table) if n.startswith(".")]
    table.close()
