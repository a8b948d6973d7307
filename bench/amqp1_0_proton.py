"""One side of the AMQP 1.0 benchmark's load on python-qpid-proton (a candidate generator).

    python -m bench.amqp1_0_proton [--api reactor|blocking] sender|receiver CONTROL key=value...

The same protocol as bench/amqp1_0_generators/load.js (rhea): steered through the
control block of bench/amqp1_0_load.py, the same messages (one data section,
CLOCK_MONOTONIC ns in its first 8 bytes, durable=true in the header for the
durable variant), unsettled sends with a window, a receiver granting credit and
accepting.  ``reactor`` is proton's event-driven Container with a
MessagingHandler (transfers pre-encoded, only the stamp rewritten);
``blocking`` is proton.utils.BlockingConnection, whose send() waits for the
outcome of each message (one in flight, whatever the window).
"""

from __future__ import annotations

import mmap
import os
import sys
import time
from array import array

from proton import Message, Timeout
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from .amqp1_0_load import (ACCEPTED, BACKLOG, BEHIND_MS, OTHER_OUTCOMES, PHASE, RATE, READY_RECEIVER,
                           READY_SENDER, RECEIVED, RECORD, RUN_MAX, RUN_RATE, SENT, SLOTS, STOP)


def _control(path: str) -> memoryview:
    fd = os.open(path, os.O_RDWR)
    try:
        return memoryview(mmap.mmap(fd, 8 * SLOTS)).cast("q")
    finally:
        os.close(fd)


def _options(items: list[str]) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in items)


def _url(o: dict[str, str]) -> str:
    return f"amqp://{o['host']}:{o['port']}"


def _connect_args(o: dict[str, str]) -> dict:
    args = {"user": o["user"], "password": o["password"], "allowed_mechs": "PLAIN"}
    if o.get("hostname"):
        args["virtual_host"] = o["hostname"]
    return args


def _template(o: dict[str, str]) -> tuple[bytes, int]:
    size = int(o["size"])
    msg = Message(body=b"a" * size, durable=o["durable"] == "1", inferred=True)
    data = msg.encode()
    return data, len(data) - size


class _Pacer:
    """How many messages are due in the paced phase; how far behind it ever fell."""

    def __init__(self) -> None:
        self.t0 = 0
        self.base = 0
        self.rate = 0.0
        self.behind_ms = 0

    def start(self, sent: int, rate_milli: int) -> None:
        self.t0, self.base, self.rate = time.perf_counter_ns(), sent, rate_milli / 1000

    def due(self, sent: int) -> int:
        return int((time.perf_counter_ns() - self.t0) / 1e9 * self.rate) - (sent - self.base)

    def left(self, n: int) -> None:
        if n > 0 and self.rate > 0:
            self.behind_ms = max(self.behind_ms, round(n / self.rate * 1000))


class ReactorSender(MessagingHandler):
    def __init__(self, o: dict[str, str], ctl: memoryview) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.o, self.ctl = o, ctl
        self.window = int(o["window"])
        self.template, self.stamp_at = _template(o)
        self.sent = self.accepted = self.other = 0
        self.phase = 0
        self.pacer = _Pacer()
        self.sender = None

    def on_start(self, event) -> None:
        conn = event.container.connect(_url(self.o), **_connect_args(self.o))
        self.sender = event.container.create_sender(conn, self.o["address"])
        event.container.schedule(0.001, self)

    def on_link_opened(self, event) -> None:
        self.ctl[READY_SENDER] = 1

    def _room(self) -> bool:
        return (self.sender.credit > 0 and self.sent - self.accepted - self.other < self.window
                and self.sent - self.ctl[RECEIVED] < self.ctl[BACKLOG])

    def _send_one(self) -> None:
        payload = bytearray(self.template)
        payload[self.stamp_at:self.stamp_at + 8] = time.perf_counter_ns().to_bytes(8, "little", signed=True)
        self.sender.delivery(str(self.sent).encode())
        self.sender.stream(bytes(payload))
        self.sender.advance()
        self.sent += 1

    def pump(self) -> None:
        if self.sender is None:
            return
        if self.phase == RUN_MAX:
            while self._room():
                self._send_one()
        elif self.phase == RUN_RATE:
            n = self.pacer.due(self.sent)
            while n > 0 and self._room():
                self._send_one()
                n -= 1
            self.pacer.left(n)

    def on_sendable(self, event) -> None:
        self.pump()

    def on_accepted(self, event) -> None:
        self.accepted += 1
        if self.phase == RUN_MAX:
            self.pump()

    def on_rejected(self, event) -> None:
        self.other += 1

    def on_released(self, event) -> None:
        self.other += 1

    def on_timer_task(self, event) -> None:
        c = self.ctl
        phase = c[PHASE]
        if phase == RUN_RATE and self.phase != RUN_RATE:
            self.pacer.start(self.sent, c[RATE])
        self.phase = phase
        c[SENT], c[ACCEPTED], c[OTHER_OUTCOMES], c[BEHIND_MS] = (self.sent, self.accepted, self.other,
                                                                  self.pacer.behind_ms)
        if phase == STOP:
            self.sender.connection.close()
            return
        self.pump()
        event.container.schedule(0.001, self)


class ReactorReceiver(MessagingHandler):
    def __init__(self, o: dict[str, str], ctl: memoryview) -> None:
        super().__init__(prefetch=int(o["credit"]), auto_accept=True)
        self.o, self.ctl = o, ctl
        self.received = 0
        self.recording = False
        self.samples = array("d")
        self.receiver = None

    def on_start(self, event) -> None:
        conn = event.container.connect(_url(self.o), **_connect_args(self.o))
        self.receiver = event.container.create_receiver(conn, self.o["address"])
        event.container.schedule(0.001, self)

    def on_link_opened(self, event) -> None:
        self.ctl[READY_RECEIVER] = 1

    def on_message(self, event) -> None:
        self.received += 1
        if self.recording:
            stamp = int.from_bytes(event.message.body[:8], "little", signed=True)
            self.samples.append(time.perf_counter_ns() - stamp)

    def on_timer_task(self, event) -> None:
        c = self.ctl
        c[RECEIVED] = self.received
        self.recording = c[RECORD] == 1
        if c[PHASE] == STOP:
            with open(self.o["samples"], "wb") as f:
                self.samples.tofile(f)
            self.receiver.connection.close()
            return
        event.container.schedule(0.001, self)


def blocking_sender(o: dict[str, str], c: memoryview) -> None:
    conn = BlockingConnection(_url(o), **_connect_args(o))
    snd = conn.create_sender(o["address"])
    c[READY_SENDER] = 1
    size, durable = int(o["size"]), o["durable"] == "1"
    sent, phase, pacer = 0, 0, _Pacer()
    pad = b"a" * (size - 8)
    while True:
        p = c[PHASE]
        if p == RUN_RATE and phase != RUN_RATE:
            pacer.start(sent, c[RATE])
        phase = p
        if phase == STOP:
            break
        due = 1 if phase == RUN_MAX else pacer.due(sent) if phase == RUN_RATE else 0
        if due > 0 and sent - c[RECEIVED] < c[BACKLOG]:
            stamp = time.perf_counter_ns().to_bytes(8, "little", signed=True)
            snd.send(Message(body=stamp + pad, durable=durable, inferred=True))
            sent += 1
            c[SENT] = c[ACCEPTED] = sent
            if phase == RUN_RATE:
                pacer.left(pacer.due(sent))
                c[BEHIND_MS] = pacer.behind_ms
        else:
            time.sleep(0.0005)
    conn.close()


def blocking_receiver(o: dict[str, str], c: memoryview) -> None:
    conn = BlockingConnection(_url(o), **_connect_args(o))
    rcv = conn.create_receiver(o["address"], credit=int(o["credit"]))
    c[READY_RECEIVER] = 1
    received, samples = 0, array("d")
    while c[PHASE] != STOP:
        try:
            msg = rcv.receive(timeout=0.05)
        except Timeout:
            continue
        rcv.accept()
        received += 1
        c[RECEIVED] = received
        if c[RECORD] == 1:
            samples.append(time.perf_counter_ns() - int.from_bytes(msg.body[:8], "little", signed=True))
    with open(o["samples"], "wb") as f:
        samples.tofile(f)
    conn.close()


def main(argv: list[str]) -> int:
    api = "reactor"
    if argv[:1] == ["--api"]:
        api, argv = argv[1], argv[2:]
    role, ctl_path, o = argv[0], argv[1], _options(argv[2:])
    ctl = _control(ctl_path)
    ready = READY_SENDER if role == "sender" else READY_RECEIVER
    try:
        if api == "blocking":
            (blocking_sender if role == "sender" else blocking_receiver)(o, ctl)
        else:
            handler = (ReactorSender if role == "sender" else ReactorReceiver)(o, ctl)
            Container(handler).run()
    except Exception as e:  # noqa: BLE001 - reported to the parent through the control block
        ctl[ready] = -1
        print(f"{role}: {e!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
