"""Timestamps of every journal commit along its path, for finding where a durable message's latency goes.

Off unless ``DELTAMQ_JOURNAL_TRACE`` names a directory; then the broker's
journal and its writer process each append one JSON object per group to a
file of their own there (``loop-<pid>.jsonl``, ``writer-<pid>.jsonl``), on
CLOCK_MONOTONIC, which both processes share:

* the loop (:class:`LoopTrace`): when the group was sealed and sent, the
  arrival time of each message it enqueues, when the writer said *staged* and
  *durable*, when the group's waiters had run and when the loop's next turn
  began (the deliveries and ``accepted`` those waiters made are written to
  the sockets in that turn), and the loop thread's CPU and run-queue wait;
* the writer (:class:`WriterTrace`): when the group was read from the pipe,
  encoded, written, fsynced (first round), when its publish began and ended
  (second round), and the CPU and run-queue wait of the thread doing each
  (``/proc/thread-self/schedstat``), so time spent waiting for a core shows
  apart from time spent waiting for the disk; and when a checkpoint was
  asked of the upkeep process.

``python -m bench.commit_trace <directory>`` joins the two and attributes the
latency tail to the stages.  The cost when on is a few microseconds per group;
when off, one attribute test per group.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

__all__ = ["LoopTrace", "WriterTrace", "TRACE_DIRECTORY", "schedstat", "loop_trace", "writer_trace", "arrivals"]

#: where the traces go (unset: no tracing)
TRACE_DIRECTORY = os.environ.get("DELTAMQ_JOURNAL_TRACE") or None
_FLUSH_EVERY = 64


def schedstat() -> tuple[float, float]:
    """This thread's CPU seconds and seconds spent runnable but waiting for a core (Linux)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            run, wait, _slices = f.read().split()
        return int(run) / 1e9, int(wait) / 1e9
    except (OSError, ValueError):
        return time.thread_time(), 0.0


class _TraceFile:
    def __init__(self, directory: str, kind: str) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._file: TextIO = open(Path(directory) / f"{kind}-{os.getpid()}.jsonl", "a", encoding="utf-8")
        self._pending: list[str] = []
        self._lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":"))
        with self._lock:
            self._pending.append(line)
            if len(self._pending) >= _FLUSH_EVERY:
                self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._file.write("\n".join(self._pending) + "\n")
            self._file.flush()
            self._pending = []

    def close(self) -> None:
        with self._lock:
            self._flush()
            self._file.close()


class LoopTrace:
    """The event loop's side: one record per group, written once its waiters have run."""

    def __init__(self, directory: str) -> None:
        self._out = _TraceFile(directory, "loop")
        self._open: dict[int, dict[str, Any]] = {}
        self._gc_started = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.monotonic()
        elif info.get("generation", 0) >= 1:
            now = time.monotonic()
            self._out.record({"gc": info["generation"], "start": self._gc_started, "end": now})

    def sent(self, number: int, arrivals: list[float], rows: int, size: int) -> None:
        cpu, wait = schedstat()
        self._open[number] = {"group": number, "sent": time.monotonic(), "rows": rows, "bytes": size,
                              "arrivals": arrivals, "cpu0": cpu, "wait0": wait}

    def staged(self, number: int) -> None:
        entry = self._open.get(number)
        if entry is not None:
            entry["staged"] = time.monotonic()

    def durable(self, number: int) -> None:
        entry = self._open.get(number)
        if entry is not None:
            entry["durable"] = time.monotonic()

    def waiters_done(self, number: int, loop: Any) -> None:
        entry = self._open.pop(number, None)
        if entry is None:
            return
        entry["waiters"] = time.monotonic()
        cpu, wait = schedstat()
        entry["loop_cpu"] = cpu - entry.pop("cpu0")
        entry["loop_wait"] = wait - entry.pop("wait0")

        def next_turn() -> None:
            entry["flushed"] = time.monotonic()
            self._out.record(entry)
        if loop is None:
            self._out.record(entry)
        else:
            loop.call_soon(next_turn)

    def close(self) -> None:
        try:
            gc.callbacks.remove(self._gc)
        except ValueError:
            pass
        self._out.close()


class WriterTrace:
    """The writer process's side: the stage (main thread) and the publish (publisher thread)."""

    def __init__(self, directory: str) -> None:
        self._out = _TraceFile(directory, "writer")
        self._staging: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def received(self, number: int) -> dict[str, Any]:
        cpu, wait = schedstat()
        entry = {"group": number, "received": time.monotonic(), "stage_cpu0": cpu, "stage_wait0": wait}
        with self._lock:
            self._staging[number] = entry
        return entry

    def mark(self, entry: dict[str, Any], name: str) -> None:
        entry[name] = time.monotonic()

    def stage_done(self, entry: dict[str, Any], fsync: tuple[float, float] | None) -> None:
        cpu, wait = schedstat()
        entry["staged"] = time.monotonic()
        entry["stage_cpu"] = cpu - entry.pop("stage_cpu0")
        entry["stage_wait"] = wait - entry.pop("stage_wait0")
        if fsync is not None:
            entry["fsync1"] = list(fsync)

    def publish_start(self, number: int) -> tuple[float, float, float]:
        cpu, wait = schedstat()
        return time.monotonic(), cpu, wait

    def published(self, number: int, started: tuple[float, float, float], fsync: tuple[float, float] | None,
                  checksum: float) -> None:
        cpu, wait = schedstat()
        with self._lock:
            entry = self._staging.pop(number, None)
        if entry is None:
            entry = {"group": number}
        entry.update(publish=started[0], answered=time.monotonic(), publish_cpu=cpu - started[1],
                     publish_wait=wait - started[2], checksum=checksum)
        if fsync is not None:
            entry["fsync2"] = list(fsync)
        self._out.record(entry)

    def event(self, name: str) -> None:
        self._out.record({"event": name, "at": time.monotonic()})

    def close(self) -> None:
        self._out.close()


def loop_trace() -> LoopTrace | None:
    """A loop trace when tracing is on."""
    return LoopTrace(TRACE_DIRECTORY) if TRACE_DIRECTORY else None


def writer_trace() -> WriterTrace | None:
    """A writer trace when tracing is on."""
    return WriterTrace(TRACE_DIRECTORY) if TRACE_DIRECTORY else None


def arrivals(rows: list[Any]) -> list[float]:
    """When each message a group enqueues arrived (monotonic seconds), from the journal's rows."""
    return [round(row[8].arrival, 6) for row in rows if row[0] == "enqueue" and row[8] is not None]
