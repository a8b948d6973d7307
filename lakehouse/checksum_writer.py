"""The journal's version checksum files written off the commit path, from a thread of normal priority.

A checksum file (``<version>.crc``, :mod:`lakehouse.version_checksum`) costs
about 0.45 ms of CPU to write, most of it creating its temporary file.  The
journal's writer commits a few hundred versions a second under load, and its
threads run ahead of normal work (:mod:`lakehouse.writer_priority`): written
by the publisher after every commit, the checksums alone took a real-time
core from the broker's loop for a tenth of each second, just when the loop
had a commit's answer to read.

So the publisher only brings the figures up to date after each commit (a
few microseconds) and hands them here; a :class:`ChecksumWriter` thread, at
normal priority, writes the newest figures it was handed:

* at most once every :data:`INTERVAL` while commits come back to back: the
  versions in between get no checksum file, which the Delta protocol allows
  (a reader of such a version finds the protocol and metadata in the log, as
  it always could);
* always for the last version once commits pause (within :data:`INTERVAL`):
  a query of a table at rest -- the case the checksum is for -- finds the
  newest version's checksum;
* only figures frozen with their own version (:class:`ChecksumFigures`),
  handed over only after that version is linked and its name fsynced, so no
  file ever claims another version's figures or a version that is not in the
  log.

:meth:`ChecksumWriter.close` writes what is still pending before it returns.
"""

from __future__ import annotations

import logging
import threading
import time

from .version_checksum import ChecksumFigures
from .writer_priority import normal_for_this_thread

__all__ = ["ChecksumWriter", "INTERVAL"]

log = logging.getLogger(__name__)

#: seconds: the least time between two checksum files while commits come back to back
INTERVAL = 0.1


class ChecksumWriter:
    """Writes the newest :class:`ChecksumFigures` it was handed, at most every ``interval`` seconds."""

    def __init__(self, name: str, interval: float | None = None) -> None:
        self.name = name
        self.interval = INTERVAL if interval is None else interval
        self._condition = threading.Condition()
        self._pending: ChecksumFigures | None = None
        self._writing = False
        self._idle = False                      # the thread waits for figures, not for the interval
        self._closed = False
        self._failed = False                    # said once in the log
        self._last_write = float("-inf")        # monotonic
        #: the version of the last checksum file written (None: none yet)
        self.written: int | None = None
        self._thread = threading.Thread(target=self._run, name=f"checksums-{name}", daemon=True)
        self._thread.start()

    def hand(self, figures: ChecksumFigures) -> None:
        """``figures`` are the newest: write them (or newer ones) soon."""
        with self._condition:
            if self._closed:
                return
            if self._pending is None or figures.version > self._pending.version:
                self._pending = figures
            if self._idle:                      # else it takes them when its interval is up:
                self._condition.notify()        # no wake-up (and no interpreter lock) per commit

    def flush(self, timeout: float = 10.0) -> int | None:
        """Write what is pending now (not waiting for the interval); the last version written."""
        deadline = time.monotonic() + timeout
        with self._condition:
            self._last_write = float("-inf")
            self._condition.notify()
            while (self._pending is not None or self._writing) and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._condition.wait(left)
            return self.written

    def close(self, timeout: float = 10.0) -> None:
        """Write what is pending, then stop the thread."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        normal_for_this_thread()
        while True:
            with self._condition:
                while True:
                    if self._pending is None:
                        if self._closed:
                            return
                        self._idle = True
                        self._condition.wait()
                        self._idle = False
                        continue
                    wait = self._last_write + self.interval - time.monotonic()
                    if wait <= 0 or self._closed:
                        break
                    self._condition.wait(wait)
                figures, self._pending = self._pending, None
                self._writing = True
            self._write(figures)
            with self._condition:
                self._writing = False
                self._last_write = time.monotonic()
                self._condition.notify_all()

    def _write(self, figures: ChecksumFigures) -> None:
        try:
            figures.write()
        except OSError as exc:                  # no file is a right answer too: go on
            if not self._failed:
                log.warning("%s: checksum file of version %d not written (%s)", self.name,
                            figures.version, exc)
                self._failed = True
            return
        self._failed = False
        self.written = figures.version
