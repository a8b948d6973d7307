"""Two (or more) versions of DeltaMQ's code in the AMQP 1.0 suite, alternately, beside Broker-J.

    python bench/amqp1_0_ab.py --code main=/work/main --code new=. [--rounds 3]
                               [--variants transient] [--only deltamq,broker-j] [--quick]
    python bench/amqp1_0_ab.py --code offer=.,DELTAMQ_AMQP1_0_IDLE_TIMEOUT=60 --code none=.

Each round runs ``python -m bench.amqp1_0`` once per version, in the order given, with
``PYTHONPATH`` naming that version's checkout: the broker is started through
``--deltamq-exe`` (default: the console script of this checkout's or the main
checkout's ``.venv``), whose interpreter puts ``PYTHONPATH`` before the editable
install, so the broker's code is the version's while the suite's own code (this
checkout's ``bench``) and the load generators stay the same.  Broker-J runs in every
run, so each DeltaMQ figure has its peer from the same minute.  Without
``--deltamq-exe`` and with no console script, ``bench.deltamq`` would put *this*
checkout first on the path whatever ``PYTHONPATH`` says: that is why the script is
needed.

A version may carry environment variables after its directory (``LABEL=DIR,VAR=VALUE``):
the broker reads its context variables from the environment, so two settings of one
checkout compare the same way.

Prints one line per run (delivered msg/s of each broker, their ratio, the sender's
CPU per message, the load average before and after) and a summary per version, and
keeps every run's JSON under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", action="append", required=True, metavar="LABEL=DIR[,VAR=VALUE...]",
                    help="a version: its label, its checkout and environment variables")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="transient")
    ap.add_argument("--only", default="deltamq,broker-j")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--deltamq-exe", default=None)
    ap.add_argument("--out", default="/tmp/deltamq-amqp1-ab")
    a, a.passed_on = ap.parse_known_args(argv)   # the rest goes to bench.amqp1_0 as it is
    a.versions = []
    for item in a.code:
        label, _, rest = item.partition("=")
        where, *assignments = rest.split(",")
        env = dict(x.split("=", 1) for x in assignments if "=" in x)
        if not label or not where or not (Path(where) / "broker").is_dir() or len(env) != len(assignments):
            ap.error(f"--code {item!r}: LABEL=DIR[,VAR=VALUE...] of a checkout holding broker/")
        a.versions.append((label, str(Path(where).resolve()), env))
    if a.deltamq_exe is None:
        for candidate in (HERE / ".venv" / "bin" / "deltamq", Path(sys.executable).with_name("deltamq")):
            if candidate.exists():
                a.deltamq_exe = str(candidate)
                break
        else:
            ap.error("no deltamq console script found: give --deltamq-exe")
    return a


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _sender_us(window: dict) -> float | None:
    """The sender process's CPU per message sent in one window (µs)."""
    per_process = window.get("client_cpu_pct_per_process") or []
    sent = window.get("sent_per_s") or 0
    return per_process[-1] / 100 * 1e6 / sent if per_process and sent else None


def figures(result: dict, variant: str) -> dict:
    """delivered msg/s per broker, and CPU µs per message of the sender and the broker (in the
    throughput window; ``lat_sender_us``: the sender's in the paced latency window), from one
    run's JSON."""
    out: dict = {}
    for broker, info in result.get("brokers", {}).items():
        workload = info.get("workloads", {}).get(variant, {})
        tput, lat = workload.get("throughput") or {}, workload.get("latency") or {}
        rate = tput.get("delivered_per_s")
        broker_us = tput.get("broker_cpu_pct", 0) / 100 * 1e6 / rate if rate else None
        out[broker] = {"rate": rate, "sender_us": _sender_us(tput), "broker_us": broker_us,
                       "lat_sender_us": _sender_us(lat), "lat_rate": lat.get("sent_per_s"),
                       "p99_ms": lat.get("p99_ms"), "machine": tput.get("machine_busy_pct")}
    return out


def run_once(a: argparse.Namespace, label: str, code: str, extra_env: dict[str, str],
             round_no: int) -> dict:
    out_dir = Path(a.out) / f"{label}-{round_no}"
    cmd = [sys.executable, "-m", "bench.amqp1_0", "--only", a.only, "--variants", a.variants,
           "--deltamq-exe", a.deltamq_exe, "--out", str(out_dir)]
    if a.quick:
        cmd.append("--quick")
    if a.duration is not None:
        cmd += ["--duration", str(a.duration)]
    cmd += a.passed_on
    env = dict(os.environ, PYTHONPATH=code, **extra_env)
    before = loadavg()
    started = time.strftime("%H:%M:%S", time.gmtime())
    with open(Path(a.out) / f"{label}-{round_no}.log", "w") as log:
        subprocess.run(cmd, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    try:
        result = json.loads((out_dir / "amqp1-latest.json").read_text())
    except (OSError, ValueError):
        result = {}
    return {"label": label, "round": round_no, "utc": started, "load_before": before,
            "load_after": loadavg(), **{v: figures(result, v) for v in a.variants.split(",")}}


def line(run: dict, variant: str) -> str:
    f = run[variant]
    d, j = f.get("deltamq", {}), f.get("broker-j", {})
    ratio = d["rate"] / j["rate"] if d.get("rate") and j.get("rate") else None

    def n(x: float | None, spec: str) -> str:
        return "—" if x is None else format(x, spec)
    return (f"{run['utc']} {run['label']:>8} r{run['round']} {variant}: DeltaMQ {n(d.get('rate'), ',.0f')} msg/s"
            f" (sender {n(d.get('sender_us'), '.1f')} µs/msg, broker {n(d.get('broker_us'), '.1f')} µs/msg;"
            f" paced {n(d.get('lat_rate'), ',.0f')}/s: sender {n(d.get('lat_sender_us'), '.1f')} µs/msg)"
            f"  Broker-J {n(j.get('rate'), ',.0f')} (sender {n(j.get('sender_us'), '.1f')})"
            f"  ratio {n(ratio, '.3f')}  load {run['load_before']} -> {run['load_after']}")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    runs = []
    for round_no in range(1, a.rounds + 1):
        for label, code, extra_env in a.versions:
            run = run_once(a, label, code, extra_env, round_no)
            runs.append(run)
            for variant in a.variants.split(","):
                print(line(run, variant), flush=True)
    print()
    for variant in a.variants.split(","):
        for label, _code, _env in a.versions:
            mine = [r[variant] for r in runs if r["label"] == label]
            ratios = [m["deltamq"]["rate"] / m["broker-j"]["rate"] for m in mine
                      if m.get("deltamq", {}).get("rate") and m.get("broker-j", {}).get("rate")]
            rates = [m["deltamq"]["rate"] for m in mine if m.get("deltamq", {}).get("rate")]
            senders = [m["deltamq"]["sender_us"] for m in mine if m.get("deltamq", {}).get("sender_us")]
            print(f"{variant} {label:>8}: DeltaMQ msg/s {', '.join(f'{r:,.0f}' for r in rates)};"
                  f" ratio to Broker-J {', '.join(f'{r:.3f}' for r in ratios)}"
                  + (f" (median {statistics.median(ratios):.3f})" if ratios else "")
                  + f"; sender µs/msg {', '.join(f'{s:.1f}' for s in senders)}")
    (Path(a.out) / "runs.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
