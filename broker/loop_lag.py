"""How long the event loop was kept from running: a timer that notices its own lateness.

Every connection, timer and management request of the broker is served by
one event loop; anything that holds it (a slow callback, a blocking call)
delays all of them.  :class:`LoopLag` schedules a tick every
:data:`INTERVAL` seconds and measures how late each tick runs: a tick late
by 30 ms means the loop did nothing else for about 30 ms.  The broker shows
the figures as statistics (``eventLoopLagMax``, ``eventLoopStalls``) and
Prometheus metrics; ``python -m bench.declare_stall`` reads them.
"""

from __future__ import annotations

import asyncio
import time

#: seconds between ticks
INTERVAL = 0.01
#: a tick later than this (seconds) counts as a stall
STALL = 0.005


class LoopLag:
    """The event loop's lateness, measured by a repeating timer."""

    def __init__(self, interval: float = INTERVAL, stall: float = STALL) -> None:
        self.interval = interval
        self.stall = stall
        #: the longest lateness seen since start (seconds)
        self.max_lag = 0.0
        #: ticks later than :attr:`stall`
        self.stalls = 0
        self.ticks = 0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = 0.0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self) -> None:
        assert self._loop is not None
        self._due = time.monotonic() + self.interval
        self._handle = self._loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        self.observe(time.monotonic() - self._due)
        self._schedule()

    def observe(self, lag: float) -> None:
        """Count one tick that ran ``lag`` seconds late."""
        self.ticks += 1
        if lag > self.max_lag:
            self.max_lag = lag
        if lag > self.stall:
            self.stalls += 1
