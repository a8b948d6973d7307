"""Empty data files created ahead of the appends that fill them, their names already durable.

Creating a file costs a commit more than writing it: about 0.1 ms of system
CPU on an idle ext4, 0.3 ms amid the journal's fsync traffic, and its name
is only durable once the table directory is fsynced too -- one more fsync in
every commit's first round.  The journal's writer commits a few hundred
times a second from real-time threads (:mod:`lakehouse.writer_priority`).

So a :class:`DataFilePool` creates the data files beforehand, from a thread
of normal priority, in batches: :data:`BATCH` empty files with ordinary
names (``part-<uuid>-c000.snappy.parquet``), then *one* fsync of the table
directory for the batch.  Only then are they handed out
(:meth:`DataFilePool.take`): an append opens one by its path (``O_WRONLY``,
without ``O_CREAT``), writes it and fsyncs its content; its name is durable
already, so the commit's first fsync round leaves the directory out.

What keeps a pooled file safe from vacuum and from readers:

* it is handed out only while younger than :data:`MAX_AGE` (two minutes,
  counted on the boot clock, which a suspend does not stop); older ones are
  deleted and, when appends still want them, replaced.  Vacuum deletes only
  unreferenced files written longer ago than the table's retention, an hour
  at the least, and never one written in the last ten minutes
  (:data:`lakehouse.maintenance.FRESH_FILES_KEPT`); Delta Spark's vacuum keeps
  a week unless told otherwise;
* no descriptor of a pooled file is kept: the append opens it when it writes
  it, and falls back to creating a file of its own when the pool is empty or
  the open fails (the file was deleted);
* no reader looks at a file the log does not name, and a pooled file is
  empty: after a crash the ones left over are empty unreferenced files, which
  vacuum deletes once they are older than the retention (as it deletes a
  crashed commit's data file); what is still in the pool on
  :meth:`DataFilePool.close` is deleted then.

Object storage tables have no pool: a PUT creates the object and its name at once.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import uuid
from pathlib import Path

from .writer_priority import normal_for_this_thread

__all__ = ["DataFilePool", "BATCH", "MAX_AGE", "data_file_name"]

log = logging.getLogger(__name__)

#: files created (and their names fsynced with one fsync of the directory) at a time
BATCH = 32
#: seconds: a pooled file older than this is deleted rather than handed out
MAX_AGE = 120.0


def data_file_name() -> str:
    """A new data file's name, as every append names its file."""
    return f"part-{uuid.uuid4()}-c000.snappy.parquet"


def _boot_clock() -> float:
    """Seconds since boot, suspends included (a pooled file ages while the machine sleeps)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class DataFilePool:
    """Empty data files in ``directory`` whose names are durable, for appends to fill."""

    def __init__(self, directory: Path, *, batch: int = BATCH, max_age: float = MAX_AGE) -> None:
        self.directory = directory
        self.batch = batch
        self.max_age = max_age
        self._condition = threading.Condition()
        self._ready: collections.deque[tuple[Path, float]] = collections.deque()   # path, created
        self._stale: list[Path] = []
        self._wanted = True                     # an append took a file since the last batch
        self._closed = False
        self._failing = False
        #: batches created (for tests and the curious)
        self.batches = 0
        self._thread = threading.Thread(target=self._run, name="data-file-pool", daemon=True)
        self._thread.start()

    def take(self) -> Path | None:
        """A pooled file (empty, its name durable, younger than :attr:`max_age`), or None."""
        with self._condition:
            now = _boot_clock()
            found: Path | None = None
            while self._ready:
                path, created = self._ready.popleft()
                if now - created < self.max_age:
                    found = path
                    break
                self._stale.append(path)
            self._wanted = True
            # woken when the pool falls to half (once per batch, not per append), is empty or stale
            if found is None or len(self._ready) == self.batch // 2 or self._stale:
                self._condition.notify()
            return found

    def __len__(self) -> int:
        with self._condition:
            return len(self._ready)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread and delete the files no append took."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout)
        with self._condition:
            left = [path for path, _ in self._ready] + self._stale
            self._ready.clear()
            self._stale.clear()
        _unlink(left)

    def _run(self) -> None:
        normal_for_this_thread()
        while True:
            with self._condition:
                self._expire()
                while not self._closed and not self._stale and \
                        not (self._wanted and len(self._ready) <= self.batch // 2):
                    self._condition.wait(self.max_age / 4)
                    self._expire()
                if self._closed:
                    return
                stale, self._stale = self._stale, []
                refill = self._wanted and len(self._ready) <= self.batch // 2
                self._wanted = False
            _unlink(stale)
            if refill and not self._create_batch():
                time.sleep(1.0)                 # no room, say: appends create their own meanwhile

    def _expire(self) -> None:
        """Move the files too old to hand out to the stale list (under the lock)."""
        oldest = _boot_clock() - self.max_age
        while self._ready and self._ready[0][1] <= oldest:
            self._stale.append(self._ready.popleft()[0])

    def _create_batch(self) -> bool:
        """Create :attr:`batch` empty files, fsync the directory once, pool them; whether it did."""
        created = _boot_clock()
        paths: list[Path] = []
        try:
            for _ in range(self.batch):
                path = self.directory / data_file_name()
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                paths.append(path)
            descriptor = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(descriptor)            # the batch's names: durable before any is handed out
            finally:
                os.close(descriptor)
        except OSError as exc:
            _unlink(paths)
            if not self._failing:
                log.warning("%s: data files not created ahead (%s); appends create their own",
                            self.directory, exc)
                self._failing = True
            return False
        self._failing = False
        with self._condition:
            if self._closed:
                stale = paths
            else:
                self._ready.extend((path, created) for path in paths)
                self.batches += 1
                stale = []
        _unlink(stale)
        return True


def _unlink(paths: list[Path]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
