"""AMQP 1.0: DeltaMQ vs Apache Qpid Broker-J 9.2.0 vs RabbitMQ's AMQP 1.0 plugin, one run.

    python -m bench.amqp1_0 [--only deltamq,broker-j,rabbitmq] [--variants transient,durable]
                            [--generator rhea] [--duration 10] [--quick]
    python -m bench.compare --suite amqp1 [the same options]
    python -m bench.amqp1_0 --generators rhea,proton,jms --quick   # which client is fastest

1 sender -> 1 queue -> 1 receiver, 256-byte messages, at-least-once (unsettled
transfers, the receiver accepts), transient (non-durable queue, durable=false)
and durable (durable queue, durable=true).  The brokers run one after the other
on the same machine, each started fresh and stopped again (also on Ctrl-C and
errors): DeltaMQ (``deltamq serve``), Broker-J (bench/broker_j.py: fetched from
Maven Central, BDB virtual host), RabbitMQ (Debian's 3.10 with the
rabbitmq_amqp1_0 plugin, bench/rabbitmq_amqp1_0.py).  The load is
bench/amqp1_0_load.py's.  Targets for DeltaMQ: delivered msg/s >= 1.0x the faster
peer, p99 <= 10 ms at half its peak rate.

DeltaMQ's port serves AMQP 1.0 beside 0-9-1 (header detection); the suite
still sends the 1.0 header first and reports DeltaMQ as skipped, and why, if
its port answers with another protocol's (a build without the 1.0 engine).
Writes bench/results/amqp1-<time>.{json,md} and amqp1-latest.*; the figures
and how to read them: docs/amqp-1-0-benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .amqp1_0_load import GENERATORS, VARIANTS, LoadOptions, ensure_clients, run_variant
from .broker_j import BrokerJ, answers_amqp1_0
from .compare import _get, best_of
from .rabbitmq_amqp1_0 import RabbitMQAmqp10
from .suite import (add_broker_arguments, attempt, broker_failed, broker_line, cell, failures,
                    interrupt_on_sigterm, log, meta, new_deltamq, run_suite,
                    write_report)

BROKERS = ("deltamq", "broker-j", "rabbitmq")
PEERS = ("broker-j", "rabbitmq")
LABEL = {"deltamq": "DeltaMQ", "broker-j": "Broker-J", "rabbitmq": "RabbitMQ"}
TARGET_RATIO = 1.0
TARGET_P99_MS = 10.0


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.amqp1_0", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(BROKERS),
                    help="comma-separated brokers (default: deltamq,broker-j,rabbitmq)")
    ap.add_argument("--variants", default="transient,durable")
    ap.add_argument("--generator", default="rhea", choices=GENERATORS,
                    help="the AMQP 1.0 client that generates the load (default rhea)")
    ap.add_argument("--generators", default="",
                    help="compare load generators: run everything once per generator named "
                         "(e.g. rhea,proton,jms); the first one's figures make the main table")
    ap.add_argument("--duration", type=float, default=None, help="seconds per window (default 10)")
    ap.add_argument("--warmup", type=float, default=None, help="warm-up seconds (default 3)")
    ap.add_argument("--latency-fraction", type=float, default=0.5)
    ap.add_argument("--latency-rate", type=float, default=None,
                    help="pace the latency window at this many msg/s instead (to compare two builds)")
    ap.add_argument("--window", type=int, default=1000, help="unsettled deliveries in flight")
    ap.add_argument("--credit", type=int, default=1000, help="the receiver's link credit")
    ap.add_argument("--quick", action="store_true", help="smoke test: 3 s windows after 2 s warm-up")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each variant N times; keep the best throughput and the best latency "
                         "window (for a shared, noisy machine; default 1)")
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--hostname", default="",
                    help="hostname in the clients' open frame (default: the host they connect to)")
    ap.add_argument("--broker-j-port", type=int, default=5690)
    add_broker_arguments(ap)
    a = ap.parse_args(argv)
    a.brokers = [b.strip() for b in a.only.split(",") if b.strip()]
    a.variant_names = [v.strip() for v in a.variants.split(",") if v.strip()]
    a.generator_list = [g.strip() for g in a.generators.split(",") if g.strip()] or [a.generator]
    for what, got, known in (("broker", a.brokers, BROKERS), ("variant", a.variant_names, VARIANTS),
                             ("generator", a.generator_list, GENERATORS)):
        bad = [x for x in got if x not in known]
        if bad:
            ap.error(f"unknown {what} {bad}; there are {', '.join(known)}")
    return a


def options(a: argparse.Namespace, generator: str) -> LoadOptions:
    o = LoadOptions(generator=generator, log=log, latency_fraction=a.latency_fraction,
                    window=a.window, credit=a.credit, nice=a.nice, hostname=a.hostname,
                    latency_rate=a.latency_rate)
    if a.quick:
        o.duration, o.warmup, o.lat_duration, o.lat_warmup, o.drain_timeout = 3.0, 2.0, 3.0, 0.5, 30.0
    if a.duration is not None:
        o.duration = o.lat_duration = a.duration
    if a.warmup is not None:
        o.warmup = a.warmup
    return o


def new_broker(name: str, a: argparse.Namespace):
    if name == "broker-j":
        b = BrokerJ(port=a.broker_j_port, log=log)
    elif name == "rabbitmq":
        b = RabbitMQAmqp10(port=a.rabbitmq_port, log=log)
    else:
        return new_deltamq(a)
    b.nice = a.nice
    return b


def speaks_amqp1_0(broker) -> tuple[bool, str]:
    """(True, "") if the broker's port answers the AMQP 1.0 header in kind, else (False, why)."""
    try:
        ok, got = answers_amqp1_0(broker.host, broker.port)
    except OSError as e:
        return False, f"its port {broker.port} refused the AMQP 1.0 header: {e}"
    if ok:
        return True, ""
    what = {b"AMQP\x00\x00\x09\x01": " (AMQP 0-9-1's)"}.get(got, "")
    return False, (f"its port {broker.port} refuses the AMQP 1.0 header: it answered {got!r}{what} "
                   "and closed (no AMQP 1.0 engine yet)")


def run_broker(name: str, a: argparse.Namespace, generator: str, out: dict) -> None:
    """Start one broker, run the variants on it, stop it; results accumulate in ``out``."""
    broker = new_broker(name, a)
    if name == "deltamq":
        ok, why = broker.available()
        if not ok:
            log(f"[deltamq] not runnable, skipped: {why}")
            out["error"] = f"not runnable: {why}"
            return
    opt = options(a, generator)
    try:
        broker.start()
        out["description"] = broker.describe()
        if name == "deltamq":
            ok, why = speaks_amqp1_0(broker)
            if not ok:
                log(f"[deltamq] skipped: {why}")
                out["skipped"] = why
                return
        for v in a.variant_names:
            if not broker.alive():
                log(f"[{name}] broker is not running; restarting it")
                broker.stop()
                broker.start()
            log(f"[{name}] {generator}: {VARIANTS[v].title}")
            out["workloads"][v] = attempt(v, VARIANTS[v].title,
                                          lambda: best_of([run_variant(broker, VARIANTS[v], opt)
                                                           for _ in range(max(1, a.repeat))]))
    finally:
        broker.stop()


# --------------------------------------------------------------------------
# reporting


METRICS = (("throughput", "delivered_per_s", "delivered msg/s", ",.0f", max),
           ("throughput", "accepted_per_s", "accepted msg/s (sender)", ",.0f", max),
           ("latency", "p50_ms", "p50 ms @ ½ peak", ".2f", min),
           ("latency", "p99_ms", "p99 ms @ ½ peak", ".2f", min))


def rows(brokers: dict, variants: list[str]) -> list[list[str]]:
    """[variant, metric, DeltaMQ, Broker-J, RabbitMQ, best peer, DeltaMQ/best peer, target, verdict]"""
    out = []
    for v in variants:
        name = VARIANTS[v].name
        for phase, key, label, spec, best in METRICS:
            vals = {b: _get(brokers.get(b), "workloads", v, phase, key) for b in BROKERS}
            peers = {b: x for b, x in vals.items() if b in PEERS and x is not None}
            ref = best(peers, key=peers.__getitem__) if peers else None
            d = vals["deltamq"]
            ratio = d / peers[ref] if d is not None and ref and peers[ref] else None
            target, verdict = "", ""
            if key == "delivered_per_s":
                target = f"≥ {TARGET_RATIO:g}× faster peer"
                verdict = "" if ratio is None else ("ok" if ratio >= TARGET_RATIO else "MISS")
            elif key == "p99_ms":
                target = f"≤ {TARGET_P99_MS:g} ms"
                verdict = "" if d is None else ("ok" if d <= TARGET_P99_MS else "MISS")
            out.append([name, label] + [cell(vals[b], spec) for b in BROKERS]
                       + [LABEL[ref] if ref else "—", cell(ratio, ".2f"), target, verdict])
            name = ""
    return out


HEAD = ["Variant", "Metric", "DeltaMQ", "Broker-J", "RabbitMQ", "Best peer", "DeltaMQ/best peer",
        "Target", "DeltaMQ vs target"]
CPU_HEAD = ["Broker", "Variant", "Window", "Receiver CPU", "Sender CPU", "Broker CPU", "irq+softirq",
            "Other jobs", "Machine busy"]


def _other(w: dict) -> float:
    return max(0.0, w["machine_busy_pct"] - w["client_cpu_pct"] - w["broker_cpu_pct"]
               - w.get("irq_softirq_pct", 0.0))


def cpu_rows(results: dict, variants: list[str]) -> list[list[str]]:
    out = []
    for b in BROKERS:
        for v in variants:
            for phase in ("throughput", "latency"):
                w = _get(results["brokers"].get(b), "workloads", v, phase)
                if not w:
                    continue
                per = w["client_cpu_pct_per_process"] + [0.0, 0.0]
                out.append([LABEL[b], v, phase, f"{per[0]:.0f}%", f"{per[1]:.0f}%",
                            f"{w['broker_cpu_pct']:.0f}%", f"{w.get('irq_softirq_pct', 0):.0f}%",
                            f"{_other(w):.0f}%",
                            f"{w['machine_busy_pct']:.0f}% of {100 * results['meta']['cpus']}%"])
    return out


def generator_rows(results: dict, variants: list[str]) -> list[list[str]]:
    """One row per generator, broker and variant: what that client library achieved."""
    out = []
    for g, brokers in results.get("generators", {}).items():
        for b in PEERS + ("deltamq",):
            for v in variants:
                t = _get(brokers.get(b), "workloads", v, "throughput")
                if not t:
                    continue
                L = _get(brokers.get(b), "workloads", v, "latency") or {}
                out.append([g, LABEL[b], v, cell(t["delivered_per_s"], ",.0f"),
                            cell(L.get("p99_ms"), ".2f"),
                            " + ".join(f"{x:.0f}%" for x in t["client_cpu_pct_per_process"]),
                            f"{t['broker_cpu_pct']:.0f}%"])
    return out


GEN_HEAD = ["Generator", "Broker", "Variant", "delivered msg/s", "p99 ms @ ½ peak",
            "receiver + sender CPU", "Broker CPU"]


def header(results: dict) -> list[str]:
    m = results["meta"]
    o = m["options"]
    lines = [f"AMQP 1.0: DeltaMQ vs Broker-J vs RabbitMQ — {m['started']}",
             f"1 sender → 1 queue → 1 receiver, {o['size']}-byte messages, at-least-once (window "
             f"{o['window']} unsettled, receiver credit {o['credit']}, accepted); throughput over "
             f"{o['duration']} s after {o['warmup']} s warm-up, latency over {o['lat_duration']} s at "
             f"{o['latency_fraction']:.0%} of that broker's delivered rate",
             f"machine: {m['cpus']} CPUs, {m['platform']}; load generator {o['generator']} (sender "
             f"and receiver in 2 processes)" + (f"; best of {m['repeat']} runs" if m.get("repeat", 1) > 1 else "")
             + f"; load average {m['loadavg_start']} at the start, {m.get('loadavg_end', '?')} "
             "at the end" + (f"; niceness {o['nice']:+d}" if o.get("nice") else "")]
    for b in BROKERS:
        info = results["brokers"].get(b)
        if info:
            line = broker_line(LABEL[b], info)
            if info.get("skipped"):
                line += f" — SKIPPED: {info['skipped']}"
            lines.append(line)
    return lines


def notes(results: dict, variants: list[str]) -> list[str]:
    out = []
    for b in BROKERS:
        ws = results["brokers"].get(b, {}).get("workloads", {})
        peaks = [(max(w["throughput"]["client_cpu_pct_per_process"] or [0]), v)
                 for v, w in ws.items() if "throughput" in w]
        if peaks:
            top, v = max(peaks)
            verdict = ("the load generator may be the bottleneck there (a process near a full core)"
                       if top >= 85 else "no generator process near a full core: it is not the bottleneck")
            out.append(f"load generator vs {LABEL[b]}: busiest process {top:.0f}% of a core ({v}); {verdict}")
        noisy = [f"{v} {ph} {_other(w[ph]):.0f}%" for v, w in ws.items()
                 for ph in ("throughput", "latency") if ph in w and _other(w[ph]) > 25]
        if noisy:
            out.append(f"{LABEL[b]}: other jobs took CPU during the windows ({', '.join(noisy)} of a "
                       "core): those figures are disturbed")
        behind = [f"{v} {w['latency']['sender_behind_max_ms']} ms" for v, w in ws.items()
                  if w.get("latency", {}).get("sender_behind_max_ms", 0) > 5]
        if behind:
            out.append(f"{LABEL[b]}: the paced sender fell behind its schedule by up to {', '.join(behind)} "
                       "(credit, window or backlog cap)")
    for b in BROKERS:
        info = results["brokers"].get(b) or {}
        if info.get("skipped"):
            out.append(f"{LABEL[b]} skipped: {info['skipped']}")
        out += failures(LABEL[b], info, variants)
    return out


def _right(i: int, heading: str) -> bool:
    return heading in ("DeltaMQ", "Broker-J", "RabbitMQ", "DeltaMQ/best peer", "delivered msg/s",
                       "p99 ms @ ½ peak")


def report(results: dict, variants: list[str], out_dir: Path) -> None:
    note_lines = notes(results, variants)
    gen = generator_rows(results, variants)
    if gen:
        from .suite import text_table
        note_lines.append("load generators compared (same runs, each client library in turn):\n"
                          + text_table(GEN_HEAD, gen, _right))
    stamp = write_report(results, out_dir, title="AMQP 1.0: DeltaMQ vs Broker-J vs RabbitMQ",
                         header=header(results), table=(HEAD, rows(results["brokers"], variants)),
                         cpu_title="CPU per window (100% = one core)",
                         cpu=(CPU_HEAD, cpu_rows(results, variants)), notes=note_lines,
                         right=_right, prefix="amqp1", latest="amqp1-latest")
    print(f"results: {out_dir / f'amqp1-{stamp}.json'} and .md (also amqp1-latest.json/.md)")


def main(argv=None) -> int:
    a = parse_args(argv)
    interrupt_on_sigterm()
    opt = options(a, a.generator_list[0])
    results: dict = {"meta": {**meta(opt, sys.argv[1:], a.variant_names, False),
                              "loadavg_start": _loadavg(), "repeat": max(1, a.repeat)},
                     "brokers": {}, "generators": {}}

    def body() -> None:
        ensure_clients(log)
        for g in a.generator_list:
            runs = results["brokers"] if g == a.generator_list[0] else {}
            if len(a.generator_list) > 1:
                results["generators"][g] = runs
            for name in a.brokers:
                out: dict = {"workloads": {}}
                runs[name] = out
                try:
                    run_broker(name, a, g, out)
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # noqa: BLE001 - record and go on with the next broker
                    log(f"[{name}] FAILED to start/run: {e}")
                    broker_failed(out, e)
        results["meta"]["loadavg_end"] = _loadavg()

    return run_suite(results, "brokers", body, lambda: report(results, a.variant_names, Path(a.out)))


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
