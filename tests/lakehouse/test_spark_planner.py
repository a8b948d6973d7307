"""The Spark consumer's planner and readers against a real broker, driven without Spark.

Spark calls ``latestOffset``, ``partitions``, ``read`` and ``commit`` of
:class:`lakehouse.spark_source.QueueStreamReader` in that order, one
micro-batch at a time; here a test makes the same calls itself, so it can
look at the broker between them: a backlog is granted a batch ahead, served
batches are settled in the background, and a stopped query gives back what
it was granted ahead.
"""

from __future__ import annotations

import uuid
from typing import Any

import pika
import pyarrow as pa
import pytest

from lakehouse.spark_source import INITIAL_OFFSET, QueueOptions, QueueStreamReader
from tests.integration.conftest import DeltaMQProcess
from tests.mgmt.conftest import Api
from tests.waiting import wait_until

pytestmark = [pytest.mark.timeout(300)]


def filled_queue(broker: DeltaMQProcess, count: int) -> tuple[str, list[bytes]]:
    name = f"planner.{uuid.uuid4().hex[:10]}"
    bodies = [f"{name}-{n}".encode() for n in range(count)]
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as connection:
        channel = connection.channel()
        channel.queue_declare(name, durable=True)
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish("", name, body, pika.BasicProperties(delivery_mode=2))
    return name, bodies


def planner(broker: DeltaMQProcess, queue: str, **options: Any) -> QueueStreamReader:
    given = {"queue": queue, "url": f"http://127.0.0.1:{broker.http_port}", "consumer": "planner",
             **{name: str(value) for name, value in options.items()}}
    return QueueStreamReader(QueueOptions.parse(given))


def held(api: Api, queue: str) -> int:
    shown = api.ok(api.get(f"consumer/default/default/{queue}"))
    return int(shown[0]["statistics"]["heldMessages"]) if shown else 0


def unsettled(api: Api, queue: str) -> tuple[int, int]:
    statistics = api.ok(api.get(f"queue/default/default/{queue}"))["statistics"]
    return int(statistics["queueDepthMessages"]), int(statistics["unacknowledgedMessages"])


def run_batch(reader: QueueStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
    """What Spark does with a logged offset: plan the tasks, run them (here, in this process)."""
    out: list[bytes] = []
    for part in reader.partitions(start, end):
        batches = list(reader.read(part))
        if batches:
            out += pa.Table.from_batches(batches).column("body").to_pylist()
    return out


def test_a_backlog_is_granted_a_batch_ahead_and_settled_in_the_background(
        broker: DeltaMQProcess, api: Api) -> None:
    queue, published = filled_queue(broker, 25)
    reader = planner(broker, queue, maxMessagesPerBatch=10)
    try:
        first = reader.latestOffset()
        # a full batch: the next one is granted while this one runs
        wait_until(lambda: held(api, queue) == 20, timeout=30, what="the batch and the one ahead held")
        assert run_batch(reader, INITIAL_OFFSET, first) == published[:10]
        second = reader.latestOffset()           # the grant made ahead; the first batch settles meanwhile
        assert second["grant"] == first["grant"] + 1
        assert run_batch(reader, first, second) == published[10:20]
        # the first batch settled in the background; the third (5 messages) granted ahead
        wait_until(lambda: held(api, queue) == 15, timeout=30, what="the first batch settled")
        third = reader.latestOffset()
        reader.commit(first)                     # Spark's commit of a batch already settled: nothing to do
        assert run_batch(reader, second, third) == published[20:]
        # the queue is empty: nothing new; what was served settles (Spark keeps asking while idle)
        wait_until(lambda: reader.latestOffset() == third and unsettled(api, queue) == (0, 0), timeout=30,
                   what="every batch settled", interval=0.1)
        assert held(api, queue) == 0
    finally:
        reader.stop()


def test_a_stopped_query_gives_back_what_it_was_granted_ahead(broker: DeltaMQProcess, api: Api) -> None:
    queue, published = filled_queue(broker, 30)
    reader = planner(broker, queue, maxMessagesPerBatch=10)
    reader.latestOffset()
    wait_until(lambda: held(api, queue) == 20, timeout=30, what="the batch and the one ahead held")
    reader.stop()
    # the logged batch stays held (Spark replays it after a restart); the one ahead is back in the queue
    assert held(api, queue) == 10
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as connection:
        channel = connection.channel()
        taken = []
        while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
            taken.append(got[2])
    assert taken == published[10:]


def test_granting_ahead_can_be_turned_off(broker: DeltaMQProcess, api: Api) -> None:
    queue, _ = filled_queue(broker, 30)
    reader = planner(broker, queue, maxMessagesPerBatch=10, grantAhead="false")
    try:
        reader.latestOffset()
        assert held(api, queue) == 10
    finally:
        reader.stop()
    with pytest.raises(ValueError, match="option 'grantAhead' must be true or false"):
        QueueOptions.parse({"queue": queue, "grantAhead": "sometimes"})
