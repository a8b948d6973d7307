"""AMQP 1.0 idle time-out against `deltamq serve` with an unmodified client (python-qpid-proton)
and, for a client that goes silent, a raw socket.

By default the broker's open offers no idle-time-out (as Broker-J's), and honours the
client's: proton, asked for heartbeats, closes a connection whose peer stays silent
past its idle time-out, so a connection that survives an idle spell proves the broker's
empty frames.  With ``connection.idleTimeout`` set, the offer is in the open and a
client silent for twice it is closed with ``amqp:resource-limit-exceeded``.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import DeltaMQProcess

proton = pytest.importorskip("proton")
httpx = pytest.importorskip("httpx")
from proton import Delivery, Message, Timeout  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

from broker.protocol.amqp1_0.definitions import Close, Open, SaslInit  # noqa: E402
from broker.protocol.amqp1_0.framing import AMQP_HEADER, SASL_HEADER, TYPE_AMQP, TYPE_SASL, Frame, encode_frame  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def process(broker_process: DeltaMQProcess | None) -> DeltaMQProcess:
    if broker_process is None:
        pytest.skip("the broker's own attributes: DeltaMQ only")
    return broker_process


@pytest.fixture
def queue(ch: Any) -> Iterator[str]:
    name = f"idle-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(name)
    yield name
    ch.queue_delete(name)


@pytest.fixture
def offered_idle_timeout(process: DeltaMQProcess) -> Iterator[int]:
    """The Broker's connection.idleTimeout set to 1 s for the test (new connections get it)."""
    url = f"http://127.0.0.1:{process.http_port}/api/latest/broker"

    def put(seconds: int) -> None:
        answer = httpx.put(url, json={"connection.idleTimeout": seconds}, auth=("guest", "guest"), timeout=30)
        assert answer.status_code in (200, 201), answer.text
    put(1)
    try:
        yield 1
    finally:
        put(0)


def _connect(port: int, heartbeat: float | None = None) -> Any:
    return BlockingConnection(f"amqp://guest:guest@127.0.0.1:{port}", timeout=20, heartbeat=heartbeat)


def _idle(connection: Any, seconds: float) -> None:
    """Let proton's reactor run for ``seconds`` with nothing to send (it would raise on a close)."""
    with pytest.raises(Timeout):
        connection.wait(lambda: False, timeout=seconds)


def _round_trip(connection: Any, queue: str) -> None:
    assert connection.create_sender(queue).send(Message(body="ping")).remote_state == Delivery.ACCEPTED
    receiver = connection.create_receiver(queue, credit=1)
    assert receiver.receive(timeout=10).body == "ping"
    receiver.accept()


def test_by_default_no_idle_time_out_is_offered_and_messages_flow(process: DeltaMQProcess, queue: str) -> None:
    connection = _connect(process.amqp_port)
    try:
        assert connection.conn.transport.remote_idle_timeout == 0
        _round_trip(connection, queue)
    finally:
        connection.close()


def test_the_clients_idle_time_out_is_honoured_with_empty_frames(process: DeltaMQProcess, queue: str) -> None:
    connection = _connect(process.amqp_port, heartbeat=2)    # proton offers 1000 ms, expires at 2 s
    try:
        assert connection.conn.transport.remote_idle_timeout == 0
        _idle(connection, 4.5)                   # more than twice proton's time-out, no traffic of ours
        _round_trip(connection, queue)
    finally:
        connection.close()


def test_a_configured_idle_time_out_is_offered_and_a_live_client_is_kept(
        process: DeltaMQProcess, offered_idle_timeout: int, queue: str) -> None:
    connection = _connect(process.amqp_port)
    try:
        assert connection.conn.transport.remote_idle_timeout == offered_idle_timeout
        _idle(connection, 3 * offered_idle_timeout + 0.5)    # proton beats every half second
        _round_trip(connection, queue)
    finally:
        connection.close()


def _read_frames(sock: socket.socket, deadline: float) -> list[Any]:
    """Performatives (None: an empty frame) until the broker closes the socket or the deadline."""
    data, out = b"", []
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
        while len(data) >= 8:
            if data[:4] == b"AMQP":
                data = data[8:]
                continue
            size, doff, ftype = struct.unpack_from(">IBB", data)
            if len(data) < size:
                break
            body, data = data[doff * 4:size], data[size:]
            frame = Frame(ftype, 0, body)
            out.append(None if not body else frame.performative()[0] if ftype == TYPE_AMQP else frame.sasl_frame())
    return out


def test_a_silent_client_is_closed_with_resource_limit_exceeded(
        process: DeltaMQProcess, offered_idle_timeout: int) -> None:
    with socket.create_connection(("127.0.0.1", process.amqp_port), timeout=10) as sock:
        sock.sendall(SASL_HEADER + encode_frame(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"),
                                                frame_type=TYPE_SASL)
                     + AMQP_HEADER + encode_frame(Open(container_id="silent")))
        started = time.monotonic()
        frames = _read_frames(sock, started + 20)
        waited = time.monotonic() - started
    opened = next(f for f in frames if isinstance(f, Open))
    assert opened.idle_time_out == 1000
    close = frames[-1]
    assert isinstance(close, Close), frames
    assert close.error.condition == "amqp:resource-limit-exceeded"
    assert 2.0 <= waited < 10.0                  # twice the offer, then the socket went
