"""The broker as a process: its own brokers started with particular options.

Memory alarm (connection.blocked), -D context overrides, users added with the
CLI, and shutdown (320 CONNECTION_FORCED) — each needs a broker of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from .conftest import DeltaMQProcess
from .support import closed_by_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)


@pytest.fixture
def own_broker(request: pytest.FixtureRequest) -> Iterator[DeltaMQProcess]:
    proc = DeltaMQProcess()
    proc.command += list(getattr(request, "param", []))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _params(proc: DeltaMQProcess, **kw: object) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", proc.amqp_port, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("own_broker", [["-D", "deltamq.memory_high_watermark=1"]], indirect=True)
def test_memory_alarm_blocks_publishers_but_not_consumers(own_broker: DeltaMQProcess) -> None:
    publisher = pika.BlockingConnection(_params(own_broker))
    blocked: list[str] = []
    publisher.add_on_connection_blocked_callback(lambda _c, frame: blocked.append(frame.method.reason))
    ch = publisher.channel()
    q = ch.queue_declare("", exclusive=False, auto_delete=True).method.queue
    ch.basic_publish("", q, b"before the alarm is noticed")
    deadline = time.monotonic() + 5
    while not blocked and time.monotonic() < deadline:
        publisher.process_data_events(time_limit=0.2)
    assert blocked and "memory" in blocked[0]
    # a connection that only consumes is not blocked (RabbitMQ blocks publishers only):
    # it is served at once, while the blocked publisher's socket is not read
    consumer = pika.BlockingConnection(_params(own_broker))
    cch = consumer.channel()
    declared = cch.queue_declare(q, passive=True).method
    assert declared.message_count in (0, 1)     # the message may still sit unread in the socket
    if declared.message_count:
        _m, _p, body = cch.basic_get(q, auto_ack=True)
        assert body == b"before the alarm is noticed"
    consumer.close()
    publisher.close()


@pytest.mark.parametrize("own_broker", [["-D", "deltamq.default_heartbeat=0",
                                          "-D", "broker.heartbeat=7"]], indirect=True)
def test_broker_starts_with_context_overrides(own_broker: DeltaMQProcess) -> None:
    # the overrides above are unused names: the broker must still start and serve
    conn = pika.BlockingConnection(_params(own_broker))
    assert conn.is_open
    conn.close()


def test_user_added_with_the_cli_can_log_in(own_broker: DeltaMQProcess) -> None:
    script = Path(sys.executable).with_name("deltamq")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "broker.cli"]
    data_dir = own_broker.dir / "data"
    subprocess.run(cmd + ["user", "add", "alice", "--password", "s3cret", "--data-dir", str(data_dir)],
                   check=True, capture_output=True, timeout=60)
    conn = pika.BlockingConnection(_params(own_broker, credentials=pika.PlainCredentials("alice", "s3cret")))
    assert conn.is_open
    conn.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(_params(own_broker, credentials=pika.PlainCredentials("alice", "wrong")))


def test_sigterm_closes_clients_with_connection_forced(own_broker: DeltaMQProcess) -> None:
    conn = pika.BlockingConnection(_params(own_broker))
    conn.channel()
    assert own_broker.proc is not None
    own_broker.proc.send_signal(signal.SIGTERM)
    assert closed_by_broker(conn, 10) == 320
    assert own_broker.proc.wait(timeout=10) == 0


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_durable_topology_survives_a_restart(own_broker: DeltaMQProcess, stop_signal: int) -> None:
    conn = pika.BlockingConnection(_params(own_broker))
    ch = conn.channel()
    ch.exchange_declare("orders", "topic", durable=True)
    ch.queue_declare("billing", durable=True, arguments={"x-max-priority": 5})
    ch.queue_bind("billing", "orders", "order.#")
    ch.exchange_declare("scratch-x", "fanout", durable=False)
    ch.queue_declare("scratch-q", durable=False)
    # declare-ok means it is on disk: even SIGKILL right now must not lose it
    assert own_broker.proc is not None
    os.killpg(own_broker.proc.pid, stop_signal)
    own_broker.proc.wait(timeout=20)
    own_broker.start()

    conn = pika.BlockingConnection(_params(own_broker))
    ch = conn.channel()
    assert ch.queue_declare("billing", passive=True).method.message_count == 0
    ch.exchange_declare("orders", "topic", passive=True)
    ch.basic_publish("orders", "order.created", b"routed after restart")
    assert ch.basic_get("billing", auto_ack=True)[2] == b"routed after restart"
    for check in (lambda c: c.queue_declare("scratch-q", passive=True),
                  lambda c: c.exchange_declare("scratch-x", "fanout", passive=True)):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            check(conn.channel())
        assert info.value.reply_code == 404
    conn.close()
