"""DeltaMQ vs RabbitMQ, same workloads, one run.

    python -m bench.compare [--only deltamq|rabbitmq] [--workloads 1,2,3,4,5,6]
                            [--duration 10] [--quick] [--client-procs 2]
    python -m bench.compare --suite durable [options of python -m bench.durable]
    python -m bench.compare --suite all     [--quick] [--only ...]
    python -m bench.compare --suite amqp1   [options of python -m bench.amqp1_0]
    python -m bench.compare --suite flow    [options of python -m bench.flow_to_disk]

--suite throughput (the default) runs the workloads below; --suite durable runs
the persistent-message suite of bench/durable.py (D1-D4: durable queues,
publisher confirms, Spark visibility, recovery) instead; --suite all runs both,
one after the other (options common to both apply to both); --suite amqp1 runs the
AMQP 1.0 suite of bench/amqp1_0.py (DeltaMQ vs Broker-J vs RabbitMQ's 1.0 plugin); --suite flow
the flow-to-disk benchmark of bench/flow_to_disk.py (a 10M-message backlog: RSS, delivery from disk).

Starts each broker in turn (a private RabbitMQ node from Debian's
rabbitmq-server, installed on demand; DeltaMQ via `.venv/bin/deltamq serve`),
runs the workloads against it, stops it (also on Ctrl-C or errors), prints a
table with both figures and the DeltaMQ/RabbitMQ ratio, and writes JSON and
Markdown under bench/results/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import procutil
from .suite import (add_broker_arguments, attempt, run_each_broker, broker_line, cell, failures,
                    interrupt_on_sigterm, log, machine_line, meta,
                    run_suite, write_report)
from .workloads import TITLES, Options, build, client_uses_uvloop, run, run_memory

BROKERS = ("deltamq", "rabbitmq")
SUITES = ("throughput", "durable", "all", "amqp1", "flow")
TARGET_RATIO = 0.5
TARGET_P99_MS = 10.0
TARGET_OVERHEAD_B = 300


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=BROKERS, help="run against one broker only")
    ap.add_argument("--workloads", default="1,2,3,4,5,6",
                    help="comma-separated workload numbers (default: all, 1-6)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of each measurement window, throughput and latency (default 10)")
    ap.add_argument("--warmup", type=float, default=None, help="warm-up seconds (default 2)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 2 s windows, 100,000 messages for the memory workload")
    ap.add_argument("--client-procs", type=int, default=2,
                    help="load-generator worker processes per workload (default 2)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run workloads 1-5 N times and keep the best throughput and the best "
                         "latency window (for shared, noisy machines; default 1)")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness increment for brokers and load generator, e.g. -10 (root) to "
                         "shield the measurement from other jobs on a shared machine (default 0)")
    ap.add_argument("--mem-messages", type=int, default=None,
                    help="messages for workload 6 (default 1,000,000)")
    add_broker_arguments(ap)
    ap.add_argument("--suite", choices=SUITES, default="throughput",
                    help="throughput (default: workloads 1-6), durable (python -m bench.durable) or all")
    a = ap.parse_args(argv)
    try:
        a.workload_ids = sorted({int(x) for x in a.workloads.split(",") if x.strip()})
    except ValueError:
        ap.error("--workloads takes numbers like 1,2,5")
    bad = [w for w in a.workload_ids if w not in TITLES]
    if bad:
        ap.error(f"unknown workloads {bad}; there are 1-6")
    return a


def options(a: argparse.Namespace) -> Options:
    o = Options(log=log, client_procs=max(1, a.client_procs), nice=a.nice)
    if a.quick:
        o.duration, o.warmup, o.lat_duration, o.lat_warmup = 2.0, 1.0, 2.0, 0.5
        o.mem_messages, o.mem_settle, o.drain_timeout = 100_000, 1.5, 30.0
    if a.duration is not None:
        o.duration = o.lat_duration = a.duration
    if a.warmup is not None:
        o.warmup = a.warmup
    if a.mem_messages is not None:
        o.mem_messages = a.mem_messages
    return o


def best_of(runs: list[dict]) -> dict:
    """Several runs of one workload: the best throughput window and, measured in
    its own run, the best latency window (lowest p99) -- on a shared machine the
    best run is the one least disturbed by other jobs.  All runs are kept."""
    if len(runs) == 1:
        return runs[0]
    res = dict(max(runs, key=lambda r: r["throughput"]["delivered_per_s"]))
    res["latency"] = min((r["latency"] for r in runs), key=lambda L: L["p99_ms"])
    res["runs"] = runs
    return res


def _run_workload(broker, wid: int, opt: Options, repeat: int) -> dict:
    if wid == 6:
        return run_memory(broker, opt)
    runs = []
    for i in range(repeat):
        if repeat > 1:
            log(f"  run {i + 1}/{repeat}")
        runs.append(run(broker, build(wid, opt.client_procs), opt))
    return best_of(runs)


def run_broker(broker, wids: list[int], opt: Options, repeat: int = 1,
               out: dict | None = None) -> dict:
    """Run the workloads on one broker; results accumulate in ``out`` as they
    come (so an interrupted run still reports what it measured)."""
    out = {"workloads": {}} if out is None else out
    out.setdefault("workloads", {})
    ran = False
    try:
        broker.start()
        out["description"] = broker.describe()
        for wid in wids:
            if not broker.alive():
                log(f"[{broker.name}] broker is not running; restarting it")
                broker.stop()
                broker.start()
            if wid == 6 and ran:
                # a fresh broker, so that RSS before = an idle broker, not the
                # allocator high-water mark the earlier workloads left behind
                log(f"[{broker.name}] restarting for the memory workload (fresh process)")
                broker.stop()
                broker.start()
            ran = True
            log(f"[{broker.name}] workload {wid}: {TITLES[wid]}")
            out["workloads"][str(wid)] = attempt(wid, TITLES[wid],
                                                 lambda: _run_workload(broker, wid, opt, repeat))
    finally:
        broker.stop()
    return out


# --------------------------------------------------------------------------
# reporting


def _get(res: dict | None, *path):
    cur = res
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


def rows(results: dict, wids: list[int]) -> list[list[str]]:
    """[workload, metric, deltamq, rabbitmq, ratio, target, verdict]"""
    d = results["brokers"].get("deltamq", {}).get("workloads", {})
    r = results["brokers"].get("rabbitmq", {}).get("workloads", {})
    out = []
    for wid in wids:
        dw, rw = d.get(str(wid)), r.get(str(wid))
        name = f"{wid}. {TITLES[wid]}"
        if wid == 6:
            dv = _get(dw, "overhead_bytes_per_message")
            rv = _get(rw, "overhead_bytes_per_message")
            ratio = f"{dv / rv:.2f}" if dv is not None and rv not in (None, 0) and rv > 0 else "—"
            verdict = "" if dv is None else ("ok" if dv <= TARGET_OVERHEAD_B else "MISS")
            out.append([name, "bytes/msg beyond 256-B body", cell(dv, ",.0f"), cell(rv, ",.0f"),
                        ratio, f"≤ {TARGET_OVERHEAD_B} B", verdict])
        else:
            metrics = [("delivered", "delivered msg/s")]
            if wid == 4:
                metrics = [("published", "published msg/s"), ("delivered", "delivered msg/s")]
            for key, label in metrics:
                dv = _get(dw, "throughput", f"{key}_per_s")
                rv = _get(rw, "throughput", f"{key}_per_s")
                tr = dv / rv if dv is not None and rv else None
                verdict = "" if tr is None else ("ok" if tr >= TARGET_RATIO else "MISS")
                out.append([name, label, cell(dv, ",.0f"), cell(rv, ",.0f"),
                            f"{tr:.2f}" if tr is not None else "—",
                            f"≥ {TARGET_RATIO}× RabbitMQ", verdict])
                name = ""
            for q, label in (("p50_ms", "p50 ms @ ½ peak"), ("p99_ms", "p99 ms @ ½ peak")):
                dv = _get(dw, "latency", q)
                rv = _get(rw, "latency", q)
                ratio = f"{dv / rv:.2f}" if dv is not None and rv else "—"
                if q == "p99_ms":
                    verdict = "" if dv is None else ("ok" if dv <= TARGET_P99_MS else "MISS")
                    target = f"≤ {TARGET_P99_MS:g} ms"
                else:
                    verdict, target = "", ""
                out.append(["", label, cell(dv, ".2f"), cell(rv, ".2f"), ratio, target, verdict])
    return out


def _failures(results: dict, wids: list[int]) -> list[str]:
    out = []
    for b in BROKERS:
        out += failures(b, results["brokers"].get(b) or {}, wids, workload="workload ")
    return out


HEAD = ["Workload", "Metric", "DeltaMQ", "RabbitMQ", "DeltaMQ/RabbitMQ", "Target", "DeltaMQ vs target"]


def _present(results: dict) -> list[str]:
    return [b for b in BROKERS if results["brokers"].get(b, {}).get("workloads")]


def _drop(head: list[str], rows_: list[list[str]], present: list[str]) -> tuple[list[str], list[list[str]]]:
    """With one broker measured, drop the other's column and the ratio (and the
    verdict if that broker is not DeltaMQ)."""
    if len(present) != 1:
        return head, rows_
    drop = {4} | ({3} if present[0] == "deltamq" else {2, 6})
    keep = [i for i in range(len(head)) if i not in drop]
    return [head[i] for i in keep], [[r[i] for i in keep] for r in rows_]


def cpu_rows(results: dict, wids: list[int]) -> list[list[str]]:
    out = []
    for b in BROKERS:
        ws = results["brokers"].get(b, {}).get("workloads", {})
        for wid in wids:
            t = _get(ws.get(str(wid)), "throughput")
            if not t:
                continue
            out.append([b, str(wid), f"{t['client_cpu_pct']:.0f}%",
                        " + ".join(f"{x:.0f}%" for x in t["client_cpu_pct_per_process"]),
                        f"{t['broker_cpu_pct']:.0f}%", f"{t.get('irq_softirq_pct', 0):.0f}%",
                        f"{_other(t):.0f}%",
                        f"{t['machine_busy_pct']:.0f}% of {100 * results['meta']['cpus']}%"])
    return out


def _other(t: dict) -> float:
    """CPU used by neither broker, load generator nor interrupts: other jobs on the machine."""
    return max(0.0, t["machine_busy_pct"] - t["client_cpu_pct"] - t["broker_cpu_pct"]
               - t.get("irq_softirq_pct", 0.0))


CPU_HEAD = ["Broker", "W", "Client CPU", "per client process", "Broker CPU", "irq+softirq",
            "Other jobs", "Machine busy"]


def _right(i: int, heading: str) -> bool:
    """Right-aligned columns: the figures and the ratio."""
    return heading in ("DeltaMQ", "RabbitMQ", "DeltaMQ/RabbitMQ")


def header(results: dict) -> list[str]:
    m = results["meta"]
    o = m["options"]
    lines = [f"DeltaMQ vs RabbitMQ — {m['started']}",
             f"256-byte non-persistent messages, non-durable queues; throughput window "
             f"{o['duration']} s after {o['warmup']} s warm-up; latency over {o['lat_duration']} s "
             f"at {o['latency_fraction']:.0%} of the peak publish rate",
             f"{machine_line(m)}, {o['client_procs']} worker processes per workload"
             + (f"; brokers and load generator at niceness {o['nice']:+d}" if o.get("nice") else "")
             + (f"; best of {m['repeat']} runs" if m.get("repeat", 1) > 1 else "")]
    for b in BROKERS:
        info = results["brokers"].get(b)
        if info:
            lines.append(broker_line(b, info))
    lines.append("consumers: W1/W3 auto-ack; W2, W4, W5 manual ack, prefetch 100, multiple-ack every 50")
    return lines


def notes(results: dict) -> list[str]:
    out = []
    for b in BROKERS:
        ws = results["brokers"].get(b, {}).get("workloads", {})
        peaks = [(w["throughput"]["client_cpu_pct_max_process"], wid) for wid, w in ws.items()
                 if "throughput" in w]
        if peaks:
            top, wid = max(peaks)
            verdict = ("the load generator may be the bottleneck there (a process near a full core)"
                       if top >= 85 else "no load-generator process near a full core: it is not the bottleneck")
            out.append(f"load generator vs {b}: busiest client process used {top:.0f}% of a core "
                       f"(workload {wid}); {verdict}")
    for b in BROKERS:
        ws = results["brokers"].get(b, {}).get("workloads", {})
        noisy = [f"W{wid} {ph} {_other(w[ph]):.0f}%" for wid, w in ws.items()
                 for ph in ("throughput", "latency") if ph in w and _other(w[ph]) > 25]
        if noisy:
            out.append(f"{b}: other jobs on the machine took CPU during the measurement windows "
                       f"({', '.join(noisy)} of a core): those figures are disturbed")
    for b in BROKERS:
        w6 = _get(results["brokers"].get(b), "workloads", "6")
        if w6 and "error" not in w6:
            qi = w6.get("broker_queue_info") or {}
            extra = ""
            if "rss_after_before_gc" in w6:
                raw = (w6["rss_after_before_gc"] - w6["rss_before"]) / w6["messages"] - 256
                extra += (f"; measured after a full Erlang GC of all processes (before it: "
                          f"{w6['rss_after_before_gc'] / 2**20:.0f} MiB, {raw:,.0f} B/msg overhead)")
            if qi and "messages_ram" in qi:
                n = max(1, int(qi.get("messages") or 1))
                extra += (f"; RabbitMQ's own accounting: messages_ram={qi.get('messages_ram')} "
                          f"(none paged to disk, disk_writes={qi.get('disk_writes')}), queue process "
                          f"memory {int(qi.get('memory') or 0) / n:,.0f} B/msg + "
                          f"{int(qi.get('message_bytes_ram') or 0) / n:,.0f} B/msg body binaries")
            out.append(f"W6 {b}: RSS {w6['rss_before'] / 2**20:.1f} → {w6['rss_after'] / 2**20:.1f} MiB "
                       f"for {w6['messages']:,} msgs (queue depth {w6['queue_depth']:,}) = "
                       f"{w6['bytes_per_message']:,.0f} B/msg{extra}")
    return out


def report(results: dict, wids: list[int], out_dir: Path) -> None:
    stamp = write_report(results, out_dir, title="DeltaMQ vs RabbitMQ", header=header(results),
                         table=_drop(HEAD, rows(results, wids), _present(results)),
                         cpu_title="CPU during the throughput window (100% = one core)",
                         cpu=(CPU_HEAD, cpu_rows(results, wids)),
                         notes=notes(results) + _failures(results, wids),
                         right=_right, prefix="compare", latest="latest")
    print(f"results: {out_dir / f'compare-{stamp}.json'} and .md (also latest.json/latest.md)")


def _split_suite(argv: list[str]) -> tuple[str, list[str]]:
    """(--suite value, argv without it)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--suite", choices=SUITES, default="throughput")
    known, _ = pre.parse_known_args(argv)
    return known.suite, _without(argv, "--suite")


def _without(argv: list[str], opt: str) -> list[str]:
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
        elif x == opt:
            skip = True
        elif not x.startswith(opt + "="):
            out.append(x)
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    suite, rest = _split_suite(argv)
    if suite == "durable":
        from . import durable
        return durable.main(rest)
    if suite == "amqp1":
        from . import amqp1_0
        return amqp1_0.main(rest)
    if suite == "flow":
        from . import flow_to_disk
        return flow_to_disk.main(rest)
    if suite == "all" and "-h" not in rest and "--help" not in rest:
        from . import durable
        rc = main_throughput(rest)
        if rc == 130:
            return rc
        # the throughput suite's --workloads/--client-procs/... mean nothing there
        rc2 = durable.main(_without(rest, "--workloads"), lenient=True)
        return rc2 if rc2 == 130 else max(rc, rc2)
    return main_throughput(rest)


def main_throughput(argv=None) -> int:
    a = parse_args(argv)
    opt = options(a)
    interrupt_on_sigterm()
    names = [a.only] if a.only else list(BROKERS)
    if a.nice:
        # our load-generator workers are forked from this process: same autogroup
        if not procutil.set_autogroup_nice(a.nice):
            log(f"(could not set the scheduler autogroup's nice to {a.nice}; "
                "--nice then only applies within this session)")
    results: dict = {
        "meta": {**meta(opt, sys.argv[1:], a.workload_ids, client_uses_uvloop()),
                 "repeat": max(1, a.repeat)},
        "brokers": {},
    }

    def body() -> None:
        run_each_broker(names, a, results, lambda name, broker, out: run_broker(
            broker, a.workload_ids, opt, max(1, a.repeat), out))
    return run_suite(results, "brokers", body, lambda: report(results, a.workload_ids, Path(a.out)))


if __name__ == "__main__":
    sys.exit(main())
