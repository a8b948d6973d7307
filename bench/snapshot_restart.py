"""Restart time with and without a journal snapshot: N live messages behind M settled ones.

    python -m bench.snapshot_restart                          # 100,000 live behind 1,000,000 settled
    python -m bench.snapshot_restart --live 1000000 --settled 10000000   # the issue's target

One run builds two journals in a temporary directory and measures, each in a
fresh process (``open`` + ``recover`` of :class:`lakehouse.journal.DeltaMessageJournal`
into a namespace holding the queue, what a broker does at start):

* ``alone``     -- a journal holding only the N live messages: full recovery;
* ``history``   -- N live behind M settled (each an enqueue and an acked settle
  row): full recovery (no snapshot, recovery watermark 0, as when one old
  message is still live somewhere);
* ``snapshot``  -- the same journal after ``deltamq spark snapshot`` (run as
  a user runs it, timed too), plus a tail of a few commits written after it
  (1,000 new messages, 1,000 acks of snapshot messages).

Journals are written directly as journal-shaped Delta commits
(:class:`lakehouse.delta_table.AppendOnlyTable`, 200,000 rows per commit,
256-byte random bodies, the 0-9-1 metadata of a persistent message), not
through a broker: publishing 11M confirmed messages would take hours here.
The result is printed as a table with the ratios snapshot/alone and
history/alone (the target: snapshot/alone about 1) and written to
``bench/results/snapshot-restart-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal_schema import ENQUEUE, JOURNAL_SCHEMA, SETTLE
from lakehouse.journal_writer import journal_table

GROUP = 200_000
BODY = 256
QUEUE = "orders"
TAIL = 1_000


def _native() -> bytes:
    from broker.messaging.message import MessageProperties
    from broker.protocol.amqp0_9_1.properties import encode_properties

    return encode_properties(MessageProperties(delivery_mode=2, content_type="application/octet-stream"))


def _rows(event: str, first: int, count: int, at: float, *, with_body: bool) -> pa.Table:
    """``count`` journal rows of ``event`` for messages ``first`` .. in queue QUEUE."""
    ids = pa.array(range(first, first + count), pa.int64())
    stamp = pa.array([int(at * 1_000_000)] * count, pa.int64()).cast(JOURNAL_SCHEMA.field("at").type)
    nulls = {name: pa.nulls(count, JOURNAL_SCHEMA.field(name).type) for name in JOURNAL_SCHEMA.names}
    columns: dict[str, Any] = {**nulls, "vhost": pa.array(["default"] * count), "at": stamp,
                               "event": pa.array([event] * count), "queue": pa.array([QUEUE] * count),
                               "message_id": ids}
    if event == SETTLE:
        columns["delivery_count"] = pa.array([1] * count, pa.int32())
        columns["outcome"] = pa.array(["acked"] * count)
    if with_body:
        blob = os.urandom(BODY * count)
        offsets = pa.array(range(0, BODY * count + 1, BODY), pa.int32())
        columns["body"] = pa.BinaryArray.from_buffers(pa.binary(), count, [None, offsets.buffers()[1],
                                                                            pa.py_buffer(blob)])
        columns["exchange"] = pa.array([""] * count)
        columns["routing_key"] = pa.array([QUEUE] * count)
        columns["published_at"] = stamp
        columns["message_format"] = pa.array(["amqp-0-9-1"] * count)
        columns["native"] = pa.array([_native()] * count, pa.binary())
    return pa.table(columns, schema=JOURNAL_SCHEMA)


def build_journal(store: Path, settled: int, live: int) -> AppendOnlyTable:
    """``<store>/journal``: ``settled`` messages enqueued and acked, then ``live`` ones enqueued."""
    table = journal_table(str(store / "journal"), 1)
    table.open()
    now = time.time()
    for first in range(1, settled + 1, GROUP):
        count = min(GROUP, settled + 1 - first)
        table.append(_rows(ENQUEUE, first, count, now, with_body=True))
        table.append(_rows(SETTLE, first, count, now, with_body=False))
    for first in range(settled + 1, settled + live + 1, GROUP):
        table.append(_rows(ENQUEUE, first, min(GROUP, settled + live + 1 - first), now, with_body=True))
    return table


def add_tail(table: AppendOnlyTable, settled: int, live: int) -> None:
    """After the snapshot: TAIL new messages, and TAIL acks of the oldest live ones."""
    now = time.time()
    table.append(_rows(ENQUEUE, settled + live + 1, TAIL, now, with_body=True))
    table.append(_rows(SETTLE, settled + 1, min(TAIL, live), now, with_body=False))


def measure(store: Path, snapshots: bool) -> dict[str, Any]:
    """Open and recover the journal at ``<store>/journal`` in a fresh process; its figures."""
    env = dict(os.environ, DELTAMQ_JOURNAL_SNAPSHOTS="1" if snapshots else "0")
    out = subprocess.run([sys.executable, "-m", "bench.snapshot_restart", "--recover", str(store)],
                         env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _recover(store: Path) -> None:
    """The child: what a broker does at start, timed."""
    from broker.messaging.namespace import Namespace
    from lakehouse.journal import DeltaMessageJournal

    started = time.perf_counter()
    ns = Namespace("default")
    queue = ns.declare_queue(QUEUE, durable=True)[0]
    journal = DeltaMessageJournal(store / "journal", "default")
    journal.open()
    opened = time.perf_counter()
    ns.journal = journal
    restored = journal.recover(ns)
    done = time.perf_counter()
    print(json.dumps({"restored": restored, "queued": queue.message_count, "open_s": opened - started,
                      "recover_s": done - opened, "total_s": done - started}))
    os._exit(0)                      # the namespace's million messages need no tear-down


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", type=int, default=100_000)
    parser.add_argument("--settled", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1, help="measurements of each case (median kept)")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the journals (default: a temp dir)")
    parser.add_argument("--recover", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.recover is not None:
        _recover(args.recover)
        return 0
    root = Path(tempfile.mkdtemp(prefix="deltamq-snapshot-bench-", dir=args.dir))
    figures: dict[str, Any] = {"live": args.live, "settled": args.settled}
    try:
        started = time.perf_counter()
        build_journal(root / "alone", 0, args.live)
        figures["build_alone_s"] = time.perf_counter() - started
        started = time.perf_counter()
        history = build_journal(root / "history", args.settled, args.live)
        figures["build_history_s"] = time.perf_counter() - started
        print(f"journals built ({figures['build_alone_s']:.0f} s, {figures['build_history_s']:.0f} s)", flush=True)
        started = time.perf_counter()
        job = subprocess.run([sys.executable, "-m", "broker.cli", "spark", "snapshot", "--store-path",
                              str(root / "history")], capture_output=True, text=True)
        figures["snapshot_job_s"] = time.perf_counter() - started
        if job.returncode:
            print(job.stderr, file=sys.stderr)
            return 1
        print(job.stdout.strip(), flush=True)
        add_tail(history, args.settled, args.live)
        cases = {"alone": (root / "alone", False), "history": (root / "history", False),
                 "snapshot": (root / "history", True)}
        for name, (store, snapshots) in cases.items():
            runs = sorted((measure(store, snapshots) for _ in range(args.repeat)), key=lambda r: r["total_s"])
            figures[name] = runs[len(runs) // 2]
            print(f"{name}: {figures[name]}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    alone = figures["alone"]["total_s"]
    print(f"\n{args.live:,} live messages, {args.settled:,} settled before them")
    print(f"{'case':<10} {'restored':>10} {'open s':>8} {'recover s':>10} {'total s':>8} {'/ alone':>8}")
    for name in ("alone", "history", "snapshot"):
        row = figures[name]
        print(f"{name:<10} {row['restored']:>10,} {row['open_s']:>8.2f} {row['recover_s']:>10.2f}"
              f" {row['total_s']:>8.2f} {row['total_s'] / alone:>8.2f}")
    print(f"snapshot job: {figures['snapshot_job_s']:.0f} s")
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / f"snapshot-restart-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
