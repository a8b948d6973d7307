"""What clients publish to a running broker is what Spark reads from its journal.

A real ``deltamq serve`` (default configuration: a ``delta`` node) takes
persistent messages from pika; Spark's ``queue_history`` view must show the
same bodies, headers and routing keys, in publish order, per queue -- after a
broker restart, and again after the journal's compaction and checkpoint.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from chispa import assert_df_equality

from lakehouse.delta_table import AppendOnlyTable
from lakehouse.journal_schema import JOURNAL_SCHEMA
from lakehouse.maintenance import TableMaintenance
from tests.integration.conftest import DeltaMQProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as proc:
        yield proc


def stop(proc: DeltaMQProcess) -> None:
    assert proc.proc is not None
    os.killpg(proc.proc.pid, signal.SIGTERM)
    proc.proc.wait(timeout=30)


def publish(proc: DeltaMQProcess, start: int, count: int) -> list[tuple[str, str, bytes, str]]:
    """Publish to a topic exchange bound to two queues; the (queue, key, body, headers JSON) expected."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("events", "topic", durable=True)
    for queue, pattern in (("all", "#"), ("orders", "order.*")):
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, "events", pattern)
    expected = []
    for i in range(start, start + count):
        key = "order.created" if i % 2 else "user.seen"
        body = b"payload-%d" % i
        ch.basic_publish("events", key, body, pika.BasicProperties(
            delivery_mode=2, headers={"n": i, "kind": key}, content_type="text/plain"))
        header_json = '{"kind": "%s", "n": %d}' % (key, i)
        expected += [("all", key, body, header_json)]
        if key.startswith("order."):
            expected += [("orders", key, body, header_json)]
    conn.close()
    return expected


def history(spark: Any, data_dir: Path) -> Any:
    from lakehouse.spark import register_views

    register_views(spark, data_dir)
    return spark.sql("SELECT queue, routing_key, body, headers FROM queue_history "
                     "WHERE exchange = 'events'")


def test_spark_reads_what_clients_published_across_restart_and_compaction(broker: DeltaMQProcess) -> None:
    from lakehouse.spark import spark_session

    data_dir = broker.dir / "data"
    expected = publish(broker, 0, 20)
    stop(broker)                                          # written before the restart ...
    broker.start()
    expected += publish(broker, 20, 10)                   # ... and after it
    stop(broker)

    spark = spark_session(data_dir)
    schema = "queue string, routing_key string, body binary, headers string"
    assert_df_equality(history(spark, data_dir), spark.createDataFrame(expected, schema),
                       ignore_row_order=True, ignore_nullable=True)
    # publish order is message id order, per queue
    for queue in ("all", "orders"):
        bodies = [r.body for r in spark.sql(
            f"SELECT body FROM queue_history WHERE queue = '{queue}' ORDER BY message_id").collect()]
        assert bodies == [bytes(b) for q, _k, b, _h in expected if q == queue]

    journal = AppendOnlyTable(data_dir / "default" / "journal", JOURNAL_SCHEMA)
    journal.open()
    maintenance = TableMaintenance(journal, compact_min_files=2)
    assert maintenance.compact() > 1
    journal.checkpoint()
    assert_df_equality(history(spark, data_dir), spark.createDataFrame(expected, schema),
                       ignore_row_order=True, ignore_nullable=True)
    live = spark.sql("SELECT count(*) AS n FROM live_messages").collect()[0].n
    assert live == len(expected)                          # nothing consumed: everything is live

    broker.start()                                        # the broker recovers from compacted files
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port))
    assert conn.channel().queue_declare("orders", passive=True).method.message_count == 15
    conn.close()
