"""A representative tour with kombu over py-amqp (``pyamqp://``), the stack
Celery runs on: SimpleQueue, Producer/Consumer, declarations, acks and errors."""

from __future__ import annotations

import queue as stdqueue
import socket
from typing import Any, Iterator

import amqp.exceptions
import kombu
import pytest
from kombu import Consumer, Exchange, Producer, Queue

from .support import BrokerEndpoint, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]


def kombu_connection(broker: BrokerEndpoint, **kw: Any) -> kombu.Connection:
    return kombu.Connection(hostname=broker.host, port=broker.port, userid=broker.user,
                            password=broker.password, virtual_host=broker.vhost,
                            transport="pyamqp", connect_timeout=10, **kw)


@pytest.fixture
def conn(broker: BrokerEndpoint) -> Iterator[kombu.Connection]:
    with kombu_connection(broker) as c:
        c.connect()
        yield c


def drain(conn: kombu.Connection, until: list[Any], n: int, timeout: float = 5.0) -> None:
    deadline = timeout
    while len(until) < n:
        try:
            conn.drain_events(timeout=deadline)
        except socket.timeout:
            raise AssertionError(f"only {len(until)} of {n} messages arrived")


def test_url_connect(broker: BrokerEndpoint) -> None:
    with kombu.Connection(broker.url("pyamqp").replace(f":{broker.port}/%2F", f":{broker.port}//"),
                          connect_timeout=10) as c:
        c.connect()
        assert c.connected
        assert c.connection.server_capabilities.get("publisher_confirms") is True


def test_simple_queue_fifo(conn: kombu.Connection) -> None:
    name = unique("q.simple")
    sq = conn.SimpleQueue(name, queue_opts={"auto_delete": True})
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


def test_producer_consumer_direct_and_topic(conn: kombu.Connection) -> None:
    direct = Exchange(unique("x.direct"), type="direct", auto_delete=True)
    topic = Exchange(unique("x.topic"), type="topic", auto_delete=True)
    q_images = Queue(unique("q.images"), direct, routing_key="images", auto_delete=True)
    q_eu = Queue(unique("q.eu"), topic, routing_key="orders.eu.#", auto_delete=True)
    received: list[tuple[str, Any]] = []

    def on_message(body: Any, message: kombu.Message) -> None:
        received.append((message.delivery_info["routing_key"], body))
        message.ack()

    with conn.channel() as ch:
        consumer = Consumer(ch, [q_images, q_eu], callbacks=[on_message], accept=["json"])
        consumer.consume()
        producer = Producer(conn.channel(), serializer="json")
        producer.publish({"img": 1}, exchange=direct, routing_key="images", declare=[q_images])
        producer.publish({"img": 2}, exchange=direct, routing_key="videos")
        producer.publish({"o": 1}, exchange=topic, routing_key="orders.eu.fr", declare=[q_eu])
        producer.publish({"o": 2}, exchange=topic, routing_key="orders.us.ny")
        producer.publish({"o": 3}, exchange=topic, routing_key="orders.eu")
        drain(conn, received, 3)
        assert sorted(received, key=str) == sorted(
            [("images", {"img": 1}), ("orders.eu.fr", {"o": 1}), ("orders.eu", {"o": 3})], key=str)
        consumer.cancel()


def test_prefetch_and_requeue(conn: kombu.Connection) -> None:
    q = Queue(unique("q.kombu-prefetch"), auto_delete=False)
    producer = Producer(conn.channel(), serializer="json")
    for i in range(4):
        producer.publish(i, routing_key=q.name, declare=[q])
    seen: list[kombu.Message] = []
    ch = conn.channel()
    consumer = Consumer(ch, [q], callbacks=[lambda body, m: seen.append(m)], accept=["json"],
                        prefetch_count=1)
    consumer.consume()
    drain(conn, seen, 1)
    with pytest.raises(socket.timeout):
        conn.drain_events(timeout=0.4)  # prefetch 1: nothing more until we settle
    assert [m.payload for m in seen] == [0]
    seen[0].requeue()
    drain(conn, seen, 2)
    assert seen[1].payload == 0 and seen[1].delivery_info["redelivered"] is True
    seen[1].ack()
    drain(conn, seen, 3)
    seen[2].reject()  # requeue=False: dropped
    drain(conn, seen, 4)
    assert [m.payload for m in seen] == [0, 0, 1, 2]
    seen[3].ack()
    drain(conn, seen, 5)
    assert seen[4].payload == 3 and seen[4].delivery_info["redelivered"] is False
    seen[4].ack()
    consumer.cancel()
    assert q(conn.channel()).queue_declare(passive=True).message_count == 0
    q(conn.channel()).delete()


def test_priority_queue_via_kombu(conn: kombu.Connection) -> None:
    q = Queue(unique("q.kprio"), max_priority=10, auto_delete=True)
    producer = Producer(conn.channel(), serializer="json")
    for body, prio in (("low", 1), ("top", 10), ("mid", 5)):
        producer.publish(body, routing_key=q.name, declare=[q], priority=prio)
    bound = q(conn.channel())
    got = [bound.get(no_ack=True).payload for _ in range(3)]
    assert got == ["top", "mid", "low"]


def test_confirm_publish_nack(broker: BrokerEndpoint) -> None:
    with kombu_connection(broker, transport_options={"confirm_publish": True}) as c:
        c.connect()
        q = Queue(unique("q.kfull"), auto_delete=True,
                  queue_arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        producer = Producer(c.channel())
        producer.publish(b"one", routing_key=q.name, declare=[q])
        with pytest.raises(amqp.exceptions.MessageNacked):
            producer.publish(b"two", routing_key=q.name)


def test_passive_declare_missing_queue(conn: kombu.Connection) -> None:
    q = Queue(unique("q.nope"))
    with pytest.raises(amqp.exceptions.NotFound) as info:
        q(conn.channel()).queue_declare(passive=True)
    assert info.value.reply_code == 404 and q.name in info.value.reply_text
    # kombu's default channel is gone with the error; the connection is not
    assert conn.connected
    assert q(conn.channel()).queue_declare(nowait=False) is not None
    q(conn.channel()).delete()


def test_inequivalent_exchange_redeclare(conn: kombu.Connection) -> None:
    name = unique("x.k")
    Exchange(name, type="direct", auto_delete=True)(conn.channel()).declare()
    with pytest.raises(amqp.exceptions.PreconditionFailed) as info:
        Exchange(name, type="fanout", auto_delete=True)(conn.channel()).declare()
    assert info.value.reply_code == 406
    Exchange(name)(conn.channel()).delete()
