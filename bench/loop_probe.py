"""Run ``deltamq`` with a probe of its event loop's lateness (for ``bench.declare_stall``).

Run as ``python bench/loop_probe.py <deltamq arguments>`` (by path, so it
works for any checkout of the broker on ``PYTHONPATH``, old ones included,
which have no loop-lag statistics of their own).  It wraps the coroutine the
broker hands to ``anyio.run`` so that, on the broker's own event loop, a
timer fires every 10 ms and notes how late it ran; every tick later than
1 ms is appended to the file named by ``DELTAMQ_LOOP_PROBE`` as
``<wall-clock seconds> <lateness in ms> <loop thread CPU ms since the last tick>``.
A tick late by *n* ms means the loop ran nothing else for about *n* ms:
every connection waited.  Full garbage collections are noted as
``<wall-clock seconds> gc2 <ms>``.  The CPU figure tells why: a loop that was busy
running something (CPU close to the lateness), or one that was not given a
core or waited for the interpreter lock (CPU well below it).
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from typing import Any

import anyio

INTERVAL = 0.01
NOTE_ABOVE = 0.001


def _start_probe(path: str) -> None:
    loop = asyncio.get_running_loop()
    out = open(path, "a", buffering=1)
    due = time.monotonic() + INTERVAL
    cpu = time.thread_time()

    def tick() -> None:
        nonlocal due, cpu
        now, cpu_now = time.monotonic(), time.thread_time()
        late = now - due
        if late > NOTE_ABOVE:
            out.write(f"{time.time():.4f} {late * 1000:.3f} {(cpu_now - cpu) * 1000:.3f}\n")
        due, cpu = now + INTERVAL, cpu_now
        loop.call_later(INTERVAL, tick)

    loop.call_later(INTERVAL, tick)

    # garbage collections of the oldest generation, which can stop the loop too
    started = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            out.write(f"{time.time():.4f} gc2 {(time.perf_counter() - started[0]) * 1000:.3f}\n")

    gc.callbacks.append(collected)


def main() -> int:
    path = os.environ["DELTAMQ_LOOP_PROBE"]
    real_run = anyio.run

    def run(func: Any, *args: Any, **kwargs: Any) -> Any:
        async def probed(*inner: Any) -> Any:
            _start_probe(path)
            return await func(*inner)
        return real_run(probed, *args, **kwargs)

    anyio.run = run  # type: ignore[assignment]
    from broker.cli import main as deltamq

    sys.argv[0] = "deltamq"
    return int(deltamq() or 0)


if __name__ == "__main__":
    sys.exit(main())
