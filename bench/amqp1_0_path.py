"""Micro-benchmark of DeltaMQ's AMQP 1.0 message path, in memory (no sockets, no clients).

Two server engines (:class:`~broker.protocol.amqp1_0.connection.AmqpConnection10`)
over one real namespace, as the AMQP 1.0 benchmark (bench/amqp1_0.py) drives
them: a sender connection gets transfers (256-byte body in one data section,
a header, unsettled) in batches, as they arrive from a socket read; the broker
routes them to a queue, delivers each to the receiver connection's link and
accepts them to the sender; the receiver's client settles every batch with one
ranged ``disposition`` (accepted, settled) and tops its credit up with a
``flow``, as rhea does.  What is timed is the process CPU time spent inside the
two engines (``receive_data`` and ``data_to_send``), per message::

    python bench/amqp1_0_path.py --one [--count 20000] [--batch 64]   # this PYTHONPATH, JSON
    python bench/amqp1_0_path.py --old ../other-checkout [--rounds 5]  # A/B, as message_path.py
    python bench/amqp1_0_path.py --profile [--count 50000]            # cProfile of one run
    ... --list32        # the client's performatives encoded as rhea writes them (list32, not list8)

``transient_us`` is the path above; ``frames_us`` only the frame and codec work
(decoding the frames of a batch of transfers and encoding as many transfers),
the part the fast paths of :mod:`broker.protocol.amqp1_0.fast` take over.
The durable variant needs the journal (a Delta table): measure it with the
real broker (bench/amqp1_0.py) and py-spy instead.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _declare(host: Any) -> None:
    if "q" not in host.namespace.queues:
        host.namespace.declare_queue("q")


#: write the transfers as rhea does: the performative a list32, not a list8 (``--list32``)
LIST32 = os.environ.get("AMQP1_PATH_LIST32") == "1"


def _frames(payload: bytes, first: int, count: int) -> bytes:
    """``count`` transfer frames (delivery ids from ``first``) as a client writes them."""
    import struct

    from broker.protocol.amqp1_0.definitions import Transfer
    from broker.protocol.amqp1_0.framing import encode_frame

    frames = [encode_frame(Transfer(handle=0, delivery_id=i, delivery_tag=struct.pack(">I", i),
                                    message_format=0, settled=False), 0, payload)
              for i in range(first, first + count)]
    return b"".join(map(_as_client_writes, frames))


def _as_client_writes(frame: bytes) -> bytes:
    """``frame`` (one performative, a list8, as the broker's codec writes it) as the client writes
    it: unchanged, or with ``--list32`` as rhea writes every performative (a list32)."""
    import struct

    if not LIST32:
        return frame
    # frame header, descriptor, list32 size and count, the same fields
    return (struct.pack(">I", len(frame) + 6) + frame[4:11] + b"\xd0" + struct.pack(">II", frame[12] + 3, frame[13])
            + frame[14:])


def _transient(count: int, batch: int) -> float:
    from broker.protocol.amqp1_0.definitions import Accepted, Disposition, Flow
    from broker.protocol.amqp1_0.framing import encode_frame
    from tests.unit.protocol.amqp1_0.engine_client import Client10, message_payload

    sender = Client10()
    host = sender.host
    _declare(host)
    receiver = Client10(host)
    for client in (sender, receiver):
        client.handshake()
        client.begin(incoming_window=1 << 20)
    sender.attach_sender("q", handle=0)
    receiver.attach_receiver("q", handle=1)
    receiver.credit(1, 1 << 20, incoming_window=1 << 20)
    sender.take()
    receiver.take()
    payload = message_payload(bytes(256))
    rounds = max(1, count // batch)
    inputs = [_frames(payload, r * batch, batch) for r in range(rounds)]
    settles = [_as_client_writes(encode_frame(Disposition(role=True, first=r * batch, last=r * batch + batch - 1,
                                                          settled=True, state=Accepted())))
               + _as_client_writes(encode_frame(Flow(next_incoming_id=(r + 1) * batch, incoming_window=1 << 20,
                                                     next_outgoing_id=0, outgoing_window=1000, handle=1,
                                                     delivery_count=(r + 1) * batch, link_credit=1 << 20)))
               for r in range(rounds)]
    s_server, r_server = sender.server, receiver.server
    out_s = out_r = 0
    gc.collect()
    started = time.process_time()
    for r in range(rounds):
        s_server.receive_data(inputs[r])
        out_s += len(s_server.data_to_send())
        s_server.output_drained()
        out_r += len(r_server.data_to_send())
        r_server.output_drained()
        r_server.receive_data(settles[r])
        out_r += len(r_server.data_to_send())
    elapsed = time.process_time() - started
    queue = host.namespace.queues["q"]
    assert queue.message_count == 0 and queue.unacked_count == 0, (queue.message_count, queue.unacked_count)
    assert out_r > rounds * batch * 256, out_r
    assert s_server.is_open and r_server.is_open
    return elapsed / (rounds * batch) * 1e6


def _codec(count: int, batch: int) -> float:
    """Reading a batch of transfer frames and decoding them as the engine does, and writing as
    many transfer frames (the fast paths where the checkout has them, else the generic codec)."""
    import struct

    from broker.protocol.amqp1_0.definitions import Transfer
    from broker.protocol.amqp1_0.framing import FrameReader, transfer_frames
    from tests.unit.protocol.amqp1_0.engine_client import message_payload

    payload = message_payload(bytes(256))
    data = _frames(payload, 0, batch)
    rounds = max(1, count // batch)
    try:
        from broker.protocol.amqp1_0.delivery_frames import TAG, transfer_frame
        from broker.protocol.amqp1_0.incoming_frames import BodyReader, performative_of
    except ImportError:
        reader = FrameReader(1 << 20)
        gc.collect()
        started = time.process_time()
        for _ in range(rounds):
            for frame in reader.feed(data):
                frame.performative()
            for i in range(batch):
                transfer_frames(0, Transfer(handle=1, delivery_id=i, delivery_tag=struct.pack(">Q", i),
                                            message_format=0, settled=False), payload, 1 << 20)
        return (time.process_time() - started) / (rounds * batch) * 1e6
    fast_reader = BodyReader(1 << 20)
    gc.collect()
    started = time.process_time()
    for _ in range(rounds):
        for frame_type, channel, body in fast_reader.bodies(data):
            performative_of(frame_type, channel, body)
        for i in range(batch):
            transfer_frame(0, 1, i, TAG(i), False, payload, 1 << 20)
    return (time.process_time() - started) / (rounds * batch) * 1e6


def one_round(count: int, batch: int) -> dict[str, float]:
    return {"transient_us": _transient(count, batch), "frames_us": _codec(count, batch)}


def profile(count: int, batch: int) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    _transient(count, batch)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(35)


def compare(old: Path, new: Path, rounds: int, count: int, batch: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}

    def run(tree: Path) -> dict[str, float]:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run([sys.executable, str(Path(__file__)), "--one", "--count", str(count),
                              "--batch", str(batch), "--root", str(tree)],
                             env=env, cwd=tree, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    for index in range(rounds):
        order: list[tuple[str, Path]] = [("old", old), ("new", new)]
        if index % 2:
            order.reverse()
        for name, tree in order:
            runs[name].append(run(tree))
    report: dict[str, Any] = {"rounds": rounds, "messages": count, "batch": batch}
    for key in runs["old"][0]:
        old_values = [r[key] for r in runs["old"]]
        new_values = [r[key] for r in runs["new"]]
        report[key] = {"old_median": round(statistics.median(old_values), 2),
                       "new_median": round(statistics.median(new_values), 2),
                       "new/old": round(statistics.median(new_values) / statistics.median(old_values), 3)}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="root of the checkout to compare against")
    parser.add_argument("--new", type=Path, default=REPO)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=64, help="transfers per socket read")
    parser.add_argument("--one", action="store_true", help="one round, JSON out")
    parser.add_argument("--profile", action="store_true", help="cProfile one transient run")
    parser.add_argument("--list32", action="store_true",
                        help="the client's performatives as rhea writes them (list32, not list8)")
    parser.add_argument("--root", type=Path, default=None, help="(internal) the checkout to import")
    args = parser.parse_args(argv)
    if args.list32:
        global LIST32
        LIST32 = True
        os.environ["AMQP1_PATH_LIST32"] = "1"     # for the --old/--new subprocesses too
    if args.root is not None:
        sys.path.insert(0, str(args.root))
    if args.profile:
        profile(args.count, args.batch)
        return 0
    if args.one:
        print(json.dumps(one_round(args.count, args.batch)))
        return 0
    if args.old is None:
        parser.error("--old is required (or --one / --profile)")
    print(json.dumps(compare(args.old, args.new, args.rounds, args.count, args.batch), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
