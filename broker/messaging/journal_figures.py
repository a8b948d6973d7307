"""What a message journal measures of its own work, for management to export.

A journal (:mod:`lakehouse.journal`) records, on the event loop, each group it
hands to the disk and each commit's answer; management (``/metrics``, the
console's node health) reads the figures.  Pure bookkeeping: no clock of its
own (callers pass monotonic seconds), no I/O, nothing exported from here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Sequence

__all__ = ["Histogram", "JournalFigures", "COMMIT_SECONDS_BOUNDS", "GROUP_ROWS_BOUNDS"]

#: upper bounds of the commit latency buckets, in seconds (an fsynced Delta commit
#: takes a few milliseconds on a local SSD, seconds on a slow disk or object storage)
COMMIT_SECONDS_BOUNDS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: upper bounds of the group size buckets, in journal rows per commit
GROUP_ROWS_BOUNDS: tuple[float, ...] = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500,
                                        5000, 10000, 25000)


class Histogram:
    """Observations counted in buckets by upper bound (``le``), as Prometheus histograms are."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)     # the last one: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations at or below it)``, ending with ``(inf, count)``."""
        running = 0
        found: list[tuple[float, int]] = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            running += count
            found.append((bound, running))
        return found


class JournalFigures:
    """Commits, their latency and size, and the bytes handed to them, of one journal."""

    __slots__ = ("commit_seconds", "group_rows", "written_bytes", "failed_commits", "_handed_off")

    def __init__(self) -> None:
        self.commit_seconds = Histogram(COMMIT_SECONDS_BOUNDS)
        self.group_rows = Histogram(GROUP_ROWS_BOUNDS)
        #: bytes of rows handed to commits, as encoded for the writer
        self.written_bytes = 0
        self.failed_commits = 0
        # (when, rows) of each commit handed off and not yet answered, oldest first (answered in order)
        self._handed_off: deque[tuple[float, int]] = deque()

    @property
    def in_flight_since(self) -> float | None:
        """When the oldest commit in flight was handed off (monotonic seconds); None: none in flight."""
        return self._handed_off[0][0] if self._handed_off else None

    def handed_off(self, rows: int, size: int, now: float) -> None:
        """A group of ``rows`` rows, ``size`` bytes encoded, went to be committed at ``now``."""
        self._handed_off.append((now, rows))
        self.written_bytes += size

    def committed(self, now: float, succeeded: bool) -> None:
        """The oldest commit handed off and not yet answered answered at ``now``."""
        if not self._handed_off:
            return
        started, rows = self._handed_off.popleft()
        if not succeeded:
            self.failed_commits += 1
            return
        self.commit_seconds.observe(max(now - started, 0.0))
        self.group_rows.observe(rows)

    def in_flight_seconds(self, now: float) -> float:
        """How long the commit in flight has been waited for (0 when none is)."""
        started = self.in_flight_since
        return 0.0 if started is None else max(now - started, 0.0)
