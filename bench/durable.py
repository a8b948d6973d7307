"""Persistent messages on durable queues (issue 3): DeltaMQ vs RabbitMQ classic and quorum.

    python -m bench.durable [--quick] [--only deltamq|rabbitmq] [--workloads D1,D2,D3,D4]
                            [--duration 15] [--warmup 5] [--inflight 1000]
                            [--latency-duration 15] [--latency-warmup 2] [--latency-fraction 0.5]
                            [--recovery-messages 1000000] [--visibility-samples 20]
    python -m bench.compare --suite durable [same options]

D1  1 producer  -> 1 durable queue -> 1 consumer
D2  10 producers (one connection each) -> 1 durable queue -> 1 consumer
    256-byte persistent messages (delivery-mode 2), publisher confirms,
    consumer with manual ack, prefetch 1000, multiple-acks.  Two windows:
    1. closed loop (peak): each producer keeps its share of --inflight
       unconfirmed messages in flight; reported confirmed and consumed msg/s.
       Its confirm latency (~ in-flight / rate, Little's law) is kept in the
       JSON as closed_loop_latency, for reference only.
    2. open loop at half the peak (--latency-fraction): after the queue
       drains, the producers publish at a fixed total rate of 0.5 x the
       confirmed msg/s of window 1, split evenly, paced by a 1 ms timer;
       reported confirm latency (write of the publish -> its basic.ack)
       p50/p99 (half_peak in the JSON).  The p99 target applies to this one.
    Against DeltaMQ (durable queue of its default `delta` virtual host node),
    RabbitMQ classic durable queue, RabbitMQ quorum queue.
D3  DeltaMQ only: publish one persistent message with a unique message-id,
    and from the instant its confirm arrives poll a Spark SQL query over the
    node's Delta journal table until the row is visible.  p50/max seconds.
D4  DeltaMQ only: confirm N (1,000,000) persistent messages into a durable
    queue, SIGTERM the broker, start it again on the same data directory and
    time process start -> broker answers -> passive queue.declare reports N.

Each broker is started and stopped here (bench/rabbitmq.py, bench/deltamq.py).
Results: a table on stdout, and bench/results/durable-<time>.{json,md} plus
durable-latest.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from struct import pack
from time import perf_counter, perf_counter_ns
from typing import Callable

from . import procutil
from .amqp import (FRAME_BODY, FRAME_END, FRAME_HEADER, AMQPError, Channel, Connection, Waker, admin,
                   install_uvloop, method_frame, publish_confirmed, raise_if_failed, shortstr)
from .deltamq import REPO, DeltaMQ
from .suite import (add_broker_arguments, attempt, broker_failed, broker_line, cell, failures,
                    interrupt_on_sigterm, log, machine_line, meta, new_deltamq, new_rabbitmq,
                    run_suite, write_report)
from .workers import PHASE, Pool, Snap, WorkloadError

BODY_SIZE = 256

TARGET_RATIO = 0.5            # DeltaMQ / RabbitMQ classic, confirmed msg/s
TARGET_P99_MS = 50.0          # DeltaMQ confirm latency p99
TARGET_VISIBLE_S = 1.0        # D3: confirm -> visible in Spark
TARGET_RECOVERY_S = 15.0      # D4: restart -> all N messages back

TITLES = {
    "D1": "1 producer → durable queue → 1 consumer",
    "D2": "10 producers → durable queue → 1 consumer",
    "D3": "confirm → visible in Spark (DeltaMQ)",
    "D4": "recovery after SIGTERM + restart (DeltaMQ)",
}
# the figures of one broker: DeltaMQ, and RabbitMQ with each queue type
TARGETS = ("deltamq", "rabbitmq-classic", "rabbitmq-quorum")
LABELS = {"deltamq": "DeltaMQ", "rabbitmq-classic": "RabbitMQ classic",
          "rabbitmq-quorum": "RabbitMQ quorum"}

# shared control block: ctrl[PHASE], ctrl[RECORD] (0 = off, else the bucket
# confirm latencies go to: CLOSED or PACED), ctrl[RATE] (PACED phase: each
# producer's publish rate in milli-messages/s)
RECORD, RATE = 1, 2
SETUP, RUN, HOLD, STOP, PACED = 0, 1, 2, 3, 4
CLOSED_LOOP, HALF_PEAK = 1, 2     # latency buckets
TICK = 0.001                      # PACED: the producers' timer

RING = 1 << 16                # per-channel ring of publish timestamps, indexed by delivery tag
RING_MASK = RING - 1
PACED_WINDOW = RING // 2 - 1  # PACED: unconfirmed per producer, only a safety bound (open loop)
PACED_BATCH = 100             # PACED: at most this many messages per producer per tick


# --------------------------------------------------------------------------
# persistent publishes, and a channel that times its confirms


def persistent_publish(channel: int, exchange: str, routing_key: str, body: bytes,
                       message_id: str | None = None, frame_max: int = 131072) -> bytes:
    """One pre-encoded basic.publish of a persistent message (delivery-mode 2,
    optionally with a message-id property): method + header + body frame(s)."""
    m = method_frame(channel, (60, 40), pack(">H", 0) + shortstr(exchange)
                     + shortstr(routing_key) + b"\x00")
    # property flags: delivery-mode = bit 12, message-id = bit 7 (in list order)
    flags = 0x1000 | (0x0080 if message_id is not None else 0)
    props = b"\x02" + (shortstr(message_id) if message_id is not None else b"")
    hp = pack(">HHQH", 60, 0, len(body), flags) + props
    h = pack(">BHI", FRAME_HEADER, channel, len(hp)) + hp + FRAME_END
    chunk = frame_max - 8
    frames = [pack(">BHI", FRAME_BODY, channel, len(body[i:i + chunk])) + body[i:i + chunk] + FRAME_END
              for i in range(0, len(body), chunk)] or [b""]
    return m + h + b"".join(frames)


def filler_body(size: int = BODY_SIZE, marker: bytes = b"") -> bytes:
    body = marker + bytes((i % 251) + 1 for i in range(max(0, size - len(marker))))
    return body[:max(size, len(marker))]


class TimedChannel(Channel):
    """A Channel that remembers when each delivery tag was written and, while
    ``ctrl[RECORD]`` is set, records confirm latency for every message a
    basic.ack (or nack) settles -- all tags up to it for multiple=true, minus
    those already settled one by one -- into the bucket ``ctrl[RECORD]``
    names (closed-loop window or paced half-peak window)."""

    def __init__(self, number: int, conn: Connection):
        super().__init__(number, conn)
        self.ring = array("q", bytes(8 * RING))
        self.lats = {CLOSED_LOOP: array("q"), HALF_PEAK: array("q")}
        self.ctrl = None

    def stamp(self, n: int, ts: int) -> None:
        """n publishes written now (tags published+1 .. published+n)."""
        r = self.ring
        m = RING_MASK
        start = self.published + 1
        for t in range(start, start + n):
            r[t & m] = ts
        self.published += n

    def _confirm(self, tag: int, multiple: bool) -> None:
        ctrl = self.ctrl
        lat = self.lats.get(ctrl[RECORD]) if ctrl is not None else None
        if lat is not None:
            now = perf_counter_ns()
            r, m, s = self.ring, RING_MASK, self.singles
            lo = self.acked_upto + 1
            if multiple:
                if tag >= lo:
                    if s:
                        lat.extend(now - r[t & m] for t in range(lo, tag + 1) if t not in s)
                    else:
                        lat.extend(now - r[t & m] for t in range(lo, tag + 1))
            elif tag >= lo and tag not in s:
                lat.append(now - r[tag & m])
        super()._confirm(tag, multiple)


class TimedConnection(Connection):
    channel_class = TimedChannel


# --------------------------------------------------------------------------
# specs and options



#: D3: seconds before the publish that the query's time bound reaches back (clock slack)
VISIBILITY_SLACK = 5.0

@dataclass
class ProdSpec:
    idx: int
    queue: str
    window: int


@dataclass
class ConsSpec:
    idx: int
    queue: str
    prefetch: int
    ack_every: int


@dataclass
class WorkerSpec:
    wid: int
    producers: list[ProdSpec] = field(default_factory=list)
    consumers: list[ConsSpec] = field(default_factory=list)


@dataclass
class Workload:
    id: str
    title: str
    queue: str
    nprod: int
    workers: list[WorkerSpec]
    window: int                 # per producer
    batch: int = 100
    backlog: int = 50_000       # producers pause while the queue holds more unconsumed messages


@dataclass
class Options:
    duration: float = 15.0
    warmup: float = 5.0
    lat_duration: float | None = None   # paced half-peak window; None: same as duration
    lat_warmup: float = 2.0
    latency_fraction: float = 0.5       # paced rate = this x the closed-loop confirmed msg/s
    inflight: int = 1000             # unconfirmed messages in flight per workload, all producers
    prefetch: int = 1000
    ack_every: int = 100
    backlog: int = 50_000
    producer_procs: int = 1
    drain_timeout: float = 60.0
    visibility_samples: int = 20
    #: D3 samples taken first and not counted: a Spark session's first queries also pay for
    #: the JVM compiling Spark's and Delta's code, and each new query text for compiling its
    #: generated classes, over ~30 queries (a notebook's session in use is long past that)
    visibility_warmup: int = 30
    visibility_timeout: float = 30.0
    recovery_messages: int = 1_000_000
    recovery_window: int = 5000
    recovery_timeout: float = 300.0
    recovery_stall: float = 15.0
    spark_conf: dict = field(default_factory=dict)   # D3: extra runtime SQL confs
    nice: int = 0
    log: Callable[[str], None] = print


def build(wid: str, opt: Options) -> Workload:
    nprod = 1 if wid == "D1" else 10
    q = f"bench.durable.{wid.lower()}"
    window = max(1, opt.inflight // nprod)
    if window >= RING // 2:
        raise ValueError(f"window {window} too large (max {RING // 2 - 1})")
    prods = [ProdSpec(i, q, window) for i in range(nprod)]
    k = max(1, min(opt.producer_procs, nprod))
    workers = [WorkerSpec(i, producers=prods[i::k]) for i in range(k)]
    workers.append(WorkerSpec(k, consumers=[ConsSpec(0, q, opt.prefetch, opt.ack_every)]))
    return Workload(wid, TITLES[wid], q, nprod, workers, window,
                    batch=min(100, window), backlog=opt.backlog)


# --------------------------------------------------------------------------
# worker processes


async def _worker(ws: WorkerSpec, wl: Workload, host: str, port: int, vhost: str,
                  ctrl, pubc, confc, recv, ready) -> tuple[bytes, int]:
    conns: list[TimedConnection] = []
    prods: list[tuple[ProdSpec, TimedConnection, TimedChannel, bytes, int]] = []
    cons: list[Channel] = []
    waker = Waker()
    wake, nap = waker.wake, waker.nap

    try:
        for ps in ws.producers:                     # one connection per producer
            c = await TimedConnection.open(host, port, vhost)
            c.on_progress = wake
            conns.append(c)
            ch = await c.channel()
            await ch.confirm_select()
            ch.ctrl = ctrl

            def on_confirm(ch, i=ps.idx):
                confc[i] = ch.confirmed
                wake()
            ch.on_confirm = on_confirm
            one = persistent_publish(ch.number, "", ps.queue, filler_body(), frame_max=c.frame_max)
            prods.append((ps, c, ch, one * max(wl.batch, PACED_BATCH), len(one)))
        for cs in ws.consumers:
            c = await TimedConnection.open(host, port, vhost)
            c.on_progress = wake
            conns.append(c)
            ch = await c.channel()
            await ch.basic_qos(cs.prefetch)

            def on_delivery(ch, i=cs.idx):
                recv[i] = ch.received
            ch.on_delivery = on_delivery
            await ch.basic_consume(cs.queue, f"bench-durable-c{cs.idx}", no_ack=False,
                                   ack_every=cs.ack_every)
            cons.append(ch)
        ready[ws.wid] = 1

        nprod = wl.nprod
        cap = wl.backlog
        last_flush = perf_counter()
        paced = {"ticks": 0, "blocked_ticks": 0, "max_behind_ms": 0.0}

        def check() -> None:
            raise_if_failed(conns)

        async def run_paced() -> None:
            """PACED: every producer publishes ctrl[RATE]/1000 msg/s on a 1 ms
            timer -- the schedule says how many messages are due by now, the
            tick writes those (usually 0 or a few); producer i's schedule is
            shifted by i/nprod of a message interval so the producers take
            turns instead of writing on the same tick.  The stamp of a message
            is its write time.  Open loop: the closed-loop confirm window does
            not apply (only PACED_WINDOW, the timestamp ring's bound), so slow
            confirms show up as latency instead of slowing the publisher; the
            backlog cap, the socket and PACED_WINDOW can still hold a producer
            back: a tick that cannot write everything due is counted
            (blocked_ticks) with how far it fell behind (max_behind_ms)."""
            rate = ctrl[RATE] / 1000.0
            t0 = perf_counter()
            base = [ch.published for _, _, ch, _, _ in prods]
            offs = [ps.idx / nprod for ps, *_ in prods]
            while ctrl[PHASE] == PACED:
                check()
                now = perf_counter()
                backlog = sum(pubc[i] for i in range(nprod)) - recv[0]
                blocked = False
                for (ps, c, ch, blocks, blen), b, off in zip(prods, base, offs):
                    due = int((now - t0) * rate + off) - (ch.published - b)
                    if due <= 0:
                        continue
                    n = min(due, PACED_BATCH, PACED_WINDOW - ch.unconfirmed, cap - backlog)
                    if n > 0 and c.writable:
                        c.write(blocks[: n * blen])
                        ch.stamp(n, perf_counter_ns())
                        pubc[ps.idx] = ch.published
                        backlog += n
                    else:
                        n = 0
                    if due > n:
                        blocked = True
                        paced["max_behind_ms"] = max(paced["max_behind_ms"], 1000 * (due - n) / rate)
                paced["ticks"] += 1
                paced["blocked_ticks"] += blocked
                await asyncio.sleep(TICK)

        while True:
            check()
            phase = ctrl[PHASE]
            if phase == STOP:
                break
            if phase == PACED and prods:
                await run_paced()
                continue
            if cons:
                now = perf_counter()
                if now - last_flush >= 0.02:
                    last_flush = now
                    for ch in cons:
                        ch.flush_acks()
            progressed = False
            if phase == RUN and prods:
                backlog = sum(pubc[i] for i in range(nprod)) - recv[0]
                ts = perf_counter_ns()
                for ps, c, ch, blocks, blen in prods:
                    n = min(wl.batch, ps.window - ch.unconfirmed, cap - backlog)
                    if n > 0 and c.writable:
                        c.write(blocks[: n * blen])
                        ch.stamp(n, ts)
                        pubc[ps.idx] = ch.published
                        backlog += n
                        progressed = True
            if progressed:
                await asyncio.sleep(0)
            else:
                await nap(0.02 if cons and not prods else 0.005)
        lats = {k: array("q") for k in (CLOSED_LOOP, HALF_PEAK)}
        nacked = 0
        for ps, c, ch, *_ in prods:
            for k, a in ch.lats.items():
                lats[k].extend(a)
            nacked += ch.nacked
        return {k: a.tobytes() for k, a in lats.items()}, {"nacked": nacked, **paced}
    finally:
        await asyncio.gather(*(c.close(timeout=3) for c in conns), return_exceptions=True)


def _reply(pipe, out: tuple[dict, dict]) -> None:
    lats, info = out
    pipe.send(("ok", info))
    for k in (CLOSED_LOOP, HALF_PEAK):
        pipe.send_bytes(lats[k])


# --------------------------------------------------------------------------
# parent side helpers


def declare_fresh(broker, queue: str, args: dict | None) -> None:
    async def go(conn, ch):
        await ch.queue_delete(queue)
        await ch.queue_declare(queue, durable=True, arguments=args)
    admin(broker, go)


def delete_queue(broker, queue: str) -> None:
    admin(broker, lambda conn, ch: ch.queue_delete(queue))


def pct(vals, q: float) -> float | None:
    if not vals:
        return None
    i = min(len(vals) - 1, max(0, int(math.ceil(q * len(vals))) - 1))
    return vals[i]


class CpuWatch:
    """Machine CPU over a stretch of D3/D4 and how much of it was not ours:
    'ours' is this process and its children (the Spark JVM of D3) plus the
    broker process tree(s) named at the end (pids gone by then are not
    counted at all, so a window should not outlive its broker)."""

    def __init__(self) -> None:
        self.t = perf_counter()
        self.machine = procutil.machine_cpu()
        self.every = procutil.all_cpu_seconds()

    def result(self, *broker_pids: int) -> dict:
        dt = max(1e-6, perf_counter() - self.t)
        busy, irq, _ = procutil.machine_pct(self.machine, procutil.machine_cpu())
        every = procutil.all_cpu_seconds()
        ours = set(procutil.tree(os.getpid())) | {os.getpid()}
        for b in broker_pids:
            ours |= set(procutil.tree(b))
        ours_s = sum(every[x] - self.every.get(x, 0.0) for x in ours if x in every)
        mine = 100 * ours_s / dt
        return {"window_s": round(dt, 2), "machine_busy_pct": round(busy, 1),
                "ours_cpu_pct": round(mine, 1), "irq_softirq_pct": round(irq, 1),
                "other_jobs_pct": round(max(0.0, busy - mine - irq), 1),
                "other_busy_processes": procutil.top_cpu(self.every, every, dt, ours)}


def run_throughput(broker, wl: Workload, queue_args: dict | None, opt: Options) -> dict:
    """D1/D2 against one broker / queue type."""
    lg = opt.log
    pool = Pool(broker, wl.nprod, 1, len(wl.workers), STOP, tick=0.1, last_line=True)
    ctrl, pubc, confc, recv = pool.ctrl, pool.pubc, pool.confc, pool.recv
    res: dict = {"workload": wl.id, "title": wl.title, "producers": wl.nprod,
                 "window_per_producer": wl.window, "inflight_total": wl.window * wl.nprod,
                 "prefetch": opt.prefetch, "ack_every": opt.ack_every,
                 "queue_arguments": queue_args or {}, "body_bytes": BODY_SIZE}
    declare_fresh(broker, wl.queue, queue_args)
    try:
        for ws in wl.workers:
            pool.spawn(_worker, _reply, f"bench-durable-{wl.id}-{ws.wid}", ws, wl, opt.nice)
        pool.wait_ready()

        def cpu(s0: Snap, s1: Snap) -> dict:
            w = pool.window(s0, s1)
            return {"window_s": round(w.dt, 2),
                    "confirmed_per_s": round(w.confirmed),
                    "published_per_s": round(w.published),
                    "consumed_per_s": round(w.received),
                    "backlog_end": s1.pub - s1.recv,
                    "client_cpu_pct_per_process": w.client,
                    "broker_cpu_pct": round(w.broker, 1),
                    "machine_busy_pct": round(w.busy, 1),
                    "irq_softirq_pct": round(w.irq, 1),
                    "other_jobs_pct": round(max(0.0, w.busy - sum(w.client) - w.broker - w.irq), 1),
                    "other_busy_processes": w.others}

        def drain(into: dict) -> None:
            """Let the consumer catch up and the confirms come in, so the
            broker is idle before the next window / run."""
            t_drain = perf_counter()
            if not pool.wait(lambda: recv[0] >= sum(pubc) and sum(confc) >= sum(pubc), opt.drain_timeout):
                into["drain_timeout"] = True
                lg(f"    warning: not drained within {opt.drain_timeout:.0f} s "
                   f"(published {sum(pubc):,}, confirmed {sum(confc):,}, consumed {recv[0]:,})")
            into["drain_s"] = round(perf_counter() - t_drain, 2)

        def other_note(c: dict) -> str:
            return (f", other jobs {c['other_jobs_pct']}% {c['other_busy_processes']}"
                    if c["other_jobs_pct"] > 10 else "")

        # ---- 1. closed loop: peak confirmed msg/s (the window of unconfirmed
        # messages kept full)
        ctrl[PHASE] = RUN
        pool.sleep(opt.warmup)
        ctrl[RECORD] = CLOSED_LOOP
        s0 = pool.snap()
        pool.sleep(opt.duration)
        s1 = pool.snap()
        ctrl[RECORD] = 0
        ctrl[PHASE] = HOLD
        res.update(cpu(s0, s1))
        drain(res)
        lg(f"    closed loop: confirmed {res['confirmed_per_s']:,}/s, consumed {res['consumed_per_s']:,}/s; "
           f"client CPU {res['client_cpu_pct_per_process']}, broker CPU {res['broker_cpu_pct']}%, "
           f"machine {res['machine_busy_pct']}%" + other_note(res))

        # ---- 2. open loop: confirm latency at a fixed rate, a fraction (half)
        # of the peak, spread evenly over the producers
        hp: dict = {"fraction": opt.latency_fraction}
        res["half_peak"] = hp
        target = res["confirmed_per_s"] * opt.latency_fraction
        if target < 1:
            hp["error"] = "peak confirmed rate is ~0; no paced window"
        else:
            per_prod = target / wl.nprod
            ctrl[RATE] = max(1, int(per_prod * 1000))
            hp.update({"target_rate_per_s": round(target), "per_producer_rate_per_s": round(per_prod, 1)})
            ctrl[PHASE] = PACED
            pool.sleep(opt.lat_warmup)
            ctrl[RECORD] = HALF_PEAK
            p0 = pool.snap()
            pool.sleep(opt.lat_duration or opt.duration)
            p1 = pool.snap()
            ctrl[RECORD] = 0
            ctrl[PHASE] = HOLD
            hp.update(cpu(p0, p1))
            drain(hp)
        ctrl[PHASE] = STOP

        lats = {CLOSED_LOOP: array("q"), HALF_PEAK: array("q")}
        nacked, ticks, blocked, behind = 0, 0, 0, 0.0
        for val, r in pool.reports():
            nacked += val["nacked"]
            ticks += val["ticks"]
            blocked += val["blocked_ticks"]
            behind = max(behind, val["max_behind_ms"])
            for k in (CLOSED_LOOP, HALF_PEAK):
                lats[k].frombytes(r.recv_bytes())
        ms = (lambda v: None if v is None else round(v / 1e6, 3))

        def stats(a: array) -> dict:
            v = sorted(a)
            return {"samples": len(v), "confirm_p50_ms": ms(pct(v, 0.50)),
                    "confirm_p99_ms": ms(pct(v, 0.99)), "confirm_p999_ms": ms(pct(v, 0.999)),
                    "confirm_max_ms": ms(v[-1] if v else None)}
        res["nacked"] = nacked
        res["closed_loop_latency"] = {
            "what": (f"confirm latency in the closed-loop throughput window ({wl.window * wl.nprod} "
                     "unconfirmed in flight): ~ in-flight / rate by Little's law, a property of the "
                     "window, not the broker -- for reference only"),
            **stats(lats[CLOSED_LOOP])}
        cl = res["closed_loop_latency"]
        lg(f"    closed-loop confirm latency (reference): p50 {cl['confirm_p50_ms']} ms p99 "
           f"{cl['confirm_p99_ms']} ms ({cl['samples']:,} samples)")
        if "error" not in hp:
            hp.update(stats(lats[HALF_PEAK]))
            hp.update({"ticks": ticks, "blocked_ticks": blocked, "max_behind_ms": round(behind, 1),
                       "what": (f"confirm latency at a fixed publish rate of {opt.latency_fraction:g} x the "
                                "closed-loop confirmed msg/s, split evenly over the producers, paced "
                                f"by a {TICK * 1000:g} ms timer (write of the publish -> its basic.ack)")})
            lg(f"    paced at {hp['target_rate_per_s']:,} msg/s ({opt.latency_fraction:g} x peak; achieved "
               f"{hp['published_per_s']:,}/s published, {hp['confirmed_per_s']:,}/s confirmed): confirm "
               f"latency p50 {hp['confirm_p50_ms']} ms p99 {hp['confirm_p99_ms']} ms max "
               f"{hp['confirm_max_ms']} ms ({hp['samples']:,} samples; {blocked} of {ticks} ticks "
               f"blocked); broker CPU {hp['broker_cpu_pct']}%, machine {hp['machine_busy_pct']}%"
               + other_note(hp))
        if nacked:
            lg(f"    {nacked} publishes nacked")
        return res
    finally:
        pool.close()
        if broker.alive():
            try:
                delete_queue(broker, wl.queue)
            except Exception as e:  # noqa: BLE001
                lg(f"    (queue delete failed: {e})")


# --------------------------------------------------------------------------
# DeltaMQ's data directory and journal


def default_node() -> str:
    """The default virtual host node's name in the embedded configuration."""
    try:
        conf = json.loads((REPO / "conf" / "config.json").read_text())
        nodes = conf.get("virtualhostnodes") or []
        want = conf.get("defaultVirtualHost")
        for n in nodes:
            if (n.get("virtualHostInitialConfiguration") or {}).get("name") == want:
                return n["name"]
        if nodes:
            return nodes[0]["name"]
    except (OSError, ValueError, KeyError):
        pass
    return "default"


def data_dir(broker: DeltaMQ) -> Path:
    assert broker.dir
    return Path(broker.dir) / "data"


def journal_path(broker: DeltaMQ) -> Path:
    return data_dir(broker) / default_node() / "journal"


def journal_info(broker: DeltaMQ) -> dict:
    p = journal_path(broker)
    log_dir = p / "_delta_log"
    if not log_dir.is_dir():
        return {"present": False, "path": str(p)}
    commits = sorted(log_dir.glob("*.json"))
    files = sum(1 for _ in p.rglob("*.parquet"))   # on disk: includes files removed but not vacuumed
    try:
        ckpt = json.loads((log_dir / "_last_checkpoint").read_text()).get("version")
    except (OSError, ValueError):
        ckpt = None
    return {"present": True, "path": str(p), "commits": len(commits),
            "latest_version": int(commits[-1].stem) if commits else None, "parquet_files": files,
            "last_checkpoint": ckpt}


# --------------------------------------------------------------------------
# D3: confirm -> visible in Spark


def run_visibility(broker: DeltaMQ, opt: Options, spark_holder: dict) -> dict:
    lg = opt.log
    q = "bench.durable.d3"
    path = journal_path(broker)
    res: dict = {"workload": "D3", "title": TITLES["D3"], "journal": str(path),
                 "samples_wanted": opt.visibility_samples}
    declare_fresh(broker, q, None)
    install_uvloop()
    loop = asyncio.new_event_loop()
    conn_ch: list = []

    async def connect():
        conn = await Connection.open(broker.host, broker.port, broker.vhost)
        ch = await conn.channel()
        await ch.confirm_select()
        conn_ch[:] = [conn, ch]

    async def publish(marker: str) -> float:
        conn, ch = conn_ch
        fut = loop.create_future()
        stamp: list[float] = []
        before = ch.confirmed

        def on_confirm(c):
            if c.confirmed > before and not fut.done():
                stamp.append(perf_counter())
                fut.set_result(c.nacked)
        ch.on_confirm = on_confirm
        body = filler_body(BODY_SIZE, marker.encode())
        ch.published += 1
        conn.write(persistent_publish(ch.number, "", q, body, message_id=marker,
                                      frame_max=conn.frame_max))
        try:
            await asyncio.wait_for(fut, 30)
        except asyncio.TimeoutError:
            raise WorkloadError("no confirm within 30 s") from None
        if conn.error:
            raise AMQPError(conn.error)
        return stamp[0]

    try:
        loop.run_until_complete(connect())
        # the first message: does the journal exist at all?
        run_id = uuid.uuid4().hex[:12]
        loop.run_until_complete(publish(f"bench-d3-{run_id}-probe"))
        t = perf_counter()
        while not (path / "_delta_log").is_dir() and perf_counter() - t < 3:
            time.sleep(0.1)
        if not (path / "_delta_log").is_dir():
            res["available"] = False
            res["why"] = f"no Delta table at {path} after a confirmed persistent publish (journal not wired?)"
            lg(f"    not available: {res['why']}")
            return res
        res["available"] = True
        spark = spark_holder.get("spark")
        if spark is None:
            lg("    starting a SparkSession (local[2], Delta) ...")
            t0 = perf_counter()
            from lakehouse.spark import spark_session
            spark = spark_session(data_dir(broker), app_name="deltamq-bench-d3")
            spark_holder["spark"] = spark
            res["spark_start_s"] = round(perf_counter() - t0, 1)
        for k, v in opt.spark_conf.items():
            spark.conf.set(k, v)
        res["spark_conf"] = dict(opt.spark_conf)
        tbl = str(path.resolve()).replace("`", "``")

        def query(marker: str, since: float) -> int:
            # what a user looking for a recent message writes: a time bound (on `at`, the
            # event's time), which lets Delta skip every older file by its statistics
            bound = _dt.datetime.fromtimestamp(since - VISIBILITY_SLACK, _dt.timezone.utc)
            return spark.sql(f"SELECT count(*) FROM delta.`{tbl}` WHERE queue = '{q}' "
                             f"AND event = 'enqueue' AND at >= TIMESTAMP '{bound:%Y-%m-%d %H:%M:%S.%f}' "
                             f"AND properties['message_id'] = '{marker}'"
                             ).collect()[0][0]

        samples, first_seen, queries, qtimes = [], [], [], []

        def sample(marker: str) -> None:
            sent = time.time()
            t_conf = loop.run_until_complete(publish(marker))
            n_q = 0
            while True:
                qs = perf_counter()
                c = query(marker, sent)
                qe = perf_counter()
                n_q += 1
                qtimes.append(qe - qs)
                if c:
                    samples.append(qe - t_conf)
                    first_seen.append(max(0.0, qs - t_conf))
                    queries.append(n_q)
                    return
                if qe - t_conf > opt.visibility_timeout:
                    lg(f"    {marker}: not visible after {opt.visibility_timeout:.0f} s")
                    res.setdefault("timeouts", 0)
                    res["timeouts"] += 1
                    return

        # warm-up: the same procedure, not counted (see Options.visibility_warmup)
        t0 = perf_counter()
        for i in range(opt.visibility_warmup):
            sample(f"bench-d3-{run_id}-warm-{i}")
        res["warmup_queries"] = len(qtimes)
        res["warmup_s"] = round(perf_counter() - t0, 2)
        res["warmup_all_s"] = [round(x, 3) for x in samples]
        samples.clear(), first_seen.clear(), queries.clear(), qtimes.clear()
        res.pop("timeouts", None)
        watch = CpuWatch()
        for i in range(opt.visibility_samples):
            sample(f"bench-d3-{run_id}-{i}")
        res["cpu"] = watch.result(broker.pid)
        try:
            d = spark.sql(f"DESCRIBE DETAIL delta.`{tbl}`").collect()[0].asDict()
            res["active_files"] = d.get("numFiles")
        except Exception as e:  # noqa: BLE001
            res["active_files_error"] = str(e).splitlines()[0] if str(e) else repr(e)
        s = sorted(samples)
        qt = sorted(qtimes)
        res.update({
            "samples": len(s),
            "p50_s": round(pct(s, 0.5), 3) if s else None,
            "max_s": round(s[-1], 3) if s else None,
            "lower_bound_p50_s": round(pct(sorted(first_seen), 0.5), 3) if s else None,
            "queries_per_sample_max": max(queries) if queries else None,
            "query_p50_s": round(pct(qt, 0.5), 3) if qt else None,
            "all_s": [round(x, 3) for x in samples],
            "table": journal_info(broker),
        })
        c = res["cpu"]
        lg(f"    visible after p50 {res['p50_s']} s, max {res['max_s']} s ({len(s)} samples; one "
           f"query takes p50 {res['query_p50_s']} s; start of the query that saw it: p50 "
           f"{res['lower_bound_p50_s']} s after the confirm); machine {c['machine_busy_pct']}%, "
           f"ours (broker + Spark + this) {c['ours_cpu_pct']}%, other jobs {c['other_jobs_pct']}% "
           f"{c['other_busy_processes']}")
        return res
    finally:
        if conn_ch:
            try:
                loop.run_until_complete(conn_ch[0].close())
            except Exception:  # noqa: BLE001
                pass
        loop.close()
        if broker.alive():
            try:
                delete_queue(broker, q)
            except Exception:  # noqa: BLE001
                pass


# --------------------------------------------------------------------------
# D4: recovery


async def _publish_many(broker, q: str, n: int, window: int, lg) -> dict:
    conn = await Connection.open(broker.host, broker.port, broker.vhost)
    try:
        ch = await conn.channel()
        await ch.queue_delete(q)
        await ch.queue_declare(q, durable=True)
        pch = await conn.channel()
        await pch.confirm_select()
        block = persistent_publish(pch.number, "", q, filler_body(), frame_max=conn.frame_max)
        blocks = block * 500

        def progress(confirmed: int, elapsed: float) -> None:
            lg(f"    ... {confirmed:,} confirmed ({confirmed / elapsed:,.0f}/s)")
        dt = await publish_confirmed(conn, pch, n, 500, window, lambda k: blocks[: k * len(block)],
                                     progress)
        depth, _ = await ch.queue_declare(q, passive=True)
        return {"publish_s": round(dt, 2), "publish_per_s": round(n / dt), "nacked": pch.nacked,
                "depth_before_stop": depth}
    finally:
        await conn.close()


async def _passive_count(broker, q: str) -> int:
    conn = await Connection.open(broker.host, broker.port, broker.vhost, timeout=5)
    try:
        ch = await conn.channel()
        n, _ = await ch.queue_declare(q, passive=True)
        return n
    finally:
        await conn.close(timeout=2)


def _restart_same_dir(broker: DeltaMQ) -> None:
    """Start `deltamq serve` again with the very same command line (port, data dir)."""
    assert broker.dir and broker.cmd
    _, env = broker._prefix()
    out = open(os.path.join(broker.dir, "deltamq.log"), "ab")
    broker.proc = subprocess.Popen(broker.cmd, cwd=broker.dir, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, preexec_fn=procutil.niceness(broker.nice),
                                   start_new_session=True, env=env)
    out.close()


def run_recovery(broker: DeltaMQ, opt: Options) -> dict:
    lg = opt.log
    n = opt.recovery_messages
    q = "bench.durable.d4"
    res: dict = {"workload": "D4", "title": TITLES["D4"], "messages": n}
    install_uvloop()
    lg(f"    publishing {n:,} persistent messages with confirms (window {opt.recovery_window}) ...")
    watch = CpuWatch()
    res.update(asyncio.run(_publish_many(broker, q, n, opt.recovery_window, lg)))
    res["cpu_publish"] = watch.result(broker.pid)
    lg(f"    published in {res['publish_s']} s ({res['publish_per_s']:,}/s), queue depth "
       f"{res['depth_before_stop']:,}, nacks {res['nacked']}")
    res["journal_before_stop"] = journal_info(broker)
    res["rss_before_stop"] = procutil.rss_bytes(broker.pid)

    # SIGTERM, and wait for a clean exit
    assert broker.proc is not None
    t0 = perf_counter()
    os.killpg(broker.proc.pid, signal.SIGTERM)
    try:
        rc = broker.proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        lg("    broker did not exit within 180 s of SIGTERM; SIGKILL")
        os.killpg(broker.proc.pid, signal.SIGKILL)
        rc = broker.proc.wait(timeout=30)
        res["killed"] = True
    res["shutdown_s"] = round(perf_counter() - t0, 2)
    res["exit_code"] = rc
    lg(f"    SIGTERM -> exit {rc} in {res['shutdown_s']} s; restarting on the same data directory")
    time.sleep(0.5)

    t0 = perf_counter()
    watch = CpuWatch()
    _restart_same_dir(broker)
    t_answer = None
    count: int | None = None
    last_change = None
    missing = False
    while True:
        now = perf_counter()
        if not broker.alive():
            res["error"] = f"broker exited during recovery (rc {broker.proc.returncode})"
            break
        try:
            c = asyncio.run(_passive_count(broker, q))
            missing = False
        except (OSError, asyncio.TimeoutError, ConnectionError):
            c = None                       # not listening / not answering yet
        except AMQPError as e:
            if "404" in str(e) or "NOT_FOUND" in str(e):
                c, missing = -1, True      # answers, queue not there (yet)
            else:
                c = None
        now = perf_counter()
        if c is not None:
            if t_answer is None:
                t_answer = now - t0
                lg(f"    broker answers {t_answer:.2f} s after process start")
            if c != count:
                count, last_change = c, now
            if c == n:
                res["recovered_s"] = round(now - t0, 2)
                break
            if now - last_change > opt.recovery_stall:
                break
        if now - t0 > opt.recovery_timeout:
            break
        time.sleep(0.1)
    res["cpu_recovery"] = watch.result(broker.pid)
    res["answer_s"] = round(t_answer, 2) if t_answer is not None else None
    res["count_after_restart"] = None if count is None or count < 0 else count
    res["queue_missing_after_restart"] = missing
    if res.get("recovered_s") is not None:
        lg(f"    recovered: {n:,} messages back {res['recovered_s']} s after process start")
    else:
        if missing:
            why = "the queue does not exist after the restart"
        elif count is None:
            why = "the broker never answered"
        else:
            why = (f"the queue holds {count:,} of {n:,} messages after the restart "
                   f"(unchanged for {opt.recovery_stall:.0f} s)")
        res["not_recovered"] = why + " -- the journal is not durable (yet)"
        lg(f"    NOT RECOVERED: {res['not_recovered']}")
    try:
        if broker.alive() and not missing and count is not None:
            delete_queue(broker, q)
    except Exception:  # noqa: BLE001
        pass
    return res


# --------------------------------------------------------------------------
# running the suite


def run_rabbitmq(a, opt: Options, results: dict) -> None:
    tp = [w for w in a.workload_ids if w in ("D1", "D2")]
    if not tp:
        return
    broker = new_rabbitmq(a)
    for t in ("rabbitmq-classic", "rabbitmq-quorum"):
        if t.split("-")[1] in a.queue_types:
            results["targets"][t] = {"workloads": {}}
    try:
        broker.start()
        desc = f"RabbitMQ {broker.version} (private node {broker.nodename})"
        for qt in a.queue_types:
            out = results["targets"][f"rabbitmq-{qt}"]
            out["description"] = f"{desc}, {qt} durable queue"
            args = {"x-queue-type": "quorum"} if qt == "quorum" else None
            for wid in tp:
                if not broker.alive():
                    raise RuntimeError("RabbitMQ exited")
                log(f"[rabbitmq {qt}] {wid}: {TITLES[wid]}")
                out["workloads"][wid] = attempt(wid, TITLES[wid],
                                                lambda: run_throughput(broker, build(wid, opt), args, opt))
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001
        log(f"[rabbitmq] FAILED: {e}")
        for qt in a.queue_types:
            results["targets"][f"rabbitmq-{qt}"].setdefault("error", str(e).splitlines()[0])
    finally:
        broker.stop()


def run_deltamq(a, opt: Options, results: dict) -> None:
    wids = a.workload_ids
    out: dict = {"workloads": {}}
    results["targets"]["deltamq"] = out

    probe = new_deltamq(a)
    ok, why = probe.available()
    if not ok:
        log(f"[deltamq] not runnable, skipped: {why}")
        out["error"] = f"not runnable: {why}"
        return
    spark: dict = {}
    try:
        first = [w for w in wids if w in ("D1", "D2", "D3")]
        if first:
            broker = new_deltamq(a)
            try:
                broker.start()
                out["description"] = (f"{broker.describe()}, durable queue on virtual host node "
                                      f"'{default_node()}' (type delta)")
                for wid in first:
                    if not broker.alive():
                        log("[deltamq] broker is not running; restarting it")
                        broker.stop()
                        broker.start()
                    log(f"[deltamq] {wid}: {TITLES[wid]}")
                    out["workloads"][wid] = attempt(
                        wid, TITLES[wid],
                        lambda: (run_visibility(broker, opt, spark) if wid == "D3"
                                 else run_throughput(broker, build(wid, opt), None, opt)))
                    if wid != "D3":
                        out["journal"] = journal_info(broker)
            finally:
                broker.stop()
            if spark.get("spark") is not None:
                try:
                    spark["spark"].stop()
                except Exception:  # noqa: BLE001
                    pass
        if "D4" in wids:
            broker = new_deltamq(a)
            try:
                broker.start()
                out.setdefault("description", broker.describe())
                log(f"[deltamq] D4: {TITLES['D4']} (fresh broker, {opt.recovery_messages:,} messages)")
                out["workloads"]["D4"] = attempt("D4", TITLES["D4"], lambda: run_recovery(broker, opt))
            finally:
                broker.stop()
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001
        log(f"[deltamq] FAILED: {e}")
        broker_failed(out, e)


# --------------------------------------------------------------------------
# reporting


def _w(results: dict, target: str, wid: str) -> dict | None:
    return results["targets"].get(target, {}).get("workloads", {}).get(wid)


def _f(v, kind: str) -> str:
    """kind: rate, s, or ms (one decimal from 100 ms on)."""
    if kind == "rate":
        return cell(v, ",.0f")
    return cell(v, ",.1f" if kind == "ms" and v is not None and v >= 100 else ".2f")


HEAD = ["Workload", "Metric", "DeltaMQ", "RabbitMQ classic", "RabbitMQ quorum",
        "DeltaMQ/classic", "DeltaMQ/quorum", "Target", "DeltaMQ vs target"]


def _get(w: dict | None, path: str):
    """w["a"]["b"] for path "a.b"; None when missing."""
    for k in path.split("."):
        if not isinstance(w, dict):
            return None
        w = w.get(k)
    return w


def rows(results: dict, wids: list[str]) -> list[list[str]]:
    out = []
    frac = results["meta"]["options"].get("latency_fraction", 0.5)
    half = "½ peak" if frac == 0.5 else f"{frac:g}× peak"
    inflight = results["meta"]["options"].get("inflight")
    for wid in wids:
        name = f"{wid}. {TITLES[wid]}"
        if wid in ("D1", "D2"):
            for key, label, kind in (("confirmed_per_s", "confirmed msg/s (peak, closed loop)", "rate"),
                                     ("consumed_per_s", "consumed msg/s (peak, closed loop)", "rate"),
                                     ("half_peak.published_per_s", f"paced publish msg/s ({half})", "rate"),
                                     ("half_peak.confirm_p50_ms", f"confirm p50 ms @ {half}", "ms"),
                                     ("half_peak.confirm_p99_ms", f"confirm p99 ms @ {half}", "ms"),
                                     ("closed_loop_latency.confirm_p99_ms",
                                      f"closed-loop confirm p99 ms ({inflight} in flight; reference)",
                                      "ms")):
                v = {t: _get(_w(results, t, wid), key) for t in TARGETS}
                d = v["deltamq"]
                ratios = [f"{d / v[t]:.2f}" if d is not None and v[t] else "—"
                          for t in ("rabbitmq-classic", "rabbitmq-quorum")]
                target, verdict = "", ""
                if key == "confirmed_per_s":
                    target = f"≥ {TARGET_RATIO}× classic"
                    if d is not None and v["rabbitmq-classic"]:
                        verdict = "ok" if d / v["rabbitmq-classic"] >= TARGET_RATIO else "MISS"
                elif key == "half_peak.confirm_p99_ms":
                    target = f"≤ {TARGET_P99_MS:g} ms"
                    if d is not None:
                        verdict = "ok" if d <= TARGET_P99_MS else "MISS"
                out.append([name, label, _f(d, kind), _f(v["rabbitmq-classic"], kind),
                            _f(v["rabbitmq-quorum"], kind), *ratios, target, verdict])
                name = ""
        elif "deltamq" not in results["targets"]:
            continue
        elif wid == "D3":
            w = _w(results, "deltamq", wid) or {}
            if w.get("available") is False:
                out.append([name, "confirm → visible (s)", "not available", "", "", "", "",
                            f"≤ {TARGET_VISIBLE_S:g} s", ""])
            else:
                for key, label in (("p50_s", "confirm → visible p50 s"), ("max_s", "confirm → visible max s")):
                    v = w.get(key)
                    verdict = "" if v is None else ("ok" if v <= TARGET_VISIBLE_S else "MISS")
                    out.append([name, label, _f(v, "s"), "", "", "", "", f"≤ {TARGET_VISIBLE_S:g} s",
                                verdict])
                    name = ""
        elif wid == "D4":
            w = _w(results, "deltamq", wid) or {}
            n = w.get("messages")
            lab = f"{n:,} msgs" if n else "messages"
            rec = w.get("recovered_s")
            if w and "error" not in w:
                verdict = "ok" if rec is not None and rec <= TARGET_RECOVERY_S else "MISS"
                cell = _f(rec, "s") if rec is not None else "not recovered"
            else:
                verdict, cell = "", "—"
            out.append([name, f"start → {lab} back (s)", cell, "", "", "", "",
                        f"≤ {TARGET_RECOVERY_S:g} s", verdict])
            out.append(["", "start → broker answers (s)", _f(w.get("answer_s"), "s"), "", "", "", "", "", ""])
            c = w.get("count_after_restart")
            out.append(["", "messages after restart", f"{c:,}" if c is not None else "—",
                        "", "", "", "", f"{n:,}" if n else "", ""])
    return out


def _present(results: dict) -> list[str]:
    return [t for t in TARGETS if results["targets"].get(t, {}).get("workloads")]


def _drop(head, rows_, present):
    drop = set()
    if "deltamq" not in present:
        drop |= {2, 5, 6, 8}
    if "rabbitmq-classic" not in present:
        drop |= {3, 5}
    if "rabbitmq-quorum" not in present:
        drop |= {4, 6}
    keep = [i for i in range(len(head)) if i not in drop]
    return [head[i] for i in keep], [[r[i] for i in keep] for r in rows_]


CPU_HEAD = ["Broker", "W", "window", "per client process", "Broker CPU", "irq+softirq", "Other jobs",
            "Machine busy", "backlog at end", "nacks"]


def _windows(w: dict):
    """(label, figures) of the closed-loop window and the paced window of a D1/D2 result."""
    yield "peak (closed loop)", w
    hp = w.get("half_peak") or {}
    if "confirmed_per_s" in hp:
        frac = hp.get("fraction", 0.5)
        yield ("½ peak (paced)" if frac == 0.5 else f"{frac:g}× peak (paced)"), hp


def cpu_rows(results: dict, wids: list[str]) -> list[list[str]]:
    out = []
    for t in TARGETS:
        for wid in wids:
            w = _w(results, t, wid)
            if not w or "confirmed_per_s" not in w:
                continue
            for label, c in _windows(w):
                out.append([LABELS[t], wid, label,
                            " + ".join(f"{x:.0f}%" for x in c["client_cpu_pct_per_process"]),
                            f"{c['broker_cpu_pct']:.0f}%", f"{c.get('irq_softirq_pct', 0):.0f}%",
                            f"{c.get('other_jobs_pct', 0):.0f}%",
                            f"{c['machine_busy_pct']:.0f}% of {100 * results['meta']['cpus']}%",
                            f"{c['backlog_end']:,}", str(w.get("nacked", 0)) if c is w else ""])
    return out


def header(results: dict) -> list[str]:
    m = results["meta"]
    o = m["options"]
    lines = [f"Persistent messages, durable queues — {m['started']}",
             f"256-byte persistent messages (delivery-mode 2), publisher confirms, "
             f"{o['inflight']} unconfirmed in flight per workload (D1: 1×{o['inflight']}, "
             f"D2: 10×{max(1, o['inflight'] // 10)}); one consumer, manual ack, prefetch {o['prefetch']}, "
             f"multiple-ack every {o['ack_every']} (or 20 ms); peak: closed loop, window "
             f"{o['duration']} s after {o['warmup']} s warm-up; confirm latency: open loop at "
             f"{o.get('latency_fraction', 0.5):g}× that broker's peak confirmed msg/s, split evenly over "
             f"the producers and paced by a {TICK * 1000:g} ms timer, window "
             f"{o.get('lat_duration') or o['duration']} s after {o.get('lat_warmup', 0)} s",
             f"{machine_line(m)}, raw-frame client, producers in "
             f"{o['producer_procs']} process(es), consumer in its own"]
    for t in TARGETS:
        info = results["targets"].get(t)
        if info:
            lines.append(broker_line(LABELS[t], info))
    return lines


def notes(results: dict, wids: list[str]) -> list[str]:
    out = []
    d = results["targets"].get("deltamq", {})
    j = d.get("journal")
    if j is not None:
        if j.get("present"):
            out.append(f"DeltaMQ journal table present after D1/D2: {j['commits']} commits, "
                       f"{j['parquet_files']} parquet files on disk (removed-but-not-vacuumed ones "
                       f"included), last checkpoint {j.get('last_checkpoint')} ({j['path']})")
        else:
            out.append("DeltaMQ had NO journal table after D1/D2: its durable queues were not "
                       "journaling persistent messages, so its D1/D2 figures are for a non-durable broker")
    for t in TARGETS:
        for wid in ("D1", "D2"):
            w = _w(results, t, wid)
            if not w or "confirmed_per_s" not in w:
                continue
            for label, c in _windows(w):
                top = max(c["client_cpu_pct_per_process"] or [0])
                if top >= 85:
                    out.append(f"{LABELS[t]} {wid} {label}: a load-generator process used {top:.0f}% of "
                               "a core: it may be the bottleneck")
                if c.get("other_jobs_pct", 0) > 25:
                    procs_ = ", ".join(f"{x} {p}%" for x, _, p in c.get("other_busy_processes") or [])
                    out.append(f"{LABELS[t]} {wid} {label}: other jobs on the machine took "
                               f"{c['other_jobs_pct']:.0f}% of a core during the window ({procs_}): "
                               "that figure is disturbed")
                if c.get("drain_timeout"):
                    out.append(f"{LABELS[t]} {wid} {label}: did not drain within the timeout after the window")
            hp = w.get("half_peak") or {}
            if hp.get("error"):
                out.append(f"{LABELS[t]} {wid}: no paced window: {hp['error']}")
            elif hp.get("target_rate_per_s"):
                short = hp["published_per_s"] < 0.95 * hp["target_rate_per_s"]
                if short or hp.get("blocked_ticks"):
                    out.append(f"{LABELS[t]} {wid} paced window: published {hp['published_per_s']:,}/s of "
                               f"{hp['target_rate_per_s']:,}/s wanted; {hp.get('blocked_ticks', 0)} of "
                               f"{hp.get('ticks', 0)} timer ticks could not write all messages due (backlog "
                               f"cap, socket or {PACED_WINDOW:,} unconfirmed), at worst {hp.get('max_behind_ms', 0)} ms "
                               "behind schedule — the latency figure leaves that wait out")
            if w.get("nacked"):
                out.append(f"{LABELS[t]} {wid}: {w['nacked']} publishes were nacked")
    little = []
    for t in TARGETS:
        for wid in ("D1", "D2"):
            w = _w(results, t, wid)
            if w and w.get("confirmed_per_s"):
                cl = (w.get("closed_loop_latency") or {}).get("confirm_p50_ms")
                little.append(f"{LABELS[t]} {wid} {1000 * w['inflight_total'] / w['confirmed_per_s']:.0f} ms"
                              + (f" (measured p50 {cl:.0f} ms)" if cl is not None else ""))
    if little:
        out.append("the closed-loop confirm latency (last D1/D2 row, reference only) is set by the window: "
                   "with it full, mean latency ≈ in-flight / confirmed rate (Little's law): "
                   + ", ".join(little) + "; the ½-peak rows are the latency figures")
    w3 = _w(results, "deltamq", "D3")
    if w3 and w3.get("available"):
        tbl = w3.get("table") or {}
        qmax = w3.get("queries_per_sample_max")
        first = (" — every row was already in the table when polling began (the confirm follows the "
                 "Delta commit), so the figure is the cost of one Spark query over a table that has a "
                 "new version" if qmax == 1 else "")
        out.append(f"D3: query = count of the journal's enqueue rows of that queue with the "
                   f"message's message-id property and `at` ≥ publish time − {VISIBILITY_SLACK:g} s; "
                   f"latency = confirm → end of the first Spark query that returned the row "
                   f"(polling from the confirm on; at most {qmax} queries per sample; one query "
                   f"p50 {_f(w3.get('query_p50_s'), 's')} s){first}; table then at version "
                   f"{tbl.get('latest_version')} (last checkpoint {tbl.get('last_checkpoint')}), "
                   f"{w3.get('active_files', '?')} active data files ({tbl.get('parquet_files')} parquet "
                   f"files on disk); SparkSession "
                   f"start {w3.get('spark_start_s')} s and {w3.get('warmup_queries', 3)} warm-up "
                   f"queries, each after its own publish like the samples, not counted (their "
                   f"latencies, in order: {w3.get('warmup_all_s')})"
                   + (f"; runtime confs {w3['spark_conf']}" if w3.get("spark_conf") else "")
                   + (f"; {w3['timeouts']} samples timed out" if w3.get("timeouts") else ""))
    elif w3 and w3.get("available") is False:
        out.append(f"D3 not available: {w3.get('why')}")
    w4 = _w(results, "deltamq", "D4")
    for label, c in ((f"D3 ({(w3 or {}).get('samples', 0)} samples)", (w3 or {}).get("cpu")),
                     ("D4 publishing", (w4 or {}).get("cpu_publish")),
                     ("D4 restart → recovered", (w4 or {}).get("cpu_recovery"))):
        if not c:
            continue
        procs_ = ", ".join(f"{x} {p}%" for x, _, p in c.get("other_busy_processes") or [])
        s = (f"{label}: machine {c['machine_busy_pct']:.0f}% of {100 * results['meta']['cpus']}% over "
             f"{c['window_s']} s, of which broker + load generator{' + Spark' if label[:2] == 'D3' else ''} "
             f"{c['ours_cpu_pct']:.0f}%, other jobs {c['other_jobs_pct']:.0f}%"
             + (f" ({procs_})" if procs_ else ""))
        if c["other_jobs_pct"] > 25:
            s += ": that figure is disturbed"
        out.append(s)
    if w4 and "error" not in w4:
        s = (f"D4: {w4['messages']:,} messages confirmed in {w4['publish_s']} s "
             f"({w4['publish_per_s']:,}/s), SIGTERM → exit {w4.get('exit_code')} in {w4['shutdown_s']} s")
        if w4.get("not_recovered"):
            s += f"; NOT RECOVERED: {w4['not_recovered']}"
        out.append(s)
    for t in TARGETS:
        out += failures(LABELS[t], results["targets"].get(t) or {}, wids)
    return out


def _right(i: int, heading: str) -> bool:
    """Right-aligned columns: the figures (not the target and verdict)."""
    return i >= 2 and heading not in ("Target", "DeltaMQ vs target", "window")


def report(results: dict, wids: list[str], out_dir: Path) -> None:
    stamp = write_report(results, out_dir, title="Persistent messages, durable queues: DeltaMQ vs RabbitMQ",
                         header=header(results), table=_drop(HEAD, rows(results, wids), _present(results)),
                         cpu_title="CPU during the D1/D2 windows (100% = one core)",
                         cpu=(CPU_HEAD, cpu_rows(results, wids)), notes=notes(results, wids),
                         right=_right, prefix="durable", latest="durable-latest")
    print(f"results: {out_dir / f'durable-{stamp}.json'} and .md (also durable-latest.json/.md)")


# --------------------------------------------------------------------------
# command line


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.durable", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("deltamq", "rabbitmq"), help="run against one broker only")
    ap.add_argument("--workloads", default="D1,D2,D3,D4",
                    help="comma-separated, of D1,D2,D3,D4 (default: all)")
    ap.add_argument("--queue-types", default="classic,quorum",
                    help="RabbitMQ queue types to measure (default classic,quorum)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 3 s windows after 2 s warm-up, 5 D3 samples, 100,000 D4 messages")
    ap.add_argument("--duration", type=float, default=None, help="D1/D2 window seconds (default 15)")
    ap.add_argument("--warmup", type=float, default=None, help="D1/D2 warm-up seconds (default 5)")
    ap.add_argument("--latency-duration", type=float, default=None,
                    help="D1/D2 paced latency window seconds (default: --duration)")
    ap.add_argument("--latency-warmup", type=float, default=None,
                    help="D1/D2 seconds of paced publishing before the latency window (default 2)")
    ap.add_argument("--latency-fraction", type=float, default=None,
                    help="paced rate as a fraction of the closed-loop peak confirmed msg/s (default 0.5)")
    ap.add_argument("--inflight", type=int, default=None,
                    help="unconfirmed messages in flight per workload, split among its producers "
                         "(default 1000: D1 1×1000, D2 10×100)")
    ap.add_argument("--prefetch", type=int, default=None, help="consumer prefetch (default 1000)")
    ap.add_argument("--producer-procs", type=int, default=1,
                    help="processes the D2 producers are spread over (default 1)")
    ap.add_argument("--recovery-messages", type=int, default=None,
                    help="D4 messages (default 1,000,000; --quick 100,000)")
    ap.add_argument("--visibility-samples", type=int, default=None, help="D3 samples (default 20)")
    ap.add_argument("--visibility-warmup", type=int, default=None,
                    help="D3 samples taken first, not counted (default 30)")
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="D3: a runtime Spark SQL conf for the polling session, e.g. "
                         "spark.databricks.delta.snapshotPartitions=2 (repeatable; default none)")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness increment for brokers and load generator (default 0)")
    add_broker_arguments(ap)
    return ap


def parse_args(argv=None, lenient: bool = False) -> argparse.Namespace:
    ap = parser()
    a = ap.parse_known_args(argv)[0] if lenient else ap.parse_args(argv)
    ids = []
    for x in a.workloads.split(","):
        x = x.strip().upper()
        if not x:
            continue
        x = x if x.startswith("D") else f"D{x}"
        if x not in TITLES:
            ap.error(f"unknown workload {x}; there are D1-D4")
        ids.append(x)
    a.workload_ids = [w for w in TITLES if w in ids]
    try:
        a.spark_conf = dict(kv.split("=", 1) for kv in a.spark_conf)
    except ValueError:
        ap.error("--spark-conf takes KEY=VALUE")
    a.queue_types = [q.strip() for q in a.queue_types.split(",") if q.strip()]
    if any(q not in ("classic", "quorum") for q in a.queue_types):
        ap.error("--queue-types takes classic and/or quorum")
    return a


def options(a: argparse.Namespace) -> Options:
    o = Options(log=log, nice=a.nice, producer_procs=max(1, a.producer_procs),
                spark_conf=a.spark_conf)
    if a.quick:
        o.duration, o.warmup, o.visibility_samples, o.recovery_messages = 3.0, 2.0, 5, 100_000
        o.visibility_warmup = 5
        o.drain_timeout, o.recovery_stall, o.lat_warmup = 30.0, 10.0, 1.0
    for k, attr in (("duration", "duration"), ("warmup", "warmup"), ("inflight", "inflight"),
                    ("prefetch", "prefetch"), ("recovery_messages", "recovery_messages"),
                    ("visibility_samples", "visibility_samples"),
                    ("visibility_warmup", "visibility_warmup"), ("latency_duration", "lat_duration"),
                    ("latency_warmup", "lat_warmup"), ("latency_fraction", "latency_fraction")):
        v = getattr(a, k)
        if v is not None:
            setattr(o, attr, v)
    if o.lat_duration is None:
        o.lat_duration = o.duration
    if not 0 < o.latency_fraction <= 1:
        raise SystemExit("--latency-fraction must be in (0, 1]")
    return o


def main(argv=None, lenient: bool = False) -> int:
    a = parse_args(argv, lenient)
    opt = options(a)
    interrupt_on_sigterm()
    if a.nice and not procutil.set_autogroup_nice(a.nice):
        log(f"(could not set the scheduler autogroup's nice to {a.nice})")
    results: dict = {
        "meta": {
            "suite": "durable",
            **meta(opt, sys.argv[1:] if argv is None else list(argv), a.workload_ids, install_uvloop()),
            "targets": {"ratio_vs_classic": TARGET_RATIO, "p99_confirm_ms": TARGET_P99_MS,
                        "visible_s": TARGET_VISIBLE_S, "recovery_s": TARGET_RECOVERY_S},
        },
        "targets": {},
    }

    def body() -> None:
        # RabbitMQ first: D3 starts a Spark JVM in this process, better after
        # every forked load generator has run
        if a.only in (None, "rabbitmq"):
            run_rabbitmq(a, opt, results)
        if a.only in (None, "deltamq"):
            run_deltamq(a, opt, results)
    return run_suite(results, "targets", body, lambda: report(results, a.workload_ids, Path(a.out)))


if __name__ == "__main__":
    sys.exit(main())
