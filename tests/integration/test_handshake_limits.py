"""Sockets that never finish opening, and sockets kept open after close-ok.

Against brokers of their own with short timeouts (``-D``): connections not
opened within ``deltamq.connection_open_timeout`` are closed whatever they
stopped at; one source address has at most
``deltamq.max_opening_connections_per_address`` opening at once (other
addresses of 127.0.0.0/8 stand in for other hosts); accepting goes on when the
broker runs out of descriptors; after ``connection.close-ok`` the broker keeps
the socket until the client closes it or ``deltamq.connection_close_timeout``.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pamqp import commands

from .conftest import DeltaMQProcess
from tests.waiting import wait_until

from .support import PROTOCOL_HEADER_0_9_1, BrokerEndpoint, RawAMQP, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

OPEN_TIMEOUT = 3          # seconds; long enough for a busy machine to fill the cap meanwhile
PER_ADDRESS = 5
CLOSE_TIMEOUT = 2


def _own_broker(*args: str, open_files: int | None = None) -> DeltaMQProcess:
    if os.environ.get("DELTAMQ_TEST_AMQP_URL") or os.environ.get("DELTAMQ_TEST_START_RABBITMQ"):
        pytest.skip("starts a DeltaMQ of its own with particular limits")
    proc = DeltaMQProcess()
    proc.command += list(args)
    if open_files is not None:       # the broker raises its soft limit to the hard one: set both
        proc.command = ["sh", "-c", f'ulimit -n {open_files} && exec "$@"', "sh", *proc.command]
    proc.start()
    # the port accepts before the broker has finished starting (management, journals):
    # descriptors counted or used up before then would be another process's
    wait_until(lambda: _log_lines(proc, r"DeltaMQ \S+ ready"), timeout=60, what="the broker ready")
    return proc


@pytest.fixture(scope="module")
def limited() -> Iterator[DeltaMQProcess]:
    proc = _own_broker("-D", f"deltamq.connection_open_timeout={OPEN_TIMEOUT}",
                       "-D", f"deltamq.max_opening_connections_per_address={PER_ADDRESS}",
                       "-D", f"deltamq.connection_close_timeout={CLOSE_TIMEOUT}")
    try:
        yield proc
    finally:
        proc.stop()


def _endpoint(proc: DeltaMQProcess) -> BrokerEndpoint:
    return BrokerEndpoint(host="127.0.0.1", port=proc.amqp_port)


def _socket(proc: DeltaMQProcess, source: str = "127.0.0.1", send: bytes = b"") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", proc.amqp_port))
    if send:
        s.sendall(send)
    return s


def _until_closed(s: socket.socket, timeout: float) -> bytes:
    """Everything the broker sends until it closes the socket (fails if it does not in time)."""
    s.settimeout(timeout)
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = s.recv(65536)
        except ConnectionResetError:
            return got
        except socket.timeout:
            break
        if not data:
            return got
        got += data
    raise AssertionError(f"the broker did not close the socket within {timeout} s")


def _descriptors(proc: DeltaMQProcess) -> int:
    assert proc.proc is not None
    return len(os.listdir(f"/proc/{proc.proc.pid}/fd"))


def _log_lines(proc: DeltaMQProcess, pattern: str) -> list[str]:
    return [line for line in Path(proc.log_path).read_text(errors="replace").splitlines()
            if re.search(pattern, line)]


@pytest.mark.parametrize("greeting", [b"", b"AMQ", PROTOCOL_HEADER_0_9_1],
                         ids=["nothing", "part of the header", "the header"])
def test_a_socket_that_does_not_open_in_time_is_closed(limited: DeltaMQProcess,
                                                       greeting: bytes) -> None:
    s = _socket(limited, send=greeting)
    try:
        got = _until_closed(s, OPEN_TIMEOUT + 5)
        assert got.startswith(b"\x01\x00\x00") if greeting == PROTOCOL_HEADER_0_9_1 else got == b""
    finally:
        s.close()


@pytest.mark.parametrize("stalled_before", ["tune-ok", "open"])
def test_a_connection_stalled_in_the_handshake_is_closed(limited: DeltaMQProcess,
                                                         stalled_before: str) -> None:
    raw = RawAMQP("127.0.0.1", limited.amqp_port)
    try:
        raw.send(PROTOCOL_HEADER_0_9_1)
        raw.expect(commands.Connection.Start)
        raw.send_method(0, commands.Connection.StartOk(mechanism="PLAIN",
                                                       response="\0guest\0guest"))
        tune = raw.expect(commands.Connection.Tune)
        if stalled_before == "open":
            raw.send_method(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                          frame_max=tune.frame_max, heartbeat=0))
        # before tune-ok a client need not understand connection.close: the socket just ends
        assert raw.read_until_eof(timeout=OPEN_TIMEOUT + 7) == b""
    finally:
        raw.close()


def test_an_address_with_too_many_opening_connections_is_refused_until_they_time_out(
        limited: DeltaMQProcess) -> None:
    params = pika.ConnectionParameters("127.0.0.1", limited.amqp_port, connection_attempts=1)
    working = pika.BlockingConnection(params)             # opened: never counted
    half_open = [_socket(limited, send=PROTOCOL_HEADER_0_9_1) for _ in range(PER_ADDRESS)]
    other_host = _socket(limited, source="127.0.0.2", send=PROTOCOL_HEADER_0_9_1)
    try:
        for s in [*half_open, other_host]:                # each accepted and sent connection.start
            assert s.recv(7)[:1] == b"\x01"
        # the cap is full for 127.0.0.1: a new socket is closed at once, before connection.start
        refused = _socket(limited, send=PROTOCOL_HEADER_0_9_1)
        assert _until_closed(refused, OPEN_TIMEOUT - 1) == b""
        refused.close()
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(params).close()
        # the connection that had opened goes on working
        ch = working.channel()
        q = ch.queue_declare(unique("q.cap"), exclusive=True).method.queue
        ch.basic_publish("", q, b"still served")
        assert ch.basic_get(q, auto_ack=True)[2] == b"still served"
        # the open timeout clears the half-open sockets; then the address may connect again
        for s in half_open:
            _until_closed(s, OPEN_TIMEOUT + 7)
        later = pika.BlockingConnection(params)
        assert later.is_open
        later.close()
        assert _log_lines(limited, "closing a new connection from 127.0.0.1: it already has 5")
    finally:
        for s in [*half_open, other_host]:
            s.close()
        working.close()


def test_two_thousand_header_only_sockets_are_closed_and_descriptors_return() -> None:
    """With the default limits (10 s, 100 per address), from 20 addresses: none refused."""
    from .test_robustness import _raise_fd_limit

    count, per_address = 2000, 100
    _raise_fd_limit(count + 512)
    proc = _own_broker()
    sockets: list[socket.socket] = []
    try:
        baseline = _descriptors(proc)
        started = time.monotonic()
        sockets = [_socket(proc, source=f"127.1.0.{i // per_address + 1}",
                           send=PROTOCOL_HEADER_0_9_1) for i in range(count)]
        held = wait_until(lambda: _descriptors(proc) >= baseline + count and _descriptors(proc),
                          timeout=8, what="every socket accepted")
        for s in sockets:
            assert _until_closed(s, 40)[:1] == b"\x01"       # connection.start, then the end
        closed = time.monotonic() - started
        after = wait_until(lambda: _descriptors(proc) <= baseline and _descriptors(proc),
                           timeout=10, what="the broker's descriptors back to the baseline")
        print(f"\nbroker descriptors: {baseline} before, {held} with {count} header-only"
              f" sockets, {after} after the open timeout; all closed {closed:.1f} s after the"
              " first was opened")
        # one line for the first, the rest summed up later: not 2,000 lines
        assert len(_log_lines(proc, "not opened within 10 s")) == 1
        assert not _log_lines(proc, "closing a new connection")
    finally:
        for s in sockets:
            s.close()
        proc.stop()


def test_accepting_goes_on_after_the_broker_runs_out_of_descriptors() -> None:
    proc = _own_broker("-D", "deltamq.connection_open_timeout=2",
                       "-D", "deltamq.max_opening_connections_per_address=-1", open_files=256)
    sockets: list[socket.socket] = []
    try:
        for _ in range(300):                 # more than the broker has descriptors for
            sockets.append(_socket(proc))
        wait_until(lambda: _descriptors(proc) >= 250, timeout=10, what="the broker out of descriptors")
        # the silent ones time out, descriptors free up, the broker accepts again
        try:
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", proc.amqp_port, connection_attempts=1, socket_timeout=20,
                stack_timeout=30, blocked_connection_timeout=30))
        except pika.exceptions.AMQPConnectionError as exc:
            raise AssertionError(f"{exc!r}; the broker's log:\n{proc.log_tail()}") from exc
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"after the descriptors came back")
        assert ch.basic_get(q, auto_ack=True)[2] == b"after the descriptors came back"
        conn.close()
        assert len(_log_lines(proc, "cannot accept connections")) == 1
        assert len(_log_lines(proc, "accepts connections again")) >= 1
        assert proc.alive()
    finally:
        for s in sockets:
            s.close()
        proc.stop()


def test_after_close_ok_the_broker_reads_on_until_the_client_closes(broker: BrokerEndpoint) -> None:
    """RabbitMQ's behaviour too: run it against RabbitMQ with DELTAMQ_TEST_AMQP_URL."""
    raw = RawAMQP(broker.host, broker.port)
    try:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        raw.send_method(1, commands.Basic.Publish(exchange="", routing_key="nowhere"))
        raw.send_content(1, b"queued before the close")
        raw.expect(commands.Connection.CloseOk)
        for _ in range(20):                  # more frames still on their way: no reset, no EOF
            raw.send_method(1, commands.Basic.Publish(exchange="", routing_key="nowhere"))
            raw.send_content(1, b"x" * 10000)
        raw.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            raw.sock.recv(1)
    finally:
        raw.close()


def test_after_close_ok_a_client_that_keeps_its_socket_is_closed_after_the_close_timeout(
        limited: DeltaMQProcess) -> None:
    raw = RawAMQP("127.0.0.1", limited.amqp_port)
    try:
        raw.handshake(_endpoint(limited))
        raw.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        raw.expect(commands.Connection.CloseOk)
        raw.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):    # kept open for the client to close...
            raw.sock.recv(1)
        assert raw.read_until_eof(timeout=CLOSE_TIMEOUT + 8) == b""    # ...but not for ever
    finally:
        raw.close()
