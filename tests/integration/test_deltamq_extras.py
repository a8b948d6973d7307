"""What DeltaMQ does beyond RabbitMQ, and where the two genuinely differ.

Tests marked ``deltamq_only`` use Broker-J's declaration arguments and queue
types (priority levels, last-value and sorted queues, delivery counts, the
qpid.* limits) or behaviour RabbitMQ does not have; they are skipped when the
broker under test is RabbitMQ.  The documented differences:

* RabbitMQ rejects the virtual host ``""``; Broker-J (and DeltaMQ) open the
  default virtual host for it.
* RabbitMQ 3.x enforces ``x-delivery-limit`` only on quorum queues
  (``x-queue-type: quorum``) and ignores it on classic queues; DeltaMQ has one
  queue type and enforces it there.  ``test_delivery_limit_same_semantics``
  runs on both, declaring the queue the way each broker needs.
* An unknown method id: RabbitMQ drops the socket without a connection.close;
  DeltaMQ answers with a connection exception (503 or 540) first.
* basic.qos with a prefetch-size: RabbitMQ refuses it (540 NOT_IMPLEMENTED);
  Broker-J and DeltaMQ limit unacknowledged bytes.
"""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.waiting import wait_until

from .support import FRAME_METHOD, BrokerEndpoint, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]
deltamq_only = pytest.mark.deltamq_only


def drain(ch: BlockingChannel, q: str) -> list[bytes]:
    out = []
    while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
        out.append(m[2])
    return out


def declare(ch: BlockingChannel, arguments: dict[str, Any], **kw: Any) -> str:
    q = unique("q.extra")
    ch.queue_declare(q, arguments=arguments, **kw)
    return q


def get_one(ch: BlockingChannel, q: str, auto_ack: bool = False) -> tuple[Any, Any, bytes]:
    return wait_until(lambda: (m := ch.basic_get(q, auto_ack=auto_ack))[0] is not None and m,
                      what=f"a message on {q}")


def dead_letter_setup(ch: BlockingChannel) -> tuple[str, str]:
    dlx = unique("x.dlx")
    ch.exchange_declare(dlx, exchange_type="fanout", auto_delete=True)
    dlq = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(dlq, dlx)
    return dlx, dlq


def deliveries_until_dead_lettered(ch: BlockingChannel, q: str, dlq: str,
                                   most: int = 10) -> tuple[int, Any]:
    """nack-requeue every delivery of the one message on q; count deliveries until it
    shows up on dlq instead.  Returns (deliveries, dead-lettered properties)."""
    deliveries = 0
    for _ in range(most):
        def where_is_it() -> tuple[str, tuple[Any, Any, bytes]] | None:
            m = ch.basic_get(q)
            if m[0] is not None:
                return "queue", m
            d = ch.basic_get(dlq, auto_ack=True)
            if d[0] is not None:
                return "dead-letter queue", d
            return None
        place, (method, props, _) = wait_until(where_is_it, what="the message somewhere")
        if place == "dead-letter queue":
            return deliveries, props
        deliveries += 1
        ch.basic_nack(method.delivery_tag, requeue=True)
    raise AssertionError(f"not dead-lettered after {most} deliveries")


# -- virtual hosts -------------------------------------------------------------------------

@deltamq_only
def test_empty_vhost_name_opens_default(broker: BrokerEndpoint) -> None:
    with broker.pika(virtual_host="") as c:
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"default vhost")
        assert ch.basic_get(q, auto_ack=True)[2] == b"default vhost"


@deltamq_only
def test_empty_and_slash_vhost_are_the_same_vhost(broker: BrokerEndpoint) -> None:
    q = unique("q.shared-vhost")
    with broker.pika(virtual_host="/") as a, broker.pika(virtual_host="") as b:
        a.channel().queue_declare(q, auto_delete=False)
        b.channel().queue_declare(q, passive=True)
        a.channel().queue_delete(q)


# -- Broker-J queue types ------------------------------------------------------------------

@deltamq_only
def test_qpid_priorities_ten_levels(ch: BlockingChannel) -> None:
    q = declare(ch, {"x-qpid-priorities": 10})
    for body, prio in (("p1", 1), ("p9", 9), ("p5", 5), ("p9b", 9), ("none", None)):
        ch.basic_publish("", q, body.encode(), pika.BasicProperties(priority=prio))
    assert drain(ch, q) == [b"p9", b"p9b", b"p5", b"p1", b"none"]
    ch.queue_delete(q)


@deltamq_only
def test_qpid_priorities_levels_centred_on_jms_range(ch: BlockingChannel) -> None:
    # Broker-J PriorityQueueList: N levels, offset 5 - (N+1)//2; 3 levels → 0-3 | 4 | 5-9
    q = declare(ch, {"x-qpid-priorities": 3})
    for body, prio in (("a0", 0), ("b9", 9), ("c4", 4), ("d3", 3), ("e5", 5)):
        ch.basic_publish("", q, body.encode(), pika.BasicProperties(priority=prio))
    assert drain(ch, q) == [b"b9", b"e5", b"c4", b"a0", b"d3"]
    ch.queue_delete(q)


@deltamq_only
def test_last_value_queue_by_key_header(ch: BlockingChannel) -> None:
    q = declare(ch, {"qpid.last_value_queue_key": "symbol"})
    for symbol, price in (("ACME", "1"), ("INIT", "7"), ("ACME", "2"), ("ACME", "3"),
                          ("ZETA", "9")):
        ch.basic_publish("", q, f"{symbol}={price}".encode(),
                         pika.BasicProperties(headers={"symbol": symbol}))
    ch.basic_publish("", q, b"no key")  # a message without the key is just queued
    assert ch.queue_declare(q, passive=True).method.message_count == 4
    # the newest value replaces the old one and takes its place at the tail
    assert drain(ch, q) == [b"INIT=7", b"ACME=3", b"ZETA=9", b"no key"]
    ch.queue_delete(q)


@deltamq_only
def test_last_value_queue_keeps_acquired_message(ch: BlockingChannel) -> None:
    q = declare(ch, {"qpid.last_value_queue_key": "k"})
    props = pika.BasicProperties(headers={"k": "same"})
    ch.basic_publish("", q, b"v1", props)
    held = ch.basic_get(q)[0]          # v1 is acquired (unacked)
    ch.basic_publish("", q, b"v2", props)
    ch.basic_publish("", q, b"v3", props)  # replaces v2, not the acquired v1
    ch.basic_ack(held.delivery_tag)
    assert drain(ch, q) == [b"v3"]
    ch.queue_delete(q)


@deltamq_only
def test_last_value_queue_default_key(ch: BlockingChannel) -> None:
    q = declare(ch, {"qpid.last_value_queue": True})
    for v in (b"1", b"2"):
        ch.basic_publish("", q, v, pika.BasicProperties(headers={"qpid.LVQ_key": "k"}))
    assert drain(ch, q) == [b"2"]
    ch.queue_delete(q)


@deltamq_only
def test_sorted_queue_by_key_header(ch: BlockingChannel) -> None:
    q = declare(ch, {"qpid.queue_sort_key": "rank"})
    for rank in ("m", "c", "x", "a", "c"):
        ch.basic_publish("", q, f"rank-{rank}".encode(),
                         pika.BasicProperties(headers={"rank": rank}))
    assert drain(ch, q) == [b"rank-a", b"rank-c", b"rank-c", b"rank-m", b"rank-x"]
    ch.queue_delete(q)


@deltamq_only
def test_sorted_queue_requeue_goes_back_in_order(ch: BlockingChannel) -> None:
    q = declare(ch, {"qpid.queue_sort_key": "rank"})
    for rank in ("b", "a", "c"):
        ch.basic_publish("", q, rank.encode(), pika.BasicProperties(headers={"rank": rank}))
    first = ch.basic_get(q)
    assert first[2] == b"a"
    ch.basic_nack(first[0].delivery_tag, requeue=True)
    assert drain(ch, q) == [b"a", b"b", b"c"]
    ch.queue_delete(q)


@deltamq_only
def test_qpid_max_count_ring_drops_oldest(ch: BlockingChannel) -> None:
    q = declare(ch, {"qpid.max_count": 2, "qpid.policy_type": "ring"})
    for i in range(1, 5):
        ch.basic_publish("", q, str(i).encode())
    assert drain(ch, q) == [b"3", b"4"]
    ch.queue_delete(q)


@deltamq_only
def test_qpid_max_count_reject_nacks_publish(ch: BlockingChannel) -> None:
    q = declare(ch, {"qpid.max_count": 1, "qpid.policy_type": "reject"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"1")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"2")
    assert drain(ch, q) == [b"1"]
    ch.queue_delete(q)


# -- delivery counts -----------------------------------------------------------------------

def test_delivery_limit_same_semantics(broker: BrokerEndpoint, ch: BlockingChannel) -> None:
    """x-delivery-limit 2: delivered three times (the first and two redeliveries), then
    dead-lettered with reason delivery_limit — on RabbitMQ that needs a quorum queue."""
    dlx, dlq = dead_letter_setup(ch)
    args: dict[str, Any] = {"x-delivery-limit": 2, "x-dead-letter-exchange": dlx}
    if broker.is_rabbitmq:
        args["x-queue-type"] = "quorum"
    q = declare(ch, args, durable=True)
    ch.basic_publish("", q, b"poison")
    deliveries, props = deliveries_until_dead_lettered(ch, q, dlq)
    assert deliveries == 3
    [death] = props.headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == (q, "delivery_limit", 1)
    assert drain(ch, q) == []
    ch.queue_delete(q)


@deltamq_only
def test_delivery_limit_on_classic_queue(ch: BlockingChannel) -> None:
    dlx, dlq = dead_letter_setup(ch)
    q = declare(ch, {"x-delivery-limit": 1, "x-dead-letter-exchange": dlx})
    ch.basic_publish("", q, b"poison")
    deliveries, props = deliveries_until_dead_lettered(ch, q, dlq)
    assert deliveries == 2
    assert props.headers["x-death"][0]["reason"] == "delivery_limit"
    ch.queue_delete(q)


@deltamq_only
def test_qpid_maximum_delivery_count(ch: BlockingChannel) -> None:
    # Broker-J: a message delivered maximumDeliveryAttempts times is not redelivered again
    dlx, dlq = dead_letter_setup(ch)
    q = declare(ch, {"x-qpid-maximum-delivery-count": 2, "x-dead-letter-exchange": dlx})
    ch.basic_publish("", q, b"poison")
    deliveries, props = deliveries_until_dead_lettered(ch, q, dlq)
    assert deliveries == 2
    assert drain(ch, q) == []
    ch.queue_delete(q)


# -- qos by size ---------------------------------------------------------------------------

@deltamq_only
def test_prefetch_size_limits_unacked_bytes(conn: pika.BlockingConnection,
                                            ch: BlockingChannel) -> None:
    q = declare(ch, {})
    for i in range(5):
        ch.basic_publish("", q, bytes([48 + i]) * 400)
    ch.basic_qos(prefetch_size=1000)
    got: list[Any] = []
    ch.basic_consume(q, lambda c, m, p, b: got.append((m, b)))
    wait_until(lambda: conn.process_data_events(0.05) or len(got) >= 2)
    conn.process_data_events(0.4)
    assert [b[:1] for _, b in got] == [b"0", b"1"]  # a third 400 bytes would exceed 1000
    ch.basic_ack(got[0][0].delivery_tag)
    wait_until(lambda: conn.process_data_events(0.05) or len(got) >= 3)
    conn.process_data_events(0.4)
    assert [b[:1] for _, b in got] == [b"0", b"1", b"2"]
    ch.basic_ack(got[-1][0].delivery_tag, multiple=True)
    conn.channel().queue_delete(q)


# -- wire-level differences ------------------------------------------------------------------

@deltamq_only
def test_unknown_method_is_a_connection_exception(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_frame(FRAME_METHOD, 1, b"\x00\x3c\x00\x63")  # basic (60), method 99
        close = raw.wait_connection_close()
        assert close is not None, "expected connection.close before the socket ends"
        assert close.reply_code in (503, 540), (close.reply_code, close.reply_text)


@deltamq_only
def test_unknown_class_is_a_connection_exception(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_frame(FRAME_METHOD, 1, b"\x00\x63\x00\x0a")  # class 99
        close = raw.wait_connection_close()
        assert close is not None
        assert close.reply_code in (503, 540), (close.reply_code, close.reply_text)
