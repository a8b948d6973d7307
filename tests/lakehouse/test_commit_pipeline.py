"""The journal writer's two stages: a group is answered durable only after its own log entry is fsynced.

The writer's loop (:func:`lakehouse.journal_writer.serve`) runs in a thread here,
over pipes, on a real journal table: requests go in as the broker sends them,
and every link into ``_delta_log``, every fsync of it and every answer is noted
in one sequence, in the order they happened.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from lakehouse import log_commit
from lakehouse.commit_pipeline import DURABLE, FAILED, REPLY, STAGED
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal_writer import REQUEST, RowEncoder, open_journal_table, serve
from tests.waiting import wait_until


class _Answers:
    """The writer's answer stream: each answer noted in ``events`` as it is written."""

    def __init__(self, events: list[tuple[Any, ...]]) -> None:
        self.events = events
        self._buffer = b""

    def write(self, data: bytes) -> int:
        self._buffer += data
        while len(self._buffer) >= REPLY.size:
            number, status = REPLY.unpack_from(self._buffer)
            self._buffer = self._buffer[REPLY.size:]
            if status == FAILED:              # not expected here: noted, and the rest ignored
                self.events.append(("failed", number))
                self._buffer = b""
                break
            self.events.append(("answer", number, status))
        return len(data)

    def flush(self) -> None:
        pass


def _group(first: int, count: int) -> bytes:
    rows = [("settle", "q", message_id, time.time(), None, 1, "acked", None, None, None)
            for message_id in range(first, first + count)]
    return pickle.dumps(rows)


def _request(number: int, payload: bytes) -> bytes:
    return REQUEST.pack(number, len(payload)) + payload


class _Writer:
    """``serve`` in a thread, fed through a pipe; links, log fsyncs and answers noted in ``events``."""

    def __init__(self, table: AppendOnlyTable, monkeypatch: pytest.MonkeyPatch,
                 pool_batch: int | None = None) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()
        log_dir = table.path / "_delta_log"
        real_link, real_fsync, real_os_fsync = os.link, log_commit.fsync_path, os.fsync

        def link(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
            real_link(source, target, *args, **kwargs)
            if Path(target).parent == log_dir:
                with self.lock:
                    self.events.append(("link", int(Path(target).stem)))

        def fsync(path: Path) -> None:
            real_fsync(path)
            if Path(path) == log_dir:
                with self.lock:
                    self.events.append(("log synced",))

        def os_fsync(fd: int) -> None:
            real_os_fsync(fd)
            if Path(os.readlink(f"/proc/self/fd/{fd}")) == table.path:   # every name in it is durable
                with self.lock:
                    self.events.append(("names synced", frozenset(os.listdir(table.path))))

        monkeypatch.setattr(log_commit.os, "link", link)
        monkeypatch.setattr(log_commit, "fsync_path", fsync)
        monkeypatch.setattr(os, "fsync", os_fsync)
        if pool_batch is not None:            # as the writer process does; after the patches, so
            table.pool_data_files(batch=pool_batch)   # the pool's first directory fsync is noted too
        read, self._write = os.pipe()
        self._requests: BinaryIO = os.fdopen(read, "rb")
        answers = _Answers(self.events)
        self.thread = threading.Thread(target=serve, args=(table, RowEncoder("v"), self._requests, answers))
        self.thread.start()

    def send(self, data: bytes) -> None:
        os.write(self._write, data)

    def answered(self, number: int, status: int) -> bool:
        with self.lock:
            return ("answer", number, status) in self.events

    def stop(self) -> None:
        self.send(REQUEST.pack(0, 0))
        self.thread.join(30)
        os.close(self._write)
        self._requests.close()


@pytest.mark.parametrize("ahead", [False, True], ids=["files of its own", "files created ahead"])
def test_each_group_is_answered_durable_after_its_own_log_entry_is_fsynced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool) -> None:
    table = open_journal_table(str(tmp_path / "journal"), 1)
    first_version = table.version
    writer = _Writer(table, monkeypatch, pool_batch=4 if ahead else None)
    groups = 12
    writer.send(b"".join(_request(number, _group(number * 100, number)) for number in range(1, groups + 1)))
    wait_until(lambda: writer.answered(groups, DURABLE), timeout=60, what="the last group durable")
    writer.stop()
    events = writer.events
    durable = [event[1] for event in events if event[0] == "answer" and event[2] == DURABLE]
    assert durable == list(range(1, groups + 1))              # in the order they came
    links = [event[1] for event in events if event[0] == "link"]
    assert links == list(range(first_version + 1, first_version + groups + 1))
    for number in range(1, groups + 1):
        answer = events.index(("answer", number, DURABLE))
        link = events.index(("link", first_version + number))
        # its own version linked, then the log fsynced, then (and only then) answered
        assert link < answer and ("log synced",) in events[link + 1:answer]
        assert events.index(("answer", number, STAGED)) < answer
    # each version holds its own group's rows, in a data file whose name was durable before the link
    log_dir = table.path / "_delta_log"
    for number in range(1, groups + 1):
        actions = [json.loads(line) for line in
                   (log_dir / f"{first_version + number:020d}.json").read_text().splitlines()]
        (add,) = [a["add"] for a in actions if "add" in a]
        assert add["stats"].startswith(f'{{"numRecords":{number},')
        link = events.index(("link", first_version + number))
        assert any(event[0] == "names synced" and add["path"] in event[1] for event in events[:link])
    table.close()


def test_the_next_group_is_staged_while_the_one_before_waits_to_be_published(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = open_journal_table(str(tmp_path / "journal"), 1)
    release = threading.Event()
    publish = table.publish

    def held_publish(staged: Any, **options: Any) -> int:
        release.wait(30)                       # the first group's log entry is not written yet
        return publish(staged, **options)

    monkeypatch.setattr(table, "publish", held_publish)
    writer = _Writer(table, monkeypatch)
    writer.send(_request(1, _group(1, 3)) + _request(2, _group(10, 4)))
    wait_until(lambda: writer.answered(2, STAGED), timeout=30, what="the second group staged")
    assert not writer.answered(1, DURABLE) and not writer.answered(2, DURABLE)
    release.set()
    wait_until(lambda: writer.answered(2, DURABLE), timeout=30, what="the second group durable")
    writer.stop()
    answers = [event for event in writer.events if event[0] == "answer" and event[2] == DURABLE]
    assert answers == [("answer", 1, DURABLE), ("answer", 2, DURABLE)]
    got = table.read("SELECT message_id FROM t ORDER BY message_id").column("message_id").to_pylist()
    assert got == [1, 2, 3, 10, 11, 12, 13]
