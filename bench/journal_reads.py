"""What a Spark consumer's executor task costs: reading a slice of a queue's messages from the journal.

    python -m bench.journal_reads --messages 200000            # fills a queue, keeps the data directory
    python -m bench.journal_reads --data-dir /tmp/deltamq-bench-data-XXXX/data --slice 50000

The Spark consumer's executors run :func:`lakehouse.queue_reads.read_messages`
(or, given a reader cache, :class:`lakehouse.queue_reads.JournalReader`) once
per task.  This times that call alone, without Spark, over the slices one
drain would read (``--slice`` ids each), in this process: process CPU time
(``time.process_time``, every thread of this process: delta-rs reads in
threads of its own) and wall time, with the load average beside each figure.

Without ``--data-dir`` it starts DeltaMQ, fills ``bench.spark.drain`` with
``--messages`` persistent 256-byte messages with confirms (as the drain
benchmark does) and stops it, keeping the data directory for the next run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from .amqp import install_uvloop
from .deltamq import DeltaMQ
from .durable import _publish_many, default_node

QUEUE = "bench.spark.drain"


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def fill(messages: int) -> Path:
    broker = DeltaMQ(keep_dir=True, log=lambda line: print(line, file=sys.stderr))
    broker.start()
    try:
        install_uvloop()
        done = asyncio.run(_publish_many(broker, QUEUE, messages, 2000, lambda line: print(line, file=sys.stderr)))
        print(f"filled: {done}", file=sys.stderr)
    finally:
        broker.stop()
    assert broker.dir is not None
    return Path(broker.dir) / "data"


def queue_ids(location: str) -> list[int]:
    from lakehouse.queue_reads import journal

    rows = journal(location).read(f"SELECT min(message_id) AS lo, max(message_id) AS hi FROM t"
                                  f" WHERE queue = '{QUEUE}' AND event = 'enqueue'")
    lo, hi = rows.column("lo")[0].as_py(), rows.column("hi")[0].as_py()
    return list(range(lo, hi + 1))


def timed(what: str, call: object, rounds: int) -> None:
    walls, cpus = [], []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        call()  # type: ignore[operator]
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    print(f"{what:<52} wall p50 {statistics.median(walls) * 1000:7.0f} ms  cpu p50"
          f" {statistics.median(cpus) * 1000:7.0f} ms  (n={rounds}, load {load()})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--slice", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = Path(args.data_dir) if args.data_dir else fill(args.messages)
    location = str(data / default_node() / "journal")
    print(f"journal: {location}")
    from lakehouse import queue_reads
    from lakehouse.delta_table import table_files

    print(f"files in the journal's snapshot: {table_files(location)}")
    ids = queue_ids(location)
    print(f"{len(ids):,} messages of {QUEUE}")
    part = ids[len(ids) // 2: len(ids) // 2 + args.slice]
    ranges = [[part[0], part[-1]]]

    timed(f"read_messages, {len(part):,} ids (a fresh table each call)",
          lambda: queue_reads.read_messages(location, QUEUE, part, {}), args.rounds)
    reader_class = getattr(queue_reads, "JournalReader", None)
    if reader_class is not None:
        reader = reader_class(location)
        timed(f"JournalReader.read, {len(part):,} ids (first call)",
              lambda: reader.read(QUEUE, ranges, {}), 1)
        timed(f"JournalReader.read, {len(part):,} ids (cached)",
              lambda: reader.read(QUEUE, ranges, {}), args.rounds)
        small = [[part[0], part[0] + 199]]
        timed("JournalReader.read, 200 ids (cached; a sink batch)",
              lambda: reader.read(QUEUE, small, {}), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
