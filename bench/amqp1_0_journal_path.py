"""DeltaMQ's durable AMQP 1.0 path in one process: the engines over a real journal, paced.

One sender and one receiver connection (:class:`~broker.protocol.amqp1_0.connection.AmqpConnection10`,
driven in memory as ``bench/amqp1_0_path.py`` drives them) over a namespace whose
durable queue journals to a real Delta table in a temporary directory, with the
journal's writer process, on an asyncio loop.  Every millisecond the sender's
client writes the durable transfers due at ``--rate`` (256-byte body carrying the
send time), the receiver's client settles what reached it in one ranged
disposition.  Reported, as JSON: send -> delivered and send -> accepted (p50,
p99), commits and journal rows per message, CPU per message of the loop
(``time.process_time``) and of the writer process (``/proc/<pid>/stat``)::

    python bench/amqp1_0_journal_path.py [--rate 2000] [--seconds 5]

Run it with one checkout and then another on ``PYTHONPATH`` to compare them: no
sockets and no clients, so the figures move with the journal and the machine only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))                 # after PYTHONPATH: it names the checkout measured

_STAMP = struct.Struct(">d")


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _quantile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1e3, 2) if ordered else -1.0


def run(rate: float, seconds: float, directory: Path) -> dict[str, Any]:
    from broker.protocol.amqp1_0.definitions import Accepted, Disposition, Transfer
    from broker.protocol.amqp1_0.framing import encode_frame
    from bench.journal_clients import journaled_host, opened
    from tests.unit.protocol.amqp1_0.engine_client import Client10, message_payload

    sender, journal = journaled_host(directory / "journal")
    receiver = Client10(sender.host)
    for client in (sender, receiver):
        opened(client)
    sender.attach_sender("q", handle=0, name="d")
    receiver.attach_receiver("q", handle=1)
    receiver.credit(1, 1 << 20, incoming_window=1 << 20)
    sender.take()
    receiver.take()
    delivered: list[float] = []
    accepted: list[float] = []

    def transfers(first: int, count: int, now: float) -> bytes:
        body = _STAMP.pack(now) + bytes(248)
        return b"".join(encode_frame(Transfer(handle=0, delivery_id=i, delivery_tag=struct.pack(">I", i),
                                              message_format=0, settled=False), 0,
                                     message_payload(body, durable=True)) for i in range(first, first + count))

    def settle(ids: list[int]) -> None:
        receiver.server.receive_data(encode_frame(Disposition(role=True, first=ids[0], last=ids[-1],
                                                              settled=True, state=Accepted())))

    async def main() -> tuple[int, float, float]:
        journal.attach_loop(asyncio.get_running_loop())
        writer = journal._writer               # the journal's own process: its CPU is the commits'
        assert writer is not None
        sender.server.receive_data(transfers(0, 1, time.monotonic()))     # the writer is up and warm
        first = journal.pending
        assert first is not None
        warm = asyncio.Event()
        first.when_durable(warm.set)
        await asyncio.wait_for(warm.wait(), 120)
        settle([0])
        for client in (sender, receiver):
            client._read()
            client.take()
        sent_at: dict[int, float] = {}
        sent = 1
        started, loop_cpu, writer_cpu = time.monotonic(), time.process_time(), _process_cpu(writer.pid)
        while time.monotonic() - started < seconds:
            now = time.monotonic()
            due = int((now - started) * rate) - (sent - 1)
            if due > 0:
                sent_at.update((i, now) for i in range(sent, sent + due))
                sender.server.receive_data(transfers(sent, due, now))
                sent += due
            receiver._read()
            receiver.server.output_drained()
            now = time.monotonic()
            ids = []
            for _channel, value, payload in receiver.take():
                if isinstance(value, Transfer):
                    ids.append(value.delivery_id)
                    delivered.append(now - _STAMP.unpack_from(payload, len(payload) - 256)[0])
            if ids:
                settle(ids)
                receiver.server.data_to_send()
            sender._read()
            sender.server.output_drained()
            for _channel, value, _payload in sender.take():
                if isinstance(value, Disposition):
                    last = value.last if value.last is not None else value.first
                    accepted.extend(now - sent_at.pop(i) for i in range(value.first, last + 1) if i in sent_at)
            await asyncio.sleep(0.001)
        return sent - 1, time.process_time() - loop_cpu, _process_cpu(writer.pid) - writer_cpu

    rows_before = journal.committed_rows
    commits_before = journal.commits
    count, loop_cpu, writer_cpu = asyncio.run(main())
    commits, rows = journal.commits - commits_before, journal.committed_rows - rows_before
    journal.close()
    return {"rate": rate, "sent": count, "delivered": len(delivered), "commits": commits,
            "rows_per_message": round(rows / max(count, 1), 2),
            "loop_cpu_us_per_message": round(loop_cpu / max(count, 1) * 1e6, 1),
            "writer_cpu_us_per_message": round(writer_cpu / max(count, 1) * 1e6, 1),
            "delivered_p50_ms": _quantile(delivered, 0.5), "delivered_p99_ms": _quantile(delivered, 0.99),
            "accepted_p50_ms": _quantile(accepted, 0.5), "accepted_p99_ms": _quantile(accepted, 0.99),
            "load_average": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="durable transfers per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="deltamq-journal-path-") as directory:
        print(json.dumps(run(args.rate, args.seconds, Path(directory))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
