"""Flow to disk: a long backlog of persistent messages, published with nobody consuming, then delivered from disk.

    python -m bench.flow_to_disk                              # 10,000,000 x 1 KB, DeltaMQ and RabbitMQ
    python -m bench.flow_to_disk --messages 200000 --only deltamq
    python -m bench.compare --suite flow [these options]

For each broker in turn (RabbitMQ first, then DeltaMQ), started as a user
starts it in a fresh data directory:

1. one durable queue, declared with ``x-queue-mode: lazy`` (DeltaMQ: paged
   always; also the broker-wide ``-D broker.flowToDiskThreshold=<bytes>``,
   ``--threshold``; RabbitMQ: its lazy classic queue, which keeps messages on
   disk, ``--rabbitmq-queue-version 2`` adds ``x-queue-version: 2``);
2. ``--messages`` persistent messages of ``--body`` bytes (random bytes, from
   a pool of 8,192 distinct bodies, so neither broker's storage compresses
   them away) published on one channel with publisher confirms, at most
   ``--window`` unconfirmed; no consumer.  A publisher that makes no progress
   for ``--stall`` seconds (a memory alarm that never clears) fails the run;
3. ``--rest`` seconds with the backlog queued and nothing happening;
4. one consumer (``--prefetch``, manual ``basic.ack multiple=true`` every
   ``--ack-every`` deliveries and every 0.1 s) takes the whole backlog.

Throughout, the broker's resident memory is sampled every 0.25 s: the
broker's own process (DeltaMQ's ``deltamq serve``, RabbitMQ's ``beam.smp``)
and its whole process tree (DeltaMQ's journal writer, journal upkeep and
configuration writer processes included; each one's peak is in the notes).  Reported per broker: confirmed publish rate; RSS peak while
publishing, at rest (the last sample of step 3) and peak while consuming;
delivery rate from disk (msg/s, MB/s of bodies) from the consume request to
the last delivery, and the time to the first one; the broker's CPU per
confirmed publish (its own process and its tree, from ``/proc``; each
process's share and the load average at the start and end of publishing are
in the notes) and its tree's CPU per message delivered; the data directory's size after publishing.  Ratios are
DeltaMQ / RabbitMQ.  Results go to ``bench/results/flow-to-disk-<time>`` and
``flow-to-disk-latest`` (.json, .md).

Before each broker starts, the free space of the temporary directory is
checked (about 3x the bodies' bytes: the journal plus files compaction
rewrites before vacuum removes the old ones); the data directories are
removed after each broker (``DELTAMQ_BENCH_KEEP_DATA=1`` keeps DeltaMQ's).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from . import procutil
from .amqp import Connection, install_uvloop, publish_confirmed, raise_if_failed
from .deltamq import DeltaMQ
from .durable import persistent_publish
from .rabbitmq import RabbitMQ
from .suite import (add_broker_arguments, broker_failed, broker_line, cell, log, machine_line, meta, run_suite,
                    write_report)

QUEUE = "bench.flow_to_disk"
THRESHOLD_VARIABLE = "broker.flowToDiskThreshold"
BODY_POOL = 8192
MIB = 1 << 20


class PagingDeltaMQ(DeltaMQ):
    """DeltaMQ started with the flow-to-disk threshold set (``-D broker.flowToDiskThreshold=N``)."""

    def __init__(self, *args: Any, threshold: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.threshold = threshold

    def _extra_args(self) -> list[str]:
        extra = super()._extra_args()
        if self.threshold is not None:
            extra += ["-D", f"{THRESHOLD_VARIABLE}={self.threshold}"]
        return extra


class RssSampler(threading.Thread):
    """Samples a process's RSS (and its tree's) every ``every`` seconds, by phase."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pid = pid
        self.every = every
        self.phase = "start"
        #: phase -> [(own RSS, tree RSS)]
        self.samples: dict[str, list[tuple[int, int]]] = {}
        #: the peak RSS of each process of the tree, by what it runs
        self.by_process: dict[str, int] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        tick = 0
        kids = procutil.tree(self.pid)
        while not self._stop_event.is_set():
            if tick % 20 == 0:                  # the tree changes rarely: list it every 5 s
                kids = procutil.tree(self.pid)
            own = procutil.rss_bytes(self.pid)
            sizes = {p: procutil.rss_bytes(p) for p in kids}
            total = sum(sizes.values())
            for p, size in sizes.items():
                name = process_name(p)
                self.by_process[name] = max(self.by_process.get(name, 0), size)
            self.samples.setdefault(self.phase, []).append((own, total))
            tick += 1
            self._stop_event.wait(self.every)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)

    def peak(self, phase: str, tree: bool = False) -> int | None:
        values = [s[1 if tree else 0] for s in self.samples.get(phase, [])]
        return max(values) if values else None

    def last(self, phase: str, tree: bool = False) -> int | None:
        values = self.samples.get(phase, [])
        return values[-1][1 if tree else 0] if values else None


def process_name(pid: int) -> str:
    """What a process runs: its module (``-m lakehouse.journal_writer``) or its command."""
    words = procutil.cmdline(pid)
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    return procutil.comm(pid) or str(pid)


def tree_cpu_by_process(pid: int) -> dict[str, float]:
    """CPU seconds of a broker's tree by what each process runs: ``broker`` for ``pid`` itself."""
    out = {"broker": procutil.cpu_seconds(pid)}
    for p in procutil.tree(pid):
        if p != pid:
            name = process_name(p)
            out[name] = out.get(name, 0.0) + procutil.cpu_seconds(p)
    return out


def cpu_per_message(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    """µs of CPU per message of each process between two :func:`tree_cpu_by_process` samples.

    A process that started in between counts from zero; one that ended is left out.
    """
    return {name: round((seconds - before.get(name, 0.0)) / n * 1e6, 1) for name, seconds in after.items()}


def bodies(size: int) -> list[bytes]:
    rng = random.Random(20261124)
    return [rng.randbytes(size) for _ in range(BODY_POOL)]


async def publish(broker: Any, arguments: dict[str, Any], n: int, body: int, window: int, stall: float) -> dict:
    conn = await Connection.open(broker.host, broker.port, broker.vhost)
    try:
        ch = await conn.channel()
        await ch.queue_delete(QUEUE)
        await ch.queue_declare(QUEUE, durable=True, arguments=arguments)
        pch = await conn.channel()
        await pch.confirm_select()
        blocks = [persistent_publish(pch.number, "", QUEUE, b, frame_max=conn.frame_max) for b in bodies(body)]
        size = len(blocks[0])
        pool = memoryview(b"".join(blocks))
        position = 0

        def frames(k: int) -> bytes:
            nonlocal position
            parts = []
            while k:
                take = min(k, BODY_POOL - position)
                parts.append(pool[position * size:(position + take) * size])
                position = (position + take) % BODY_POOL
                k -= take
            return b"".join(parts)

        def progress(confirmed: int, elapsed: float) -> None:
            log(f"    ... {confirmed:,} confirmed ({confirmed / elapsed:,.0f}/s)")

        cpu0, load0 = tree_cpu_by_process(broker.pid), os.getloadavg()[0]
        task = asyncio.ensure_future(publish_confirmed(conn, pch, n, 500, window, frames, progress))
        seen, since = 0, time.monotonic()
        while not task.done():
            await asyncio.wait({task}, timeout=1.0)
            if pch.confirmed != seen:
                seen, since = pch.confirmed, time.monotonic()
            elif time.monotonic() - since > stall:
                task.cancel()
                raise RuntimeError(f"publishing stalled: {seen:,} of {n:,} confirmed, none for {stall:.0f} s"
                                   " (a memory alarm that does not clear: is flow to disk on?)")
        seconds = task.result()
        cpu = cpu_per_message(cpu0, tree_cpu_by_process(broker.pid), n)
        load = (round(load0, 2), round(os.getloadavg()[0], 2))
        depth, _ = await ch.queue_declare(QUEUE, passive=True)
        return {"publish_s": round(seconds, 2), "publish_per_s": round(n / seconds), "nacked": pch.nacked,
                "depth": depth, "publish_cpu_us": cpu["broker"],
                "publish_cpu_us_tree": round(sum(cpu.values()), 1), "publish_cpu_us_by_process": cpu,
                "publish_load": load}
    finally:
        await conn.close()


async def consume(broker: Any, n: int, body: int, prefetch: int, ack_every: int, stall: float) -> dict:
    conn = await Connection.open(broker.host, broker.port, broker.vhost)
    try:
        ch = await conn.channel()
        await ch.basic_qos(prefetch)
        cpu0 = procutil.tree_cpu_seconds(broker.pid)
        t0 = time.perf_counter()
        await ch.basic_consume(QUEUE, "flow-to-disk", no_ack=False, ack_every=ack_every)
        first: float | None = None
        seen, since, shown = 0, time.monotonic(), time.monotonic()
        while ch.received < n:
            raise_if_failed((conn,))
            await asyncio.sleep(0.1)
            ch.flush_acks()
            if first is None and ch.received:
                first = time.perf_counter() - t0
            now = time.monotonic()
            if ch.received != seen:
                seen, since = ch.received, now
            elif now - since > stall:
                raise RuntimeError(f"delivery stalled: {seen:,} of {n:,} received, none for {stall:.0f} s")
            if now - shown > 10:
                shown = now
                log(f"    ... {seen:,} delivered ({seen / (time.perf_counter() - t0):,.0f}/s)")
        seconds = time.perf_counter() - t0
        ch.flush_acks()
        cpu = procutil.tree_cpu_seconds(broker.pid) - cpu0
        await asyncio.sleep(0.5)                # the last acks reach the broker
        depth, _ = await ch.queue_declare(QUEUE, passive=True)
        return {"deliver_s": round(seconds, 2), "deliver_per_s": round(n / seconds),
                "deliver_mb_per_s": round(n * body / seconds / 1e6, 1),
                "first_delivery_s": round(first if first is not None else seconds, 3),
                "broker_cpu_us_per_message": round(cpu / n * 1e6, 1), "depth_after": depth}
    finally:
        await conn.close()


def directory_bytes(path: str | None) -> int:
    total = 0
    for root, _, files in os.walk(path or ""):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def check_disk(a: argparse.Namespace) -> None:
    need = 3 * a.messages * (a.body + 200)
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < need:
        raise RuntimeError(f"{tempfile.gettempdir()} has {free / 2**30:.1f} GiB free; {a.messages:,} messages of"
                           f" {a.body} B need about {need / 2**30:.1f} GiB (3x the bodies); use --messages")


def run_broker(name: str, broker: Any, a: argparse.Namespace) -> dict:
    check_disk(a)
    arguments: dict[str, Any] = {"x-queue-mode": "lazy"}
    if name == "rabbitmq" and a.rabbitmq_queue_version:
        arguments["x-queue-version"] = a.rabbitmq_queue_version
    broker.start()
    sampler = RssSampler(broker.pid)
    sampler.start()
    try:
        install_uvloop()
        out: dict[str, Any] = {"description": broker.describe(), "queue_arguments": arguments}
        log(f"[{name}] publishing {a.messages:,} persistent messages of {a.body} B (lazy queue, confirms) ...")
        sampler.phase = "publish"
        out.update(asyncio.run(publish(broker, arguments, a.messages, a.body, a.window, a.stall)))
        out["data_bytes"] = directory_bytes(broker.dir)
        log(f"[{name}] published at {out['publish_per_s']:,}/s; queue depth {out['depth']:,};"
            f" {out['data_bytes'] / MIB:,.0f} MiB on disk; resting {a.rest:.0f} s")
        sampler.phase = "rest"
        time.sleep(a.rest)
        sampler.phase = "consume"
        log(f"[{name}] consuming (prefetch {a.prefetch}, ack every {a.ack_every}) ...")
        out.update(asyncio.run(consume(broker, a.messages, a.body, a.prefetch, a.ack_every, a.stall)))
        sampler.phase = "end"
        log(f"[{name}] delivered at {out['deliver_per_s']:,}/s ({out['deliver_mb_per_s']} MB/s);"
            f" depth after {out['depth_after']}")
    finally:
        sampler.stop()
        broker.stop()
    for phase in ("publish", "rest", "consume"):
        out[f"rss_{phase}_peak"] = sampler.peak(phase)
        out[f"rss_{phase}_peak_tree"] = sampler.peak(phase, tree=True)
    out["rss_peak_by_process"] = dict(sampler.by_process)
    out["rss_upkeep_peak"] = sampler.by_process.get("lakehouse.journal_upkeep")
    out["rss_rest"] = sampler.last("rest")
    out["rss_rest_tree"] = sampler.last("rest", tree=True)
    return out


ROWS = (
    ("confirmed publish, msg/s", "publish_per_s", ",.0f", 1),
    ("broker CPU per confirmed publish, us", "publish_cpu_us", ",.1f", 1),
    ("  broker tree, us", "publish_cpu_us_tree", ",.1f", 1),
    ("RSS peak publishing, MiB", "rss_publish_peak", ",.0f", MIB),
    ("  broker tree, MiB", "rss_publish_peak_tree", ",.0f", MIB),
    ("RSS at rest, backlog queued, MiB", "rss_rest", ",.0f", MIB),
    ("  broker tree, MiB", "rss_rest_tree", ",.0f", MIB),
    ("delivery from disk, msg/s", "deliver_per_s", ",.0f", 1),
    ("delivery from disk, MB/s of bodies", "deliver_mb_per_s", ",.1f", 1),
    ("first delivery after consume, s", "first_delivery_s", ",.2f", 1),
    ("RSS peak consuming, MiB", "rss_consume_peak", ",.0f", MIB),
    ("  broker tree, MiB", "rss_consume_peak_tree", ",.0f", MIB),
    ("journal upkeep process RSS peak, MiB", "rss_upkeep_peak", ",.0f", MIB),
    ("broker CPU per delivery, us", "broker_cpu_us_per_message", ",.1f", 1),
    ("data directory after publishing, MiB", "data_bytes", ",.0f", MIB),
)


def report(results: dict, out_dir: Path, a: argparse.Namespace) -> None:
    brokers = results["brokers"]
    d, r = brokers.get("deltamq", {}), brokers.get("rabbitmq", {})
    rows = []
    for label, key, spec, unit in ROWS:
        dv, rv = d.get(key), r.get(key)
        ratio = dv / rv if isinstance(dv, (int, float)) and isinstance(rv, (int, float)) and rv else None
        rows.append([label, cell(dv / unit if dv is not None else None, spec),
                     cell(rv / unit if rv is not None else None, spec), cell(ratio, ".2f")])
    header = [f"Flow to disk: {a.messages:,} persistent {a.body}-byte messages, one lazy durable queue",
              machine_line(results["meta"]), broker_line("DeltaMQ", d), broker_line("RabbitMQ", r),
              f"DeltaMQ -D {THRESHOLD_VARIABLE}={a.threshold}; publish window {a.window}; consumer prefetch"
              f" {a.prefetch}, ack every {a.ack_every}; rest {a.rest:.0f} s"]
    notes = [f"{label}: {info['error']}" for label, info in (("DeltaMQ", d), ("RabbitMQ", r)) if "error" in info]
    for label, info in (("DeltaMQ", d), ("RabbitMQ", r)):
        peaks = info.get("rss_peak_by_process") or {}
        if len(peaks) > 1:
            notes.append(f"{label}'s processes, peak RSS: " + ", ".join(
                f"{name} {size / MIB:,.0f} MiB" for name, size in sorted(peaks.items(), key=lambda kv: -kv[1])))
    for label, info in (("DeltaMQ", d), ("RabbitMQ", r)):
        if "publish_load" in info:
            start, end = info["publish_load"]
            split = ", ".join(f"{name} {us:,.1f}" for name, us in info["publish_cpu_us_by_process"].items())
            notes.append(f"{label} publishing: load average {start} at the start, {end} at the end;"
                         f" CPU per confirmed publish, us: {split}")
    notes.append("the publish rate follows the CPU the broker gets: on a loaded machine compare CPU per"
                 " confirmed publish, which the load changes little")
    notes.append("ratio = DeltaMQ / RabbitMQ; RSS of the broker process (DeltaMQ: deltamq serve; RabbitMQ:"
                 " beam.smp) and of its process tree (DeltaMQ's journal writer, journal upkeep and"
                 " configuration writer processes; their peaks are listed above)")
    write_report(results, out_dir, title="Flow to disk", header=header,
                 table=(["figure", "DeltaMQ", "RabbitMQ", "ratio"], rows), cpu_title="", cpu=([], []),
                 notes=notes, right=lambda i, _h: i > 0, prefix="flow-to-disk", latest="flow-to-disk-latest")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.flow_to_disk", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("deltamq", "rabbitmq"), help="run against one broker only")
    ap.add_argument("--messages", type=int, default=10_000_000, help="backlog size (default 10,000,000)")
    ap.add_argument("--body", type=int, default=1024, help="body bytes (default 1024)")
    ap.add_argument("--threshold", type=int, default=256 * MIB,
                    help=f"DeltaMQ's {THRESHOLD_VARIABLE}, bytes (default 256 MiB)")
    ap.add_argument("--rabbitmq-queue-version", type=int, choices=(1, 2), default=None,
                    help="RabbitMQ's x-queue-version (default: the node's default)")
    ap.add_argument("--window", type=int, default=5000, help="unconfirmed publishes at most (default 5000)")
    ap.add_argument("--prefetch", type=int, default=1000, help="consumer prefetch (default 1000)")
    ap.add_argument("--ack-every", type=int, default=100, help="deliveries per multiple ack (default 100)")
    ap.add_argument("--rest", type=float, default=10.0, help="seconds between publishing and consuming")
    ap.add_argument("--stall", type=float, default=180.0, help="seconds without progress that fail a run")
    ap.add_argument("--nice", type=int, default=0, help="niceness increment for the brokers")
    add_broker_arguments(ap)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    names = [a.only] if a.only else ["rabbitmq", "deltamq"]
    results: dict[str, Any] = {"meta": meta(a, sys.argv if argv is None else argv, names, install_uvloop()),
                               "brokers": {}}

    def body() -> None:
        for name in names:
            broker: DeltaMQ | RabbitMQ
            if name == "deltamq":
                broker = PagingDeltaMQ(port=a.deltamq_port, exe=a.deltamq_exe, vhost=a.deltamq_vhost, log=log,
                                       keep_dir=bool(os.environ.get("DELTAMQ_BENCH_KEEP_DATA")),
                                       threshold=a.threshold)
            else:
                broker = RabbitMQ(port=a.rabbitmq_port, log=log)
            broker.nice = a.nice
            try:
                results["brokers"][name] = run_broker(name, broker, a)
                results["brokers"][name]["workloads"] = {"flow": {}}
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 - record it and go on with the next broker
                log(f"[{name}] FAILED: {e}")
                failed: dict[str, Any] = {"workloads": {"flow": {"error": str(e)}}}
                broker_failed(failed, e)
                results["brokers"][name] = failed

    return run_suite(results, "brokers", body, lambda: report(results, Path(a.out), a))


if __name__ == "__main__":
    sys.exit(main())
