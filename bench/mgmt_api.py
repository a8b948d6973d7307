"""The management API under load: DeltaMQ's REST API vs RabbitMQ's management plugin.

    python -m bench.mgmt_api [--only deltamq|rabbitmq] [--quick] [--queues 10000]
                             [--rate 20000] [--duration 10] [--requests 50] [--nice N]

Issue 4, item 9: "GET of 10,000 queues and of one queue under 20k msg/s of
AMQP load: the API answers in <= 200 ms p99 and the AMQP throughput drops by
<= 10% while a dashboard polls every second."  Each broker is started in
turn (DeltaMQ with its HTTP port on a free port; a private RabbitMQ node with
the ``rabbitmq_management`` plugin on 127.0.0.1, see bench/rabbitmq.py), then:

M1  ``--queues`` (10,000) non-durable queues are declared over AMQP; the
    list of every queue of the virtual host is fetched ``--requests`` times,
    one request every 0.2 s on an idle broker: p50/p99 of the time from
    sending the request to the last byte of the answer.  DeltaMQ:
    ``GET /api/latest/queue/<node>/<vhost>`` (every attribute and the
    statistics of every queue); RabbitMQ: ``GET /api/queues/%2F`` without
    ``page``/``columns``, i.e. every queue with every field -- the closest
    equivalent (its UI pages with ``?page=1&page_size=100``).
M2  With the queues still there, the load generator of the throughput suite
    (bench/workers.py, bench/workloads.py: workload 2, one producer -> one
    queue -> one consumer, manual ack, prefetch 100, 256-byte transient
    messages on a non-durable queue) publishes at ``--rate`` (20,000) msg/s,
    paced; meanwhile that one queue is fetched ``--m2-rate`` (20) times a
    second (DeltaMQ ``/api/latest/queue/<node>/<vhost>/bench.w2``, RabbitMQ
    ``/api/queues/%2F/bench.w2``): p50/p99, and the rate achieved.
M3  Delivered msg/s over windows without management requests and with a
    "dashboard" polling every ``--poll-interval`` (1) s what a console page
    fetches -- the queue list, one queue, the virtual host, its connections --
    alternating: without, then ``--m3-rounds`` (2) times with and without; the
    drop is 1 - mean(with) / mean(without).  M3p: the load
    of M2, paced at ``--rate`` msg/s (the issue's scenario: it drops only if
    the broker cannot keep up); M3: the same producer and consumer at their
    peak (closed loop, as the throughput suite measures it: the broker is
    saturated, so whatever management takes shows) -- both with the
    ``--queues`` queues declared, which the dashboard lists every time (the
    hard case); M3s: M3 again after deleting them, on a virtual host holding
    only the load's queue (``--no-small`` skips it).

Every request carries HTTP Basic credentials (guest/guest), on one
keep-alive connection per client, as curl in a loop or a console does.  The
parent process makes the requests; the load runs in two forked worker
processes.  The report (table, CPU of every window, notes) is printed and
written to bench/results/mgmt-<time>.{json,md} and mgmt-latest.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any, Callable
from urllib.parse import quote

from . import procutil
from .amqp import admin
from .compare import _drop, _other, _right
from .suite import (add_broker_arguments, attempt, run_each_broker, broker_line, cell, failed,
                    failures, interrupt_on_sigterm, log, machine_line, meta,
                    run_suite, write_report)
from .workers import PHASE, Pool, Window
from .workloads import (PAUSE, RATE, RUN_MAX, RUN_RATE, STOP, Workload, _cpu, _reply, _worker,
                        build, client_uses_uvloop, setup, teardown)

BROKERS = ("deltamq", "rabbitmq")
TARGET_P99_MS = 200.0
TARGET_DROP_PCT = 10.0
LOAD_WORKLOAD = 2          # bench/workloads.py: 1 producer -> 1 queue -> 1 consumer, manual ack
QUEUE_PREFIX = "bench.mgmt."
TITLES = {
    "M1": "GET all queues",
    "M2": "GET one queue under load",
    "M3": "AMQP peak, dashboard polling",
    "M3p": "AMQP paced load, dashboard polling",
    "M3s": "AMQP peak, dashboard polling (small vhost)",
}


# --------------------------------------------------------------------------
# HTTP


class HttpClient:
    """One keep-alive HTTP/1.1 connection; HTTP Basic on every request."""

    def __init__(self, host: str, port: int, user: str = "guest", password: str = "guest",
                 timeout: float = 120.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.conn: http.client.HTTPConnection | None = None

    def get(self, path: str) -> tuple[int, bytes, float]:
        """(status, body, seconds from sending the request to the last byte of the answer)."""
        for attempt_ in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self.conn.connect()                    # not timed: the connection is kept
            t0 = perf_counter()
            try:
                self.conn.request("GET", path, headers={"Authorization": self.auth,
                                                        "Accept": "application/json"})
                resp = self.conn.getresponse()
                body = resp.read()
            except (http.client.HTTPException, OSError):
                self.close()
                if attempt_ == 2:
                    raise
                continue                               # a keep-alive connection the server closed
            took = perf_counter() - t0
            if (resp.getheader("connection") or "").lower() == "close":
                self.close()
            return resp.status, body, took
        raise AssertionError("unreachable")

    def get_json(self, path: str) -> Any:
        status, body, _ = self.get(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}: {body[:300]!r}")
        return json.loads(body)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class Api:
    """Where one broker's management API has what the benchmark fetches."""

    queues: str                # every queue of the virtual host
    queue_prefix: str          # + a percent-encoded queue name: that queue
    vhost: str
    connections: str

    def queue(self, name: str) -> str:
        return self.queue_prefix + quote(name, safe="")

    def dashboard(self, queue: str) -> list[tuple[str, str]]:
        """What a console page showing a virtual host fetches every refresh."""
        return [("queues", self.queues), ("queue", self.queue(queue)),
                ("vhost", self.vhost), ("connections", self.connections)]


def deltamq_api(client: HttpClient, amqp_vhost: str) -> Api:
    """Broker-J paths: find the node holding the virtual host AMQP clients use."""
    broker = client.get_json("/api/latest/broker")
    wanted = broker.get("defaultVirtualHost") if amqp_vhost in ("", "/") else amqp_vhost
    for node in client.get_json("/api/latest/virtualhostnode?depth=1"):
        for vhost in node.get("virtualhosts", []):
            if vhost.get("name") == wanted:
                base = f"{quote(node['name'], safe='')}/{quote(vhost['name'], safe='')}"
                return Api(queues=f"/api/latest/queue/{base}",
                           queue_prefix=f"/api/latest/queue/{base}/",
                           vhost=f"/api/latest/virtualhost/{base}",
                           connections=f"/api/latest/virtualhost/{base}/getConnections")
    raise RuntimeError(f"DeltaMQ: no virtual host '{wanted}' in /api/latest/virtualhostnode")


def rabbitmq_api(amqp_vhost: str) -> Api:
    v = quote(amqp_vhost, safe="")
    return Api(queues=f"/api/queues/{v}", queue_prefix=f"/api/queues/{v}/",
               vhost=f"/api/vhosts/{v}", connections=f"/api/vhosts/{v}/connections")


def _pct(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of values in seconds, in ms."""
    if not values:
        return None
    s = sorted(values)
    i = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return round(s[i] * 1000, 2)


def _latency(values: list[float]) -> dict[str, Any]:
    return {"requests": len(values), "p50_ms": _pct(values, 0.5), "p99_ms": _pct(values, 0.99),
            "max_ms": _pct(values, 1.0),
            "mean_ms": round(statistics.fmean(values) * 1000, 2) if values else None}


# --------------------------------------------------------------------------
# the queues of M1


def queue_names(n: int) -> list[str]:
    return [f"{QUEUE_PREFIX}{i:05d}" for i in range(n)]


def declare_queues(broker: Any, names: list[str], delete: bool = False, channels: int = 16) -> float:
    """Declare (or delete) non-durable queues over AMQP, on ``channels`` channels at once;
    returns the seconds it took."""
    async def go(conn: Any, ch: Any) -> None:
        chans = [ch] + [await conn.channel() for _ in range(channels - 1)]

        async def one(c: Any, part: list[str]) -> None:
            for name in part:
                if delete:
                    await c.queue_delete(name)
                else:
                    await c.queue_declare(name)
        await asyncio.gather(*(one(c, names[i::channels]) for i, c in enumerate(chans)))

    t0 = perf_counter()
    admin(broker, go)
    return perf_counter() - t0


# --------------------------------------------------------------------------
# M1


def m1(broker: Any, client: HttpClient, api: Api, a: argparse.Namespace) -> dict[str, Any]:
    time.sleep(a.settle)
    for _ in range(a.m1_warmup):
        client.get(api.queues)
    took: list[float] = []
    size = 0
    listed = None
    t0 = perf_counter()
    cpu0, own0 = procutil.tree_cpu_seconds(broker.pid), procutil.cpu_seconds(os.getpid())
    machine0 = procutil.machine_cpu()
    for i in range(a.requests):
        if i >= 3 and perf_counter() - t0 > a.m1_time:
            log(f"    (M1 stopped after {i} requests: --m1-time {a.m1_time:g} s)")
            break
        status, body, dt = client.get(api.queues)
        if status != 200:
            raise RuntimeError(f"GET {api.queues}: HTTP {status}: {body[:300]!r}")
        took.append(dt)
        size = len(body)
        if i == 0:
            listed = len(json.loads(body))
        time.sleep(a.m1_gap)
    cpu = procutil.tree_cpu_seconds(broker.pid) - cpu0
    own = procutil.cpu_seconds(os.getpid()) - own0
    busy, irq, _ = procutil.machine_pct(machine0, procutil.machine_cpu())
    elapsed = perf_counter() - t0
    res = {"workload": "M1", "title": TITLES["M1"], "path": api.queues, "queues_listed": listed,
           "response_bytes": size, "stopped_early": len(took) < a.requests, **_latency(took),
           "broker_cpu_ms_per_request": round(1000 * cpu / len(took), 1),
           "broker_cpu_pct": round(100 * cpu / elapsed, 1), "client_cpu_pct": round(100 * own / elapsed, 1),
           "irq_softirq_pct": round(irq, 1), "machine_busy_pct": round(busy, 1)}
    log(f"    M1 GET {api.queues}: {listed:,} queues, {size / 1e6:.1f} MB: p50 {res['p50_ms']} ms"
        f"  p99 {res['p99_ms']} ms  max {res['max_ms']} ms ({len(took)} requests; broker CPU "
        f"{res['broker_cpu_ms_per_request']} ms per request)")
    return res


# --------------------------------------------------------------------------
# the load (M2, M3)


class Load:
    """The load generator's worker processes on one broker, driven through its phases."""

    def __init__(self, broker: Any, a: argparse.Namespace) -> None:
        self.broker = broker
        self.wl: Workload = build(LOAD_WORKLOAD, 2)
        self.pool = Pool(broker, self.wl.nprod, self.wl.ncons, len(self.wl.workers), STOP,
                         tick=0.2, amqp_text=True)
        self.nice = a.nice
        self.drain_timeout = 60.0

    @property
    def queue(self) -> str:
        return self.wl.queues[0]

    def start(self) -> None:
        setup(self.broker, self.wl)
        for ws in self.wl.workers:
            self.pool.spawn(_worker, _reply, f"bench-mgmt-{ws.wid}", ws, self.wl, self.nice)
        self.pool.wait_ready()

    def drained(self) -> bool:
        recv, pubc = self.pool.recv, self.pool.pubc
        return all(recv[c] >= sum(pubc[p] for p in ps) for c, ps in self.wl.feeds.items())

    def pause(self) -> None:
        """Producers stop; wait until the consumer has everything."""
        self.pool.ctrl[PHASE] = PAUSE
        if not self.pool.wait(self.drained, self.drain_timeout):
            log(f"    warning: the consumer did not catch up within {self.drain_timeout:g} s")

    def stop(self) -> None:
        pool = self.pool
        try:
            if pool.procs and all(p.is_alive() for p in pool.procs):
                pool.ctrl[PHASE] = STOP
                for _, r in pool.reports():
                    r.recv_bytes()  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001 - close() below makes sure they are gone
            log(f"    (load generator: {e})")
        finally:
            pool.close()
            if self.broker.alive():
                try:
                    teardown(self.broker, self.wl)
                except Exception as e:  # noqa: BLE001
                    log(f"    (teardown failed: {e})")


def _window(w: Window) -> dict[str, Any]:
    return {"published_per_s": round(w.published), "delivered_per_s": round(w.received),
            "window_s": round(w.dt, 2), **_cpu(w)}


def paced(pool: Pool, duration: float, interval: float, action: Callable[[], None]) -> int:
    """action() every ``interval`` s for ``duration`` s (at once when it runs late);
    returns how many times it started late by more than an interval."""
    t0 = perf_counter()
    k, late = 0, 0
    while True:
        due = t0 + k * interval
        now = perf_counter()
        if due >= t0 + duration:
            break
        if now < due:
            pool.sleep(due - now)
        elif now - due > interval:
            late += 1
        action()
        pool.health()
        k += 1
    left = t0 + duration - perf_counter()
    if left > 0:
        pool.sleep(left)
    return late


def m2(load: Load, client: HttpClient, api: Api, a: argparse.Namespace) -> dict[str, Any]:
    pool = load.pool
    path = api.queue(load.queue)
    pool.ctrl[RATE] = int(a.rate * 1000 / load.wl.nprod)
    pool.ctrl[PHASE] = RUN_RATE
    pool.sleep(a.warmup)
    took: list[float] = []
    bad: list[int] = []
    last = b""

    def one() -> None:
        nonlocal last
        status, body, dt = client.get(path)
        took.append(dt)
        last = body
        if status != 200:
            bad.append(status)

    s0 = pool.snap()
    late = paced(pool, a.duration, 1.0 / a.m2_rate, one)
    s1 = pool.snap()
    load.pause()
    if bad:
        raise RuntimeError(f"GET {path}: HTTP {bad[0]} ({len(bad)} of {len(took)} requests)")
    shown = json.loads(last)
    if isinstance(shown, list):
        shown = shown[0] if shown else {}
    if shown.get("name") != load.queue:
        raise RuntimeError(f"GET {path} answered something else: {last[:200]!r}")
    w = pool.window(s0, s1)
    res = {"workload": "M2", "title": TITLES["M2"], "path": path, "target_rate_per_s": a.rate,
           "request_rate_per_s": a.m2_rate, "late_requests": late, "response_bytes": len(last),
           **_latency(took), "load": _window(w)}
    log(f"    M2 GET {path} at {a.m2_rate:g}/s under {w.published:,.0f} msg/s published, "
        f"{w.received:,.0f} delivered: p50 {res['p50_ms']} ms  p99 {res['p99_ms']} ms  "
        f"max {res['max_ms']} ms ({len(took)} requests; broker CPU {w.broker:.0f}%, "
        f"machine {w.busy:.0f}%)")
    return res


def m3(load: Load, client: HttpClient, api: Api, a: argparse.Namespace, wid: str,
       rate: float | None = None) -> dict[str, Any]:
    """Throughput at the peak (or at ``rate`` msg/s): without, with a dashboard polling,
    without again."""
    pool = load.pool
    if rate is None:
        pool.ctrl[PHASE] = RUN_MAX
    else:
        pool.ctrl[RATE] = int(rate * 1000 / load.wl.nprod)
        pool.ctrl[PHASE] = RUN_RATE
    pool.sleep(a.warmup)
    requests = api.dashboard(load.queue)
    polls: list[float] = []
    per_request: dict[str, list[float]] = {name: [] for name, _ in requests}
    sizes: dict[str, int] = {}

    def poll() -> None:
        t0 = perf_counter()
        for name, path in requests:
            status, body, dt = client.get(path)
            if status != 200:
                raise RuntimeError(f"dashboard GET {path}: HTTP {status}: {body[:200]!r}")
            per_request[name].append(dt)
            sizes[name] = len(body)
        polls.append(perf_counter() - t0)

    windows: list[dict[str, Any]] = []
    late = 0
    for kind in ["without"] + ["dashboard", "without"] * a.m3_rounds:
        s0 = pool.snap()
        if kind == "dashboard":
            late = paced(pool, a.duration, a.poll_interval, poll)
        else:
            pool.sleep(a.duration)
        s1 = pool.snap()
        windows.append({"kind": kind, **_window(pool.window(s0, s1))})
    load.pause()
    without = [w["delivered_per_s"] for w in windows if w["kind"] == "without"]
    base = statistics.fmean(without)
    with_dash = round(statistics.fmean(w["delivered_per_s"] for w in windows
                                       if w["kind"] == "dashboard"))
    drop = 100.0 * (1.0 - with_dash / base) if base else None
    res = {"workload": wid, "title": TITLES[wid], "poll_interval_s": a.poll_interval,
           "load": "peak (closed loop)" if rate is None else f"paced at {rate:,.0f} msg/s",
           "dashboard": [p for _, p in requests],
           "without_per_s": round(base), "with_dashboard_per_s": with_dash,
           "drop_pct": round(drop, 1) if drop is not None else None,
           "baseline_spread_pct": round(100.0 * (max(without) - min(without)) / base, 1)
           if base else None,
           "polls": len(polls), "late_polls": late, "poll": _latency(polls),
           "requests": {name: _latency(v) for name, v in per_request.items()},
           "response_bytes": sizes, "windows": windows}
    log(f"    {wid}: delivered " + ", ".join(f"{w['delivered_per_s']:,}/s {w['kind']}" for w in windows)
        + f": drop {res['drop_pct']}% (baselines differ by {res['baseline_spread_pct']}%); "
        f"dashboard poll ({len(requests)} GETs) p50 {res['poll']['p50_ms']} ms p99 "
        f"{res['poll']['p99_ms']} ms; queue list {sizes.get('queues', 0) / 1e6:.2f} MB")
    return res


# --------------------------------------------------------------------------
# one broker


def run_broker(name: str, broker: Any, a: argparse.Namespace, out: dict[str, Any]) -> None:
    ws: dict[str, Any] = out.setdefault("workloads", {})
    clients: list[HttpClient] = []

    def step(wid: str, what: str, fn: Callable[[], dict[str, Any]]) -> None:
        log(f"[{name}] {wid}: {TITLES[wid]}{what}")
        ws[wid] = attempt(wid, TITLES[wid], fn)

    try:
        broker.start()
        out["description"] = broker.describe()
        if not broker.http_port:
            raise RuntimeError(f"{name} has no HTTP management port")
        client = HttpClient(broker.host, broker.http_port)
        clients.append(client)
        api = deltamq_api(client, broker.vhost) if name == "deltamq" else rabbitmq_api(broker.vhost)
        out["api"] = {"queues": api.queues, "queue": api.queue_prefix + "<queue>",
                      "vhost": api.vhost, "connections": api.connections}
        names = queue_names(a.queues)
        log(f"[{name}] declaring {len(names):,} non-durable queues")
        out["declare_s"] = round(declare_queues(broker, names), 2)
        log(f"    declared in {out['declare_s']} s")
        if "M1" in a.measure_ids:
            step("M1", "", lambda: m1(broker, client, api, a))
        if not {"M2", "M3"} & set(a.measure_ids):
            return
        load = Load(broker, a)
        try:
            load.start()
        except Exception as e:  # noqa: BLE001 - reported as the failure of M2 and M3
            load.stop()
            for wid in ("M2", "M3"):
                if wid in a.measure_ids:
                    ws[wid] = failed(wid, TITLES[wid], e)
            return
        try:
            if "M2" in a.measure_ids:
                step("M2", f" ({a.rate:,.0f} msg/s)", lambda: m2(load, client, api, a))
            if "M3" in a.measure_ids:
                step("M3p", f" ({a.rate:,.0f} msg/s, {len(names):,} queues)",
                     lambda: m3(load, client, api, a, "M3p", a.rate))
                step("M3", f" ({len(names):,} queues)", lambda: m3(load, client, api, a, "M3"))
                if a.small:
                    log(f"[{name}] deleting the {len(names):,} queues")
                    out["delete_s"] = round(declare_queues(broker, names, delete=True), 2)
                    step("M3s", "", lambda: m3(load, client, api, a, "M3s"))
        finally:
            load.stop()
    finally:
        for c in clients:
            c.close()
        broker.stop()


# --------------------------------------------------------------------------
# reporting


def _g(res: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(res, dict) or p not in res:
            return None
        res = res[p]
    return res


HEAD = ["Measure", "Metric", "DeltaMQ", "RabbitMQ", "DeltaMQ/RabbitMQ", "Target", "DeltaMQ vs target"]


def rows(results: dict[str, Any]) -> list[list[str]]:
    d = results["brokers"].get("deltamq", {}).get("workloads", {})
    r = results["brokers"].get("rabbitmq", {}).get("workloads", {})
    o = results["meta"]["options"]
    out: list[list[str]] = []

    def row(label: str, metric: str, path: tuple[str, ...], spec: str, target: str = "",
            ok: Callable[[float], bool] | None = None, ratio: bool = True,
            scale: float = 1.0) -> None:
        dv, rv = _g(d, *path), _g(r, *path)
        dv = dv * scale if isinstance(dv, (int, float)) else dv
        rv = rv * scale if isinstance(rv, (int, float)) else rv
        rt = f"{dv / rv:.2f}" if ratio and isinstance(dv, (int, float)) and rv else "—"
        verdict = "" if ok is None or dv is None else ("ok" if ok(dv) else "MISS")
        out.append([label, metric, cell(dv, spec), cell(rv, spec), rt, target, verdict])

    ran = {wid for ws in (d, r) for wid in ws}
    p99_ok: Callable[[float], bool] = lambda v: v <= TARGET_P99_MS
    drop_ok: Callable[[float], bool] = lambda v: v <= TARGET_DROP_PCT
    if "M1" in ran:
        row(f"M1. GET all queues ({o['queues']:,} queues)", "p50 ms", ("M1", "p50_ms"), ",.1f")
        row("", "p99 ms", ("M1", "p99_ms"), ",.1f", f"≤ {TARGET_P99_MS:g} ms", p99_ok)
        row("", "broker CPU ms per request", ("M1", "broker_cpu_ms_per_request"), ",.1f")
        row("", "requests", ("M1", "requests"), ",.0f", ratio=False)
        row("", "response MB", ("M1", "response_bytes"), ".2f", scale=1e-6)
    if "M2" in ran:
        row(f"M2. GET one queue under {o['rate']:,.0f} msg/s", "p50 ms", ("M2", "p50_ms"), ",.1f")
        row("", "p99 ms", ("M2", "p99_ms"), ",.1f", f"≤ {TARGET_P99_MS:g} ms", p99_ok)
        row("", "delivered msg/s (achieved)", ("M2", "load", "delivered_per_s"), ",.0f")
    for wid, label in (("M3p", f"M3p. {o['rate']:,.0f} msg/s paced, dashboard every "
                               f"{o['poll_interval']:g} s ({o['queues']:,} queues)"),
                       ("M3", f"M3. peak msg/s, dashboard every {o['poll_interval']:g} s "
                              f"({o['queues']:,} queues)"),
                       ("M3s", f"M3s. the same, vhost without the {o['queues']:,} queues")):
        if wid not in ran:
            continue
        row(label, "delivered msg/s without", (wid, "without_per_s"), ",.0f")
        row("", "delivered msg/s with dashboard", (wid, "with_dashboard_per_s"), ",.0f")
        row("", "throughput drop %", (wid, "drop_pct"), ".1f", f"≤ {TARGET_DROP_PCT:g} %", drop_ok,
            ratio=False)
        row("", "dashboard poll p99 ms", (wid, "poll", "p99_ms"), ",.1f")
    return out


CPU_HEAD = ["Broker", "Window", "Delivered msg/s", "Client CPU", "Broker CPU", "irq+softirq",
            "Other jobs", "Machine busy"]


def cpu_rows(results: dict[str, Any]) -> list[list[str]]:
    out = []
    ncpu = results["meta"]["cpus"]
    for b in BROKERS:
        ws = results["brokers"].get(b, {}).get("workloads", {})
        windows: list[tuple[str, dict[str, Any]]] = []
        if _g(ws, "M1", "machine_busy_pct") is not None:
            windows.append(("M1 (GETs, no load)", {**ws["M1"], "delivered_per_s": None}))
        if _g(ws, "M2", "load"):
            windows.append(("M2 (paced load)", ws["M2"]["load"]))
        for wid in ("M3p", "M3", "M3s"):
            for i, w in enumerate(_g(ws, wid, "windows") or []):
                windows.append((f"{wid} {i + 1}: {w['kind']}", w))
        for label, t in windows:
            out.append([b, label, cell(t["delivered_per_s"], ","), f"{t['client_cpu_pct']:.0f}%",
                        f"{t['broker_cpu_pct']:.0f}%", f"{t.get('irq_softirq_pct', 0):.0f}%",
                        f"{_other(t):.0f}%", f"{t['machine_busy_pct']:.0f}% of {100 * ncpu}%"])
    return out


def header(results: dict[str, Any]) -> list[str]:
    m = results["meta"]
    o = m["options"]
    lines = [f"Management API under load: DeltaMQ vs RabbitMQ — {m['started']}",
             f"M1: {o['requests']} GETs of the queue list, one every {o['m1_gap']:g} s, idle broker; "
             f"M2: {o['m2_rate']:g} GETs/s of one queue for {o['duration']:g} s while 1 producer → 1 "
             f"consumer (manual ack, prefetch 100) moves 256-byte transient messages at "
             f"{o['rate']:,.0f} msg/s; M3p (paced at that rate), M3, M3s (at peak): {o['duration']:g} s "
             f"windows, without then {o['m3_rounds']} × (with a dashboard, without), after "
             f"{o['warmup']:g} s warm-up; drop = 1 − mean(with) / mean(without)",
             "dashboard poll = GET queue list, one queue, the virtual host, its connections; "
             "HTTP Basic on every request, one keep-alive connection; latency = request sent → "
             "last byte of the answer",
             machine_line(m) + "; HTTP client: http.client in the parent process"
             + (f"; brokers and load generator at niceness {o['nice']:+d}" if o.get("nice") else "")]
    for b in BROKERS:
        info = results["brokers"].get(b)
        if info:
            lines.append(broker_line(b, info))
            if info.get("api"):
                api = info["api"]
                lines.append(f"{b} API: {api['queues']}, {api['queue']}, {api['vhost']}, "
                             f"{api['connections']}")
    return lines


def notes(results: dict[str, Any]) -> list[str]:
    out = []
    for b in BROKERS:
        info = results["brokers"].get(b, {})
        ws = info.get("workloads", {})
        if "declare_s" in info:
            out.append(f"{b}: {results['meta']['options']['queues']:,} queues declared over AMQP "
                       f"(16 channels) in {info['declare_s']} s"
                       + (f", deleted in {info['delete_s']} s" if "delete_s" in info else ""))
        for wid in ("M3p", "M3", "M3s"):
            w = ws.get(wid)
            if w and "error" not in w:
                reqs = ", ".join(f"{k} p50 {v['p50_ms']} / p99 {v['p99_ms']} ms"
                                 for k, v in w["requests"].items())
                out.append(f"{b} {wid}: baselines differ by {w['baseline_spread_pct']}% (noise); "
                           f"{w['polls']} polls, {w['late_polls']} late; per request: {reqs}")
        noisy = []
        for label, t in [("M1", ws.get("M1")), ("M2", _g(ws, "M2", "load"))] + [
                (f"{wid} {x['kind']}", x) for wid in ("M3p", "M3", "M3s")
                for x in (_g(ws, wid, "windows") or [])]:
            if t and _other(t) > 25:
                noisy.append(f"{label} {_other(t):.0f}%")
        if noisy:
            out.append(f"{b}: other jobs on the machine took CPU during the windows "
                       f"({', '.join(noisy)} of a core): those figures are disturbed")
    if "rabbitmq" in results["brokers"]:
        out.append("rabbitmq: the management plugin serves statistics from its own database, "
                   "refreshed every 5 s (collect_statistics_interval, default); DeltaMQ computes "
                   "them on each request")
    return out


def _present(results: dict[str, Any]) -> list[str]:
    return [b for b in BROKERS if results["brokers"].get(b, {}).get("workloads")]


def report(results: dict[str, Any], out_dir: Path) -> None:
    fails = []
    for b in BROKERS:
        fails += failures(b, results["brokers"].get(b) or {}, ["M1", "M2", "M3p", "M3", "M3s"])
    stamp = write_report(results, out_dir, title="Management API under load: DeltaMQ vs RabbitMQ",
                         header=header(results), table=_drop(HEAD, rows(results), _present(results)),
                         cpu_title="CPU per window (100% = one core)",
                         cpu=(CPU_HEAD, cpu_rows(results)), notes=notes(results) + fails,
                         right=_right, prefix="mgmt", latest="mgmt-latest")
    print(f"results: {out_dir / f'mgmt-{stamp}.json'} and .md (also mgmt-latest.json/.md)")


# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.mgmt_api", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=BROKERS, help="run against one broker only")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 3 s windows after 1 s warm-up, 10 M1 requests")
    ap.add_argument("--queues", type=int, default=10_000, help="queues declared for M1/M3 (10000)")
    ap.add_argument("--rate", type=float, default=20_000, help="M2's AMQP load in msg/s (20000)")
    ap.add_argument("--requests", type=int, default=None, help="M1's GETs (default 50; --quick 10)")
    ap.add_argument("--m1-time", type=float, default=None,
                    help="M1 stops after this many seconds (at least 3 requests) when a broker "
                         "answers slowly (default 60; --quick 20)")
    ap.add_argument("--m2-rate", type=float, default=20.0, help="M2's GETs per second (20)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of M2's window and of each M3 window (default 10; --quick 3)")
    ap.add_argument("--warmup", type=float, default=None, help="warm-up seconds (2; --quick 1)")
    ap.add_argument("--poll-interval", type=float, default=1.0,
                    help="seconds between two dashboard polls (1)")
    ap.add_argument("--measures", default="M1,M2,M3",
                    help="which to run, e.g. M1 alone (no AMQP load); M3 means M3p, M3 and "
                         "M3s; default M1,M2,M3")
    ap.add_argument("--m3-rounds", type=int, default=None,
                    help="M3 windows: without, then N times (with the dashboard, without); the "
                         "drop compares the means (default 2; --quick 1)")
    ap.add_argument("--no-small", dest="small", action="store_false",
                    help="skip M3s (the dashboard on a vhost without the queues of M1)")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness increment for brokers and load generator (negative: root)")
    add_broker_arguments(ap)
    a = ap.parse_args(argv)
    a.requests = a.requests if a.requests is not None else (10 if a.quick else 50)
    a.duration = a.duration if a.duration is not None else (3.0 if a.quick else 10.0)
    a.warmup = a.warmup if a.warmup is not None else (1.0 if a.quick else 2.0)
    a.m3_rounds = max(1, a.m3_rounds) if a.m3_rounds is not None else (1 if a.quick else 2)
    a.m1_time = a.m1_time if a.m1_time is not None else (20.0 if a.quick else 60.0)
    a.m1_warmup = 2
    a.m1_gap = 0.2
    a.settle = 5.0      # after declaring: RabbitMQ's statistics are emitted every 5 s
    a.measure_ids = [m.strip().upper() for m in a.measures.split(",") if m.strip()]
    if not a.measure_ids or set(a.measure_ids) - {"M1", "M2", "M3"}:
        ap.error("--measures takes M1, M2 and M3, e.g. M1,M3")
    if a.queues < 1 or a.requests < 1 or a.rate <= 0 or a.m2_rate <= 0 or a.poll_interval <= 0:
        ap.error("--queues, --requests, --rate, --m2-rate and --poll-interval must be positive")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    interrupt_on_sigterm()
    if a.nice and not procutil.set_autogroup_nice(a.nice):
        log(f"(could not set the scheduler autogroup's nice to {a.nice})")
    names = [a.only] if a.only else list(BROKERS)
    results: dict[str, Any] = {
        "meta": meta(a, sys.argv[1:] if argv is None else argv, ["M1", "M2", "M3p", "M3", "M3s"],
                     client_uses_uvloop()),
        "brokers": {},
    }

    def body() -> None:
        run_each_broker(names, a, results, lambda name, broker, out: run_broker(name, broker, a, out),
                        rabbitmq_management=True)

    return run_suite(results, "brokers", body, lambda: report(results, Path(a.out)))


if __name__ == "__main__":
    sys.exit(main())
