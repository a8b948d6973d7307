"""What reading paged-out messages back costs: MessagePages.read over a long journal, in runs of consecutive ids.

    python -m bench.page_reads --messages 1000000             # writes a journal in a temporary directory
    python -m bench.page_reads --journal DIR --keep            # reads (and keeps) a journal written before

The journal is written with the journal writer's own code -- rows built by
:class:`lakehouse.journal_writer.RowEncoder`, one Delta commit per group of
``--per-commit`` messages through :meth:`AppendOnlyTable.append`, as the
writer process does -- every message persistent AMQP 0-9-1 with a body of
``--body`` random bytes.  Then the upkeep's compaction
(:class:`lakehouse.maintenance.TableMaintenance`) runs rounds until nothing
is left to compact, unless ``--no-compact``, and everything is measured
again: a broker's journal holds both kinds of files, the group commits'
(one row group each) and compaction's (row groups of 16,384 rows).

Measured, in this process: one fresh :class:`lakehouse.message_pages.MessagePages`
reads every message, in runs of ``--run`` consecutive ids from the first to
the last (a consumer working through a backlog): CPU time
(``time.process_time``: every thread of this process) per message read, and
wall time (noisy on a shared machine: the load average is printed), pages
decoded, index refreshes, the cache's peak; then
:class:`lakehouse.queue_reads.JournalReader` (one DataFusion query per read)
on ``--sql-runs`` runs spread over the journal, for comparison.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def write_journal(location: Path, messages: int, per_commit: int, body: int) -> None:
    from broker.messaging.message import MessageProperties
    from broker.protocol.amqp0_9_1.properties import encode_properties
    from lakehouse.journal_writer import RowEncoder, open_journal_table

    table = open_journal_table(str(location), 1)
    encoder = RowEncoder("/")
    native = encode_properties(MessageProperties(delivery_mode=2, content_type="application/octet-stream"))
    rng = random.Random(14)
    pool = [rng.randbytes(body) for _ in range(4096)]
    started = time.perf_counter()
    for first in range(1, messages + 1, per_commit):
        now = time.time()
        rows = [("enqueue", "backlog", i, now, None, None, None, None,
                 ("", "backlog", now, pool[i % len(pool)], "amqp-0-9-1", native), None)
                for i in range(first, min(first + per_commit, messages + 1))]
        table.append(encoder.table(rows))       # type: ignore[arg-type]
        if (first // per_commit) % 100 == 0:
            print(f"  ... {first + len(rows) - 1:,} messages written", file=sys.stderr)
    print(f"journal written: {messages:,} messages in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    table.checkpoint()
    table.close()


def compact(location: Path) -> None:
    from lakehouse.journal_writer import open_journal_table
    from lakehouse.maintenance import TableMaintenance

    table = open_journal_table(str(location), 1)
    upkeep = TableMaintenance(table)
    rounds = 0
    while upkeep.compact():
        rounds += 1
    upkeep.checkpoint()
    table.close()
    print(f"compacted in {rounds} rounds", file=sys.stderr)


def files(location: Path) -> str:
    from lakehouse.log_state import LogState

    state = LogState(location)
    state.load()
    sizes = sorted(int(add["size"]) for add in state.adds.values())
    return f"{len(sizes)} live data files, {sizes[0] / 2**20:.1f}-{sizes[-1] / 2**20:.1f} MiB"


def read_all(location: Path, messages: int, run: int, cache_mib: int) -> None:
    from lakehouse.message_pages import MessagePages

    pages = MessagePages(location, cache_bytes=cache_mib << 20)
    cpu = time.process_time()
    read = len(pages.read(range(1, min(run, messages) + 1)))  # type: ignore[arg-type]
    print(f"MessagePages, first read of {read:,} (reads the log, imports): {(time.process_time() - cpu) * 1e3:.0f} ms CPU")
    peak = read = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for first in range(1 + run, messages + 1, run):
        got = pages.read(range(first, min(first + run, messages + 1)))  # type: ignore[arg-type]
        read += len(got)
        peak = max(peak, pages.cached_bytes)
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    print(f"MessagePages, runs of {run:,} after the first: {read:,} messages, {cpu / read * 1e6:.2f} us CPU per message"
          f" ({read / cpu:,.0f}/s of CPU), wall {read / wall:,.0f}/s (load {load()});"
          f" {pages.pages_read} pages decoded, {pages.refreshes} index refreshes,"
          f" cache peak {peak / 2**20:.1f} MiB of {cache_mib} MiB")


def read_sql(location: Path, messages: int, run: int, runs: int) -> None:
    from lakehouse.queue_reads import JournalReader

    reader = JournalReader(str(location))
    reader.read("backlog", [[1, 1]], {})                    # open the table first
    firsts = [1 + k * (messages - run) // max(1, runs - 1) for k in range(runs)]
    wall, cpu = time.perf_counter(), time.process_time()
    read = 0
    for first in firsts:
        read += reader.read("backlog", [[first, first + run - 1]], {}).num_rows
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    print(f"JournalReader (SQL), runs of {run:,}: {read:,} messages, {cpu / read * 1e6:.2f} us CPU per message,"
          f" wall {read / wall:,.0f}/s (load {load()})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.page_reads", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--journal", help="a journal written by an earlier run (with --keep)")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--per-commit", type=int, default=2000, help="messages per group commit (default 2000)")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--run", type=int, default=1000, help="consecutive ids per read (default 1000)")
    ap.add_argument("--cache-mib", type=int, default=32)
    ap.add_argument("--sql-runs", type=int, default=20)
    ap.add_argument("--no-compact", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the journal written")
    a = ap.parse_args(argv)
    made = a.journal is None
    location = Path(a.journal) if a.journal else Path(tempfile.mkdtemp(prefix="deltamq-page-reads-")) / "journal"
    try:
        if made:
            write_journal(location, a.messages, a.per_commit, a.body)
        print(f"journal {location}: {files(location)}")
        read_all(location, a.messages, a.run, a.cache_mib)
        read_sql(location, a.messages, a.run, a.sql_runs)
        if made and not a.no_compact:
            compact(location)
            print(f"journal {location}: {files(location)}")
            read_all(location, a.messages, a.run, a.cache_mib)
            read_sql(location, a.messages, a.run, a.sql_runs)
    finally:
        if made and not a.keep:
            shutil.rmtree(location.parent, ignore_errors=True)
        elif made:
            print(f"kept: --journal {location}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
