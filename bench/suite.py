"""What the suites (compare.py: throughput, durable.py: persistent messages)
share around their measurements: logging, failures recorded as results,
the run's metadata and exit code, and the report -- a text table on stdout,
JSON and Markdown under bench/results/."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import signal
import traceback
from pathlib import Path
from typing import Callable

from . import procutil
from .amqp import AMQPError
from .deltamq import DeltaMQ
from .rabbitmq import RabbitMQ

RESULTS = Path(__file__).resolve().parent / "results"


def log(msg: str) -> None:
    print(msg, flush=True)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def interrupt_on_sigterm() -> None:
    """SIGTERM stops a run like Ctrl-C: brokers stopped, what was measured reported."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


# --------------------------------------------------------------------------
# brokers


def add_broker_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the brokers the suites start, and where results go."""
    ap.add_argument("--rabbitmq-port", type=int, default=5680)
    ap.add_argument("--deltamq-port", type=int, default=0, help="default: a free port")
    ap.add_argument("--deltamq-exe", default=None, help="default: <repo>/.venv/bin/deltamq")
    ap.add_argument("--deltamq-vhost", default="/")
    ap.add_argument("--out", default=str(RESULTS), help="results directory (default bench/results)")


def new_deltamq(a: argparse.Namespace) -> DeltaMQ:
    b = DeltaMQ(port=a.deltamq_port, exe=a.deltamq_exe, vhost=a.deltamq_vhost, log=log,
                keep_dir=bool(os.environ.get("DELTAMQ_BENCH_KEEP_DATA")))
    b.nice = a.nice
    return b


def new_rabbitmq(a: argparse.Namespace) -> RabbitMQ:
    b = RabbitMQ(port=a.rabbitmq_port, log=log)
    b.nice = a.nice
    return b


def run_each_broker(names: list[str], a: argparse.Namespace, results: dict,
                    run: Callable[[str, DeltaMQ | RabbitMQ, dict], None], *,
                    rabbitmq_management: bool = False) -> None:
    """Run ``run(name, broker, out)`` for each broker named, one after the other.

    ``out`` is the broker's entry in ``results["brokers"]``.  A DeltaMQ that
    cannot run here, or a broker that fails to start or run, is recorded
    there and the suite goes on with the next one.
    """
    for name in names:
        broker: DeltaMQ | RabbitMQ
        if name == "deltamq":
            broker = new_deltamq(a)
            ok, why = broker.available()
            if not ok:
                log(f"[deltamq] not runnable, skipped: {why}")
                results["brokers"][name] = {"error": f"not runnable: {why}", "workloads": {}}
                continue
        else:
            broker = new_rabbitmq(a)
            broker.management = rabbitmq_management
        out: dict = {"workloads": {}}
        results["brokers"][name] = out
        try:
            run(name, broker, out)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - record and go on with the next broker
            log(f"[{name}] FAILED to start/run: {e}")
            broker_failed(out, e)


# --------------------------------------------------------------------------
# failures


def failed(wid, title: str, e: BaseException) -> dict:
    """The result of a workload that raised ``e`` (logged; a traceback unless expected)."""
    msg = str(e) or repr(e)
    log(f"    FAILED: {msg}")
    if not isinstance(e, (RuntimeError, OSError, TimeoutError, AMQPError)):
        log(traceback.format_exc())
    return {"workload": wid, "title": title, "error": msg}


def attempt(wid, title: str, fn: Callable[[], dict]) -> dict:
    """fn()'s result, or failed(...) if it raised: the suite goes on with the next workload."""
    try:
        return fn()
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - record and go on with the next workload
        return failed(wid, title, e)


def broker_failed(out: dict, e: BaseException) -> None:
    """Record in a broker's results that it could not be started or run."""
    out["error"] = str(e).splitlines()[0] if str(e) else repr(e)
    out["detail"] = str(e)


def failures(label: str, info: dict, wids, workload: str = "") -> list[str]:
    """Note lines: the broker's error, and the last line of each failed workload's."""
    out = []
    if "error" in info:
        out.append(f"{label}: {info['error']}")
    for wid in wids:
        w = (info.get("workloads") or {}).get(str(wid))
        if w and "error" in w:
            first = w["error"].strip().splitlines()
            out.append(f"{label} {workload}{wid} FAILED: {first[-1] if first else '?'}")
    return out


# --------------------------------------------------------------------------
# a run


def meta(options, argv: list[str], workloads: list, uvloop: bool) -> dict:
    """What a run's results start with: when, where, how."""
    return {
        "started": _dt.datetime.now().isoformat(timespec="seconds"),
        "cpus": procutil.ncpu(), "platform": platform.platform(),
        "python": platform.python_version(), "uvloop": uvloop,
        "argv": argv,
        "options": {k: v for k, v in vars(options).items() if k != "log"},
        "workloads": workloads,
    }


def machine_line(m: dict) -> str:
    """A report header's line on the machine and the load generator, from meta()."""
    return (f"machine: {m['cpus']} CPUs, {m['platform']}; load generator: Python {m['python']}, "
            f"{'uvloop' if m['uvloop'] else 'asyncio'}")


def broker_line(label: str, info: dict) -> str:
    """A report header's line on one broker: what ran, or why it did not."""
    return f"{label}: {info.get('description') or info.get('error', '')}"


def run_suite(results: dict, key: str, body: Callable[[], None], report: Callable[[], None]) -> int:
    """body() runs the brokers (results[key][broker]["workloads"] fill up as
    they come); Ctrl-C / SIGTERM ends it early.  Reports what was measured;
    returns the exit code: 130 if interrupted, 1 if a workload or a broker
    other than DeltaMQ failed (DeltaMQ may be not runnable here), else 0."""
    interrupted = False
    try:
        body()
    except KeyboardInterrupt:
        interrupted = True
        log("\ninterrupted; brokers stopped")
    if any(b.get("workloads") for b in results[key].values()):
        report()
    if interrupted:
        return 130
    bad = [n for n, b in results[key].items()
           if ("error" in b and n != "deltamq")
           or any("error" in w for w in b.get("workloads", {}).values())]
    return 1 if bad else 0


# --------------------------------------------------------------------------
# tables and files


def cell(v, spec: str) -> str:
    """A figure formatted for a table (format spec ``spec``); "—" when it is missing."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return format(v, spec)


def text_table(head: list[str], rows_: list[list[str]], right: Callable[[int, str], bool]) -> str:
    """Columns padded to their widest cell; right(i, heading) says which are right-aligned."""
    w = [max(len(str(r[i])) for r in [head] + rows_) for i in range(len(head))]
    lines = []
    for k, r in enumerate([head] + rows_):
        cells = [(str(c).rjust(w[i]) if k and right(i, head[i]) else str(c).ljust(w[i]))
                 for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * x for x in w))
    return "\n".join(lines)


def md_table(head: list[str], rows_: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows_]
    return "\n".join(lines)


def write_report(results: dict, out_dir: Path, *, title: str, header: list[str],
            table: tuple[list[str], list[list[str]]], cpu_title: str,
            cpu: tuple[list[str], list[list[str]]], notes: list[str],
            right: Callable[[int, str], bool], prefix: str, latest: str) -> str:
    """Print the report (header lines, the main table, the CPU table if it has
    rows, the notes) and write it as Markdown, with the results as JSON, to
    out_dir/<prefix>-<start time>.{json,md} and out_dir/<latest>.{json,md}.
    Returns the start-time stamp of the file names."""
    txt = "\n".join(header) + "\n\n" + text_table(*table, right)
    if cpu[1]:
        txt += f"\n\n{cpu_title}:\n" + text_table(*cpu, right)
    if notes:
        txt += "\n\n" + "\n".join(notes)
    print("\n" + txt + "\n", flush=True)

    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = results["meta"]["started"].replace(":", "").replace("-", "").replace("T", "-")[:15]
    md = (f"# {title}\n\n" + "\n".join(f"- {x}" for x in header[1:]) + "\n\n"
          + md_table(*table) + "\n")
    if cpu[1]:
        md += f"\n## {cpu_title}\n\n" + md_table(*cpu) + "\n"
    if notes:
        md += "\n## Notes\n\n" + "\n".join(f"- {x}" for x in notes) + "\n"
    for name in (f"{prefix}-{stamp}", latest):
        (out_dir / f"{name}.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        (out_dir / f"{name}.md").write_text(md)
    return stamp
