"""Durable declares beside a publish flow: their latency, and the event loop's longest stall.

    python -m bench.declare_stall [--declares 1000] [--rate 20000] [--rounds 2]
                                  [--old /path/to/old/checkout]

For each broker (this checkout, and with ``--old`` another one: A/B,
interleaved round by round) it starts ``deltamq serve`` in a fresh data
directory under the loop probe (:mod:`bench.loop_probe`), then:

* a publisher process sends transient messages at ``--rate`` per second, in
  batches every 10 ms, to a queue capped at 10,000 messages (drop-head), and
  keeps doing so for the whole run;
* this process declares ``--declares`` durable queues one after the other
  (each waits for its declare-ok) and times each;
* the probe notes every time the broker's event loop ran a 10 ms timer late;
* then the flow runs alone as long again: the stalls the machine's load
  causes anyway (on a busy machine the broker is not always given a core).

Reported per run: durable declare latency (median, p99, max), the loop's
longest stall, the longest the loop thread was *busy* (its CPU time within a
late tick: a stall with little CPU was the machine not giving the broker a
core, or the loop waiting for the interpreter lock) and the number of
stalls over 5 ms while the declares ran,
and the publish rate the publisher achieved, then the stacks the loop thread
was seen in most during its stalls (sampled every 0.5 ms while a tick is
over 4 ms late) and the slow garbage collections.  On a machine too slow for the
rate asked, the achieved rate is what the broker sustained: say so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from . import amqp
from .deltamq import REPO, DeltaMQ

PROBE = Path(__file__).resolve().parent / "loop_probe.py"
STALL_MS = 5.0
TOP_STACKS = 5


class ProbedDeltaMQ(DeltaMQ):
    """``deltamq serve`` of checkout ``repo``, run under the loop probe."""

    def __init__(self, repo: Path, probe_file: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.repo = repo
        self.probe_file = probe_file

    def _prefix(self) -> tuple[list[str], dict[str, str]]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.repo)
        env["DELTAMQ_LOOP_PROBE"] = self.probe_file
        return [sys.executable, str(PROBE)], env


def _publish(port: int, rate: int, stop_at: float) -> None:
    """The publisher process: ``rate`` messages/s in 10 ms batches until ``stop_at`` (wall clock)."""

    async def run() -> int:
        conn = await amqp.Connection.open("127.0.0.1", port)
        ch = await conn.channel()
        queue = f"flow-{uuid.uuid4().hex[:8]}"
        await ch.queue_declare(queue, arguments={"x-max-length": 10_000})
        per_batch = max(1, rate // 100)
        publisher = amqp.Publisher(ch.number, "", queue, per_batch)
        sent = 0
        start = time.monotonic()
        while time.time() < stop_at:
            due = start + (sent / rate)
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
            conn.write(bytes(publisher.batch(per_batch, time.perf_counter_ns())))
            sent += per_batch
            await conn.drain()
        await conn.close()
        return sent

    asyncio.run(run())


async def _declare(port: int, count: int) -> list[float]:
    conn = await amqp.Connection.open("127.0.0.1", port)
    ch = await conn.channel()
    prefix = f"durable-{uuid.uuid4().hex[:6]}"
    latencies = []
    for n in range(count):
        t0 = time.perf_counter()
        await ch.queue_declare(f"{prefix}-{n}", durable=True)
        latencies.append((time.perf_counter() - t0) * 1000)
    await conn.close()
    return latencies


def _stalls(probe_file: str, start: float, end: float) -> list[tuple[float, float]]:
    """(lateness ms, loop thread CPU ms meanwhile) of the late ticks between ``start`` and ``end``."""
    out = []
    with open(probe_file) as f:
        for line in f:
            at, late, cpu = line.split()[:3]
            if start <= float(at) <= end and not late.startswith("gc"):
                out.append((float(late), float(cpu)))
    return out


def _collections(probe_file: str, start: float, end: float, kind: str = "gc2") -> list[float]:
    """Durations (ms) of the garbage collections of ``kind`` noted between ``start`` and ``end``.

    ``gc2``: every full collection; ``gc0``/``gc1``: the younger ones over 0.5 ms.
    """
    with open(probe_file) as f:
        return [float(ms) for at, noted, ms, *_ in (line.split() for line in f)
                if noted == kind and start <= float(at) <= end]


def _stall_stacks(probe_file: str, start: float, end: float) -> list[tuple[int, int, str]]:
    """What the loop ran in its *busy* stalls between ``start`` and ``end``.

    (samples, stalls it was seen in, stack), most samples first, from the
    probe's watchdog (``<probe file>.stacks``); only the stalls in which the
    loop thread used over half the time sampled count (the others were the
    machine not giving it a core).
    """
    samples: dict[str, int] = {}
    stalls: dict[str, int] = {}
    path = probe_file + ".stacks"
    if not os.path.exists(path):
        return []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if not start <= record["at"] <= end or record["cpu_ms"] < record["ms"] / 2:
                continue
            for count, stack in record["stacks"]:
                samples[stack] = samples.get(stack, 0) + count
                stalls[stack] = stalls.get(stack, 0) + 1
    return sorted(((n, stalls[s], s) for s, n in samples.items()), reverse=True)


def _figures(stalls: list[tuple[float, float]]) -> tuple[float, int, float]:
    """Longest stall, stalls over 5 ms, and the longest the loop was busy (not merely descheduled)."""
    return (max((late for late, _ in stalls), default=0.0),
            sum(1 for late, _ in stalls if late > STALL_MS),
            max((min(late, cpu) for late, cpu in stalls), default=0.0))


def one_run(label: str, repo: Path, declares: int, rate: int, log: Any) -> dict[str, Any]:
    probe_file = tempfile.mktemp(prefix="deltamq-loop-probe-")
    broker = ProbedDeltaMQ(repo, probe_file, log=lambda *a: None)
    broker.start()
    try:
        warmup = 2.0
        # the flow runs from before the first declare until after the last (generous)
        stop_at = time.time() + warmup + 600
        publisher = multiprocessing.Process(target=_publish, args=(broker.port, rate, stop_at))
        publisher.start()
        time.sleep(warmup)
        taken_in = broker_messages_in(broker)
        start = time.time()
        latencies = asyncio.run(_declare(broker.port, declares))
        end = time.time()
        flow = (broker_messages_in(broker) - taken_in) / (end - start)
        # the baseline: as long again with the flow alone (what the machine's load costs anyway)
        time.sleep(end - start)
        baseline = _stalls(probe_file, end + 0.2, time.time())
        publisher.terminate()
        publisher.join(10)
        stalls = _stalls(probe_file, start, end)
        collections = _collections(probe_file, start, end)
        young = _collections(probe_file, start, end, "gc1")
        youngest = _collections(probe_file, start, end, "gc0")
        stacks = _stall_stacks(probe_file, start, end)
    finally:
        broker.stop()
        for path in (probe_file, probe_file + ".stacks"):
            if os.path.exists(path) and not os.environ.get("DECLARE_STALL_KEEP"):
                os.unlink(path)
    ordered = sorted(latencies)
    figures = {
        "label": label, "declares": len(latencies),
        "median_ms": statistics.median(ordered), "p99_ms": ordered[int(len(ordered) * 0.99) - 1],
        "max_ms": ordered[-1], "seconds": end - start, "publish_rate": flow,
        "full_gc": len(collections), "full_gc_max_ms": max(collections, default=0.0),
    }
    figures["loop_stall_max_ms"], figures["stalls_over_5ms"], figures["loop_busy_max_ms"] = _figures(stalls)
    (figures["baseline_stall_max_ms"], figures["baseline_stalls_over_5ms"],
     figures["baseline_busy_max_ms"]) = _figures(baseline)
    log(f"{label:4} declare median {figures['median_ms']:6.2f} ms  p99 {figures['p99_ms']:6.2f} ms"
        f"  max {figures['max_ms']:6.2f} ms | loop stall max {figures['loop_stall_max_ms']:6.2f} ms"
        f" (busy {figures['loop_busy_max_ms']:5.2f}), {figures['stalls_over_5ms']} over {STALL_MS:.0f} ms"
        f" | flow {flow:,.0f} msg/s over {end - start:.1f} s | flow alone: stall max"
        f" {figures['baseline_stall_max_ms']:.2f} ms (busy {figures['baseline_busy_max_ms']:.2f}),"
        f" {figures['baseline_stalls_over_5ms']} over {STALL_MS:.0f} ms | full GCs {len(collections)},"
        f" longest {figures['full_gc_max_ms']:.2f} ms; over 0.5 ms: gen-1 {len(young)}"
        f" (longest {max(young, default=0.0):.2f} ms), gen-0 {len(youngest)}"
        f" (longest {max(youngest, default=0.0):.2f} ms)")
    for samples, seen_in, stack in stacks[:TOP_STACKS]:
        log(f"     stalled in ({samples} samples, {seen_in} stalls): {stack}")
    return figures


def broker_messages_in(broker: DeltaMQ) -> float:
    """Messages the broker took in so far (its statistics, over REST)."""
    import json
    import urllib.request

    if not broker.http_port:
        return float("nan")
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}/api/latest/broker")
    request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")       # guest:guest
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            data = json.load(answer)
    except OSError:
        return float("nan")
    data = data[0] if isinstance(data, list) else data
    return float(data.get("statistics", {}).get("messagesIn", float("nan")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--declares", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=20_000, help="publishes per second")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--old", type=Path, help="another checkout to compare with (A/B)")
    args = parser.parse_args(argv)
    runs = []
    for _ in range(args.rounds):
        if args.old is not None:
            runs.append(one_run("old", args.old, args.declares, args.rate, print))
        runs.append(one_run("new", REPO, args.declares, args.rate, print))
    for label in ("old", "new"):
        mine = [r for r in runs if r["label"] == label]
        if mine:
            print(f"{label}: p99 declare {max(r['p99_ms'] for r in mine):.2f} ms (worst round),"
                  f" loop stall max {max(r['loop_stall_max_ms'] for r in mine):.2f} ms, longest busy"
                  f" {max(r['loop_busy_max_ms'] for r in mine):.2f} ms,"
                  f" stalls over {STALL_MS:.0f} ms {sum(r['stalls_over_5ms'] for r in mine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
