"""Spark as a participant: the drain, the sink latency and the dead-letter lag, side by side, one run.

    python -m bench.spark_participant                    # ~20 min: 1M messages per drain
    python -m bench.spark_participant --quick            # smoke test: 50,000 messages, short windows
    python -m bench.spark_participant --only deltamq --measures drain --messages 200000

Three measures (issue 12's benchmarks):

* **drain** -- a durable queue holding ``--messages`` persistent 256-byte
  messages (published with confirms, so all of them journaled) is drained by:
  the Spark consumer (``readStream.format("deltamq")`` on ``local[2]``, into
  Spark's ``noop`` sink, ``maxMessagesPerBatch`` = ``--batch``), and by the
  fastest AMQP consumer there is here -- the benchmark's own raw-frame 0-9-1
  client (bench/amqp.py), once with auto-ack and once with manual acks
  (prefetch 1,000, ``multiple`` every 100) -- against DeltaMQ and against
  RabbitMQ (a classic durable queue).  The queue is filled afresh before each
  drain.  The time runs from the start of the consume (Spark: the query's
  ``start()``) to the last message received (Spark: the broker's queue shows
  no message left and none held, i.e. every batch settled).  Target: Spark
  >= 5x the faster AMQP consumer of either broker.  Spark's clock starts
  as the AMQP consumers' does, with the client up (the JVM running, as the
  AMQP client's connection is open) and includes the query's start (its
  first batch: the planner's Python process, the executors' Python workers,
  Spark's first plans).  Two more figures beside it: the rate after the
  first batch, and the rate with the JVM's start (``spark_session()`` and a
  first job, timed before the drains) added to the time.
* **sink** -- publish -> Spark sink: a stream from the queue into a Delta table
  (Spark's Delta sink, default trigger) while a producer publishes persistent
  messages at ``--sink-rate`` per second for ``--sink-seconds``, each body
  starting with the wall-clock time of its publish.  A row's latency is the
  commit time of the sink table's first version holding it (from the Delta log)
  minus that time.  Target: p50 <= 2 s.
* **dlq** -- dead letter -> curated table: ``deltamq spark dlq`` runs as a user
  runs it (``--interval`` = ``--dlq-interval``) while a client rejects
  ``--dlq-rate`` messages a second into a dead-letter queue for
  ``--dlq-seconds``.  A dead letter's lag is the commit time of the curated
  table's first version holding it minus its ``dead_lettered_at`` (the broker's
  time of the dead-lettering, from the journal).  Target: <= 5 s.

Wall-clock times on a machine that may be shared: the report shows what else
used the CPU during each measure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote

from . import procutil
from .amqp import Connection, install_uvloop
from .durable import CpuWatch, _publish_many, data_dir, default_node, persistent_publish, filler_body
from .suite import (add_broker_arguments, attempt, broker_line, cell, interrupt_on_sigterm, log, machine_line,
                    meta, new_deltamq, new_rabbitmq, run_suite, write_report)

BROKERS = ("deltamq", "rabbitmq")
MEASURES = ("drain", "sink", "dlq")
TARGET_DRAIN_RATIO = 5.0
TARGET_SINK_P50_S = 2.0
TARGET_DLQ_LAG_S = 5.0
DRAIN_QUEUE = "bench.spark.drain"
SINK_QUEUE = "bench.spark.sink"


class Options:
    def __init__(self, a: argparse.Namespace) -> None:
        self.messages = a.messages or (50_000 if a.quick else 1_000_000)
        self.batch = a.batch
        self.partitions = a.partitions
        self.sink_rate = a.sink_rate
        self.sink_seconds = a.sink_seconds or (10.0 if a.quick else 30.0)
        self.sink_warmup = a.sink_warmup
        self.dlq_rate = a.dlq_rate
        self.dlq_seconds = a.dlq_seconds or (10.0 if a.quick else 30.0)
        self.dlq_interval = a.dlq_interval
        self.dlq_warmup = a.dlq_warmup
        self.nice = a.nice
        self.window = 2000
        self.grant_ahead = a.grant_ahead
        #: how long spark_session() took (the JVM's start), once measured
        self.spark_start_s: float | None = None


# --------------------------------------------------------------------------
# the broker's REST API (DeltaMQ)


def rest(broker: Any, path: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}/api/latest/{path}")
    request.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def queue_statistics(broker: Any, queue: str) -> dict[str, Any]:
    node = default_node()
    statistics_: dict[str, Any] = rest(broker, f"queue/{node}/{node}/{queue}")["statistics"]
    return statistics_


def python_cause(broker: Any) -> str:
    """The last Python traceback in the Spark JVM's log (what failed in an executor), or ""."""
    try:
        text = (Path(broker.dir or ".") / "spark-jvm.log").read_text(errors="replace")
    except OSError:
        return ""
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return ""
    lines = text[start:].splitlines()
    end = next((i for i, line in enumerate(lines) if line.startswith("\tat ")), min(len(lines), 40))
    return "\n".join(lines[:end])


def wait_until(condition: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> float:
    """Poll ``condition`` until it holds; the time it first held (perf_counter)."""
    deadline = time.perf_counter() + timeout
    while True:
        if condition():
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


# --------------------------------------------------------------------------
# drain


def fill(broker: Any, n: int, opt: Options) -> dict[str, Any]:
    install_uvloop()
    log(f"    filling {DRAIN_QUEUE} with {n:,} persistent messages (confirmed) ...")
    done = asyncio.run(_publish_many(broker, DRAIN_QUEUE, n, opt.window, lambda line: log(line)))
    log(f"    filled in {done['publish_s']} s ({done['publish_per_s']:,}/s)")
    return done


async def _amqp_drain(broker: Any, n: int, no_ack: bool) -> float:
    conn = await Connection.open(broker.host, broker.port, broker.vhost)
    try:
        ch = await conn.channel()
        finished = asyncio.get_running_loop().create_future()

        def delivered(channel: Any) -> None:
            if channel.received >= n and not finished.done():
                finished.set_result(time.perf_counter())
        ch.on_delivery = delivered
        if not no_ack:
            await ch.basic_qos(1000)
        began = time.perf_counter()
        await ch.basic_consume(DRAIN_QUEUE, "drain", no_ack=no_ack, ack_every=100)
        ended = await asyncio.wait_for(finished, timeout=3600)
        ch.flush_acks()
        return float(ended - began)
    finally:
        await conn.close()


class CpuPerMessage:
    """CPU seconds spent over a drain by the broker's processes and by the consumer's (this process and
    its children but the broker: the Spark JVM, its Python workers and planner), per message: a figure
    the machine's other jobs do not change much, where wall-clock rates follow the load."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.before = procutil.all_cpu_seconds()

    def result(self, messages: int) -> dict[str, float]:
        after = procutil.all_cpu_seconds()
        broker = set(procutil.tree(self.broker.pid)) | {self.broker.pid}
        consumer = (set(procutil.tree(os.getpid())) | {os.getpid()}) - broker

        def spent(pids: set[int]) -> float:
            return sum(after[p] - self.before.get(p, 0.0) for p in pids if p in after)
        return {"broker_cpu_us_per_msg": round(1e6 * spent(broker) / messages, 1),
                "consumer_cpu_us_per_msg": round(1e6 * spent(consumer) / messages, 1)}


def drain_amqp(broker: Any, opt: Options, no_ack: bool) -> dict[str, Any]:
    filled = fill(broker, opt.messages, opt)
    watch, cpu_used = CpuWatch(), CpuPerMessage(broker)
    seconds = asyncio.run(_amqp_drain(broker, opt.messages, no_ack))
    result = {"messages": opt.messages, "seconds": round(seconds, 2), "per_s": round(opt.messages / seconds),
              "fill": filled, "cpu": watch.result(broker.pid), **cpu_used.result(opt.messages)}
    log(f"    drained in {seconds:.2f} s: {result['per_s']:,} msg/s; CPU per message: broker"
        f" {result['broker_cpu_us_per_msg']} µs, consumer {result['consumer_cpu_us_per_msg']} µs; load"
        f" {Path('/proc/loadavg').read_text().split()[0]}")
    return result


def drain_spark(broker: Any, spark: Any, opt: Options) -> dict[str, Any]:
    filled = fill(broker, opt.messages, opt)
    checkpoint = tempfile.mkdtemp(prefix="deltamq-bench-drain-")
    stream = (spark.readStream.format("deltamq").option("queue", DRAIN_QUEUE)
              .option("url", f"http://127.0.0.1:{broker.http_port}")
              .option("maxMessagesPerBatch", str(opt.batch)).option("numPartitions", str(opt.partitions))
              .option("grantAhead", opt.grant_ahead).load())
    watch, cpu_used = CpuWatch(), CpuPerMessage(broker)
    began, began_wall = time.perf_counter(), time.time()
    query = stream.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    try:
        def drained() -> bool:
            if query.exception() is not None:
                raise RuntimeError(f"the Spark query failed: {python_cause(broker)}\n{query.exception()}")
            s = queue_statistics(broker, DRAIN_QUEUE)
            return (s["queueDepthMessages"], s["unacknowledgedMessages"]) == (0, 0)
        ended = wait_until(drained, 3600, "the Spark consumer's drain", every=0.1)
        cpu = watch.result(broker.pid)
        cpu_per_message = cpu_used.result(opt.messages)
        batches = [p for p in query.recentProgress if p.get("numInputRows")]
        durations = batch_durations(query.recentProgress[1:])     # the first pays for the query's start
    finally:
        query.stop()
    seconds = ended - began
    first = batches[0] if batches else {}
    result = {"messages": opt.messages, "seconds": round(seconds, 2), "per_s": round(opt.messages / seconds),
              "batches": len(batches), "max_messages_per_batch": opt.batch, "partitions": opt.partitions,
              "first_batch_ms": (first.get("durationMs") or {}).get("triggerExecution"),
              "first_batch_durations_ms": first.get("durationMs"),
              "batch_ms": durations, "fill": filled, "cpu": cpu, **cpu_per_message}
    if len(batches) > 1 and first.get("durationMs"):
        # after the first batch: the query's start (the planner's Python process, the executors'
        # Python workers and their imports, Spark's first plans) behind it
        first_end = _epoch(first["timestamp"]) + first["durationMs"]["triggerExecution"] / 1000
        rest = ended - began - (first_end - began_wall)
        if rest > 0:
            result["after_first_batch_per_s"] = round((opt.messages - first["numInputRows"]) / rest)
    if opt.spark_start_s is not None:
        # the same clock started before the JVM (spark_session(): JVM, Delta's jars, a first job)
        result["with_jvm_start_per_s"] = round(opt.messages / (seconds + opt.spark_start_s))
        result["spark_start_s"] = round(opt.spark_start_s, 2)
    log(f"    drained in {seconds:.2f} s: {result['per_s']:,} msg/s ({len(batches)} batches; first batch"
        f" {result['first_batch_ms']} ms; after it {result.get('after_first_batch_per_s')} msg/s; with the JVM's"
        f" start {result.get('with_jvm_start_per_s')} msg/s; first batch ms {result['first_batch_durations_ms']};"
        f" mean batch ms {durations}; CPU per message: broker {cpu_per_message['broker_cpu_us_per_msg']} µs,"
        f" Spark {cpu_per_message['consumer_cpu_us_per_msg']} µs; load"
        f" {Path('/proc/loadavg').read_text().split()[0]})")
    return result


def _epoch(stamp: str) -> float:
    """Spark's progress timestamp (ISO, UTC) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# --------------------------------------------------------------------------
# reading when rows became visible in a Delta table, from its log


def batch_durations(progress: list[dict[str, Any]]) -> dict[str, float]:
    """The mean of each of Spark's per-batch durations (ms) over the batches of ``progress`` that read rows."""
    batches = [p for p in progress if p.get("numInputRows")]
    keys = sorted({k for p in batches for k in (p.get("durationMs") or {})})
    return {k: round(statistics.mean((p.get("durationMs") or {}).get(k, 0) for p in batches)) for k in keys} \
        if batches else {}


def first_visible(table: Path, columns: list[str]) -> list[tuple[float, dict[str, Any]]]:
    """Every row of ``table`` with the commit time (s) of the first version that held it.

    Rows are told apart by ``columns`` (their values, as a tuple); the time
    is the version's ``commitInfo.timestamp``.
    """
    import pyarrow.parquet as pq

    seen: dict[tuple[Any, ...], tuple[float, dict[str, Any]]] = {}
    for entry in sorted((table / "_delta_log").glob("*.json")):
        stamp: float | None = None
        added: list[str] = []
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action and action["commitInfo"].get("timestamp"):
                stamp = action["commitInfo"]["timestamp"] / 1000
            if "add" in action:
                added.append(unquote(action["add"]["path"]))
        when = stamp if stamp is not None else entry.stat().st_mtime
        for path in added:
            for row in pq.read_table(table / path, columns=columns).to_pylist():
                seen.setdefault(tuple(row[c] for c in columns), (when, row))
    return list(seen.values())


def summary(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    if not ordered:
        return {"count": 0}

    def q(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)
    return {"count": len(ordered), "p50_s": round(statistics.median(ordered), 3), "p90_s": q(0.9),
            "p99_s": q(0.99), "max_s": round(ordered[-1], 3), "min_s": round(ordered[0], 3)}


# --------------------------------------------------------------------------
# sink: publish -> Spark -> Delta


async def _paced_publish(broker: Any, queue: str, rate: float, seconds: float) -> int:
    conn = await Connection.open(broker.host, broker.port, broker.vhost)
    try:
        ch = await conn.channel()
        await ch.confirm_select()
        filler = filler_body(256 - 8)
        sent, began = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                body = time.time_ns().to_bytes(8, "big") + filler
                conn.write(persistent_publish(ch.number, "", queue, body, frame_max=conn.frame_max))
                ch.published += 1
                sent += 1
            await asyncio.sleep(0.005)
        deadline = time.perf_counter() + 60
        while ch.confirmed < sent and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        return sent
    finally:
        await conn.close()


def sink_latency(broker: Any, spark: Any, opt: Options) -> dict[str, Any]:
    asyncio.run(_declare(broker, SINK_QUEUE))
    work = Path(tempfile.mkdtemp(prefix="deltamq-bench-sink-"))
    table = work / "sink"
    stream = (spark.readStream.format("deltamq").option("queue", SINK_QUEUE)
              .option("url", f"http://127.0.0.1:{broker.http_port}").load())
    query = (stream.select("message_id", "body", "published_at").writeStream.format("delta")
             .option("checkpointLocation", str(work / "checkpoint")).start(str(table)))
    def visible() -> list[tuple[float, dict[str, Any]]]:
        if query.exception() is not None:
            raise RuntimeError(f"the Spark query failed: {python_cause(broker)}\n{query.exception()}")
        return first_visible(table, ["message_id", "body"]) if (table / "_delta_log").is_dir() else []
    try:
        # the first batches pay for the query's start, the JIT and the Python workers' start:
        # a warm-up at the measured rate, not part of the measure
        log(f"    warm-up: {opt.sink_rate:g} msg/s for {opt.sink_warmup:g} s ...")
        warmed = asyncio.run(_paced_publish(broker, SINK_QUEUE, opt.sink_rate, opt.sink_warmup))
        wait_until(lambda: len(visible()) >= warmed, 600, "the warm-up's rows in the sink", every=0.2)
        warm = {row["message_id"] for _, row in visible()}
        log(f"    publishing {opt.sink_rate:g} msg/s for {opt.sink_seconds:g} s into the stream ...")
        measured_from = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")[:23]
        watch = CpuWatch()
        sent = asyncio.run(_paced_publish(broker, SINK_QUEUE, opt.sink_rate, opt.sink_seconds))
        wait_until(lambda: len(visible()) >= len(warm) + sent, 300,
                   "every published message in the sink table", every=0.5)
        cpu = watch.result(broker.pid)
        batches = len([p for p in query.recentProgress if p.get("numInputRows")])
        timeline = [(p["batchId"], p["timestamp"], p["numInputRows"], (p.get("durationMs") or {}).get("triggerExecution"))
                    for p in query.recentProgress if p.get("numInputRows")]
        durations = batch_durations([p for p in query.recentProgress if p["timestamp"] >= measured_from])
        rows = visible()
    finally:
        query.stop()
    latencies = [when - int.from_bytes(row["body"][:8], "big") / 1e9 for when, row in rows
                 if row["message_id"] not in warm]
    result = {"messages": sent, "rate": opt.sink_rate, "seconds": opt.sink_seconds, "batches": batches,
              "batch_ms": durations, "latency": summary(latencies), "timeline": timeline, "cpu": cpu}
    log(f"    publish -> sink: {result['latency']}; mean batch ms {durations}")
    for batch in timeline:
        log(f"      batch {batch[0]} at {batch[1]}: {batch[2]} rows, {batch[3]} ms")
    return result


async def _declare(broker: Any, queue: str) -> None:
    conn = await Connection.open(broker.host, broker.port, broker.vhost)
    try:
        ch = await conn.channel()
        await ch.queue_delete(queue)
        await ch.queue_declare(queue, durable=True)
    finally:
        await conn.close()


# --------------------------------------------------------------------------
# dlq: dead letter -> curated table


DLQ_POLICY = """\
dead_letter_queues = ["bench.dlq"]
curated_table = "curated"
default_action = "park"
"""


def _reject_flow(broker: Any, rate: float, seconds: float, marker: str) -> int:
    """Publish persistent messages to bench.work and reject each: ``rate`` dead letters a second."""
    import pika

    params = pika.ConnectionParameters("127.0.0.1", broker.port, virtual_host=broker.vhost)
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        sent, began = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds or sent == 0:
            due = max(1, int(elapsed * rate) + 1)
            while sent < due:
                channel.basic_publish("", "bench.work", f"{marker}-{sent}".encode(),
                                      pika.BasicProperties(delivery_mode=2))
                method, _, _ = channel.basic_get("bench.work")
                if method is not None:
                    channel.basic_reject(method.delivery_tag, requeue=False)
                sent += 1
            connection.sleep(0.005)
        return sent


def _dlq_topology(broker: Any) -> None:
    import pika

    params = pika.ConnectionParameters("127.0.0.1", broker.port, virtual_host=broker.vhost)
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.exchange_declare("bench.dlx", "fanout", durable=True)
        channel.queue_declare("bench.dlq", durable=True)
        channel.queue_bind("bench.dlq", "bench.dlx")
        channel.queue_declare("bench.work", durable=True, arguments={"x-dead-letter-exchange": "bench.dlx"})


def dlq_lag(broker: Any, opt: Options) -> dict[str, Any]:
    _dlq_topology(broker)
    work = Path(tempfile.mkdtemp(prefix="deltamq-bench-dlq-"))
    (work / "policy.toml").write_text(DLQ_POLICY)
    table = work / "curated"
    command = [sys.executable, "-m", "broker.cli", "spark", "dlq", "--policy", str(work / "policy.toml"),
               "--data-dir", str(data_dir(broker)), "--node", default_node(),
               "--interval", f"{opt.dlq_interval:g}", "--amqp-url", f"amqp://guest:guest@127.0.0.1:{broker.port}/",
               "--url", f"http://127.0.0.1:{broker.http_port}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")) if p))
    with open(work / "dlq.log", "wb") as out:
        job = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                               preexec_fn=procutil.niceness(opt.nice))

    def visible() -> list[tuple[float, dict[str, Any]]]:
        if job.poll() is not None:
            raise RuntimeError(f"deltamq spark dlq exited {job.returncode}:\n{(work / 'dlq.log').read_text()[-3000:]}")
        if not (table / "_delta_log").is_dir():
            return []
        return first_visible(table, ["message_id", "dead_lettered_at"])
    try:
        # the job's first batches pay for its start and the JIT: a warm-up at the measured rate
        log(f"    warm-up: {opt.dlq_rate:g} dead letters/s for {opt.dlq_warmup:g} s ...")
        warmed = _reject_flow(broker, opt.dlq_rate, opt.dlq_warmup, "warm-up")
        wait_until(lambda: len(visible()) >= warmed, 600, "the warm-up's rows in the curated table", every=0.5)
        warm = {row["message_id"] for _, row in visible()}
        log(f"    rejecting {opt.dlq_rate:g} msg/s for {opt.dlq_seconds:g} s with the job running ...")
        watch = CpuWatch()
        sent = _reject_flow(broker, opt.dlq_rate, opt.dlq_seconds, "flow")
        wait_until(lambda: len(visible()) >= len(warm) + sent, 300, "every dead letter in the curated table", every=0.5)
        cpu = watch.result(broker.pid, job.pid)
        rows = visible()
    finally:
        procutil.stop_group(job, ((signal.SIGINT, 60), (signal.SIGTERM, 10), (signal.SIGKILL, 10)))
    measured = sorted((row["dead_lettered_at"].timestamp(), when) for when, row in rows if row["message_id"] not in warm)
    lags = [when - at for at, when in measured]
    if measured:                      # how the lag went over the window: a growing one means a backlog
        start = measured[0][0]
        log("    lag by second of the window: " + ", ".join(
            f"{int(at - start)}s:{when - at:.1f}" for at, when in measured[::max(1, len(measured) // 15)]))
    result = {"dead_letters": sent, "rate": opt.dlq_rate, "interval_s": opt.dlq_interval,
              "lag": summary(lags), "cpu": cpu}
    log(f"    dead letter -> curated table: {result['lag']}")
    return result


# --------------------------------------------------------------------------
# a run


def run_deltamq(broker: Any, opt: Options, measures: list[str], out: dict[str, Any]) -> None:
    from lakehouse.spark import spark_session

    broker.start()
    out["description"] = broker.describe()
    results = out["measures"]
    try:
        spark = None
        if "drain" in measures or "sink" in measures:
            log("[deltamq] starting Spark (local[2]) ...")
            started = time.perf_counter()
            spark = spark_session(app_name="deltamq-bench", jvm_log=Path(broker.dir or ".") / "spark-jvm.log")
            spark.range(1).collect()                  # a first job: what the first query would pay
            opt.spark_start_s = time.perf_counter() - started
            log(f"    Spark started in {opt.spark_start_s:.1f} s")
        if "drain" in measures:
            log("[deltamq] drain: the Spark consumer")
            results["drain_spark"] = attempt("drain_spark", "Spark consumer", lambda: drain_spark(broker, spark, opt))
            for no_ack in (True, False):
                name = "drain_amqp_" + ("autoack" if no_ack else "ack")
                log(f"[deltamq] drain: AMQP consumer, {'auto-ack' if no_ack else 'manual ack'}")
                results[name] = attempt(name, name, lambda: drain_amqp(broker, opt, no_ack))
        if "sink" in measures:
            log("[deltamq] sink: publish -> Spark -> Delta")
            results["sink"] = attempt("sink", "sink", lambda: sink_latency(broker, spark, opt))
        if spark is not None:
            spark.stop()
        if "dlq" in measures:
            log("[deltamq] dlq: dead letter -> curated table")
            results["dlq"] = attempt("dlq", "dlq", lambda: dlq_lag(broker, opt))
    finally:
        broker.stop()


def run_rabbitmq(broker: Any, opt: Options, measures: list[str], out: dict[str, Any]) -> None:
    if "drain" not in measures:
        return
    broker.start()
    out["description"] = broker.describe()
    try:
        for no_ack in (True, False):
            name = "drain_amqp_" + ("autoack" if no_ack else "ack")
            log(f"[rabbitmq] drain: AMQP consumer, {'auto-ack' if no_ack else 'manual ack'}")
            out["measures"][name] = attempt(name, name, lambda: drain_amqp(broker, opt, no_ack))
    finally:
        broker.stop()


def _rate(results: dict[str, Any], broker: str, name: str) -> float | None:
    value = ((results["brokers"].get(broker) or {}).get("measures") or {}).get(name) or {}
    rate = value.get("per_s")
    return float(rate) if rate else None


def rows(results: dict[str, Any]) -> list[list[str]]:
    out: list[list[str]] = []
    spark = _rate(results, "deltamq", "drain_spark")
    amqp = {(b, kind): _rate(results, b, f"drain_amqp_{kind}") for b in BROKERS for kind in ("autoack", "ack")}
    fastest = max((v for v in amqp.values() if v), default=None)
    if spark is not None or fastest is not None:
        ratio = spark / fastest if spark and fastest else None
        out.append(["drain 1 queue", "Spark consumer, local[2] (msg/s)", cell(spark, ",.0f"), "",
                    cell(ratio, ".2f") + "× fastest AMQP", f"≥ {TARGET_DRAIN_RATIO:g}×",
                    "" if ratio is None else ("ok" if ratio >= TARGET_DRAIN_RATIO else "MISS")])
        drain = ((results["brokers"].get("deltamq") or {}).get("measures") or {}).get("drain_spark") or {}
        for key, label in (("after_first_batch_per_s", "Spark consumer after its first batch (msg/s)"),
                           ("with_jvm_start_per_s", "Spark consumer, the JVM's start included (msg/s)")):
            if drain.get(key) and fastest:
                out.append(["", label, cell(drain[key], ",.0f"), "", cell(drain[key] / fastest, ".2f") + "×", "", ""])
        for kind, label in (("autoack", "AMQP consumer, auto-ack (msg/s)"), ("ack", "AMQP consumer, acks (msg/s)")):
            out.append(["", label, cell(amqp[("deltamq", kind)], ",.0f"), cell(amqp[("rabbitmq", kind)], ",.0f"),
                        "", "", ""])
    sink = ((results["brokers"].get("deltamq") or {}).get("measures") or {}).get("sink") or {}
    if sink.get("latency"):
        lat = sink["latency"]
        out.append(["publish → Spark → Delta", f"p50 s ({sink['rate']:g} msg/s)", cell(lat.get("p50_s"), ".2f"), "",
                    "", f"≤ {TARGET_SINK_P50_S:g} s",
                    "ok" if lat.get("p50_s", 1e9) <= TARGET_SINK_P50_S else "MISS"])
        out.append(["", "p99 s", cell(lat.get("p99_s"), ".2f"), "", "", "", ""])
    dlq = ((results["brokers"].get("deltamq") or {}).get("measures") or {}).get("dlq") or {}
    if dlq.get("lag"):
        lag = dlq["lag"]
        out.append(["dead letter → curated", f"p50 s (interval {dlq['interval_s']:g} s)", cell(lag.get("p50_s"), ".2f"),
                    "", "", f"≤ {TARGET_DLQ_LAG_S:g} s", "ok" if lag.get("p50_s", 1e9) <= TARGET_DLQ_LAG_S else "MISS"])
        out.append(["", "p99 s", cell(lag.get("p99_s"), ".2f"), "", "", f"≤ {TARGET_DLQ_LAG_S:g} s",
                    "ok" if lag.get("p99_s", 1e9) <= TARGET_DLQ_LAG_S else "MISS"])
    return out


HEAD = ["Measure", "Metric", "DeltaMQ", "RabbitMQ", "Ratio", "Target", "DeltaMQ vs target"]


def notes(results: dict[str, Any]) -> list[str]:
    out = []
    for broker in BROKERS:
        info = results["brokers"].get(broker) or {}
        if "error" in info:
            out.append(f"{broker}: {info['error']}")
        for name, value in (info.get("measures") or {}).items():
            if not isinstance(value, dict):
                continue
            if "error" in value:
                out.append(f"{broker} {name} FAILED: {value['error'].strip().splitlines()[-1]}")
                continue
            cpu = value.get("cpu") or {}
            if cpu:
                out.append(f"{broker} {name}: machine {cpu['machine_busy_pct']:.0f}% busy of "
                           f"{100 * procutil.ncpu()}%, other jobs {cpu['other_jobs_pct']:.0f}%"
                           + (f"; fill {value['fill']['publish_per_s']:,} msg/s" if value.get("fill") else ""))
    return out


def report(results: dict[str, Any], out_dir: Path) -> None:
    m = results["meta"]
    o = m["options"]
    header = [f"Spark as a participant — {m['started']}",
              f"drain: {o['messages']:,} persistent 256-B messages in a durable queue; Spark local[2], "
              f"maxMessagesPerBatch {o['batch']:,}, numPartitions {o['partitions']}; sink: {o['sink_rate']:g} msg/s "
              f"for {o['sink_seconds']:g} s; dlq: {o['dlq_rate']:g} dead letters/s for {o['dlq_seconds']:g} s",
              machine_line(m)]
    header += [broker_line(b, results["brokers"][b]) for b in BROKERS if b in results["brokers"]]
    stamp = write_report(results, out_dir, title="Spark as a participant", header=header, table=(HEAD, rows(results)),
                         cpu_title="", cpu=([], []), notes=notes(results),
                         right=lambda i, h: h in ("DeltaMQ", "RabbitMQ"), prefix="spark", latest="latest-spark")
    print(f"results: {out_dir / f'spark-{stamp}.json'} and .md (also latest-spark.json/.md)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_participant", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=BROKERS)
    ap.add_argument("--measures", default=",".join(MEASURES), help="comma-separated: drain,sink,dlq")
    ap.add_argument("--quick", action="store_true", help="smoke test: 50,000 messages, 10 s windows")
    ap.add_argument("--messages", type=int, default=None, help="messages per drain (default 1,000,000)")
    ap.add_argument("--batch", type=int, default=100_000, help="the Spark consumer's maxMessagesPerBatch")
    ap.add_argument("--partitions", type=int, default=2, help="the Spark consumer's numPartitions")
    ap.add_argument("--grant-ahead", choices=("true", "false"), default="true",
                    help="the Spark consumer's grantAhead")
    ap.add_argument("--sink-rate", type=float, default=200.0)
    ap.add_argument("--sink-seconds", type=float, default=None)
    ap.add_argument("--sink-warmup", type=float, default=15.0, help="seconds of publishing before the measure")
    ap.add_argument("--dlq-rate", type=float, default=20.0)
    ap.add_argument("--dlq-seconds", type=float, default=None)
    ap.add_argument("--dlq-interval", type=float, default=1.0, help="deltamq spark dlq --interval")
    ap.add_argument("--dlq-warmup", type=float, default=15.0, help="seconds of dead letters before the measure")
    ap.add_argument("--nice", type=int, default=0)
    add_broker_arguments(ap)
    a = ap.parse_args(argv)
    a.measure_list = [m.strip() for m in a.measures.split(",") if m.strip()]
    unknown = set(a.measure_list) - set(MEASURES)
    if unknown:
        ap.error(f"unknown measures {sorted(unknown)}; there are {', '.join(MEASURES)}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    opt = Options(a)
    interrupt_on_sigterm()
    if a.nice and not procutil.set_autogroup_nice(a.nice):
        log(f"(could not set the scheduler autogroup's nice to {a.nice})")
    results: dict[str, Any] = {"meta": meta(opt, sys.argv[1:], a.measure_list, False), "brokers": {}}
    names = [a.only] if a.only else list(BROKERS)

    def body() -> None:
        for name in names:
            measures: dict[str, Any] = {}
            out: dict[str, Any] = {"measures": measures, "workloads": measures}
            results["brokers"][name] = out
            try:
                if name == "deltamq":
                    run_deltamq(new_deltamq(a), opt, a.measure_list, out)
                else:
                    run_rabbitmq(new_rabbitmq(a), opt, a.measure_list, out)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - record it, go on with the next broker
                log(f"[{name}] FAILED: {exc}")
                out["error"] = str(exc).splitlines()[0] if str(exc) else repr(exc)
    return run_suite(results, "brokers", body, lambda: report(results, Path(a.out)))


if __name__ == "__main__":
    sys.exit(main())
