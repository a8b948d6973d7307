"""A representative tour with kombu over py-amqp (``pyamqp://``), the stack
Celery runs on: SimpleQueue, Producer/Consumer, declarations, acks and errors."""

from __future__ import annotations

import queue as stdqueue
import socket
from typing import Any

import amqp.exceptions
import kombu
import pytest
from kombu import Consumer, Exchange, Producer, Queue

from .support import BrokerEndpoint, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]


def drain(connection: kombu.Connection, until: list[Any], n: int, timeout: float = 5.0) -> None:
    deadline = timeout
    while len(until) < n:
        try:
            connection.drain_events(timeout=deadline)
        except socket.timeout:
            raise AssertionError(f"only {len(until)} of {n} messages arrived")


def test_url_connect(broker: BrokerEndpoint) -> None:
    with kombu.Connection(broker.url("pyamqp").replace(f":{broker.port}/%2F", f":{broker.port}//"),
                          connect_timeout=10) as c:
        c.connect()
        assert c.connected
        assert c.connection.server_capabilities.get("publisher_confirms") is True


def test_simple_queue_fifo(kombu_conn: kombu.Connection) -> None:
    name = unique("q.simple")
    sq = kombu_conn.SimpleQueue(name, queue_opts={"auto_delete": True})
    try:
        for i in range(5):
            sq.put({"n": i, "text": "héllo"}, serializer="json")
        got = []
        for _ in range(5):
            m = sq.get(block=True, timeout=5)
            got.append(m.payload)
            m.ack()
        assert got == [{"n": i, "text": "héllo"} for i in range(5)]
        with pytest.raises(stdqueue.Empty):
            sq.get(block=False)
        assert sq.qsize() == 0
    finally:
        sq.close()


def test_producer_consumer_direct_and_topic(kombu_conn: kombu.Connection) -> None:
    direct = Exchange(unique("x.direct"), type="direct", auto_delete=True)
    topic = Exchange(unique("x.topic"), type="topic", auto_delete=True)
    q_images = Queue(unique("q.images"), direct, routing_key="images", auto_delete=True)
    q_eu = Queue(unique("q.eu"), topic, routing_key="orders.eu.#", auto_delete=True)
    received: list[tuple[str, Any]] = []

    def on_message(body: Any, message: kombu.Message) -> None:
        received.append((message.delivery_info["routing_key"], body))
        message.ack()

    with kombu_conn.channel() as ch:
        consumer = Consumer(ch, [q_images, q_eu], callbacks=[on_message], accept=["json"])
        consumer.consume()
        producer = Producer(kombu_conn.channel(), serializer="json")
        producer.publish({"img": 1}, exchange=direct, routing_key="images", declare=[q_images])
        producer.publish({"img": 2}, exchange=direct, routing_key="videos")
        producer.publish({"o": 1}, exchange=topic, routing_key="orders.eu.fr", declare=[q_eu])
        producer.publish({"o": 2}, exchange=topic, routing_key="orders.us.ny")
        producer.publish({"o": 3}, exchange=topic, routing_key="orders.eu")
        drain(kombu_conn, received, 3)
        assert sorted(received, key=str) == sorted(
            [("images", {"img": 1}), ("orders.eu.fr", {"o": 1}), ("orders.eu", {"o": 3})], key=str)
        consumer.cancel()


def test_prefetch_and_requeue(kombu_conn: kombu.Connection) -> None:
    q = Queue(unique("q.kombu-prefetch"), auto_delete=False)
    producer = Producer(kombu_conn.channel(), serializer="json")
    for i in range(4):
        producer.publish(i, routing_key=q.name, declare=[q])
    seen: list[kombu.Message] = []
    ch = kombu_conn.channel()
    consumer = Consumer(ch, [q], callbacks=[lambda body, m: seen.append(m)], accept=["json"],
                        prefetch_count=1)
    consumer.consume()
    drain(kombu_conn, seen, 1)
    # prefetch 1: the broker keeps the other three until we settle
    assert q(kombu_conn.channel()).queue_declare(passive=True).message_count == 3
    assert [m.payload for m in seen] == [0]
    seen[0].requeue()
    drain(kombu_conn, seen, 2)
    assert seen[1].payload == 0 and seen[1].delivery_info["redelivered"] is True
    seen[1].ack()
    drain(kombu_conn, seen, 3)
    seen[2].reject()  # requeue=False: dropped
    drain(kombu_conn, seen, 4)
    assert [m.payload for m in seen] == [0, 0, 1, 2]
    seen[3].ack()
    drain(kombu_conn, seen, 5)
    assert seen[4].payload == 3 and seen[4].delivery_info["redelivered"] is False
    seen[4].ack()
    consumer.cancel()
    assert q(kombu_conn.channel()).queue_declare(passive=True).message_count == 0
    q(kombu_conn.channel()).delete()


def test_priority_queue_via_kombu(kombu_conn: kombu.Connection) -> None:
    q = Queue(unique("q.kprio"), max_priority=10, auto_delete=True)
    producer = Producer(kombu_conn.channel(), serializer="json")
    for body, prio in (("low", 1), ("top", 10), ("mid", 5)):
        producer.publish(body, routing_key=q.name, declare=[q], priority=prio)
    bound = q(kombu_conn.channel())
    got = [bound.get(no_ack=True).payload for _ in range(3)]
    assert got == ["top", "mid", "low"]


def test_confirm_publish_nack(broker: BrokerEndpoint) -> None:
    with broker.kombu(transport_options={"confirm_publish": True}) as c:
        c.connect()
        q = Queue(unique("q.kfull"), auto_delete=True,
                  queue_arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        producer = Producer(c.channel())
        producer.publish(b"one", routing_key=q.name, declare=[q])
        with pytest.raises(amqp.exceptions.MessageNacked):
            producer.publish(b"two", routing_key=q.name)


def test_passive_declare_missing_queue(kombu_conn: kombu.Connection) -> None:
    q = Queue(unique("q.nope"))
    with pytest.raises(amqp.exceptions.NotFound) as info:
        q(kombu_conn.channel()).queue_declare(passive=True)
    assert info.value.reply_code == 404 and q.name in info.value.reply_text
    # kombu's default channel is gone with the error; the connection is not
    assert kombu_conn.connected
    assert q(kombu_conn.channel()).queue_declare(nowait=False) is not None
    q(kombu_conn.channel()).delete()


def test_inequivalent_exchange_redeclare(kombu_conn: kombu.Connection) -> None:
    name = unique("x.k")
    Exchange(name, type="direct", auto_delete=True)(kombu_conn.channel()).declare()
    with pytest.raises(amqp.exceptions.PreconditionFailed) as info:
        Exchange(name, type="fanout", auto_delete=True)(kombu_conn.channel()).declare()
    assert info.value.reply_code == 406
    Exchange(name)(kombu_conn.channel()).delete()
