"""Spark as a queue consumer: ``readStream.format("deltamq")`` against a real broker.

A real ``deltamq serve`` (default configuration, a ``delta`` node) takes
persistent messages from pika; a Structured Streaming query consumes the
queue as a lease consumer, its executors reading bodies from the journal.
Checked as a user would: what the sink got, what a pika consumer on the same
queue got, what the journal says, what management shows -- across a stopped
job, a restart from the checkpoint, and a broker restart.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import pika
import pytest

from lakehouse.queue_reads import journal
from tests.integration.conftest import DeltaMQProcess
from tests.mgmt.conftest import Api, wait_for_http
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def spark() -> Any:
    from lakehouse.spark import spark_session

    return spark_session()


def new_queue(broker: DeltaMQProcess) -> str:
    name = f"spark.{uuid.uuid4().hex[:10]}"
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as connection:
        connection.channel().queue_declare(name, durable=True)
    return name


def publish(broker: DeltaMQProcess, queue: str, bodies: list[bytes]) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for n, body in enumerate(bodies):
            channel.basic_publish("", queue, body, pika.BasicProperties(
                delivery_mode=2, headers={"n": n}, content_type="text/plain"))


def bodies(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{n}".encode() for n in range(count)]


def stream(spark: Any, broker: DeltaMQProcess, queue: str, **options: Any) -> Any:
    reader = (spark.readStream.format("deltamq").option("queue", queue)
              .option("url", f"http://127.0.0.1:{broker.http_port}"))
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


class Batches:
    """A foreachBatch sink keyed by batch id: a replayed batch replaces itself (as Delta's sink does)."""

    def __init__(self) -> None:
        self.by_batch: dict[int, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.block = threading.Event()          # set: the next batch fails after being seen
        self.fail = threading.Event()

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = [row.asDict() for row in frame.collect()]
        if rows and self.block.is_set():
            with self.lock:
                self.by_batch[-1 - batch_id] = rows    # seen, never committed
            self.fail.wait(60)
            raise RuntimeError("the job dies in the middle of a batch")
        with self.lock:
            self.by_batch[batch_id] = rows

    def rows(self) -> list[dict[str, Any]]:
        with self.lock:
            return [row for batch_id, rows in sorted(self.by_batch.items()) if batch_id >= 0 for row in rows]

    def bodies(self) -> list[bytes]:
        return [bytes(row["body"]) for row in self.rows()]


def start(frame: Any, sink: Batches, checkpoint: Path) -> Any:
    return frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).start()


def journal_rows(broker: DeltaMQProcess, queue: str) -> list[dict[str, Any]]:
    table = journal(str(broker.dir / "data" / "default" / "journal"))
    # a range row (a grant or a settlement of many: journal schema 3) as one row per message
    return table.read(f"""
        SELECT event, unnest(generate_series(COALESCE(first_message_id, message_id), message_id)) AS message_id,
               delivery_count, outcome, reason
        FROM t WHERE queue = '{queue}'""").to_pylist()


def pika_take(broker: DeltaMQProcess, queue: str, timeout: float) -> list[tuple[bytes, bool]]:
    """What a pika consumer gets (acked) until the queue stays quiet for ``timeout`` seconds."""
    got: list[tuple[bytes, bool]] = []
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1)
        for method, _, body in channel.consume(queue, inactivity_timeout=timeout):
            if method is None:
                break
            got.append((body, bool(method.redelivered)))
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
    return got


def stop(query: Any) -> None:
    try:
        query.stop()
    except Exception:                          # a query that failed on purpose
        pass


def test_a_stream_drains_the_queue_sharing_no_message_with_another_consumer(
        spark: Any, broker: DeltaMQProcess, api: Api, tmp_path: Path) -> None:
    queue = new_queue(broker)
    published = bodies("drain", 300)
    publish(broker, queue, published)
    sink = Batches()
    query = start(stream(spark, broker, queue, maxMessagesPerBatch=25, consumer="drainer"), sink,
                  tmp_path / "checkpoint")
    try:
        wait_until(lambda: sink.rows(), timeout=120, what="the first batch")
        # the job is a consumer of the queue, shown by management with what it holds
        [shown] = wait_until(lambda: api.ok(api.get(f"consumer/default/default/{queue}")), timeout=30,
                             what="the job listed as a consumer")
        assert shown["name"] == "drainer" and shown["leaseExpires"] > shown["createdTime"]
        taken = pika_take(broker, queue, timeout=3)        # a pika consumer competes meanwhile
        wait_until(lambda: len(sink.rows()) + len(taken) >= len(published), timeout=120,
                   what="every message consumed by one side or the other")
        got = sink.bodies()
        assert len(got) == len(set(got))                   # no message twice
        assert not set(got) & {body for body, _ in taken}  # none went to both
        assert sorted(got + [body for body, _ in taken]) == sorted(published)
        row = next(r for r in sink.rows() if bytes(r["body"]) == got[0])
        assert row["queue"] == queue and row["exchange"] == "" and row["routing_key"] == queue
        assert row["headers"] == '{"n": %d}' % published.index(got[0])
        assert row["properties"]["content_type"] == "text/plain" and row["delivery_count"] == 0
        assert row["redelivered"] is False and row["message_format"] == "amqp-0-9-1"
        # settled by the job: the journal says acked, by this consumer, for everything it got
        ids = {r["message_id"] for r in sink.rows()}
        wait_until(lambda: {r["message_id"] for r in journal_rows(broker, queue)
                            if r["event"] == "settle" and r["reason"] == "consumer:drainer"} == ids,
                   timeout=30, what="the job's messages settled in the journal")
        assert {r["outcome"] for r in journal_rows(broker, queue) if r["event"] == "settle"} == {"acked"}
        statistics = api.ok(api.get(f"queue/default/default/{queue}"))["statistics"]
        assert (statistics["queueDepthMessages"], statistics["unacknowledgedMessages"]) == (0, 0)
    finally:
        stop(query)


def test_a_job_that_dies_gives_its_messages_back_after_the_lease(
        spark: Any, broker: DeltaMQProcess, api: Api, tmp_path: Path) -> None:
    queue = new_queue(broker)
    published = bodies("dies", 8)
    publish(broker, queue, published)
    sink = Batches()
    sink.block.set()
    query = start(stream(spark, broker, queue, leaseSeconds=3, consumer="dying"), sink, tmp_path / "cp")
    try:
        wait_until(lambda: sink.by_batch, timeout=120, what="a batch seen by the job")
        [shown] = api.ok(api.get(f"consumer/default/default/{queue}"))
        assert shown["statistics"]["heldMessages"] == len(published)
        assert pika_take(broker, queue, timeout=1) == []    # held for the job: no one else gets them
        sink.fail.set()                                     # the job dies without committing
        wait_until(lambda: api.ok(api.get(f"consumer/default/default/{queue}")) == [], timeout=30,
                   what="the lease consumer gone once its lease ran out")
        assert pika_take(broker, queue, timeout=2) == [(body, True) for body in published]
        requeued = [r for r in journal_rows(broker, queue) if r["event"] == "requeue"]
        assert sorted(r["delivery_count"] for r in requeued) == [1] * len(published)
    finally:
        sink.fail.set()
        stop(query)


def test_restart_from_the_checkpoint_loses_nothing_and_repeats_nothing(
        spark: Any, broker: DeltaMQProcess, api: Api, tmp_path: Path) -> None:
    queue = new_queue(broker)
    published = bodies("restart", 200)
    publish(broker, queue, published)
    sink = Batches()
    checkpoint = tmp_path / "checkpoint"
    options = {"maxMessagesPerBatch": 10, "leaseSeconds": 5, "consumer": "restarting"}
    query = start(stream(spark, broker, queue, **options), sink, checkpoint)
    wait_until(lambda: len(sink.rows()) >= 40, timeout=120, what="a few batches")
    query.stop()
    before = set(sink.bodies())
    query = start(stream(spark, broker, queue, **options), sink, checkpoint)
    try:
        wait_until(lambda: len(sink.rows()) >= len(published), timeout=180, what="the rest of the queue")
        got = sink.bodies()
        assert sorted(got) == sorted(published)            # nothing lost, nothing twice
        assert before <= set(got)
        wait_until(lambda: api.ok(api.get(f"queue/default/default/{queue}"))["statistics"][
            "unacknowledgedMessages"] == 0, timeout=30, what="everything settled")
        assert pika_take(broker, queue, timeout=1) == []   # nothing settled comes back
    finally:
        stop(query)


def test_a_broker_restart_while_the_job_runs(spark: Any, broker: DeltaMQProcess, tmp_path: Path) -> None:
    queue = new_queue(broker)
    published = bodies("bounce", 150)
    publish(broker, queue, published)
    sink = Batches()
    query = start(stream(spark, broker, queue, maxMessagesPerBatch=10, consumer="bounced"), sink,
                  tmp_path / "checkpoint")
    try:
        wait_until(lambda: len(sink.rows()) >= 30, timeout=120, what="a few batches")
        assert broker.proc is not None
        os.killpg(broker.proc.pid, signal.SIGKILL)          # the broker dies mid-stream ...
        broker.proc.wait(timeout=10)
        broker.start()                                      # ... and comes back on the same ports
        wait_for_http(broker)
        wait_until(lambda: len(set(sink.bodies())) >= len(published), timeout=180,
                   what="every message after the broker's restart")
        got = sink.bodies()
        assert sorted(set(got)) == sorted(published)
        assert len(got) == len(published)                   # the job reclaimed what it held
        assert pika_take(broker, queue, timeout=2) == []
    finally:
        stop(query)


def test_browsing_reads_live_messages_without_consuming(
        spark: Any, broker: DeltaMQProcess, api: Api) -> None:
    queue = new_queue(broker)
    published = bodies("browse", 30)
    publish(broker, queue, published)
    url = f"http://127.0.0.1:{broker.http_port}"
    frame = spark.read.format("deltamq").option("queue", queue).option("url", url).load()
    rows = frame.orderBy("message_id").collect()
    assert [bytes(r["body"]) for r in rows] == published
    assert {r["queue"] for r in rows} == {queue} and not any(r["redelivered"] for r in rows)
    depth = api.ok(api.get(f"queue/default/default/{queue}"))["statistics"]["queueDepthMessages"]
    assert depth == len(published)                          # nothing consumed
    path = str(broker.dir / "data" / "default" / "journal")
    by_path = spark.read.format("deltamq").option("queue", queue).option("path", path).load()
    assert by_path.count() == len(published)                # the journal alone, no broker asked


def test_options_are_checked_with_a_message_that_says_what_to_fix(spark: Any, broker: DeltaMQProcess) -> None:
    with pytest.raises(Exception, match="option 'queue' is required"):
        spark.read.format("deltamq").load().collect()
    plain = f"spark.plain.{uuid.uuid4().hex[:8]}"
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as connection:
        connection.channel().queue_declare(plain, durable=False)
    sink = Batches()
    query = stream(spark, broker, plain).writeStream.foreachBatch(sink).start()
    try:
        with pytest.raises(Exception, match=f"queue '{plain}'.*not durable"):
            query.awaitTermination(120)
    finally:
        stop(query)
