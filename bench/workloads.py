"""The workloads and the machinery that runs them.

A throughput/latency workload is a set of *worker processes* (forked), each
running one asyncio (uvloop) loop with some AMQP connections carrying producer
and consumer channels.  The parent process never speaks AMQP during a run: it
steers the workers through a small shared-memory control block and reads their
counters (messages published / confirmed / received, one slot per producer or
consumer) to time the measurement windows itself.

Phases (``ctrl[PHASE]``):

RUN_MAX   producers publish as fast as they can, bounded by (a) the write
          buffer of their socket (TCP backpressure, RabbitMQ's flow control),
          (b) the confirm window for confirming producers, and (c) a backlog
          cap: a producer stops while its queue(s) hold more than
          ``backlog`` messages not yet received by their consumer, so the
          figure is a sustained end-to-end rate, not a queue filling up.
PAUSE     producers idle until the consumers have received everything.
RUN_RATE  producers publish at ``ctrl[RATE]`` (milli-messages/s each), paced
          by a 1 ms tick, every body stamped with ``perf_counter_ns()`` at the
          write; while ``ctrl[RECORD]`` is set consumers record per-message
          latency = arrival (read) time - stamp.
STOP      workers close, send their latency samples back, exit.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import time
import traceback
from array import array
from dataclasses import dataclass, field
from time import perf_counter, perf_counter_ns
from typing import Callable

from . import procutil
from .amqp import AMQPError, Connection, Publisher, install_uvloop

SETUP, RUN_MAX, PAUSE, RUN_RATE, STOP = 0, 1, 2, 3, 4
PHASE, RATE, RECORD = 0, 1, 2

MANUAL_ACK_PREFETCH = 100
MANUAL_ACK_EVERY = 50


# --------------------------------------------------------------------------
# specs (picklable, built in the parent)


@dataclass
class ProducerSpec:
    idx: int
    exchange: str
    routing_key: str
    gate: list[int]              # consumer idxs whose backlog bounds this producer
    confirm: bool = False
    window: int = 1000


@dataclass
class ConsumerSpec:
    idx: int
    queue: str
    no_ack: bool = True
    prefetch: int = 0
    ack_every: int = MANUAL_ACK_EVERY


@dataclass
class ConnSpec:
    producers: list[ProducerSpec] = field(default_factory=list)
    consumers: list[ConsumerSpec] = field(default_factory=list)


@dataclass
class WorkerSpec:
    wid: int
    conns: list[ConnSpec] = field(default_factory=list)


@dataclass
class Workload:
    id: int
    title: str
    queues: list[str]
    workers: list[WorkerSpec]
    nprod: int
    ncons: int
    feeds: dict[int, list[int]]              # consumer idx -> producer idxs feeding it
    exchange: tuple[str, str] | None = None  # (name, type)
    bindings: list[tuple[str, str, str]] = field(default_factory=list)
    batch: int = 100
    backlog: int = 10000
    consumer_mode: str = ""


@dataclass
class Options:
    duration: float = 10.0
    warmup: float = 2.0
    lat_duration: float = 10.0
    lat_warmup: float = 1.0
    client_procs: int = 2
    nice: int = 0                # niceness increment for load-generator workers
    latency_fraction: float = 0.5
    drain_timeout: float = 60.0
    mem_messages: int = 1_000_000
    mem_settle: float = 3.0
    log: Callable[[str], None] = print


# --------------------------------------------------------------------------
# workload definitions


def _split(items: list, k: int) -> list[list]:
    k = max(1, min(k, len(items)))
    return [items[i::k] for i in range(k)]


def _chunks(items: list, n: int) -> list[list]:
    return [items[i:i + n] for i in range(0, len(items), n)]


def build(wid: int, procs: int) -> Workload:
    procs = max(1, procs)
    if wid in (1, 2, 3):
        q = f"bench.w{wid}"
        prod = ProducerSpec(0, "", q, gate=[0], confirm=(wid == 3), window=1000)
        if wid == 2:
            cons = ConsumerSpec(0, q, no_ack=False, prefetch=MANUAL_ACK_PREFETCH)
            mode = f"manual ack, prefetch {MANUAL_ACK_PREFETCH}, multiple-ack every {MANUAL_ACK_EVERY}"
        else:
            cons = ConsumerSpec(0, q, no_ack=True)
            mode = "auto-ack (no-ack)"
        title = {1: "1→1 auto-ack", 2: "1→1 manual ack, prefetch 100",
                 3: "1→1 publisher confirms (window 1000)"}[wid]
        if procs >= 2:
            workers = [WorkerSpec(0, [ConnSpec(producers=[prod])]),
                       WorkerSpec(1, [ConnSpec(consumers=[cons])])]
        else:
            workers = [WorkerSpec(0, [ConnSpec(producers=[prod]), ConnSpec(consumers=[cons])])]
        return Workload(wid, title, [q], workers, 1, 1, {0: [0]}, consumer_mode=mode)

    if wid == 4:
        n = 10
        ex = "bench.w4.fanout"
        queues = [f"bench.w4.q{i}" for i in range(n)]
        prod = ProducerSpec(0, ex, "", gate=list(range(n)))
        fan = [ConsumerSpec(i, queues[i], no_ack=False, prefetch=MANUAL_ACK_PREFETCH)
               for i in range(n)]
        if procs >= 2:
            workers = [WorkerSpec(0, [ConnSpec(producers=[prod])])]
            for k, group in enumerate(_split(fan, procs - 1)):
                workers.append(WorkerSpec(k + 1, [ConnSpec(consumers=[c]) for c in group]))
        else:
            workers = [WorkerSpec(0, [ConnSpec(producers=[prod])]
                                  + [ConnSpec(consumers=[c]) for c in fan])]
        return Workload(4, "fan-out 1→fanout exchange→10 queues", queues, workers, 1, n,
                        {i: [0] for i in range(n)}, exchange=(ex, "fanout"),
                        bindings=[(q, ex, "") for q in queues],
                        consumer_mode=f"10 consumers, manual ack, prefetch {MANUAL_ACK_PREFETCH}")

    if wid == 5:
        n = 100
        queues = [f"bench.w5.q{i:03d}" for i in range(n)]
        workers = []
        for k, idxs in enumerate(_split(list(range(n)), procs)):
            conns = []
            for group in _chunks(idxs, 10):       # 10 producer channels per connection
                conns.append(ConnSpec(producers=[ProducerSpec(i, "", queues[i], gate=[i])
                                                 for i in group]))
            for group in _chunks(idxs, 10):       # 10 consumer channels per connection
                conns.append(ConnSpec(consumers=[ConsumerSpec(i, queues[i], no_ack=False,
                                                              prefetch=MANUAL_ACK_PREFETCH)
                                                 for i in group]))
            workers.append(WorkerSpec(k, conns))
        return Workload(5, "100 queues × (1 producer + 1 consumer)", queues, workers, n, n,
                        {i: [i] for i in range(n)}, batch=20, backlog=2000,
                        consumer_mode=f"manual ack, prefetch {MANUAL_ACK_PREFETCH}; "
                                      "10 channels per connection")
    raise ValueError(f"no workload {wid}")


TITLES = {
    1: "1→1 auto-ack",
    2: "1→1 manual ack, prefetch 100",
    3: "1→1 publisher confirms (window 1000)",
    4: "fan-out 1→10 queues",
    5: "100 queues × (1 prod + 1 cons)",
    6: "memory per queued message",
}


# --------------------------------------------------------------------------
# the worker process


class _Prod:
    __slots__ = ("spec", "conn", "ch", "pub", "sent", "gate")

    def __init__(self, spec: ProducerSpec, conn: Connection, ch, pub: Publisher):
        self.spec, self.conn, self.ch, self.pub = spec, conn, ch, pub
        self.sent = 0
        self.gate = spec.gate


async def _worker(ws: WorkerSpec, wl: Workload, host: str, port: int, vhost: str,
                  ctrl, pubc, confc, recv, ready) -> bytes:
    loop = asyncio.get_running_loop()
    conns: list[Connection] = []
    prods: list[_Prod] = []
    cons = []
    wake_fut: asyncio.Future | None = None

    def wake(*_a) -> None:
        if wake_fut is not None and not wake_fut.done():
            wake_fut.set_result(None)

    async def nap(t: float) -> None:
        nonlocal wake_fut
        wake_fut = loop.create_future()
        h = loop.call_later(t, wake)
        try:
            await wake_fut
        finally:
            h.cancel()
            wake_fut = None

    try:
        for cs in ws.conns:
            c = await Connection.open(host, port, vhost)
            c.on_progress = wake
            conns.append(c)
            for ps in cs.producers:
                ch = await c.channel()
                if ps.confirm:
                    await ch.confirm_select()
                    ch.on_confirm = wake
                prods.append(_Prod(ps, c, ch, Publisher(ch.number, ps.exchange, ps.routing_key,
                                                        wl.batch, frame_max=c.frame_max)))
            for spec in cs.consumers:
                ch = await c.channel()
                ch.samples = array("q")
                if not spec.no_ack:
                    await ch.basic_qos(spec.prefetch)

                def on_delivery(ch, i=spec.idx):
                    recv[i] = ch.received
                ch.on_delivery = on_delivery
                await ch.basic_consume(spec.queue, f"bench-c{spec.idx}", spec.no_ack, spec.ack_every)
                cons.append(ch)
        ready[ws.wid] = 1

        manual = [ch for ch in cons if not ch.no_ack]
        last_flush = perf_counter()
        backlog_cap = wl.backlog

        def check() -> None:
            for c in conns:
                if c.error:
                    raise AMQPError(c.error)

        # publishes of one loop iteration, coalesced into one write per connection
        pending: dict[Connection, list] = {}

        def send(p: _Prod, n: int, ts: int) -> None:
            parts = pending.get(p.conn)
            if parts is None:
                parts = pending[p.conn] = []
            parts.append(p.pub.batch(n, ts))
            p.sent += n
            p.ch.published += n
            pubc[p.spec.idx] = p.sent

        def flush() -> None:
            for c, parts in pending.items():
                c.write(b"".join(parts) if len(parts) > 1 else bytes(parts[0]))
            pending.clear()

        def room(p: _Prod, limit: int) -> int:
            n = limit
            if p.spec.confirm:
                n = min(n, p.spec.window - p.ch.unconfirmed)
                confc[p.spec.idx] = p.ch.confirmed
            g = p.gate
            lo = recv[g[0]] if len(g) == 1 else min(recv[i] for i in g)
            return min(n, backlog_cap - (p.sent - lo))

        while True:
            phase = ctrl[PHASE]
            check()
            rec = bool(ctrl[RECORD])
            for c in conns:
                c.recording = rec
            if manual:
                now = perf_counter()
                if now - last_flush > 0.02:
                    last_flush = now
                    for ch in manual:
                        ch.flush_acks()
            if phase == RUN_MAX:
                progressed = False
                ts = perf_counter_ns()
                for p in prods:
                    if p.conn.writable:
                        n = room(p, wl.batch)
                        if n > 0:
                            send(p, n, ts)
                            progressed = True
                flush()
                if progressed:
                    await asyncio.sleep(0)
                else:
                    await nap(0.001)
            elif phase == RUN_RATE:
                rate = ctrl[RATE] / 1000.0
                t0 = perf_counter()
                base = [p.sent for p in prods]
                while ctrl[PHASE] == RUN_RATE:
                    check()
                    rec = bool(ctrl[RECORD])
                    for c in conns:
                        c.recording = rec
                    now = perf_counter()
                    target = int((now - t0) * rate)
                    ts = perf_counter_ns()
                    for p, b in zip(prods, base):
                        due = target - (p.sent - b)
                        if due > 0 and p.conn.writable:
                            n = room(p, min(due, wl.batch)) if p.spec.confirm else min(due, wl.batch)
                            if n > 0:
                                send(p, n, ts)
                    flush()
                    if manual and now - last_flush > 0.02:
                        last_flush = now
                        for ch in manual:
                            ch.flush_acks()
                    await asyncio.sleep(0.001)
            elif phase == STOP:
                break
            else:
                for p in prods:
                    if p.spec.confirm:
                        confc[p.spec.idx] = p.ch.confirmed
                await nap(0.005)
        samples = array("q")
        for ch in cons:
            if ch.samples is not None:
                samples.extend(ch.samples)
        return samples.tobytes()
    finally:
        await asyncio.gather(*(c.close(timeout=3) for c in conns), return_exceptions=True)


def _worker_main(ws: WorkerSpec, wl: Workload, host: str, port: int, vhost: str,
                 ctrl, pubc, confc, recv, ready, pipe, nice: int = 0) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent handles Ctrl-C
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    install_uvloop()
    try:
        samples = asyncio.run(_worker(ws, wl, host, port, vhost, ctrl, pubc, confc, recv, ready))
        pipe.send(("ok", ""))
        pipe.send_bytes(samples)
    except BaseException as e:  # noqa: BLE001
        ready[ws.wid] = -1
        try:
            msg = str(e) if isinstance(e, AMQPError) else traceback.format_exc()
            pipe.send(("error", msg))
        except Exception:  # noqa: BLE001
            pass
    finally:
        pipe.close()


# --------------------------------------------------------------------------
# the parent side


class WorkloadError(RuntimeError):
    pass


async def _admin(broker, fn):
    conn = await Connection.open(broker.host, broker.port, broker.vhost)
    try:
        ch = await conn.channel()
        return await fn(conn, ch)
    finally:
        await conn.close()


def _run_admin(broker, fn):
    install_uvloop()
    return asyncio.run(_admin(broker, fn))


def setup(broker, wl: Workload) -> None:
    async def go(conn, ch):
        if wl.exchange:
            await ch.exchange_declare(*wl.exchange)
        for q in wl.queues:
            await ch.queue_declare(q)
            await ch.queue_purge(q)
        for q, ex, rk in wl.bindings:
            await ch.queue_bind(q, ex, rk)
    _run_admin(broker, go)


def teardown(broker, wl: Workload) -> None:
    async def go(conn, ch):
        for q in wl.queues:
            await ch.queue_delete(q)
        if wl.exchange:
            await ch.exchange_delete(wl.exchange[0])
    _run_admin(broker, go)


@dataclass
class _Snap:
    t: float
    pub: int
    recv: int
    client_cpu: list[float]
    broker_cpu: float
    machine: tuple[int, int, int, int]
    everyone: dict[int, float]
    broker_pids: list[int]


def _pct(sorted_vals: array | list, q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i] / 1e6


def run(broker, wl: Workload, opt: Options) -> dict:
    """Run one throughput+latency workload; returns a result dict."""
    log = opt.log
    ctx = mp.get_context("fork")
    ctrl = ctx.RawArray("q", 4)
    pubc = ctx.RawArray("q", wl.nprod)
    confc = ctx.RawArray("q", wl.nprod)
    recv = ctx.RawArray("q", wl.ncons)
    ready = ctx.RawArray("q", len(wl.workers))
    procs: list = []
    pipes: list = []
    result: dict = {"workload": wl.id, "title": wl.title, "consumers": wl.consumer_mode,
                    "client_processes": len(wl.workers)}
    setup(broker, wl)
    try:
        for ws in wl.workers:
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker_main, name=f"bench-w{wl.id}-{ws.wid}",
                            args=(ws, wl, broker.host, broker.port, broker.vhost,
                                  ctrl, pubc, confc, recv, ready, w, opt.nice), daemon=True)
            p.start()
            w.close()
            procs.append(p)
            pipes.append(r)

        def health() -> None:
            for i, p in enumerate(procs):
                if ready[i] == -1 or (not p.is_alive() and ctrl[PHASE] != STOP):
                    msg = "worker died"
                    if pipes[i].poll(1):
                        try:
                            kind, msg = pipes[i].recv()
                        except EOFError:
                            pass
                    raise WorkloadError(f"worker {i}: {msg.strip()}")
            if not broker.alive():
                raise WorkloadError("broker process exited")

        def sleep(t: float) -> None:
            end = perf_counter() + t
            while True:
                health()
                left = end - perf_counter()
                if left <= 0:
                    return
                time.sleep(min(0.2, left))

        deadline = perf_counter() + 60
        while not all(ready[i] == 1 for i in range(len(procs))):
            health()
            if perf_counter() > deadline:
                raise WorkloadError("workers not ready after 60 s")
            time.sleep(0.05)

        pids = [p.pid for p in procs]

        def snap() -> _Snap:
            t, pb, rc = perf_counter(), sum(pubc), sum(recv)
            bp = procutil.tree(broker.pid)
            return _Snap(t, pb, rc, [procutil.cpu_seconds(x) for x in pids],
                         sum(procutil.cpu_seconds(x) for x in bp), procutil.machine_cpu(),
                         procutil.all_cpu_seconds(), bp)

        def cpu(a: _Snap, b: _Snap) -> dict:
            dt = b.t - a.t
            per = [round(100 * (y - x) / dt, 1) for x, y in zip(a.client_cpu, b.client_cpu)]
            total = max(1, b.machine[1] - a.machine[1])
            busy = (b.machine[0] - a.machine[0]) / total
            irq = (b.machine[2] - a.machine[2]) / total
            steal = (b.machine[3] - a.machine[3]) / total
            others = procutil.top_cpu(a.everyone, b.everyone, dt,
                                      set(pids) | set(b.broker_pids) | {os.getpid()})
            return {"client_cpu_pct": round(sum(per), 1), "client_cpu_pct_per_process": per,
                    "client_cpu_pct_max_process": max(per) if per else 0.0,
                    "broker_cpu_pct": round(100 * (b.broker_cpu - a.broker_cpu) / dt, 1),
                    "machine_busy_pct": round(100 * busy * procutil.ncpu(), 1),
                    "irq_softirq_pct": round(100 * irq * procutil.ncpu(), 1),
                    "steal_pct": round(100 * steal * procutil.ncpu(), 1),
                    "other_busy_processes": others}

        # ---- throughput
        ctrl[PHASE] = RUN_MAX
        sleep(opt.warmup)
        s0 = snap()
        sleep(opt.duration)
        s1 = snap()
        ctrl[PHASE] = PAUSE
        dt = s1.t - s0.t
        pub_rate = (s1.pub - s0.pub) / dt
        del_rate = (s1.recv - s0.recv) / dt
        result["throughput"] = {"published_per_s": round(pub_rate), "delivered_per_s": round(del_rate),
                                "window_s": round(dt, 2), **cpu(s0, s1)}
        log(f"    throughput: published {pub_rate:,.0f}/s delivered {del_rate:,.0f}/s  "
            f"(client CPU {result['throughput']['client_cpu_pct']}% "
            f"{result['throughput']['client_cpu_pct_per_process']}, broker CPU "
            f"{result['throughput']['broker_cpu_pct']}%, machine {result['throughput']['machine_busy_pct']}%"
            + (f", other busy processes {result['throughput']['other_busy_processes']}"
               if result['throughput']['other_busy_processes'] else "") + ")")

        # ---- drain
        def drained() -> bool:
            return all(recv[c] >= sum(pubc[p] for p in ps) for c, ps in wl.feeds.items())
        t_drain = perf_counter()
        while not drained():
            health()
            if perf_counter() - t_drain > opt.drain_timeout:
                result["drain_timeout"] = True
                log(f"    warning: consumers did not catch up within {opt.drain_timeout}s")
                break
            time.sleep(0.05)

        # ---- latency at a fraction of the peak publish rate
        target = pub_rate * opt.latency_fraction
        if target < 1:
            raise WorkloadError("peak publish rate is ~0; cannot measure latency")
        ctrl[RATE] = max(1, int(target / wl.nprod * 1000))
        ctrl[PHASE] = RUN_RATE
        sleep(opt.lat_warmup)
        ctrl[RECORD] = 1
        l0 = snap()
        sleep(opt.lat_duration)
        ctrl[RECORD] = 0
        l1 = snap()
        ldt = l1.t - l0.t
        ctrl[PHASE] = STOP

        samples = array("q")
        for i, (p, r) in enumerate(zip(procs, pipes)):
            if not r.poll(30):
                raise WorkloadError(f"worker {i} did not report")
            kind, msg = r.recv()
            if kind != "ok":
                raise WorkloadError(f"worker {i}: {msg.strip()}")
            samples.frombytes(r.recv_bytes())
            p.join(10)
        vals = sorted(samples)
        result["latency"] = {
            "target_rate_per_s": round(target),
            "published_per_s": round((l1.pub - l0.pub) / ldt),
            "delivered_per_s": round((l1.recv - l0.recv) / ldt),
            "samples": len(vals),
            "p50_ms": round(_pct(vals, 0.50), 3),
            "p99_ms": round(_pct(vals, 0.99), 3),
            "p999_ms": round(_pct(vals, 0.999), 3),
            "max_ms": round(vals[-1] / 1e6, 3) if vals else None,
            **cpu(l0, l1),
        }
        L = result["latency"]
        log(f"    latency @ {target:,.0f} msg/s published (achieved {L['published_per_s']:,}/s): "
            f"p50 {L['p50_ms']} ms  p99 {L['p99_ms']} ms  max {L['max_ms']} ms  ({len(vals):,} samples; "
            f"client CPU {L['client_cpu_pct']}%, broker CPU {L['broker_cpu_pct']}%"
            + (f", other busy processes {L['other_busy_processes']}" if L["other_busy_processes"] else "")
            + ")")
        return result
    finally:
        ctrl[PHASE] = STOP
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
        for r in pipes:
            r.close()
        if broker.alive():
            try:
                teardown(broker, wl)
            except Exception as e:  # noqa: BLE001
                log(f"    (teardown failed: {e})")


# --------------------------------------------------------------------------
# workload 6: memory per queued message


def run_memory(broker, opt: Options) -> dict:
    log = opt.log
    n = opt.mem_messages
    q = "bench.w6.mem"
    pid = broker.pid
    res: dict = {"workload": 6, "title": TITLES[6], "messages": n, "body_bytes": 256}

    async def go(conn, ch):
        loop = asyncio.get_running_loop()
        await ch.queue_declare(q)
        await ch.queue_purge(q)
        await asyncio.sleep(opt.mem_settle)
        if hasattr(broker, "collect_garbage"):
            await loop.run_in_executor(None, broker.collect_garbage)
            await asyncio.sleep(1)
        res["rss_before"] = procutil.rss_bytes(pid)
        pch = await conn.channel()
        await pch.confirm_select()
        batch, window = 500, 5000
        pub = Publisher(pch.number, "", q, batch, frame_max=conn.frame_max)
        fut: list[asyncio.Future | None] = [None]

        def wake(*_):
            if fut[0] is not None and not fut[0].done():
                fut[0].set_result(None)
        pch.on_confirm = wake
        conn.on_progress = wake
        t0 = perf_counter()
        sent = 0
        while pch.confirmed < n:
            if conn.error:
                raise AMQPError(conn.error)
            k = min(batch, n - sent, window - pch.unconfirmed)
            if k > 0 and conn.writable:
                conn.write(bytes(pub.batch(k, perf_counter_ns())))
                sent += k
                pch.published += k
                await asyncio.sleep(0)
            else:
                fut[0] = loop.create_future()
                h = loop.call_later(0.05, wake)
                await fut[0]
                h.cancel()
        res["publish_s"] = round(perf_counter() - t0, 2)
        res["nacked"] = pch.nacked
        await asyncio.sleep(opt.mem_settle)
        res["rss_after"] = procutil.rss_bytes(pid)
        if hasattr(broker, "collect_garbage"):
            # RabbitMQ: the figure above includes garbage the queue process
            # has not collected yet; measure again after a full GC.
            res["rss_after_before_gc"] = res["rss_after"]
            await loop.run_in_executor(None, broker.collect_garbage)
            await asyncio.sleep(1)
            res["rss_after"] = procutil.rss_bytes(pid)
        msgs, _ = await ch.queue_declare(q, passive=True)
        res["queue_depth"] = msgs
        if hasattr(broker, "queue_info"):
            res["broker_queue_info"] = await loop.run_in_executor(None, broker.queue_info, q)
        await ch.queue_delete(q)
        await asyncio.sleep(1)
        res["rss_after_delete"] = procutil.rss_bytes(pid)

    try:
        _run_admin(broker, go)
    except Exception:
        try:
            _run_admin(broker, lambda conn, ch: ch.queue_delete(q))
        except Exception:  # noqa: BLE001
            pass
        raise
    d = res["rss_after"] - res["rss_before"]
    res["rss_delta"] = d
    res["bytes_per_message"] = round(d / n, 1)
    res["overhead_bytes_per_message"] = round(d / n - 256, 1)
    log(f"    RSS {res['rss_before'] / 2**20:.1f} MiB -> {res['rss_after'] / 2**20:.1f} MiB for "
        f"{n:,} messages (queue depth {res['queue_depth']:,}, published in {res['publish_s']} s): "
        f"{d / n:.0f} B/msg, overhead {d / n - 256:.0f} B/msg beyond the body"
        + (f"; queue info {res['broker_queue_info']}" if res.get("broker_queue_info") else ""))
    return res


def client_uses_uvloop() -> bool:
    import importlib.util
    return importlib.util.find_spec("uvloop") is not None


__all__ = ["Options", "Workload", "build", "run", "run_memory", "TITLES", "WorkloadError",
           "client_uses_uvloop"]
