"""CPU per message of the 0-9-1 core, in one process, for two checkouts side by side.

The broker-under-load benchmark (``python -m bench.compare``) measures
throughput through sockets, which a busy machine disturbs.  This one feeds
the bytes a benchmark client sends straight into a 0-9-1 connection engine
and reads its output, timing the process's CPU: publish -> route -> enqueue
-> deliver, the way ``bench.compare``'s workloads 1-3 drive it (256-byte
transient messages to the default exchange, batches of 100):

- ``auto``: one consumer, auto-ack (workload 1);
- ``manual``: prefetch 100, ``basic.ack multiple`` every 50 (workload 2);
- ``backlog``: the same with the consumer's prefetch full and 100 more queued: every
  message is stored, then delivered from storage when an ack makes room;
- ``confirm``: publisher confirms, auto-ack consumer (workload 3);
- ``fanout``: a fanout exchange to 10 queues, a consumer on each (its own channel),
  prefetch 100, ``basic.ack multiple`` every 50 (workload 4; figures per message
  published, ten deliveries each).

The engine runs over the test harness's host (a bare namespace), or with
``--host real`` over the broker's own: a broker opened in a temporary data
directory, its ``BrokerHost``, its default virtual host (what ``deltamq
serve`` gives a client, the virtual host's journal hooks and access control
included).  Each measurement runs in a fresh process whose ``PYTHONPATH`` is
one checkout, alternating between them::

    python bench/core_path.py --old /path/to/old/checkout [--rounds 5] [--host real]
    python bench/core_path.py --one --mode auto --profile      # cProfile of this checkout

``--profile`` prints the functions by their own time with their calls per
message, to compare two checkouts function by function.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BATCH = 100
ACK_EVERY = 50
PREFETCH = 100
BODY = 256
MODES = ("auto", "manual", "backlog", "confirm", "fanout")
_ACKING = ("manual", "backlog", "fanout")
FANOUT = 10


@contextmanager
def _harness_host() -> Iterator[tuple[Any, Callable[[Any], None]]]:
    from tests.unit.protocol.harness import FakeHost

    yield FakeHost(), lambda client: None


@contextmanager
def _real_host() -> Iterator[tuple[Any, Callable[[Any], None]]]:
    """The broker's own host over a broker opened in a temporary data directory."""
    import broker.server as server

    with tempfile.TemporaryDirectory(prefix="core-path-") as directory:
        context = {"deltamq.data_dir": directory, "deltamq.amqp_port": "0",
                   "deltamq.http_port": "0", "deltamq.amqps_port": "0"}
        try:
            from broker.model.system_config import configure_system, open_system
        except ImportError:                     # a checkout before the configuration store
            from broker.model import load_system_config
            system = load_system_config(None, context)
        else:
            system = configure_system(None, context, store_type=None)
            open_system(system)
        try:
            broker = system.broker
            port = next(p for p in broker.ports() if p.name == "AMQP")
            if hasattr(server, "ResourceAlarms"):
                alarms = server._resource_alarms(broker, directory)
                host = server.BrokerHost(broker, port, alarms)
            else:
                host = server.BrokerHost(broker, port, server.MemoryAlarm(1 << 40))
            host.namespace = broker.find_virtual_host("default").namespace  # type: ignore
            yield host, lambda client: None
        finally:
            close = getattr(system, "close", None)
            if close is not None:
                close()


def _ack_frame(client: Any, channel: int, tag: int) -> bytes:
    from broker.protocol.amqp0_9_1 import methods as m

    return client.encode(channel, m.BasicAck(delivery_tag=tag, multiple=True))


def _setup(host: Any, mode: str) -> tuple[Any, bytes, Callable[[], int]]:
    """A client connected to ``host`` with its consumer; the publish batch; the step."""
    from broker.protocol.amqp0_9_1 import methods as m
    from tests.unit.protocol.harness import Client

    client = Client(host)
    client.handshake("default")
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="q"))
    client.take()
    consumers = [1]
    exchange = ""
    if mode == "fanout":
        exchange, consumers = "amq.fanout", list(range(2, 2 + FANOUT))
        for number in consumers:
            client.open_channel(number)
            client.send(number, m.QueueDeclare(queue=f"q{number}"))
            client.send(number, m.QueueBind(queue=f"q{number}", exchange=exchange))
            client.take()
    for number in consumers:
        queue = "q" if number == 1 else f"q{number}"
        if mode in _ACKING:
            client.send(number, m.BasicQos(prefetch_count=PREFETCH))
        client.send(number, m.BasicConsume(queue=queue, consumer_tag="c",
                                           no_ack=mode not in _ACKING))
    if mode == "confirm":
        client.send(1, m.ConfirmSelect())
    client.take()
    server = client.server
    header = b"\x00<\x00\x00" + BODY.to_bytes(8, "big") + b"\x10\x00\x01"
    one = (client.encode(1, m.BasicPublish(exchange=exchange, routing_key="q"))
           + b"\x02\x00\x01" + len(header).to_bytes(4, "big") + header + b"\xce"
           + b"\x03\x00\x01" + BODY.to_bytes(4, "big") + bytes(BODY) + b"\xce")
    acking = mode in _ACKING
    per = ACK_EVERY if acking else BATCH
    batch = one * per
    tag = 0
    if mode == "backlog":
        # the consumer's prefetch full and more waiting: every publish is stored, every
        # ack lets as many out of storage
        server.receive_data(one * (PREFETCH + BATCH))
        server.data_to_send()
        server.output_drained()

    def step() -> int:
        """One batch in, the output out (and the consumers' acks): bytes written."""
        nonlocal tag
        server.receive_data(batch)
        sent = len(server.data_to_send())
        server.output_drained()
        if acking:
            tag += per
            server.receive_data(b"".join(_ack_frame(client, number, tag) for number in consumers))
            sent += len(server.data_to_send())
            server.output_drained()
        return sent

    return host, batch, step


def _measure(host_kind: str, mode: str, count: int, profile: bool, top: int = 45) -> dict[str, Any]:
    with (_real_host() if host_kind == "real" else _harness_host()) as (host, _):
        host, _batch, step = _setup(host, mode)
        per = ACK_EVERY if mode in _ACKING else BATCH
        for _ in range(20):                     # first-use costs are not per message
            step()
        steps = max(1, count // per)
        profiler = cProfile.Profile() if profile else None
        gc.collect()
        sent = 0
        started = time.process_time()
        if profiler is not None:
            profiler.enable()
        for _ in range(steps):
            sent += step()
        if profiler is not None:
            profiler.disable()
        elapsed = time.process_time() - started
        messages = steps * per
        left = sum(queue.message_count for queue in host.namespace.queues.values())
        if mode == "backlog":
            left -= BATCH
        copies = FANOUT if mode == "fanout" else 1
        assert left == 0 and sent > messages * copies * BODY, (left, sent)
        result: dict[str, Any] = {"us": elapsed / messages * 1e6}
        if profiler is not None:
            result["profile"] = _table(profiler, messages, top)
        return result


def _table(profiler: cProfile.Profile, messages: int, top: int = 45) -> str:
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (path, line, name), (_cc, calls, own, total, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(path).parent.name}/{Path(path).name}:{line}({name})" if line else name
        rows.append((own, total, calls, where))
    rows.sort(reverse=True)
    out = [f"{'own us/msg':>10} {'cum us/msg':>10} {'calls/msg':>9}  function"]
    for own, total, calls, where in rows[:top]:
        out.append(f"{own / messages * 1e6:10.3f} {total / messages * 1e6:10.3f} "
                   f"{calls / messages:9.3f}  {where}")
    out.append(f"{sum(r[0] for r in rows) / messages * 1e6:10.3f} total (profiled)")
    return "\n".join(out)


def compare(old: Path, new: Path, rounds: int, count: int, host: str,
            modes: list[str]) -> dict[str, Any]:
    runs: dict[str, dict[str, list[float]]] = {"old": {m: [] for m in modes},
                                                "new": {m: [] for m in modes}}

    def run(tree: Path, mode: str) -> float:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run([sys.executable, __file__, "--one", "--count", str(count),
                              "--host", host, "--mode", mode],
                             env=env, cwd=tree, capture_output=True, text=True, check=True)
        return float(json.loads(out.stdout)["us"])

    for index in range(rounds):
        for mode in modes:
            order: list[tuple[str, Path]] = [("old", old), ("new", new)]
            if index % 2:
                order.reverse()                 # neither side always runs first
            for name, tree in order:
                runs[name][mode].append(run(tree, mode))
    report: dict[str, Any] = {"rounds": rounds, "messages": count, "host": host,
                              "load_average": os.getloadavg()}
    for mode in modes:
        old_values, new_values = runs["old"][mode], runs["new"][mode]
        ratios = [n / o for n, o in zip(new_values, old_values)]
        report[mode] = {"old_us": [round(v, 2) for v in old_values],
                        "new_us": [round(v, 2) for v in new_values],
                        "old_best": round(min(old_values), 2), "new_best": round(min(new_values), 2),
                        "ratio_of_best": round(min(new_values) / min(old_values), 3),
                        "ratio_of_medians": round(statistics.median(new_values)
                                                  / statistics.median(old_values), 3),
                        "paired_ratio_min": round(min(ratios), 3),
                        "paired_ratio_max": round(max(ratios), 3)}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="root of the checkout to compare against")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=50_000, help="messages per run")
    parser.add_argument("--host", choices=("harness", "real"), default="harness")
    parser.add_argument("--mode", choices=MODES, action="append",
                        help="workload (repeatable; default: all)")
    parser.add_argument("--one", action="store_true", help="one run, this PYTHONPATH, JSON out")
    parser.add_argument("--profile", action="store_true", help="with --one: cProfile table")
    parser.add_argument("--top", type=int, default=45, help="functions in the profile table")
    args = parser.parse_args(argv)
    modes = args.mode or list(MODES)
    if args.one:
        for mode in modes:
            result = _measure(args.host, mode, args.count, args.profile, args.top)
            if args.profile:
                print(f"== {mode}: {result['us']:.2f} us/msg (unprofiled run of the same"
                      f" code is faster)\n{result['profile']}\n")
            else:
                print(json.dumps({"mode": mode, "us": result["us"]}))
        return 0
    if args.old is None:
        parser.error("--old is required (or --one)")
    print(json.dumps(compare(args.old, args.new, args.rounds, args.count, args.host, modes),
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
