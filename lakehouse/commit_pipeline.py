"""The journal writer's commits in two stages: the next group is staged while the one before is published.

A commit (:mod:`lakehouse.log_commit`) is a *stage* -- the group's Arrow
table and Parquet file built and written, the commit's content written,
both fsynced -- then a *publish*: the commit linked into ``_delta_log`` as
the next version and the log directory fsynced.  The writer process stages
in its main thread and publishes in a :class:`Publisher` thread, so the CPU
work and the first fsync round of group N+1 run while group N's log entry
is being fsynced, and the two commits' fsyncs can share a flush of the file
system's journal.

What stays as it was:

* commits are published one at a time, in the order the groups came: a
  group's version is always higher than every earlier group's;
* a group is answered *durable* only once its own publish returned, i.e.
  after the fsync of ``_delta_log`` that made its version's name durable;
* the broker hands over at most two groups at a time
  (:data:`PIPELINE_DEPTH`), and the next one only once the writer has
  answered *staged* for the last one it sent, so what arrives while a group
  is being staged joins the group after it, not a group of its own.

Answers (``REPLY``: group number, status) go out on one stream from both
threads, under a lock; a failure carries its error text.
"""

from __future__ import annotations

import logging
import os
import queue
import struct
import threading
import time
from typing import BinaryIO, Protocol, Union

import pyarrow as pa

from .commit_trace import WriterTrace
from .log_commit import ROUNDS, StagedAppend
from .writer_priority import apply_to_thread

__all__ = ["Publisher", "PIPELINE_DEPTH", "REPLY", "ERROR_LENGTH", "DURABLE", "FAILED", "STAGED",
           "PROBE", "CommitTarget"]

log = logging.getLogger("lakehouse.journal_writer")

REPLY = struct.Struct(">IB")          # group number, status (below)
ERROR_LENGTH = struct.Struct(">I")    # length of the error text that follows a failure
#: statuses: the group's commit is durable / failed (error text follows) / staged: send the next
DURABLE, FAILED, STAGED = 0, 1, 2
#: groups the broker has with the writer at most: one being published, one being staged
#: (DELTAMQ_JOURNAL_PIPELINE_DEPTH=1: one group at a time, each staged and published before
#: the next is sent -- fewer, larger commits, for a machine where the writer's CPU is scarce)
PIPELINE_DEPTH = max(1, int(os.environ.get("DELTAMQ_JOURNAL_PIPELINE_DEPTH", "2")))


class CommitTarget(Protocol):
    """What the publisher needs of the table (an :class:`~lakehouse.delta_table.AppendOnlyTable`)."""

    def publish(self, staged: StagedAppend | pa.Table, *, defer_checksum: bool = False) -> int: ...

    def probe(self) -> None: ...

    def write_deferred_checksum(self) -> None: ...


class _Probe:
    """A probe while commits fail: is there room again?"""


PROBE = _Probe()
#: what the publisher is handed for a group: its staged append (and when staging began), a
#: probe, or why staging failed
Work = Union[tuple[StagedAppend | pa.Table, float], _Probe, BaseException]


class Publisher:
    """The thread that publishes staged groups in order and answers for each."""

    def __init__(self, table: CommitTarget, replies: BinaryIO, slow_commit: float,
                 trace: WriterTrace | None = None) -> None:
        self._table = table
        self._trace = trace
        self._checksum_took = 0.0               # the last checksum file's wall time (for the trace)
        self._replies = replies
        self._slow = slow_commit
        self._lock = threading.Lock()
        # one group waits here while the one before is published: the stager blocks on a third
        self._work: queue.Queue[tuple[int, Work] | None] = queue.Queue(maxsize=1)
        self._failing = False
        self._broken = False                   # the broker's end of the answers is gone
        self._thread = threading.Thread(target=self._run, name="journal-publisher", daemon=True)
        self._thread.start()

    def staged(self, number: int, work: Work) -> None:
        """Hand over group ``number``'s work; say *staged* once it is queued, when it was staged."""
        self._work.put((number, work))
        if isinstance(work, tuple):
            self.answer(number, STAGED)

    def close(self) -> None:
        """Publish what was handed over, then stop the thread."""
        self._work.put(None)
        self._thread.join()

    def answer(self, number: int, status: int, error: str = "") -> None:
        data = REPLY.pack(number, status)
        if status == FAILED:
            encoded = error.encode("utf-8", "replace")
            data += ERROR_LENGTH.pack(len(encoded)) + encoded
        with self._lock:
            if self._broken:
                return
            try:
                self._replies.write(data)
                self._replies.flush()
            except (OSError, ValueError):       # the broker went away: its input ends too
                self._broken = True

    def _run(self) -> None:
        apply_to_thread()                       # as the stager: lakehouse.writer_priority
        while True:
            item = self._work.get()
            if item is None:
                return
            self._publish(*item)
            started = time.monotonic()
            try:
                self._table.write_deferred_checksum()   # after the answer: confirms never wait for it
            except Exception:                   # the thread must go on: the stager waits on it
                log.exception("journal writer: the checksum file of a commit")
            self._checksum_took = time.monotonic() - started

    def _publish(self, number: int, work: Work) -> None:
        trace = self._trace
        traced = trace.publish_start(number) if trace is not None else None
        try:
            if isinstance(work, BaseException):
                raise work
            if isinstance(work, _Probe):
                self._table.probe()
            else:
                staged, started = work
                self._table.publish(staged, defer_checksum=True)
                took = time.perf_counter() - started
                if took > self._slow:
                    rows = staged.num_rows if isinstance(staged, pa.Table) else staged.rows
                    log.warning("commit of group %d (%d rows) took %.0f ms", number, rows, took * 1000)
        except Exception as exc:              # the broker nacks what this group held
            if not self._failing and not isinstance(exc, OSError):
                log.error("journal commit of group %d failed", number, exc_info=exc)
            self._failing = True
            text = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            self.answer(number, FAILED, text)
        else:
            self._failing = False
            self.answer(number, DURABLE)
            if trace is not None and traced is not None:
                trace.published(number, traced, ROUNDS.publish, self._checksum_took)
