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
``<wall-clock seconds> gc2 <ms> <objects collected>``, and collections of the younger generations
that took over 0.5 ms as ``gc0``/``gc1``.  The CPU figure tells why: a loop
that was busy running something (CPU close to the lateness), or one that was
not given a core or waited for the interpreter lock (CPU well below it).
With ``DELTAMQ_LOOP_PROBE_GARBAGE=1`` the objects in the young generation
when it is collected and the cyclic garbage each collection freed are
counted by type in ``<probe file>.garbage`` (for finding the cycles;
it slows collections, so not for figures).

What the loop ran meanwhile: a watchdog thread notices a tick more than 4 ms
late, samples the loop thread's stack every 0.5 ms until the tick runs, and
appends one JSON line per stall to ``<probe file>.stacks``:
``{"at": <wall-clock seconds>, "ms": <how long it sampled>, "cpu_ms": <the
loop thread's CPU time meanwhile>, "samples": n, "stacks": [[count,
"file:line function <- caller <- ..."], ...]}`` (the innermost frame first,
down to the event loop; most frequent stack first).  ``<event loop>`` alone
is the loop's own code: polling, or with uvloop its C callbacks.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import time
from collections import Counter
from types import FrameType
from typing import Any

import anyio

INTERVAL = 0.01
NOTE_ABOVE = 0.001
WATCH_ABOVE = 0.004
SAMPLE_EVERY = 0.0005
STACK_DEPTH = 14


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
    _start_watchdog(path + ".stacks", threading.get_ident(), lambda: due)

    # garbage collections: all of the oldest generation, the younger ones when slow
    started = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        generation = info.get("generation")
        if phase == "start":
            if out_garbage is not None and generation == 0:
                young = gc.get_objects(0)
                kinds = Counter(type(o).__qualname__ for o in young)
                out_garbage.write(json.dumps({"at": round(time.time(), 4), "young": len(young),
                                              "types": kinds.most_common(12)}) + "\n")
                del young
            started[0] = time.perf_counter()
            return
        took = (time.perf_counter() - started[0]) * 1000
        if generation == 2 or took > 0.5:
            out.write(f"{time.time():.4f} gc{generation} {took:.3f} {info.get('collected', 0)}\n")
        if out_garbage is not None and gc.garbage:
            kinds = Counter(type(o).__qualname__ for o in gc.garbage)
            gc.garbage.clear()
            out_garbage.write(json.dumps({"at": round(time.time(), 4), "generation": generation,
                                          "types": kinds.most_common(12)}) + "\n")

    out_garbage = None
    if os.environ.get("DELTAMQ_LOOP_PROBE_GARBAGE"):
        # what the collections free, by type (slows them: for finding cycles, not for figures)
        gc.set_debug(gc.DEBUG_SAVEALL)
        out_garbage = open(path + ".garbage", "a", buffering=1)
    gc.callbacks.append(collected)


def _stack(frame: FrameType | None) -> str:
    parts = []
    while frame is not None and len(parts) < STACK_DEPTH:
        code = frame.f_code
        if code.co_filename.endswith("asyncio/runners.py"):
            # the loop itself (its C code: polling, or uvloop's own work)
            parts.append("<event loop>")
            break
        parts.append(f"{_short(code.co_filename)}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return " <- ".join(parts)


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/broker/", "/lakehouse/", "/mgmt/", "/lib/python"):
        at = filename.rfind(marker)
        if at >= 0:
            return filename[at + 1:]
    return filename


def _start_watchdog(path: str, loop_thread: int, due: Any) -> None:
    """Sample the loop thread's stack while its tick is over ``WATCH_ABOVE`` late."""
    out = open(path, "a", buffering=1)
    clock = time.pthread_getcpuclockid(loop_thread)

    def watch() -> None:
        while True:
            time.sleep(0.001)
            late_for = due()
            if time.monotonic() - late_for <= WATCH_ABOVE:
                continue
            # sample often: a waiting thread only gets the interpreter lock every switch interval
            switch = sys.getswitchinterval()
            sys.setswitchinterval(SAMPLE_EVERY / 2)
            stacks: Counter[str] = Counter()
            first = time.monotonic()
            cpu_first = time.clock_gettime(clock)
            try:
                while due() == late_for:
                    frame = sys._current_frames().get(loop_thread)
                    stacks[_stack(frame)] += 1
                    del frame
                    time.sleep(SAMPLE_EVERY)
            finally:
                sys.setswitchinterval(switch)
            record = {"at": round(time.time(), 4), "ms": round((time.monotonic() - first) * 1000, 3),
                      "cpu_ms": round((time.clock_gettime(clock) - cpu_first) * 1000, 3),
                      "samples": sum(stacks.values()), "stacks": [[n, s] for s, n in stacks.most_common()]}
            out.write(json.dumps(record) + "\n")

    threading.Thread(target=watch, name="loop-probe-watchdog", daemon=True).start()


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
