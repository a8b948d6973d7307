"""Flow to disk for a priority queue with a real client: a lazy priority queue pages every level.

The broker is started as a user starts it; pika declares a lazy priority
queue (``x-queue-mode: lazy``, ``x-max-priority: 9``), publishes a few
thousand persistent messages of priorities 0-9 in transactions: the REST
API counts them paged out (all but the newest arrivals, up to a chunk of
1,024, which wait to be paged with more).  A third is consumed -- highest priority
first, FIFO within a priority -- the broker is killed (SIGKILL) and started
again: the rest comes back paged, by level, and is consumed in the same order.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pika
import pytest

from tests.waiting import wait_until

from .test_flow_to_disk import answers, queue_attributes, start, statistic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

COUNT = 3000
BODY = 1000
QUEUE = "lazy-priority"
ARGUMENTS = {"x-queue-mode": "lazy", "x-max-priority": 9}


def body(index: int) -> bytes:
    head = b"message %06d " % index
    return head + bytes((index * 7 + k) % 251 for k in range(BODY - len(head)))


def priority(index: int) -> int:
    return (index * 7) % 10


#: the order a priority queue delivers them in: highest priority first, FIFO within a priority
ORDER = sorted(range(COUNT), key=lambda i: (-priority(i), i))


def publish(port: int) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.queue_declare(QUEUE, durable=True, arguments=ARGUMENTS)
    ch.tx_select()
    for index in range(COUNT):
        ch.basic_publish("", QUEUE, body(index), pika.BasicProperties(
            delivery_mode=2, priority=priority(index), message_id=f"m-{index}", headers={"index": index}))
        if index % 500 == 499:
            ch.tx_commit()
    ch.tx_commit()
    conn.close()


def consume(port: int, count: int) -> list[tuple[int, bytes, Any, bool]]:
    """``count`` messages, acked in transactions (durable once committed): (index, body, priority,
    redelivered); the prefetched rest is requeued."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.queue_declare(QUEUE, durable=True, arguments=ARGUMENTS)
    ch.basic_qos(prefetch_count=100)
    ch.tx_select()
    got: list[tuple[int, bytes, Any, bool]] = []
    for method, props, data in ch.consume(QUEUE, inactivity_timeout=30):
        assert method is not None, f"nothing more after {len(got)} messages"
        got.append((props.headers["index"], data, props.priority, method.redelivered))
        ch.basic_ack(method.delivery_tag)
        if len(got) % 50 == 0 or len(got) == count:
            ch.tx_commit()
        if len(got) == count:
            break
    ch.cancel()
    conn.close()
    return got


def check(got: list[tuple[int, bytes, Any, bool]], expected: list[int]) -> None:
    assert [index for index, _, _, _ in got] == expected
    for index, data, level, _ in got:
        assert data == body(index) and level == priority(index), f"message {index} differs"


def test_a_lazy_priority_queue_pages_every_level_and_is_recovered_paged() -> None:
    proc = start(None)
    try:
        publish(proc.amqp_port)
        wait_until(lambda: statistic(queue_attributes(proc, QUEUE), "messagesPagedOut") >= COUNT - 1024, 30,
                   what="messages paged out")
        assert statistic(queue_attributes(proc, QUEUE), "queueDepthMessages") == COUNT
        first = COUNT // 3
        check(consume(proc.amqp_port, first), ORDER[:first])
        assert proc.proc is not None
        os.killpg(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(timeout=30)
        proc.start()
        wait_until(lambda: answers(proc, QUEUE), 30, what="the REST API after the restart")
        attributes = queue_attributes(proc, QUEUE)
        assert statistic(attributes, "queueDepthMessages") == COUNT - first
        # all but what was out with the consumer (delivered before: read back with their bodies); with
        # acks in transactions that is its prefetch and a few more (an ack frees credit before its commit)
        assert statistic(attributes, "messagesPagedOut") >= COUNT - first - 200
        assert "paged, bodies left on disk" in proc.log_tail(200_000)
        rest = consume(proc.amqp_port, COUNT - first)
        check(rest, ORDER[first:])
        assert not any(redelivered for _, _, _, redelivered in rest[200:])
    finally:
        proc.stop()
