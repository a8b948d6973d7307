"""Rates per second of counter statistics, measured between reads (sans-IO).

The broker keeps plain counters (messages in, bytes out, ...); a rate is
the change of a counter over time.  :class:`RateBook` remembers, per
object, a few timed readings of its counters -- at most one per
``interval`` -- and answers each read with the rate since the newest
reading at least ``interval`` old (or the oldest it has).  A dashboard
polling every second thus sees the rate over the last second or two; the
first read of an object reports 0.  Readings of objects no longer read
are forgotten after ``horizon`` seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

RATE_SUFFIX = "Rate"


class _Readings:
    __slots__ = ("samples", "last_read")

    def __init__(self, now: float) -> None:
        #: (time, counter names, their values) oldest first
        self.samples: deque[tuple[float, tuple[str, ...], tuple[int, ...]]] = deque()
        self.last_read = now


def rate_name(counter: str) -> str:
    return counter + RATE_SUFFIX


class RateBook:
    def __init__(self, interval: float = 1.0, horizon: float = 60.0) -> None:
        self.interval = interval
        self.horizon = horizon
        self._readings: dict[str, _Readings] = {}
        self._last_sweep = 0.0

    def rates(self, key: str, now: float, counters: Mapping[str, int]) -> dict[str, float]:
        """``{<counter>Rate: per second}`` for object ``key``, whose counters read ``counters`` now."""
        names = tuple(counters)
        found = self.rates_of(key, now, names, tuple(counters.values()))
        if found is None:
            return {rate_name(name): 0.0 for name in names}
        return {rate_name(name): rate for name, rate in zip(names, found)}

    def rates_of(self, key: str, now: float, names: tuple[str, ...],
                 values: tuple[int, ...]) -> list[float] | None:
        """The rates per second of counters ``names`` of object ``key``, which read ``values``
        now, in that order, or None when they are all 0 -- what :meth:`rates` gives,
        without a dict in and out: a list of 10,000 queues, most of them idle, asks
        for the same few counters of each."""
        readings = self._readings.get(key)
        if readings is None:
            readings = self._readings[key] = _Readings(now)
        readings.last_read = now
        samples = readings.samples
        interval = self.interval
        while len(samples) > 1 and now - samples[1][0] >= interval:
            samples.popleft()                       # keep one reading at least `interval` old
        found: list[float] | None = None
        if samples and now > samples[0][0]:
            then, before_names, before = samples[0]
            if before_names != names:
                earlier = dict(zip(before_names, before))
                before = tuple(earlier.get(name, 0) for name in names)
            if before != values:
                elapsed = now - then
                found = [round((value - old) / elapsed, 3) if value > old else 0.0
                         for value, old in zip(values, before)]
        if not samples or now - samples[-1][0] >= interval:
            samples.append((now, names, values))
        if now - self._last_sweep >= self.horizon:
            self._sweep(now)
        return found

    def _sweep(self, now: float) -> None:
        self._last_sweep = now
        for key in [k for k, r in self._readings.items() if now - r.last_read > self.horizon]:
            del self._readings[key]

    def __len__(self) -> int:
        return len(self._readings)
