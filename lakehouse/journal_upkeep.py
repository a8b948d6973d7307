"""The journal's upkeep process: checkpoints, compaction, history retention and vacuum.

Started by the writer process (:mod:`lakehouse.journal_writer`), one per
journal, at a lower CPU priority than the writer and the broker.  It used to
be a thread of the writer, and under load it ran nearly all the time:
compaction rounds of 0.2-1.7 s and checkpoints of 0.1-0.5 s.  On 2 cores,
that thread competed with the commits for the writer's interpreter (Python's
global interpreter lock) and for the CPU, and the commits it delayed by
25-50 ms were the tail of the publishers' confirm latency.  In a process of
its own, niced, it only takes what the broker leaves.

Both processes commit to the same table and never conflict: appends remove
nothing, and every commit is put-if-absent (the loser of a race for a
version takes the next one, :meth:`AppendOnlyTable.commit_actions`).

Its memory does not grow with the journal:

* the two questions it asks of the whole table -- the lowest live message
  (the recovery watermark) and which messages ended before the history
  retention's cut-off -- are asked one window of message ids at a time
  (:mod:`lakehouse.journal_windows`); the watermark's windows are read file
  by file, row group by row group, with pyarrow (:mod:`lakehouse.journal_keys`),
  not through DataFusion, whose memory grew with the number of data files;
* the watermark walks at most ``WATERMARK_WINDOWS`` windows a round, every
  ``WATERMARK_INTERVAL`` seconds, and goes on at the next round from where it
  stopped; it is not walked again while nothing was committed;
* compaction and retention stream the rows they rewrite, a row group at a
  time (:mod:`lakehouse.file_rewrite`);
* the process keeps pandas out and takes pyarrow's buffers from jemalloc
  (:func:`lean_process`, :func:`upkeep_environment`).

A round compacts first, so the queries after it read fewer files.  Each step
that raises the process's peak resident memory says so in the log.

The writer tells it when a checkpoint is due by writing a byte to its
standard input; the end of that input (the writer is closing, or gone) makes
it finish the round in progress and exit.

Run as ``python -m lakehouse.journal_upkeep <table location> <history hours> <log hours>``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from broker.cpu_placement import stay_on_inherited_cpus
from broker.data_directory import inherited_descriptors

from .delta_table import AppendOnlyTable, is_uri
from .journal_windows import WATERMARK_WINDOWS, WINDOW_IDS, step_watermark
from .journal_writer import journal_table
from .maintenance import TableMaintenance
from .retention import purge_settled_history

__all__ = ["JournalMaintenance", "UpkeepProcess", "main"]

log = logging.getLogger("lakehouse.journal_upkeep")

#: the upkeep process's CPU priority: ``idle`` (Linux SCHED_IDLE: it runs when nothing else
#: wants the CPU, and any wake-up of the broker or its writer preempts it at once) or a
#: niceness increment over the writer's, such as ``10``
PRIORITY = os.environ.get("DELTAMQ_JOURNAL_UPKEEP_PRIORITY", "idle")
#: seconds between history retention and vacuum rounds (DELTAMQ_JOURNAL_UPKEEP_VACUUM_S)
VACUUM_INTERVAL = float(os.environ.get("DELTAMQ_JOURNAL_UPKEEP_VACUUM_S", "300"))
#: seconds between walks of the recovery watermark (DELTAMQ_JOURNAL_UPKEEP_WATERMARK_S); a walk
#: cut short by WATERMARK_WINDOWS goes on at the next round, whatever the time.  Each walk takes
#: CPU from compaction (same thread, idle priority): with 30 s, compaction fell behind under load
WATERMARK_INTERVAL = float(os.environ.get("DELTAMQ_JOURNAL_UPKEEP_WATERMARK_S", "300"))
#: where pyarrow's buffers come from in the upkeep process (DELTAMQ_JOURNAL_UPKEEP_ARROW_POOL):
#: ``jemalloc``, ``system`` or ``default`` (pyarrow's, mimalloc).  A compaction round of 127
#: files of 500 KB peaked at 232 MiB with mimalloc, 188 with jemalloc, 195 with the system's
ARROW_POOL = os.environ.get("DELTAMQ_JOURNAL_UPKEEP_ARROW_POOL", "jemalloc")
MIB = 1 << 20


class JournalMaintenance(TableMaintenance):
    """The journal's upkeep: also removes the rows of messages that ended ``history_hours`` ago.

    ``retention_hours`` (the base class's) is how long Delta's own history is
    kept: log entries and files compacted away.  It is short on purpose: every
    Spark query lists the whole ``_delta_log`` directory (a journal with 6,000
    versions answered a query in 1.6 s, 0.9 s once the old entries were
    gone), and a Spark stream must only keep up within it.

    A round compacts first (the queries after it then list fewer files), then
    checkpoints, then walks the recovery watermark (every ``watermark_interval``
    seconds, at most :data:`~lakehouse.journal_windows.WATERMARK_WINDOWS`
    windows a round), then, every ``vacuum_interval`` seconds, history
    retention and vacuum.  A step that raises the process's peak resident
    memory says so in the log (:attr:`phase_peaks`).
    """

    def __init__(self, table: AppendOnlyTable, *, history_hours: int,
                 watermark_interval: float = WATERMARK_INTERVAL, watermark_window: int = WINDOW_IDS,
                 watermark_windows: int = WATERMARK_WINDOWS, **options: Any) -> None:
        super().__init__(table, **options)
        self.history_hours = history_hours
        self.watermark_interval = watermark_interval
        #: message ids per window, and windows per round, of the watermark's walk
        self.watermark_window = watermark_window
        self.watermark_windows = watermark_windows
        #: the table's version when the watermark last reached the lowest live id (-1: not yet)
        self._watermark_version = -1
        #: the walk stopped short of the lowest live id: the next round goes on with it
        self._watermark_behind = False
        self._last_watermark = -float("inf")
        #: how many times the watermark was walked (a round with no commit since skips it)
        self.watermark_rounds = 0
        #: the highest peak RSS (bytes) seen at the end of each step ("compaction", "watermark"...)
        self.phase_peaks: dict[str, int] = {}

    @contextlib.contextmanager
    def _step(self, name: str) -> Iterator[None]:
        """Note the process's peak RSS after the step ``name``; log it when the step raised it."""
        before = _peak_rss()
        try:
            yield
        finally:
            after = _peak_rss()
            self.phase_peaks[name] = max(self.phase_peaks.get(name, 0), after)
            if after > before + MIB:
                log.info("%s raised the upkeep's peak RSS from %.0f to %.0f MiB",
                         name, before / MIB, after / MIB)

    def run_once(self) -> None:
        super().run_once()
        if (not is_uri(self.table.uri)
                and (self._watermark_behind
                     or time.monotonic() - self._last_watermark >= self.watermark_interval)):
            self.advance_watermark()
        pa.default_memory_pool().release_unused()

    def compact(self) -> int:
        with self._step("compaction"):
            return super().compact()

    def checkpoint(self) -> None:
        with self._step("checkpoint"):
            super().checkpoint()

    def vacuum(self) -> None:
        if not is_uri(self.table.uri):            # row retention rewrites files locally (not on S3 yet)
            with self._step("retention"):
                cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=self.history_hours)
                purge_settled_history(self.table, cutoff, self.log_state())
        with self._step("vacuum"):
            super().vacuum()

    def advance_watermark(self) -> None:
        """Move the recovery watermark up, unless nothing was committed since it was reached.

        The journal's live messages change only by commits: with none since,
        the lowest live id is where the last walk found it.  A walk is
        ``watermark_windows`` windows at most (:func:`~lakehouse.journal_windows.step_watermark`);
        one cut short goes on at the next round.
        """
        version = self.log_state().version
        if version == self._watermark_version and not self._watermark_behind:
            return
        with self._step("watermark"):
            _, reached = step_watermark(self.table, self.table.uri, window=self.watermark_window,
                                        max_windows=self.watermark_windows)
        self._last_watermark = time.monotonic()
        self._watermark_behind = not reached
        if reached:
            self._watermark_version = version
        self.watermark_rounds += 1


def _peak_rss() -> int:
    """This process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class UpkeepProcess:
    """The writer's handle on the upkeep process of its table."""

    def __init__(self, location: str | Path, history_hours: int, log_hours: int) -> None:
        self._command = [sys.executable, "-m", "lakehouse.journal_upkeep", str(location),
                         str(history_hours), str(log_hours)]
        #: how many times the process was started (more than once: it died and was replaced)
        self.starts = 0
        self._start()

    def _start(self) -> None:
        # it writes the table too: it holds the data directory's lock while it lives
        self._process = subprocess.Popen(self._command, stdin=subprocess.PIPE, bufsize=0,
                                         pass_fds=inherited_descriptors(),
                                         env={**os.environ, **upkeep_environment()})
        assert self._process.stdin is not None
        self._wake_fd = self._process.stdin.fileno()
        os.set_blocking(self._wake_fd, False)
        self.starts += 1

    @property
    def pid(self) -> int:
        return self._process.pid

    def checkpoint_due(self) -> None:
        """Ask for a checkpoint (never blocks: a byte already waiting says the same).

        A process that died (killed, out of memory) is replaced first: without
        it the table would get no checkpoints and no compaction.
        """
        if self._process.poll() is not None:
            log.warning("journal upkeep process %d ended (exit %s); starting another",
                        self._process.pid, self._process.returncode)
            assert self._process.stdin is not None
            self._process.stdin.close()
            self._start()
        try:
            os.write(self._wake_fd, b"c")
        except (BlockingIOError, BrokenPipeError):
            pass

    def close(self, timeout: float = 60.0) -> None:
        """Let the round in progress finish, then end the process."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("journal upkeep did not finish within %.0f s; killing it", timeout)
            self._process.kill()
            self._process.wait()


def _lower_priority() -> None:
    """Run below the broker and the writer (see :data:`PRIORITY`)."""
    if PRIORITY == "idle":
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except (AttributeError, OSError):      # not Linux: the lowest niceness instead
            increment = 19
    else:
        increment = int(PRIORITY)
    if increment > 0:
        os.nice(increment)


class _Refused:
    """An import finder that refuses some top-level packages (see :func:`keep_out_pandas`)."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{name} is kept out of the journal upkeep process", name=name)


def keep_out_pandas() -> None:
    """Make ``import pandas`` fail in this process from now on (unless it is imported already).

    The upkeep never uses pandas, but pyarrow imports it, when installed, the
    first time it builds an array from Python objects, to check whether they
    are pandas objects: 32 MiB of resident memory in a process that does not
    otherwise reach 300.  Without it pyarrow does the same work, minus that check.
    """
    if "pandas" not in sys.modules and not any(isinstance(f, _Refused) for f in sys.meta_path):
        sys.meta_path.insert(0, _Refused("pandas"))


def _arrow_pool() -> str | None:
    """The pyarrow memory pool :data:`ARROW_POOL` names, if this pyarrow has it (None: its default)."""
    if ARROW_POOL not in ("jemalloc", "system", "mimalloc"):
        return None
    return ARROW_POOL if ARROW_POOL in pa.supported_memory_backends() else "system"


def upkeep_environment() -> dict[str, str]:
    """The environment variables the upkeep process is started with, over the writer's.

    pyarrow's memory pool is chosen when pyarrow is first imported
    (``ARROW_DEFAULT_MEMORY_POOL``), so it is given to the process from the
    start; one set by the user is kept.
    """
    pool = _arrow_pool()
    if pool is None or "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return {}
    return {"ARROW_DEFAULT_MEMORY_POOL": pool}


def lean_process() -> None:
    """Set this process up to hold little memory: pandas kept out (:func:`keep_out_pandas`),
    and pyarrow's allocations from :data:`ARROW_POOL` (when the process was not started with
    it: :func:`upkeep_environment`)."""
    keep_out_pandas()
    pool = _arrow_pool()
    if pool is not None and pa.default_memory_pool().backend_name != pool:
        pa.set_memory_pool({"jemalloc": pa.jemalloc_memory_pool, "system": pa.system_memory_pool,
                            "mimalloc": pa.mimalloc_memory_pool}[pool]())


def _serve(maintenance: TableMaintenance, wake: int) -> None:
    """Turn each byte on ``wake`` into a checkpoint request, until its end."""
    while True:
        try:
            data = os.read(wake, 4096)
        except InterruptedError:
            continue
        if not data:
            return
        maintenance.checkpoint_due()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    location, history_hours, log_hours = args[0], int(args[1]), int(args[2])
    lean_process()
    # like the writer, it ends when its input does, not on the signals sent to the broker's group
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _lower_priority()
    stay_on_inherited_cpus()        # the writers' CPUs, maintenance thread included (broker.cpu_placement)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s journal-upkeep: %(message)s")
    table = journal_table(location, log_hours)
    table.open()
    maintenance = JournalMaintenance(table, history_hours=history_hours, retention_hours=log_hours,
                                     vacuum_interval=VACUUM_INTERVAL)
    maintenance.start()
    try:
        _serve(maintenance, sys.stdin.fileno())
    finally:
        maintenance.close()
        table.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
