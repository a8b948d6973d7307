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
from dataclasses import dataclass, field

RATE_SUFFIX = "Rate"


@dataclass(slots=True)
class _Readings:
    samples: deque[tuple[float, dict[str, int]]] = field(default_factory=deque)
    last_read: float = 0.0


class RateBook:
    def __init__(self, interval: float = 1.0, horizon: float = 60.0) -> None:
        self.interval = interval
        self.horizon = horizon
        self._readings: dict[str, _Readings] = {}
        self._last_sweep = 0.0

    def rates(self, key: str, now: float, counters: Mapping[str, int]) -> dict[str, float]:
        """``{<counter>Rate: per second}`` for object ``key``, whose counters read ``counters`` now."""
        readings = self._readings.get(key)
        if readings is None:
            readings = self._readings[key] = _Readings()
        readings.last_read = now
        samples = readings.samples
        while len(samples) > 1 and now - samples[1][0] >= self.interval:
            samples.popleft()                       # keep one reading at least `interval` old
        rates: dict[str, float] = {}
        if samples and now > samples[0][0]:
            then, before = samples[0]
            elapsed = now - then
            for name, value in counters.items():
                rates[name + RATE_SUFFIX] = round(max(value - before.get(name, 0), 0) / elapsed, 3)
        else:
            rates = {name + RATE_SUFFIX: 0.0 for name in counters}
        if not samples or now - samples[-1][0] >= self.interval:
            samples.append((now, dict(counters)))
        self._sweep(now)
        return rates

    def _sweep(self, now: float) -> None:
        if now - self._last_sweep < self.horizon:
            return
        self._last_sweep = now
        for key in [k for k, r in self._readings.items() if now - r.last_read > self.horizon]:
            del self._readings[key]

    def __len__(self) -> int:
        return len(self._readings)
