"""A broker restarts from ``deltamq spark snapshot``'s snapshot plus the journal's tail.

The user's way: ``deltamq serve``, pika publishing and acknowledging, the
snapshot job run from the command line while the broker serves, more
traffic after it, a SIGKILL, and a restart that must give back exactly the
unsettled messages -- those of the snapshot and those published after it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.waiting import wait_until

from .conftest import REPO, DeltaMQProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def own_broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as proc:
        yield proc


def connect(proc: DeltaMQProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))


def deltamq(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("deltamq")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "broker.cli"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run([*command, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)


def drain(proc: DeltaMQProcess, queue: str) -> list[tuple[bytes, bool]]:
    """(body, redelivered) of every message of ``queue``, acknowledged."""
    conn = connect(proc)
    ch = conn.channel()
    got = []
    while True:
        method, _props, body = ch.basic_get(queue)
        if method is None:
            break
        got.append((body, bool(method.redelivered)))
        ch.basic_ack(method.delivery_tag)
    conn.close()
    return got


def test_a_broker_restarts_from_the_snapshot_and_the_tail(own_broker: DeltaMQProcess) -> None:
    conn = connect(own_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("fan", "fanout", durable=True)
    for name in ("orders", "copy"):
        ch.queue_declare(name, durable=True)
    ch.queue_bind("copy", "fan")
    ch.queue_bind("orders", "fan")
    for i in range(30):
        ch.basic_publish("fan", "", b"m%d" % i, PERSISTENT)
    ch.queue_declare("deleted", durable=True)
    ch.basic_publish("", "deleted", b"gone", PERSISTENT)
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=5)
    consumer.tx_select()
    taken = []
    for method, _props, body in consumer.consume("orders"):
        taken.append((method.delivery_tag, body))
        if len(taken) == 5:
            break
    for tag, _ in taken[:3]:                    # m0-m2 acked; m3, m4 delivered, never acked
        consumer.basic_ack(tag)
    consumer.tx_commit()
    conn.close()                                # the job takes minutes: no idle connection to keep alive

    # the job runs while the broker serves
    data_dir = own_broker.dir / "data"
    job = deltamq("spark", "snapshot", "--data-dir", str(data_dir))
    assert job.returncode == 0, job.stderr
    assert "live messages in" in job.stdout, job.stdout
    snapshots = [node / "journal_snapshot" for node in data_dir.iterdir()
                 if (node / "journal_snapshot" / "_delta_log").is_dir()]
    assert len(snapshots) == 1

    # after the snapshot: more messages, acks of snapshot messages, a queue deleted
    conn = connect(own_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(30, 35):
        ch.basic_publish("fan", "", b"m%d" % i, PERSISTENT)
    copy = conn.channel()
    copy.tx_select()
    for _ in range(4):                          # m0-m3 leave "copy"
        method, _props, _body = copy.basic_get("copy")
        copy.basic_ack(method.delivery_tag)
    copy.tx_commit()
    ch.queue_delete("deleted")
    assert own_broker.proc is not None
    os.killpg(own_broker.proc.pid, signal.SIGKILL)
    own_broker.proc.wait(timeout=30)
    own_broker.start()                          # a new log
    wait_until(lambda: "from the snapshot of version" in own_broker.log_since(0), 60,
               what="recovery from the snapshot in the broker's log")

    orders = drain(own_broker, "orders")
    assert [body for body, _ in orders] == [b"m%d" % i for i in range(3, 35)]
    assert orders[0][1] and orders[1][1]        # m3, m4: delivered before the snapshot, never acked
    assert not any(redelivered for _, redelivered in orders[-5:])     # published after it
    assert [body for body, _ in drain(own_broker, "copy")] == [b"m%d" % i for i in range(4, 35)]
    conn = connect(own_broker)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        conn.channel().queue_declare("deleted", passive=True)


def test_the_snapshot_command_explains_bad_options(tmp_path: Path) -> None:
    missing = deltamq("spark", "snapshot", "--data-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "no data directory at" in missing.stderr
    (tmp_path / "data").mkdir()
    empty = deltamq("spark", "snapshot", "--data-dir", str(tmp_path / "data"))
    assert empty.returncode == 1 and "no node with a journal" in empty.stderr
    keep = deltamq("spark", "snapshot", "--data-dir", str(tmp_path / "data"), "--keep", "0")
    assert keep.returncode == 1 and "--keep must be at least 1" in keep.stderr
    store = deltamq("spark", "snapshot", "--store-path", str(tmp_path / "data"))
    assert store.returncode == 1 and "no journal table at" in store.stderr
