"""Recovery of a large paged backlog: time and memory (flow to disk, docs/flow-to-disk.md).

    python bench/flow_to_disk_recovery.py --messages 1000000 [--body 1024] [--dir /tmp/ftd]

Writes a journal of ``--messages`` persistent messages of ``--body`` bytes on a
lazy durable queue (through the broker's own journal and writer process, in
groups of 20,000, so the writing process stays small: the queue pages as it
goes), then recovers it in a fresh process and prints, as JSON: the recovery's
wall time and CPU time, the recovering process's peak RSS and its RSS after
recovery, and the messages paged.  With ``--threshold`` the queue is not lazy
and recovery pages because the journal is larger than the threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GROUP = 20_000


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def write(path: Path, count: int, body: int, lazy: bool) -> list[dict[str, Any]]:
    from broker.messaging.message import MessageProperties
    from broker.messaging.namespace import Namespace
    from broker.protocol.amqp0_9_1.properties import encode_properties
    from lakehouse.journal import DeltaMessageJournal

    properties = MessageProperties(delivery_mode=2, content_type="application/octet-stream")
    ns = Namespace("v")
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    ns.journal = journal
    queue = ns.declare_queue("backlog", durable=True, arguments={"x-queue-mode": "lazy"} if lazy else None)[0]
    asyncio.run(_fill(journal, queue, count, os.urandom(body), properties, encode_properties(properties),
                      forget=not lazy))
    records = ns.records()
    journal.close()
    return records


async def _fill(journal: Any, queue: Any, count: int, payload: bytes, properties: Any, native: bytes, *,
                forget: bool) -> None:
    """Publish in groups, each waited for.  ``forget``: the queue does not page, so the writing
    process would hold every body: let go of what each group committed (the journal keeps it
    live; recovery finds it)."""
    from broker.messaging.message import Message
    from broker.protocol.amqp0_9_1.properties import FORMAT

    journal.attach_loop(asyncio.get_running_loop())
    for start in range(0, count, GROUP):
        for _ in range(min(GROUP, count - start)):
            queue.enqueue(Message(exchange="", routing_key="backlog", body=payload, properties=properties,
                                  native=native, format=FORMAT, arrival=time.monotonic()))
        group = journal.pending
        if group is not None:
            done = asyncio.Event()
            group.when_durable(done.set)
            await done.wait()
        await asyncio.sleep(0)
        if forget:
            queue._fresh.clear()
            queue._ready = queue._ready_bytes = 0


def recover(path: Path, records: list[dict[str, Any]], threshold: int) -> dict[str, Any]:
    from broker.messaging.namespace import Namespace
    from lakehouse.journal import DeltaMessageJournal

    before = _rss()
    ns = Namespace("v")
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    journal.page_threshold = threshold
    ns.journal = journal
    ns.restore(records)
    started, cpu = time.perf_counter(), time.process_time()
    restored = journal.recover(ns)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    queue = ns.queues["backlog"]
    figures = {"messages": restored, "paged": queue.paged_count, "recovery_s": round(wall, 2),
               "recovery_cpu_s": round(cpu, 2), "rss_before_mb": round(before / 2**20),
               "rss_after_mb": round(_rss() / 2**20),
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    journal.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--threshold", type=int, default=0,
                        help="not lazy: recovery pages because the journal is larger than this")
    parser.add_argument("--recover-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.recover_only is not None:
        spec = json.loads(args.recover_only.read_text())
        print(json.dumps(recover(Path(spec["path"]), spec["records"], spec["threshold"])))
        return
    base = args.dir or Path(tempfile.mkdtemp(prefix="ftd-"))
    path = base / "journal"
    started = time.perf_counter()
    records = write(path, args.messages, args.body, lazy=args.threshold <= 0)
    written = time.perf_counter() - started
    spec = base / "spec.json"
    spec.write_text(json.dumps({"path": str(path), "records": records, "threshold": args.threshold}))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, __file__, "--recover-only", str(spec)], env=env, check=True,
                         capture_output=True, text=True).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    figures.update(write_s=round(written, 1), body=args.body, journal_dir=str(path))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
