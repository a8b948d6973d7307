"""Queue class (0-9-1 §1.7, §3.1.4): declare (server-named, passive, exclusive,
auto-delete), bind/unbind, purge, delete (if-unused, if-empty), declare-ok counts."""

from __future__ import annotations


import pika
import pika.exceptions
import pytest

from tests.waiting import wait_until

from .support import BrokerEndpoint, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]


def test_server_named_queues(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ok1 = ch.queue_declare("", exclusive=True).method
    ok2 = ch.queue_declare("", exclusive=True).method
    assert ok1.queue and ok2.queue and ok1.queue != ok2.queue
    assert (ok1.message_count, ok1.consumer_count) == (0, 0)
    ch.basic_publish("", ok1.queue, b"to a generated name")
    assert ch.basic_get(ok1.queue, auto_ack=True)[2] == b"to a generated name"


def test_passive_declare(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = unique("q.passive")
    ch.queue_declare(q, auto_delete=True)
    ch.basic_publish("", q, b"1")
    ch.basic_publish("", q, b"2")
    ok = wait_until(lambda: (m := ch.queue_declare(q, passive=True).method).message_count == 2 and m)
    assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 2, 0)
    missing = unique("q.missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(missing, passive=True)
    assert info.value.reply_code == 404
    assert "NOT_FOUND" in info.value.reply_text and missing in info.value.reply_text
    conn.channel().queue_delete(q)


def test_declare_ok_counts_ready_messages_and_consumers(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = unique("q.counts")
    ch.queue_declare(q, auto_delete=True)
    for i in range(5):
        ch.basic_publish("", q, str(i).encode())
    wait_until(lambda: ch.queue_declare(q, passive=True).method.message_count == 5)
    consumers = []
    for _ in range(2):
        c = conn.channel()
        c.basic_qos(prefetch_count=1)
        c.basic_consume(q, lambda *a: None)  # never acks: one unacked message each
        consumers.append(c)
    conn.process_data_events(0.2)
    ok = wait_until(lambda: (m := ch.queue_declare(q, passive=True).method).message_count == 3 and m,
                    what="2 of 5 messages held unacked by 2 consumers")
    assert ok.consumer_count == 2
    # a non-passive equivalent redeclare reports the same
    ok = ch.queue_declare(q, auto_delete=True).method
    assert (ok.message_count, ok.consumer_count) == (3, 2)


@pytest.mark.parametrize("first,second", [
    (dict(durable=False), dict(durable=True)),
    (dict(arguments={"x-max-length": 10}), dict(arguments={"x-max-length": 20})),
    (dict(arguments={}), dict(arguments={"x-message-ttl": 1000})),
], ids=["durable", "max-length", "ttl-added"])
def test_inequivalent_queue_redeclare(conn: pika.BlockingConnection, first: dict,
                                      second: dict) -> None:
    ch = conn.channel()
    q = unique("q.redeclare")
    ch.queue_declare(q, **first)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, **second)
    assert info.value.reply_code == 406
    assert "PRECONDITION_FAILED" in info.value.reply_text
    assert "inequivalent" in info.value.reply_text and q in info.value.reply_text
    conn.channel().queue_delete(q)


@pytest.mark.parametrize("key,value", [
    ("x-message-ttl", -1), ("x-expires", 0), ("x-max-length", -1), ("x-max-length-bytes", -5),
    ("x-overflow", "bogus"), ("x-max-priority", 300), ("x-message-ttl", "abc"),
    ("x-single-active-consumer", "yes"), ("x-dead-letter-routing-key", "no-dlx"),
])
def test_invalid_queue_argument_is_precondition_failed(conn: pika.BlockingConnection, key: str,
                                                       value: object) -> None:
    ch = conn.channel()
    q = unique("q.badarg")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={key: value})
    assert info.value.reply_code == 406
    assert f"invalid arg '{key}' for queue '{q}'" in info.value.reply_text
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().queue_declare(q, passive=True)  # nothing was created
    assert info.value.reply_code == 404


def test_amq_prefix_queue_is_access_refused(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("amq." + unique("q"))
    assert info.value.reply_code == 403


def test_exclusive_queue_is_locked_to_its_connection(broker: BrokerEndpoint) -> None:
    q = unique("q.exclusive")
    with broker.pika() as owner, broker.pika() as other:
        och = owner.channel()
        och.queue_declare(q, exclusive=True)
        och.basic_publish("", q, b"mine")
        for attempt in (lambda ch: ch.queue_declare(q, exclusive=True),
                        lambda ch: ch.queue_declare(q),
                        lambda ch: ch.queue_declare(q, passive=True),
                        lambda ch: ch.basic_get(q),
                        lambda ch: ch.basic_consume(q, lambda *a: None),
                        lambda ch: ch.queue_delete(q)):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                attempt(other.channel())
            assert info.value.reply_code == 405
            assert "RESOURCE_LOCKED" in info.value.reply_text
        # the owner may use it from any of its channels
        assert owner.channel().basic_get(q, auto_ack=True)[2] == b"mine"
        owner.close()

        def gone() -> bool:
            try:
                other.channel().queue_declare(q, passive=True)
                return False
            except pika.exceptions.ChannelClosedByBroker as e:
                assert e.reply_code == 404
                return True
        wait_until(gone, what="exclusive queue deleted when its owner closed")


def test_auto_delete_queue_goes_with_its_last_consumer(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = unique("q.autodelete")
    ch.queue_declare(q, auto_delete=True)
    conn.process_data_events(0.2)
    ch.queue_declare(q, passive=True)  # never consumed from: stays
    t1 = ch.basic_consume(q, lambda *a: None)
    t2 = ch.basic_consume(q, lambda *a: None)
    ch.basic_cancel(t1)
    assert ch.queue_declare(q, passive=True).method.consumer_count == 1
    ch.basic_cancel(t2)

    def gone() -> bool:
        try:
            conn.channel().queue_declare(q, passive=True)
            return False
        except pika.exceptions.ChannelClosedByBroker as e:
            assert e.reply_code == 404
            return True
    wait_until(gone, what="auto-delete queue deleted after its last consumer")


def test_bind_and_unbind(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    x = unique("x")
    ch.exchange_declare(x, exchange_type="direct", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x, "a")
    ch.queue_bind(q, x, "b")
    ch.queue_bind(q, x, "a")  # duplicate binding is a no-op
    for key in ("a", "b", "c"):
        ch.basic_publish(x, key, key.encode())
    ch.queue_unbind(q, x, "a")
    ch.basic_publish(x, "a", b"a2")
    ch.basic_publish(x, "b", b"b2")
    got = []
    while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
        got.append(m[2])
    assert got == [b"a", b"b", b"b2"]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(q, unique("x.missing"), "k")
    assert info.value.reply_code == 404


def test_bind_missing_queue_is_not_found(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(unique("q.missing"), "amq.direct", "k")
    assert info.value.reply_code == 404


def test_purge(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    for i in range(4):
        ch.basic_publish("", q, str(i).encode())
    method, _, body = ch.basic_get(q, auto_ack=False)  # one unacked: purge leaves it
    assert body == b"0"
    assert ch.queue_purge(q).method.message_count == 3
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.basic_nack(method.delivery_tag, requeue=True)
    assert ch.basic_get(q, auto_ack=True)[2] == b"0"
    assert ch.queue_purge(q).method.message_count == 0


def test_delete_reports_message_count(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = unique("q.delete")
    ch.queue_declare(q)
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish("", q, b"x")
    assert ch.queue_delete(q).method.message_count == 3
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, passive=True)
    assert info.value.reply_code == 404


def test_delete_if_unused_and_if_empty(conn: pika.BlockingConnection) -> None:
    consumer = conn.channel()
    q = unique("q.ifunused")
    consumer.queue_declare(q)
    consumer.basic_consume(q, lambda *a: None)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_delete(q, if_unused=True)
    assert info.value.reply_code == 406 and "PRECONDITION_FAILED" in info.value.reply_text
    ch = conn.channel()
    assert ch.queue_declare(q, passive=True).method.consumer_count == 1

    q2 = unique("q.ifempty")
    ch.queue_declare(q2)
    ch.confirm_delivery()
    ch.basic_publish("", q2, b"not empty")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_delete(q2, if_empty=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    wait_until(lambda: ch.queue_declare(q2, passive=True).method.message_count == 1)
    assert ch.basic_get(q2, auto_ack=True)[2] == b"not empty"
    assert ch.queue_delete(q2, if_empty=True).method.message_count == 0
    consumer.close()
    assert ch.queue_delete(q, if_unused=True).method.message_count == 0
