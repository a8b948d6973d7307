"""A/B micro-benchmark of the message path: engine publish -> route -> enqueue -> deliver,
journal row encoding, and the memory of queued messages.

For comparing two checkouts on one machine (absolute figures mean little on a
busy or slow one; times are the process's CPU time, which other processes
disturb less than the wall clock).  Each measurement runs in a fresh process whose
``PYTHONPATH`` is one checkout's root, alternating between them, and the
report gives new/old ratios of the medians with their spread::

    python bench/message_path.py --old /path/to/old/checkout [--rounds 7]

With ``--one`` it runs one round against the code on ``PYTHONPATH`` and
prints its figures as JSON (what the comparison runs in each process).  The
same file works against checkouts from before message formats (journal
schema 1): it adapts to either ``Message`` API.

- ``engine_us``: microseconds per message through an in-memory 0-9-1
  connection: basic.publish + header + body frames in, routed by a direct
  exchange to one queue, delivered to an auto-ack consumer, frames out.
- ``confirm_us``: the same in confirm mode (basic.ack per batch out).
- ``journal_us``: microseconds per message to turn persistent messages into
  journal rows (the broker's reduction to plain rows + the writer's Arrow
  encoding; half the messages share their properties, half do not).
- ``bytes_per_message``: traced memory of 100,000 queued messages as the
  engine builds them (properties kept in wire form), body excluded.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

BATCH = 200


def _engine(confirm: bool, count: int) -> float:
    from broker.messaging.message import MessageProperties
    from broker.protocol.amqp0_9_1 import methods as m
    from tests.unit.protocol.harness import Client, FakeHost

    host = FakeHost()
    client = Client(host)
    client.handshake()
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.QueueBind(queue="q", exchange="amq.direct", routing_key="rk"))
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c", no_ack=True))
    if confirm:
        client.send(1, m.ConfirmSelect())
    client.take()
    props = MessageProperties(content_type="application/octet-stream", delivery_mode=1,
                              headers={"tenant": "acme"}, message_id="m-1")
    batch = b"".join(client.publish_bytes(1, "amq.direct", "rk", bytes(256), props)
                     for _ in range(BATCH))
    server = client.server
    rounds = max(1, count // BATCH)
    sent = 0
    gc.collect()
    started = time.process_time()
    for _ in range(rounds):
        server.receive_data(batch)
        sent += len(server.data_to_send())
        server.output_drained()
    elapsed = time.process_time() - started
    queue = host.namespace.queues["q"]
    assert queue.message_count == 0 and sent > rounds * BATCH * 256, (queue.message_count, sent)
    return elapsed / (rounds * BATCH) * 1e6


def _make_message(index: int, shared: bool) -> Any:
    """A persistent message as the 0-9-1 engine builds it, for either Message API."""
    from broker.messaging.message import Message, MessageProperties
    from broker.protocol.amqp0_9_1 import properties as wire

    props = MessageProperties(content_type="application/json", delivery_mode=2,
                              headers={"tenant": "acme", "n": 1},
                              message_id="shared" if shared else f"m-{index}")
    raw = wire.encode_properties(props)
    body = index.to_bytes(4, "big") * 64
    if hasattr(wire, "FORMAT"):
        return Message(exchange="amq.direct", routing_key="rk", body=body, properties=props,
                       native=raw, format=wire.FORMAT, arrival=time.monotonic())
    return Message(exchange="amq.direct", routing_key="rk", body=body,  # type: ignore[call-arg]
                   properties=props, encoded_properties=raw, codec=wire.CODEC,
                   arrival=time.monotonic())


def _journal(count: int) -> float:
    from lakehouse.journal import DeltaMessageJournal
    from lakehouse.journal_writer import RowEncoder

    messages = [_make_message(i, i % 2 == 0) for i in range(count)]
    rows = [("enqueue", "q", i + 1, 1.0e9, None, None, None, None, message, None)
            for i, message in enumerate(messages)]
    with tempfile.TemporaryDirectory() as directory:
        journal = DeltaMessageJournal(Path(directory) / "journal", "v")
        encoder = RowEncoder("v")
        gc.collect()
        started = time.process_time()
        for start in range(0, count, 1000):
            encoder.table(journal._plain(rows[start:start + 1000]))   # type: ignore[arg-type]
        elapsed = time.process_time() - started
    return elapsed / count * 1e6


def _memory(count: int) -> float:
    [_make_message(i, False) for i in range(1000)]      # first-use allocations are not per message
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [_make_message(i, False) for i in range(count)]
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
        bodies = sum(sys.getsizeof(message.body) for message in kept)
    finally:
        tracemalloc.stop()
    return (used - bodies) / count


def one_round(count: int) -> dict[str, float]:
    return {"engine_us": _engine(False, count), "confirm_us": _engine(True, count),
            "journal_us": _journal(count // 4), "bytes_per_message": _memory(100_000)}


def compare(old: Path, new: Path, rounds: int, count: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}

    def run(tree: Path) -> dict[str, float]:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run([sys.executable, __file__, "--one", "--count", str(count)],
                             env=env, cwd=tree, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    for index in range(rounds):
        order: list[tuple[str, Path]] = [("old", old), ("new", new)]
        if index % 2:
            order.reverse()                     # neither side always runs first
        for name, tree in order:
            runs[name].append(run(tree))
    report: dict[str, Any] = {"rounds": rounds, "messages": count}
    for key in runs["old"][0]:
        old_values = [r[key] for r in runs["old"]]
        new_values = [r[key] for r in runs["new"]]
        ratios = [n / o for n, o in zip(new_values, old_values)]
        report[key] = {"old_median": statistics.median(old_values),
                       "new_median": statistics.median(new_values),
                       "ratio_of_medians": statistics.median(new_values) / statistics.median(old_values),
                       "paired_ratio_min": min(ratios), "paired_ratio_max": max(ratios)}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="root of the checkout to compare against")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=20_000, help="messages per engine run")
    parser.add_argument("--one", action="store_true", help="one round, this PYTHONPATH, JSON out")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_round(args.count)))
        return 0
    if args.old is None:
        parser.error("--old is required (or --one)")
    print(json.dumps(compare(args.old, args.new, args.rounds, args.count), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
