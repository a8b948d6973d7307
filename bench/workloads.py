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
from array import array
from dataclasses import dataclass, field
from time import perf_counter, perf_counter_ns
from typing import Callable

from . import procutil
from .amqp import Connection, Publisher, Waker, admin, publish_confirmed, raise_if_failed
from .workers import PHASE, Pool, Window, WorkloadError

SETUP, RUN_MAX, PAUSE, RUN_RATE, STOP = 0, 1, 2, 3, 4
RATE, RECORD = 1, 2            # ctrl slots besides PHASE

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
    conns: list[Connection] = []
    prods: list[_Prod] = []
    cons = []
    waker = Waker()
    wake, nap = waker.wake, waker.nap

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
            raise_if_failed(conns)

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


def _reply(pipe, samples: bytes) -> None:
    pipe.send(("ok", ""))
    pipe.send_bytes(samples)


# --------------------------------------------------------------------------
# the parent side


def setup(broker, wl: Workload) -> None:
    async def go(conn, ch):
        if wl.exchange:
            await ch.exchange_declare(*wl.exchange)
        for q in wl.queues:
            await ch.queue_declare(q)
            await ch.queue_purge(q)
        for q, ex, rk in wl.bindings:
            await ch.queue_bind(q, ex, rk)
    admin(broker, go)


def teardown(broker, wl: Workload) -> None:
    async def go(conn, ch):
        for q in wl.queues:
            await ch.queue_delete(q)
        if wl.exchange:
            await ch.exchange_delete(wl.exchange[0])
    admin(broker, go)


def _pct(sorted_vals: array | list, q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i] / 1e6


def _cpu(w: Window) -> dict:
    return {"client_cpu_pct": round(sum(w.client), 1), "client_cpu_pct_per_process": w.client,
            "client_cpu_pct_max_process": max(w.client) if w.client else 0.0,
            "broker_cpu_pct": round(w.broker, 1),
            "machine_busy_pct": round(w.busy, 1),
            "irq_softirq_pct": round(w.irq, 1),
            "steal_pct": round(w.steal, 1),
            "other_busy_processes": w.others}


def run(broker, wl: Workload, opt: Options) -> dict:
    """Run one throughput+latency workload; returns a result dict."""
    log = opt.log
    pool = Pool(broker, wl.nprod, wl.ncons, len(wl.workers), STOP, tick=0.2, amqp_text=True)
    ctrl, pubc, recv = pool.ctrl, pool.pubc, pool.recv
    result: dict = {"workload": wl.id, "title": wl.title, "consumers": wl.consumer_mode,
                    "client_processes": len(wl.workers)}
    setup(broker, wl)
    try:
        for ws in wl.workers:
            pool.spawn(_worker, _reply, f"bench-w{wl.id}-{ws.wid}", ws, wl, opt.nice)
        pool.wait_ready()

        # ---- throughput
        ctrl[PHASE] = RUN_MAX
        pool.sleep(opt.warmup)
        s0 = pool.snap()
        pool.sleep(opt.duration)
        s1 = pool.snap()
        ctrl[PHASE] = PAUSE
        tw = pool.window(s0, s1)
        pub_rate, del_rate = tw.published, tw.received
        result["throughput"] = {"published_per_s": round(pub_rate), "delivered_per_s": round(del_rate),
                                "window_s": round(tw.dt, 2), **_cpu(tw)}
        log(f"    throughput: published {pub_rate:,.0f}/s delivered {del_rate:,.0f}/s  "
            f"(client CPU {result['throughput']['client_cpu_pct']}% "
            f"{result['throughput']['client_cpu_pct_per_process']}, broker CPU "
            f"{result['throughput']['broker_cpu_pct']}%, machine {result['throughput']['machine_busy_pct']}%"
            + (f", other busy processes {result['throughput']['other_busy_processes']}"
               if result['throughput']['other_busy_processes'] else "") + ")")

        # ---- drain
        def drained() -> bool:
            return all(recv[c] >= sum(pubc[p] for p in ps) for c, ps in wl.feeds.items())
        if not pool.wait(drained, opt.drain_timeout):
            result["drain_timeout"] = True
            log(f"    warning: consumers did not catch up within {opt.drain_timeout}s")

        # ---- latency at a fraction of the peak publish rate
        target = pub_rate * opt.latency_fraction
        if target < 1:
            raise WorkloadError("peak publish rate is ~0; cannot measure latency")
        ctrl[RATE] = max(1, int(target / wl.nprod * 1000))
        ctrl[PHASE] = RUN_RATE
        pool.sleep(opt.lat_warmup)
        ctrl[RECORD] = 1
        l0 = pool.snap()
        pool.sleep(opt.lat_duration)
        ctrl[RECORD] = 0
        l1 = pool.snap()
        lw = pool.window(l0, l1)
        ctrl[PHASE] = STOP

        samples = array("q")
        for _, r in pool.reports():
            samples.frombytes(r.recv_bytes())
        vals = sorted(samples)
        result["latency"] = {
            "target_rate_per_s": round(target),
            "published_per_s": round(lw.published),
            "delivered_per_s": round(lw.received),
            "samples": len(vals),
            "p50_ms": round(_pct(vals, 0.50), 3),
            "p99_ms": round(_pct(vals, 0.99), 3),
            "p999_ms": round(_pct(vals, 0.999), 3),
            "max_ms": round(vals[-1] / 1e6, 3) if vals else None,
            **_cpu(lw),
        }
        L = result["latency"]
        log(f"    latency @ {target:,.0f} msg/s published (achieved {L['published_per_s']:,}/s): "
            f"p50 {L['p50_ms']} ms  p99 {L['p99_ms']} ms  max {L['max_ms']} ms  ({len(vals):,} samples; "
            f"client CPU {L['client_cpu_pct']}%, broker CPU {L['broker_cpu_pct']}%"
            + (f", other busy processes {L['other_busy_processes']}" if L["other_busy_processes"] else "")
            + ")")
        return result
    finally:
        pool.close()
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
        took = await publish_confirmed(conn, pch, n, batch, window,
                                       lambda k: bytes(pub.batch(k, perf_counter_ns())))
        res["publish_s"] = round(took, 2)
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
        admin(broker, go)
    except Exception:
        try:
            admin(broker, lambda conn, ch: ch.queue_delete(q))
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
