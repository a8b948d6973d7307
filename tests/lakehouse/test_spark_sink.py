"""Spark as a producer: ``df.write`` and ``df.writeStream`` ``.format("deltamq")`` against a real broker.

A real ``deltamq serve`` takes what Spark publishes; pika reads it back.  The
streaming test replays a micro-batch the broker already committed (its entry
in the checkpoint's commit log removed, as when the driver dies between the
sink's commit and Spark's) after a broker crash and restart, and checks that
every row arrives exactly once.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from broker.messaging.producer_sequences import PRODUCER_HEADER, SEQUENCE_HEADER
from tests.integration.conftest import DeltaMQProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as proc:
        yield proc


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from lakehouse.spark import spark_session

    session = spark_session()
    yield session
    session.stop()


def url(broker: DeltaMQProcess) -> str:
    return f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/%2F"


def channel(broker: DeltaMQProcess) -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)).channel()


def declare(broker: DeltaMQProcess, *queues: str) -> None:
    ch = channel(broker)
    for queue in queues:
        ch.queue_declare(queue, durable=True)
        ch.queue_purge(queue)
    ch.connection.close()


def drain(broker: DeltaMQProcess, queue: str) -> list[tuple[bytes, Any]]:
    """Everything in ``queue``: (body, properties), in queue order."""
    ch = channel(broker)
    got = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append((body, props))
    ch.connection.close()
    return got


def test_write_publishes_each_row_with_its_exchange_key_headers_and_properties(
        spark: Any, broker: DeltaMQProcess) -> None:
    declare(broker, "sink-a", "sink-b")
    rows = [(b"one", "", "sink-a", {"n": "1"}, {"content_type": "text/plain", "correlation_id": "c1",
                                                "priority": "3"}),
            (b"two", "amq.direct", "sink-b", None, {"message_id": "m2"}),
            (b"three", None, None, {"n": "3"}, None)]           # the options' exchange and routing key
    ch = channel(broker)
    ch.queue_bind("sink-b", "amq.direct", "sink-b")
    ch.connection.close()
    df = spark.createDataFrame(
        rows, "body binary, exchange string, routing_key string, headers map<string,string>,"
              " properties map<string,string>").repartition(2)
    df.write.format("deltamq").option("url", url(broker)).option("routingKey", "sink-a") \
        .mode("append").save()
    a = {body: props for body, props in drain(broker, "sink-a")}
    b = {body: props for body, props in drain(broker, "sink-b")}
    assert set(a) == {b"one", b"three"} and set(b) == {b"two"}
    assert a[b"one"].headers == {"n": "1"}                      # the sink's mark is stripped
    assert (a[b"one"].content_type, a[b"one"].correlation_id, a[b"one"].priority) == ("text/plain", "c1", 3)
    assert b[b"two"].message_id == "m2" and b[b"two"].headers in (None, {})
    assert {props.delivery_mode for props in [*a.values(), *b.values()]} == {2}   # persistent by default
    assert a[b"three"].headers == {"n": "3"}


def test_string_bodies_json_headers_and_transient_messages(spark: Any, broker: DeltaMQProcess) -> None:
    declare(broker, "sink-c")
    df = spark.createDataFrame([("héllo", '{"k": 7, "ok": true}')], "body string, headers string")
    df.write.format("deltamq").option("url", url(broker)).option("routingKey", "sink-c") \
        .option("persistent", "false").mode("append").save()
    [(body, props)] = drain(broker, "sink-c")
    assert body == "héllo".encode() and props.headers == {"k": 7, "ok": True} and props.delivery_mode == 1


@pytest.mark.parametrize("select, options, error", [
    ("body, 'x' AS colour", {}, "cannot publish column(s) 'colour'"),
    ("42 AS body", {}, "column 'body' must be binary or string"),
    ("'x' AS exchange", {}, "needs a 'body' column"),
    ("body", {"routingkey": "q", "speed": "fast"}, "unknown option 'speed'"),
    ("body", {"persistent": "maybe"}, "option 'persistent' must be true or false"),
    ("body", {"url": "http://localhost"}, "option 'url' must be an AMQP URL"),
])
def test_bad_columns_and_options_are_refused_before_anything_is_published(
        spark: Any, broker: DeltaMQProcess, select: str, options: dict[str, str], error: str) -> None:
    declare(broker, "sink-d")
    df = spark.createDataFrame([(b"x",)], "body binary").selectExpr(*select.split(", "))
    writer = df.write.format("deltamq").option("url", url(broker)).option("routingKey", "sink-d")
    with pytest.raises(Exception) as caught:
        writer.options(**options).mode("append").save()
    assert error in str(caught.value)
    assert drain(broker, "sink-d") == []


def test_a_bad_row_fails_the_task_with_what_to_fix(spark: Any, broker: DeltaMQProcess) -> None:
    declare(broker, "sink-e")
    df = spark.createDataFrame([(b"x", {"colour": "red"})], "body binary, properties map<string,string>")
    with pytest.raises(Exception) as caught:
        df.write.format("deltamq").option("url", url(broker)).option("routingKey", "sink-e") \
            .mode("append").save()
    assert "unknown message property 'colour'" in str(caught.value)
    assert drain(broker, "sink-e") == []


def test_a_publish_the_broker_refuses_fails_the_write_with_the_brokers_reason(
        spark: Any, broker: DeltaMQProcess) -> None:
    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(Exception) as caught:
        df.write.format("deltamq").option("url", url(broker)).option("exchange", "no-such-exchange") \
            .mode("append").save()
    assert "404" in str(caught.value) and "no-such-exchange" in str(caught.value)


def test_a_stream_publishes_every_row_once_across_a_replayed_batch_and_a_broker_crash(
        spark: Any, broker: DeltaMQProcess, tmp_path: Path) -> None:
    declare(broker, "stream")
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def add_file(number: int) -> None:
        lines = "".join(f"row-{number}-{i}\n" for i in range(6))
        (source / f"part-{number}.txt").write_text(lines)

    def run() -> None:
        stream = (spark.readStream.option("maxFilesPerTrigger", 1).text(str(source))
                  .selectExpr("value AS body").repartition(2, "body"))    # two partitions, by content
        query = (stream.writeStream.format("deltamq").option("url", url(broker))
                 .option("routingKey", "stream").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    for number in range(3):
        add_file(number)
    run()                                                # batches 0, 1 and 2
    commits = checkpoint / "commits"
    assert sorted(p.name for p in commits.iterdir() if not p.name.startswith(".")) == ["0", "1", "2"]
    # the broker took batch 2; Spark's commit of it is lost (the driver died in between) ...
    for name in ("2", ".2.crc"):
        (commits / name).unlink(missing_ok=True)
    # ... and the broker crashes too, then recovers what it committed from its journal
    assert broker.proc is not None
    os.killpg(broker.proc.pid, signal.SIGKILL)
    broker.proc.wait(timeout=30)
    broker.start()
    run()                                                # Spark replays batch 2: nothing new
    add_file(3)
    run()                                                # batch 3: published
    bodies = [body.decode() for body, _props in drain(broker, "stream")]
    expected = [f"row-{n}-{i}" for n in range(4) for i in range(6)]
    assert sorted(bodies) == sorted(expected)            # every row, none twice
    assert len(bodies) == len(set(bodies))


def test_a_partition_the_broker_already_took_is_not_published_again(
        spark: Any, broker: DeltaMQProcess, tmp_path: Path) -> None:
    """Exactly once per partition: a batch half committed before a crash publishes only its other half."""
    declare(broker, "halves")
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    (source / "a.txt").write_text("first\n")

    def run() -> None:
        stream = spark.readStream.option("maxFilesPerTrigger", 1).text(str(source)) \
            .selectExpr("value AS body").repartition(2, "body")
        query = (stream.writeStream.format("deltamq").option("url", url(broker))
                 .option("routingKey", "halves").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    run()                                                # batch 0
    assert [b for b, _p in drain(broker, "halves")] == [b"first"]
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    # partition 0 of batch 1 reached the broker before the crash (as the sink marks it)
    ch = channel(broker)
    ch.tx_select()
    ch.basic_publish("", "halves", b"taken-before-the-crash", pika.BasicProperties(
        delivery_mode=2, headers={PRODUCER_HEADER: f"{query_id}/0", SEQUENCE_HEADER: 1}))
    ch.tx_commit()
    ch.connection.close()
    lines = [f"line-{i}" for i in range(40)]
    (source / "b.txt").write_text("".join(f"{line}\n" for line in lines))
    run()                                                # batch 1: partition 0 is a replay
    published = {b.decode() for b, _p in drain(broker, "halves")}
    assert "taken-before-the-crash" in published
    rest = published - {"taken-before-the-crash"}
    assert rest and rest < set(lines)                    # partition 1's rows only, not partition 0's
