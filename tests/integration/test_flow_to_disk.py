"""Flow to disk with a real client: a backlog past ``broker.flowToDiskThreshold`` is paged and served.

The broker is started as a user starts it, with a small threshold set with
``-D``; pika publishes a few thousand persistent messages in transactions (the
broker flows to disk: the log says so, the REST API counts paged messages),
then consumes them all, in order, intact.  A lazy queue (``x-queue-mode``)
pages without any threshold and is recovered paged after a restart.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.waiting import wait_until

from .conftest import DeltaMQProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

COUNT = 3000
BODY = 1000


def body(index: int) -> bytes:
    head = b"message %06d " % index
    return head + bytes((index + k) % 251 for k in range(BODY - len(head)))


def start(threshold: int | None) -> DeltaMQProcess:
    proc = DeltaMQProcess()
    if threshold is not None:
        proc.command += ["-D", f"broker.flowToDiskThreshold={threshold}"]
    proc.start()
    return proc


@pytest.fixture
def small_threshold() -> Iterator[DeltaMQProcess]:
    proc = start(200_000)
    try:
        yield proc
    finally:
        proc.stop()


def queue_attributes(proc: DeltaMQProcess, name: str) -> dict[str, Any]:
    return rest(proc, f"queue/default/default/{name}")


def rest(proc: DeltaMQProcess, path: str) -> dict[str, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{proc.http_port}/api/latest/{path}")
    request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")          # guest:guest
    with urllib.request.urlopen(request, timeout=10) as reply:
        found = json.load(reply)
    return found[0] if isinstance(found, list) else found


def answers(proc: DeltaMQProcess, name: str) -> bool:
    try:
        queue_attributes(proc, name)
    except OSError:                              # the HTTP port opens after the AMQP one
        return False
    return True


def statistic(attributes: dict[str, Any], name: str) -> int:
    return int(attributes.get("statistics", attributes).get(name, attributes.get(name, 0)))


def publish(proc: DeltaMQProcess, queue: str, arguments: dict[str, Any] | None = None) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments=arguments)
    ch.tx_select()                               # tx.commit-ok: all of them are durable
    for index in range(COUNT):
        ch.basic_publish("", queue, body(index), pika.BasicProperties(
            delivery_mode=2, message_id=f"m-{index}", headers={"index": index}, content_type="application/x"))
        if index % 500 == 499:
            ch.tx_commit()
    ch.tx_commit()
    conn.close()


def consume_all(proc: DeltaMQProcess, queue: str) -> list[tuple[bytes, Any, Any]]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=200)
    got: list[tuple[bytes, Any, Any]] = []
    for method, props, data in ch.consume(queue, inactivity_timeout=30):
        assert method is not None, f"nothing more after {len(got)} messages"
        got.append((data, props.message_id, props.headers))
        ch.basic_ack(method.delivery_tag)
        if len(got) == COUNT:
            break
    ch.cancel()
    conn.close()
    return got


def check_in_order(got: list[tuple[bytes, Any, Any]]) -> None:
    assert len(got) == COUNT
    for index, (data, message_id, headers) in enumerate(got):
        assert data == body(index), f"message {index} differs"
        assert message_id == f"m-{index}" and headers == {"index": index}


def test_a_backlog_past_the_threshold_is_paged_and_consumed_in_order(small_threshold: DeltaMQProcess) -> None:
    proc = small_threshold
    publish(proc, "backlog")
    # the resource check (once a second) finds 3 MB held, above 200 kB: the queue is paged
    wait_until(lambda: statistic(queue_attributes(proc, "backlog"), "messagesPagedOut") > COUNT // 2, 30,
               what="messages paged out")
    attributes = queue_attributes(proc, "backlog")
    assert statistic(attributes, "queueDepthMessages") == COUNT
    assert statistic(attributes, "messageBytesPagedOut") >= (COUNT // 2) * BODY
    assert "flow to disk started" in proc.log_tail(200_000)
    assert rest(proc, "broker")["statistics"]["flowingToDisk"] is True
    check_in_order(consume_all(proc, "backlog"))
    attributes = queue_attributes(proc, "backlog")
    assert statistic(attributes, "queueDepthMessages") == 0 and statistic(attributes, "messagesPagedOut") == 0
    wait_until(lambda: "flow to disk stopped" in proc.log_tail(200_000), 30, what="flow to disk stopping")


def test_a_lazy_queue_is_paged_and_recovered_paged_after_a_restart() -> None:
    proc = start(None)
    try:
        publish(proc, "lazy", {"x-queue-mode": "lazy"})
        wait_until(lambda: statistic(queue_attributes(proc, "lazy"), "messagesPagedOut") >= COUNT - 1024, 30,
                   what="messages paged out")
        assert proc.proc is not None
        os.killpg(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(timeout=30)
        proc.start()
        wait_until(lambda: answers(proc, "lazy"), 30, what="the REST API after the restart")
        attributes = queue_attributes(proc, "lazy")
        assert statistic(attributes, "queueDepthMessages") == COUNT
        assert statistic(attributes, "messagesPagedOut") == COUNT          # bodies left on disk
        assert "paged, bodies left on disk" in proc.log_tail(200_000)
        check_in_order(consume_all(proc, "lazy"))
    finally:
        proc.stop()
