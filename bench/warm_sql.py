"""Warm vs cold ``deltamq sql``: a query through ``deltamq spark serve`` against a local session.

    python -m bench.warm_sql                       # ~3 min: makes its own data directory
    python -m bench.warm_sql --data-dir ./data --queries 20 --cold 3

Without ``--data-dir`` it starts DeltaMQ on a temporary directory, publishes
``--messages`` persistent messages (confirmed: journaled) to a durable queue,
acknowledges half of them and stops it.  Then, over that data directory:

* **cold**: ``deltamq sql --local "<query>"`` run ``--cold`` times, each a new
  JVM (the time before a first row today);
* **warm**: ``deltamq spark serve`` started, two queries to warm it up, then
  ``deltamq sql "<query>"`` run ``--queries`` times -- the whole command,
  Python start-up included -- and the same query ``--queries`` times from a
  Spark Connect client in this process (the server's own share).

Prints p50 and p90 of each; wall-clock times on a machine others may use.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import procutil
from .deltamq import DeltaMQ

QUERY = "SELECT queue, count(*) AS messages, count(settled_at) AS settled FROM queue_history GROUP BY queue"
REPO = Path(__file__).resolve().parent.parent


def deltamq(*args: str) -> list[str]:
    return [sys.executable, "-m", "broker.cli", *args]


def timed(command: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    elapsed = time.perf_counter() - began
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {out.stderr.strip()}")
    return elapsed


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return f"p50 {statistics.median(ordered) * 1000:8.0f} ms   p90 {p90 * 1000:8.0f} ms   (n={len(ordered)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="a broker's data directory (default: one made here)")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--cold", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    made = None
    if args.data_dir:
        data_dir = Path(args.data_dir)
    else:
        installed = Path(sys.executable).with_name("deltamq")        # this Python's console script
        made = DeltaMQ(exe=installed if installed.exists() else None, keep_dir=True,
                       log=lambda line: print(line, file=sys.stderr))
        _fill(made, args.messages)
        assert made.dir is not None
        data_dir = Path(made.dir) / "data"
    print(f"data directory: {data_dir}\nquery: {QUERY}")

    cold = [timed(deltamq("sql", "--local", "--data-dir", str(data_dir), QUERY), env) for _ in range(args.cold)]
    print(f"cold  deltamq sql --local     {percentiles(cold)}")

    log = Path(tempfile.mkdtemp(prefix="deltamq-bench-serve-")) / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen(deltamq("spark", "serve", "--data-dir", str(data_dir), "--port", "0"),
                                 stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
    try:
        from lakehouse.connect_server import recorded_server, remote_session

        deadline = time.monotonic() + 300
        while (server := recorded_server(data_dir)) is None or server.pid != serve.pid:
            if serve.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"deltamq spark serve did not start:\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        for _ in range(2):
            timed(deltamq("sql", "--data-dir", str(data_dir), QUERY), env)
        warm = [timed(deltamq("sql", "--data-dir", str(data_dir), QUERY), env) for _ in range(args.queries)]
        print(f"warm  deltamq sql (server)    {percentiles(warm)}")
        spark = remote_session(server)
        spark.sql(QUERY).collect()
        inside = []
        for _ in range(args.queries):
            began = time.perf_counter()
            spark.sql(QUERY).collect()
            inside.append(time.perf_counter() - began)
        spark.stop()
        print(f"warm  one query, Connect client {percentiles(inside)}")
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
        if made is not None:
            made.keep_dir = False
            made.stop()
    return 0


def _fill(broker: DeltaMQ, messages: int) -> None:
    """Start ``broker``, journal ``messages`` persistent messages, settle half, stop it."""
    import pika

    broker.start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = connection.channel()
        channel.queue_declare("bench.history", durable=True)
        channel.confirm_delivery()
        for n in range(messages):
            channel.basic_publish("", "bench.history", f"message {n}".encode(), pika.BasicProperties(delivery_mode=2))
        for _ in range(messages // 2):
            method, _, _ = channel.basic_get("bench.history")
            channel.basic_ack(method.delivery_tag)
        connection.close()
    finally:
        if broker.proc is not None:
            procutil.stop_group(broker.proc, ((signal.SIGINT, 15), (signal.SIGTERM, 10), (signal.SIGKILL, 10)))
            broker.proc = None


if __name__ == "__main__":
    sys.exit(main())
