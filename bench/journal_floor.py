"""The floor of a durable message's latency on this machine: one message, one commit, an idle writer.

Two measurements, one after the other, in a temporary directory (``--directory``:
on another file system):

* ``commit``: one durable AMQP 1.0 transfer at a time through the real engine
  and journal, with the journal's writer process; the time from handing the
  transfer to the engine until its group's commit is answered durable on the
  loop, then a pause (``--pause`` ms) so the writer is idle again before the
  next one;
* ``fsync``: the disk alone -- the two fsync rounds a commit makes, without
  the CPU work: a small data file and a commit file written and fsynced
  together with their directory, the commit file linked, its directory fsynced;
  its threads scheduled as the writer's are (:mod:`lakehouse.writer_priority`),
  so a thread's wait for a core is not counted as the disk's.

Prints JSON: p50 / p90 / p99 / max in ms of each, and the load average::

    python bench/journal_floor.py [--count 400] [--pause 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))                 # after PYTHONPATH: it names the checkout measured


def figures(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pick(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1e3, 2)
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": round(ordered[-1] * 1e3, 2)}


def commits(directory: Path, count: int, pause: float) -> list[float]:
    """Arrival -> durable of ``count`` lone durable messages, through the engine and the writer process."""
    from broker.protocol.amqp1_0.definitions import Transfer
    from broker.protocol.amqp1_0.framing import encode_frame
    from bench.journal_clients import durable_sender
    from tests.unit.protocol.amqp1_0.engine_client import message_payload

    sender, journal = durable_sender(directory / "journal")
    sender.take()
    took: list[float] = []

    async def main() -> None:
        journal.attach_loop(asyncio.get_running_loop())
        for i in range(count + count // 10):
            frame = encode_frame(Transfer(handle=0, delivery_id=i, delivery_tag=i.to_bytes(4, "big"),
                                          message_format=0, settled=False), 0,
                                 message_payload(bytes(256), durable=True))
            done = asyncio.Event()
            started = time.monotonic()
            sender.server.receive_data(frame)
            group = journal.pending
            assert group is not None
            group.when_durable(done.set)
            await asyncio.wait_for(done.wait(), 60)
            if i >= count // 10:               # the first tenth warms up
                took.append(time.monotonic() - started)
            sender.server.data_to_send()
            await asyncio.sleep(pause)

    asyncio.run(main())
    journal.close()
    return took


def fsync_rounds(directory: Path, count: int, pause: float) -> tuple[list[float], list[float]]:
    """The two fsync rounds of a commit, alone: (first round, second round) seconds each."""
    from lakehouse.log_commit import fsync_path, fsync_together
    from lakehouse.writer_priority import enable_in_this_process

    enable_in_this_process()
    table = directory / "rounds"
    (table / "_delta_log").mkdir(parents=True)
    first: list[float] = []
    second: list[float] = []
    for i in range(count):
        data, temp = table / f"part-{i}.parquet", table / "_delta_log" / f".{i}.tmp"
        descriptors = []
        for path, size in ((data, 12_000), (temp, 900)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, os.urandom(size))
            descriptors.append(fd)
        descriptors.append(os.open(table, os.O_RDONLY))
        started = time.monotonic()
        fsync_together(descriptors)
        middle = time.monotonic()
        for fd in descriptors:
            os.close(fd)
        os.link(temp, table / "_delta_log" / f"{i:020d}.json")
        os.unlink(temp)
        linked = time.monotonic()
        fsync_path(table / "_delta_log")
        first.append(middle - started)
        second.append(time.monotonic() - linked)
        time.sleep(pause)
    return first, second


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--pause", type=float, default=20.0, help="ms between two messages (the writer idles)")
    parser.add_argument("--directory", type=Path, default=None)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"load_average_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="deltamq-journal-floor-", dir=args.directory) as directory:
        result["commit_ms"] = figures(commits(Path(directory), args.count, args.pause / 1000))
        first, second = fsync_rounds(Path(directory), args.count, args.pause / 1000)
        result["fsync_round1_ms"] = figures(first)
        result["fsync_round2_ms"] = figures(second)
        result["fsync_both_ms"] = figures([a + b for a, b in zip(first, second)])
    result["load_average_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
