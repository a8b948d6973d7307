"""TLS vs plain TCP: AMQP 0-9-1 publish -> consume over one broker, one workload.

::

    python -m bench.tls                          # 200,000 messages per run, 3 runs each
    python -m bench.tls --messages 50000 --repeat 1            # smoke test

One DeltaMQ is started the way a user starts it (``deltamq serve --amqp-port N
--amqps-port M``, the default configuration: its AMQPS port presents the
certificate generated at first start, which the clients verify with the CA
file written beside it).  Then, alternately over plain TCP and over TLS, one
producer process publishes ``--messages`` 256-byte transient messages to a
queue as fast as the socket takes them and one consumer process consumes them
with no-ack (bench.amqp's load client; asyncio's own TLS over the socket).

Reported per transport, best of ``--repeat``: throughput (messages over the
time from the first publish to the last delivery), and the broker's CPU time
per message (``/proc/<pid>/stat``, user + system) -- the figure that does not
depend on what else the machine runs.  The ratios TLS/plain are the result:
throughput (target >= 0.7) and plain/TLS broker CPU per message, what the
throughput ratio would be if the broker were the bottleneck.  The load average
before and after is printed with them; results go to
``bench/results/tls-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import multiprocessing
import os
import ssl
import time
from pathlib import Path
from typing import Any

from . import procutil
from .amqp import Connection, Publisher, install_uvloop
from .deltamq import DeltaMQ

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_RATIO = 0.7
BATCH = 100


class TlsDeltaMQ(DeltaMQ):
    """DeltaMQ with its default AMQPS port on a free port number."""

    amqps_port = 0

    def _extra_args(self) -> list[str]:
        self.amqps_port = procutil.free_port(None, self.host)
        return super()._extra_args() + ["--amqps-port", str(self.amqps_port)]

    @property
    def ca_file(self) -> str:
        assert self.dir is not None
        return os.path.join(self.dir, "data", "tls", "amqps-ca.pem")


async def _open(port: int, ca_file: str | None) -> Connection:
    loop = asyncio.get_running_loop()
    if ca_file is None:
        _, conn = await loop.create_connection(Connection, "127.0.0.1", port)
    else:
        context = ssl.create_default_context(cafile=ca_file)
        _, conn = await loop.create_connection(Connection, "localhost", port, ssl=context,
                                               server_hostname="localhost")
    await asyncio.wait_for(conn._handshake("/", "guest", "guest"), 15)
    return conn


async def _consume(port: int, ca_file: str | None, queue: str, n: int, ready: Any) -> float:
    conn = await _open(port, ca_file)
    ch = await conn.channel()
    done = asyncio.get_running_loop().create_future()

    def on_delivery(channel: Any) -> None:
        if channel.received >= n and not done.done():
            done.set_result(time.perf_counter())

    ch.on_delivery = on_delivery
    await ch.basic_consume(queue, "bench", no_ack=True)
    ready.set()
    finished: float = await asyncio.wait_for(done, 600)
    await conn.close()
    return finished


async def _produce(port: int, ca_file: str | None, queue: str, n: int) -> None:
    conn = await _open(port, ca_file)
    ch = await conn.channel()
    publisher = Publisher(ch.number, "", queue, BATCH, frame_max=conn.frame_max)
    sent = 0
    while sent < n:
        await conn.drain()
        count = min(BATCH, n - sent)
        conn.write(bytes(publisher.batch(count, time.perf_counter_ns())))
        sent += count
        if sent % (BATCH * 20) == 0:
            await asyncio.sleep(0)              # let the loop write
    await conn.close(timeout=60)


def _consumer_process(port: int, ca_file: str | None, queue: str, n: int, ready: Any,
                      out: Any) -> None:
    install_uvloop()
    finished = asyncio.run(_consume(port, ca_file, queue, n, ready))
    out.send((finished, time.process_time()))


def _producer_process(port: int, ca_file: str | None, queue: str, n: int, out: Any) -> None:
    install_uvloop()
    asyncio.run(_produce(port, ca_file, queue, n))
    out.send(time.process_time())


def run_once(broker: TlsDeltaMQ, tls: bool, n: int, index: int) -> dict[str, float]:
    port = broker.amqps_port if tls else broker.port
    ca_file = broker.ca_file if tls else None
    queue = f"bench-tls-{index}"

    async def declare() -> None:
        conn = await _open(broker.port, None)
        ch = await conn.channel()
        await ch.queue_declare(queue)
        await conn.close()
    asyncio.run(declare())
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    consumer_out, consumer_in = ctx.Pipe(duplex=False)
    producer_out, producer_in = ctx.Pipe(duplex=False)
    consumer = ctx.Process(target=_consumer_process,
                           args=(port, ca_file, queue, n, ready, consumer_in))
    consumer.start()
    if not ready.wait(60):
        consumer.kill()
        raise RuntimeError("the consumer did not start")
    cpu_before = procutil.cpu_seconds(broker.pid)
    started = time.perf_counter()
    producer = ctx.Process(target=_producer_process, args=(port, ca_file, queue, n, producer_in))
    producer.start()
    finished, consumer_cpu = consumer_out.recv()
    cpu_after = procutil.cpu_seconds(broker.pid)
    producer_cpu = producer_out.recv()
    producer.join(60)
    consumer.join(60)
    return {"msg_per_s": n / (finished - started),
            "broker_cpu_us_per_msg": (cpu_after - cpu_before) / n * 1e6,
            "client_cpu_us_per_msg": (consumer_cpu + producer_cpu) / n * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tls", description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    broker = TlsDeltaMQ(log=print)
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "tls": []}
    broker.start()
    try:
        index = 0
        for _ in range(a.repeat):
            for name in ("plain", "tls"):
                index += 1
                result = run_once(broker, name == "tls", a.messages, index)
                print(f"{name:5}  {result['msg_per_s']:9,.0f} msg/s  broker"
                      f" {result['broker_cpu_us_per_msg']:6.1f} us/msg  clients"
                      f" {result['client_cpu_us_per_msg']:6.1f} us/msg", flush=True)
                runs[name].append(result)
    finally:
        broker.stop()
    load_after = os.getloadavg()
    best = {name: {"msg_per_s": max(r["msg_per_s"] for r in rs),
                   "broker_cpu_us_per_msg": min(r["broker_cpu_us_per_msg"] for r in rs)}
            for name, rs in runs.items()}
    throughput_ratio = best["tls"]["msg_per_s"] / best["plain"]["msg_per_s"]
    cpu_ratio = best["plain"]["broker_cpu_us_per_msg"] / best["tls"]["broker_cpu_us_per_msg"]
    print(f"TLS/plain throughput {throughput_ratio:.2f}x (target >= {TARGET_RATIO}x); broker CPU"
          f" per message plain/TLS {cpu_ratio:.2f}x; load average {load_before[0]:.1f} before,"
          f" {load_after[0]:.1f} after, {procutil.ncpu()} CPUs")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"tls-{stamp}.json").write_text(json.dumps({
        "messages": a.messages, "runs": runs, "best": best,
        "throughput_ratio": throughput_ratio, "broker_cpu_ratio": cpu_ratio,
        "target_ratio": TARGET_RATIO, "load_average": [load_before, load_after],
        "cpus": procutil.ncpu()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
