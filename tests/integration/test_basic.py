"""Basic, Confirm and Tx classes (0-9-1 §1.8-1.9, RabbitMQ extensions): qos,
consume/cancel, publish/return, get, ack/nack/reject, recover, confirms, transactions."""

from __future__ import annotations

import datetime
import time
import decimal
from typing import Any

import amqp
import pika
import pika.exceptions
import pytest
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel

from tests.waiting import wait_until

from .support import BrokerEndpoint, assert_closed_with, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]

Delivery = tuple[Any, Any, bytes]


def fresh_queue(ch: BlockingChannel, **kw: Any) -> str:
    return str(ch.queue_declare(unique("q"), auto_delete=kw.pop("auto_delete", False),
                                **kw).method.queue)


def publish_all(ch: BlockingChannel, q: str, bodies: list[bytes]) -> None:
    for b in bodies:
        ch.basic_publish("", q, b)


def ready(ch: BlockingChannel, q: str) -> int:
    return int(ch.queue_declare(q, passive=True).method.message_count)


def drain(ch: BlockingChannel, q: str) -> list[bytes]:
    out = []
    while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
        out.append(m[2])
    return out


class Collector:
    """A pika consumer callback that records deliveries without acking."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []

    def __call__(self, ch: BlockingChannel, method: Any, props: Any, body: bytes) -> None:
        self.deliveries.append((method, props, body))

    @property
    def bodies(self) -> list[bytes]:
        return [d[2] for d in self.deliveries]

    def wait(self, conn: pika.BlockingConnection, n: int, timeout: float = 5.0) -> None:
        def enough() -> bool:
            conn.process_data_events(time_limit=0.05)
            return len(self.deliveries) >= n
        wait_until(enough, timeout, what=f"{n} deliveries (have {len(self.deliveries)})")

    def settle(self, conn: pika.BlockingConnection, seconds: float = 0.4) -> None:
        conn.process_data_events(time_limit=seconds)


# -- qos ------------------------------------------------------------------------------

def test_prefetch_count_limits_unacked(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = fresh_queue(ch)
    publish_all(ch, q, [str(i).encode() for i in range(10)])
    ch.basic_qos(prefetch_count=3)
    got = Collector()
    ch.basic_consume(q, got)
    got.wait(conn, 3)
    got.settle(conn)
    assert got.bodies == [b"0", b"1", b"2"]
    ch.basic_ack(got.deliveries[0][0].delivery_tag)
    got.wait(conn, 4)
    got.settle(conn)
    assert got.bodies == [b"0", b"1", b"2", b"3"]
    ch.basic_ack(got.deliveries[3][0].delivery_tag, multiple=True)  # acks 1..4
    got.wait(conn, 7)
    got.settle(conn)
    assert got.bodies == [str(i).encode() for i in range(7)]
    assert ready(conn.channel(), q) == 3
    ch.basic_qos(prefetch_count=0)  # unlimited from now on
    ch.basic_ack(got.deliveries[-1][0].delivery_tag, multiple=True)
    got.wait(conn, 10)
    assert got.bodies == [str(i).encode() for i in range(10)]
    conn.channel().queue_delete(q)


def test_prefetch_is_per_consumer_unless_global(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q1, q2 = fresh_queue(ch), fresh_queue(ch)
    for q in (q1, q2):
        publish_all(ch, q, [b"m"] * 5)
    # per_consumer_qos: global=false applies to each new consumer separately
    ch.basic_qos(prefetch_count=2, global_qos=False)
    a, b = Collector(), Collector()
    ch.basic_consume(q1, a)
    ch.basic_consume(q2, b)
    a.wait(conn, 2)
    b.wait(conn, 2)
    a.settle(conn)
    assert (len(a.deliveries), len(b.deliveries)) == (2, 2)
    ch.close()
    # global=true (RabbitMQ): one limit shared by all consumers on the channel
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3, global_qos=True)
    c, d = Collector(), Collector()
    ch.basic_consume(q1, c)
    ch.basic_consume(q2, d)
    wait_until(lambda: conn.process_data_events(0.05) or len(c.deliveries) + len(d.deliveries) >= 3)
    c.settle(conn, 0.5)
    assert len(c.deliveries) + len(d.deliveries) == 3
    ch.close()
    conn.channel().queue_delete(q1)
    conn.channel().queue_delete(q2)


# -- consume / cancel ------------------------------------------------------------------

def test_consume_no_ack_delivers_in_order(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = fresh_queue(ch)
    publish_all(ch, q, [f"m{i}".encode() for i in range(20)])
    got = Collector()
    tag = ch.basic_consume(q, got, auto_ack=True)
    got.wait(conn, 20)
    assert got.bodies == [f"m{i}".encode() for i in range(20)]
    first = got.deliveries[0][0]
    assert (first.consumer_tag, first.exchange, first.routing_key, first.redelivered) == \
        (tag, "", q, False)
    assert [d[0].delivery_tag for d in got.deliveries] == list(range(1, 21))
    ch.close()  # nothing was unacked: nothing comes back
    assert ready(conn.channel(), q) == 0
    conn.channel().queue_delete(q)


def test_server_generated_consumer_tag_and_duplicate_tag(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    tag = ch.basic_consume(q, lambda *a: None)
    assert tag
    with pytest.raises(pika.exceptions.DuplicateConsumerTag):
        ch.basic_consume(q, lambda *a: None, consumer_tag=tag)  # pika refuses client-side


def test_duplicate_consumer_tag_on_the_wire_is_not_allowed(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(1, commands.Queue.Declare(queue="", exclusive=True))
        q = raw.expect(commands.Queue.DeclareOk).queue
        raw.send_method(1, commands.Basic.Consume(queue=q, consumer_tag="same"))
        raw.expect(commands.Basic.ConsumeOk)
        raw.send_method(1, commands.Basic.Consume(queue=q, consumer_tag="same"))
        close = raw.wait_connection_close()
        assert_closed_with(close, 530, "NOT_ALLOWED")


def test_consume_from_missing_queue_is_not_found(ch: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(unique("q.missing"), lambda *a: None)
    assert info.value.reply_code == 404


def test_exclusive_consumer(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = fresh_queue(ch, auto_delete=True)
    ch.basic_consume(q, lambda *a: None, exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().basic_consume(q, lambda *a: None)
    assert info.value.reply_code == 403 and "ACCESS_REFUSED" in info.value.reply_text
    ch2 = conn.channel()
    q2 = fresh_queue(ch2, auto_delete=True)
    ch2.basic_consume(q2, lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().basic_consume(q2, lambda *a: None, exclusive=True)
    assert info.value.reply_code == 403


def test_consumer_cancel_notification_when_queue_deleted(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = fresh_queue(ch)
    cancelled: list[Any] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = ch.basic_consume(q, lambda *a: None)
    conn.channel().queue_delete(q)
    wait_until(lambda: conn.process_data_events(0.05) or cancelled,
               what="basic.cancel from the broker")
    assert cancelled[0].consumer_tag == tag
    assert ch.is_open and tag not in ch.consumer_tags


def test_cancel_stops_deliveries_and_keeps_unacked(conn: pika.BlockingConnection,
                                                   ch: BlockingChannel) -> None:
    q = fresh_queue(ch)
    ch.basic_qos(prefetch_count=1)
    got = Collector()
    tag = ch.basic_consume(q, got)
    ch.basic_publish("", q, b"first")
    got.wait(conn, 1)
    assert ch.basic_cancel(tag) == []
    ch.basic_publish("", q, b"second")
    got.settle(conn)
    assert got.bodies == [b"first"]
    # the cancelled consumer's delivery is still ours to ack
    ch.basic_ack(got.deliveries[0][0].delivery_tag)
    assert drain(conn.channel(), q) == [b"second"]
    conn.channel().queue_delete(q)


# -- publish / return ---------------------------------------------------------------------

def test_mandatory_unroutable_is_returned(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    returned: list[tuple[Any, Any, bytes]] = []
    ch.add_on_return_callback(lambda c, m, p, b: returned.append((m, p, b)))
    key = unique("nowhere")
    props = pika.BasicProperties(message_id="r1", headers={"h": 1})
    ch.basic_publish("amq.direct", key, b"come back", props, mandatory=True)
    ch.basic_publish("amq.direct", key, b"silently dropped", props, mandatory=False)
    wait_until(lambda: conn.process_data_events(0.05) or returned, what="basic.return")
    conn.process_data_events(0.3)
    assert len(returned) == 1
    method, p, body = returned[0]
    assert (method.reply_code, method.reply_text, method.exchange, method.routing_key) == \
        (312, "NO_ROUTE", "amq.direct", key)
    assert body == b"come back" and p.message_id == "r1" and p.headers == {"h": 1}


def test_mandatory_unroutable_with_confirms_raises_unroutable(ch: BlockingChannel) -> None:
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        ch.basic_publish("", unique("q.nowhere"), b"lost", mandatory=True)
    [msg] = info.value.messages
    assert msg.method.reply_code == 312 and msg.body == b"lost"


def test_immediate_is_not_implemented(broker: BrokerEndpoint) -> None:
    conn = broker.py_amqp()
    try:
        ch = conn.channel()
        q, _, _ = ch.queue_declare("", exclusive=True)
        ch.basic_publish(amqp.Message(b"now!"), exchange="", routing_key=q, immediate=True)
        with pytest.raises(amqp.exceptions.AMQPNotImplementedError) as info:
            ch.queue_declare("", exclusive=True)
            conn.drain_events(timeout=5)
        assert info.value.reply_code == 540 and "NOT_IMPLEMENTED" in info.value.reply_text
    finally:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - already closed by the broker
            pass


def test_properties_round_trip(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True).method.queue
    ts = 1_700_000_000
    headers = {
        "str": "text é", "int": 42, "neg": -7, "big": 2 ** 40, "bool": True,
        "false": False, "none": None, "list": [1, "two", [3]], "nested": {"a": {"b": "c"}},
        "decimal": decimal.Decimal("3.14"),
        "when": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
    }
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", headers=headers,
        delivery_mode=2, priority=5, correlation_id="corr-1", reply_to="reply.q",
        expiration="600000", message_id="id-1", timestamp=ts, type="kind",
        user_id="guest", app_id="itest")
    ch.basic_publish("", q, b'{"k": 1}', props)
    method, p, body = ch.basic_get(q, auto_ack=True)
    assert body == b'{"k": 1}'
    for name in ("content_type", "content_encoding", "delivery_mode", "priority",
                 "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
                 "user_id", "app_id"):
        assert getattr(p, name) == getattr(props, name), name
    assert p.headers["str"] == "text é"
    assert p.headers["list"] == [1, "two", [3]]
    assert p.headers["nested"] == {"a": {"b": "c"}}
    for k in ("int", "neg", "big", "bool", "false", "none", "decimal", "when"):
        assert p.headers[k] == headers[k], k


def test_properties_round_trip_py_amqp(broker: BrokerEndpoint) -> None:
    conn = broker.py_amqp()
    try:
        ch = conn.channel()
        q, _, _ = ch.queue_declare("", exclusive=True)
        headers = {"float": 1.5, "int": -3, "list": [1, 2.5, "x"], "bool": False,
                   "map": {"k": "v"}, "bytes": b"\x00\xff"}
        ch.basic_publish(amqp.Message(b"body", content_type="text/plain", priority=3,
                                      application_headers=headers, correlation_id="c"),
                         exchange="", routing_key=q)
        msg = ch.basic_get(q, no_ack=True)
        assert msg is not None and msg.body == b"body"
        assert msg.properties["content_type"] == "text/plain"
        assert msg.properties["priority"] == 3 and msg.properties["correlation_id"] == "c"
        got = msg.properties["application_headers"]
        for k in ("float", "int", "list", "bool", "map"):
            assert got[k] == headers[k], k
        assert bytes(got["bytes"]) == b"\x00\xff"
    finally:
        conn.close()


def test_empty_body_and_no_properties(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"")
    method, p, body = ch.basic_get(q, auto_ack=True)
    assert body == b"" and p.headers is None and p.content_type is None


# -- get ----------------------------------------------------------------------------------

def test_get_and_get_empty(ch: BlockingChannel) -> None:
    q = fresh_queue(ch, auto_delete=True)
    assert ch.basic_get(q) == (None, None, None)
    publish_all(ch, q, [b"a", b"b", b"c"])
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"a"
    assert (method.exchange, method.routing_key, method.redelivered, method.message_count) == \
        ("", q, False, 2)
    assert [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)] == [b"b", b"c"]
    assert ch.basic_get(q, auto_ack=True) == (None, None, None)


# -- ack / nack / reject / recover --------------------------------------------------------

def test_ack_multiple_and_redelivery_of_the_rest(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = fresh_queue(ch)
    publish_all(ch, q, [b"1", b"2", b"3", b"4", b"5"])
    tags = [ch.basic_get(q)[0].delivery_tag for _ in range(5)]
    assert tags == [1, 2, 3, 4, 5]
    ch.basic_ack(3, multiple=True)
    ch.close()  # 4 and 5 were unacked: requeued, marked redelivered
    ch = conn.channel()
    wait_until(lambda: ready(ch, q) == 2)
    m4 = ch.basic_get(q, auto_ack=True)
    m5 = ch.basic_get(q, auto_ack=True)
    assert (m4[2], m4[0].redelivered, m5[2], m5[0].redelivered) == (b"4", True, b"5", True)
    ch.queue_delete(q)


def test_requeued_messages_keep_their_position(ch: BlockingChannel) -> None:
    q = fresh_queue(ch)
    publish_all(ch, q, [b"1", b"2", b"3", b"4", b"5"])
    t1, t2, t3 = (ch.basic_get(q)[0].delivery_tag for _ in range(3))
    ch.basic_nack(t2, requeue=True)
    ch.basic_reject(t3, requeue=True)
    ch.basic_nack(t1, requeue=True)
    got = [ch.basic_get(q, auto_ack=True) for _ in range(5)]
    assert [g[2] for g in got] == [b"1", b"2", b"3", b"4", b"5"]
    assert [g[0].redelivered for g in got] == [True, True, True, False, False]
    ch.queue_delete(q)


def test_nack_multiple_and_reject_without_requeue_drop(ch: BlockingChannel) -> None:
    q = fresh_queue(ch)
    publish_all(ch, q, [b"1", b"2", b"3", b"4"])
    tags = [ch.basic_get(q)[0].delivery_tag for _ in range(4)]
    ch.basic_nack(tags[1], multiple=True, requeue=False)  # 1 and 2 gone
    ch.basic_reject(tags[2], requeue=False)               # 3 gone
    ch.basic_nack(tags[3], multiple=True, requeue=True)   # 4 back
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, method.redelivered, method.message_count) == (b"4", True, 0)
    assert ch.basic_get(q) == (None, None, None)
    ch.queue_delete(q)


def test_nack_requeue_redelivers_to_consumer(conn: pika.BlockingConnection,
                                             ch: BlockingChannel) -> None:
    q = fresh_queue(ch)
    got = Collector()
    ch.basic_consume(q, got)
    ch.basic_publish("", q, b"again")
    got.wait(conn, 1)
    ch.basic_nack(got.deliveries[0][0].delivery_tag, requeue=True)
    got.wait(conn, 2)
    first, second = got.deliveries[:2]
    assert second[2] == b"again" and second[0].redelivered and not first[0].redelivered
    assert second[0].delivery_tag == first[0].delivery_tag + 1
    ch.basic_ack(second[0].delivery_tag)
    conn.channel().queue_delete(q)


def test_recover_requeue_redelivers_unacked(conn: pika.BlockingConnection,
                                            ch: BlockingChannel) -> None:
    q = fresh_queue(ch)
    got = Collector()
    ch.basic_consume(q, got)
    publish_all(ch, q, [b"x", b"y", b"z"])
    got.wait(conn, 3)
    ch.basic_recover(requeue=True)
    got.wait(conn, 6)
    got.settle(conn)
    assert got.bodies == [b"x", b"y", b"z", b"x", b"y", b"z"]
    assert [d[0].redelivered for d in got.deliveries] == [False] * 3 + [True] * 3
    ch.basic_ack(got.deliveries[-1][0].delivery_tag, multiple=True)
    conn.channel().queue_delete(q)


@pytest.mark.parametrize("settle", ["ack", "nack", "reject", "double-ack"])
def test_unknown_delivery_tag_is_precondition_failed(conn: pika.BlockingConnection,
                                                     settle: str) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"m")
    tag = ch.basic_get(q)[0].delivery_tag
    bogus = tag + 41
    if settle == "ack":
        ch.basic_ack(bogus)
    elif settle == "nack":
        ch.basic_nack(bogus)
    elif settle == "reject":
        ch.basic_reject(bogus)
    else:
        ch.basic_ack(tag)
        ch.basic_ack(tag)
        bogus = tag
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, passive=True)
    assert info.value.reply_code == 406
    assert "PRECONDITION_FAILED" in info.value.reply_text
    assert f"unknown delivery tag {bogus}" in info.value.reply_text
    assert conn.is_open


# -- publisher confirms --------------------------------------------------------------------

def test_publisher_confirms_pika(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = fresh_queue(ch)
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", q, str(i).encode())  # returns only once the broker acked
    assert ready(ch, q) == 50
    # unroutable but not mandatory: still acked
    ch.basic_publish("", unique("q.nowhere"), b"dropped but confirmed")
    ch.queue_delete(q)


def test_confirm_delivery_tags_on_the_wire(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(1, commands.Confirm.Select())
        raw.expect(commands.Confirm.SelectOk)
        raw.send_method(1, commands.Queue.Declare(queue="", exclusive=True))
        q = raw.expect(commands.Queue.DeclareOk).queue
        for i in range(5):
            raw.send_method(1, commands.Basic.Publish(exchange="", routing_key=q))
            raw.send_content(1, f"m{i}".encode())
        confirmed: set[int] = set()
        while len(confirmed) < 5:
            ack = raw.expect(commands.Basic.Ack)
            upto = ack.delivery_tag
            newly = set(range(1, upto + 1)) - confirmed if ack.multiple else {upto}
            assert newly and not (newly & confirmed), f"confirm {upto} repeats or is empty"
            confirmed |= newly
        assert confirmed == {1, 2, 3, 4, 5}


def test_confirm_select_on_transactional_channel_is_refused(ch: BlockingChannel) -> None:
    ch.tx_select()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert info.value.reply_code == 406


# -- transactions ------------------------------------------------------------------------

def test_tx_publish_visible_only_after_commit(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    observer = conn.channel()
    q = fresh_queue(observer)
    ch.tx_select()
    publish_all(ch, q, [b"t1", b"t2"])
    conn.process_data_events(0.2)
    assert ready(observer, q) == 0
    ch.tx_commit()
    assert drain(observer, q) == [b"t1", b"t2"]
    ch.basic_publish("", q, b"rolled back")
    ch.tx_rollback()
    ch.basic_publish("", q, b"t3")
    ch.tx_commit()
    assert drain(observer, q) == [b"t3"]
    observer.queue_delete(q)


def test_tx_acks_take_effect_on_commit(conn: pika.BlockingConnection) -> None:
    setup = conn.channel()
    q = fresh_queue(setup)
    publish_all(setup, q, [b"a", b"b"])
    ch = conn.channel()
    ch.tx_select()
    ta = ch.basic_get(q)[0].delivery_tag
    tb = ch.basic_get(q)[0].delivery_tag
    ch.basic_ack(ta)
    ch.tx_rollback()   # the ack of "a" is discarded: "a" stays unacked
    ch.basic_ack(tb)
    ch.tx_commit()     # "b" is gone for good
    ch.close()         # "a" comes back
    assert drain(conn.channel(), q) == [b"a"]
    setup.queue_delete(q)


def test_tx_commit_without_select_is_precondition_failed(ch: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.tx_commit()
    assert info.value.reply_code == 406


# -- edges of the spec ------------------------------------------------------------------------

def test_ack_zero_multiple_acks_everything_outstanding(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = fresh_queue(ch)
    publish_all(ch, q, [b"1", b"2", b"3"])
    for _ in range(3):
        ch.basic_get(q)
    ch.basic_ack(0, multiple=True)  # 0-9-1 §1.8.3.13: tag 0 with multiple = all outstanding
    ch.close()
    ch = conn.channel()
    assert ch.basic_get(q) == (None, None, None)
    ch.queue_delete(q)


def test_cancel_of_unknown_consumer_tag_is_ok(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(1, commands.Basic.Cancel(consumer_tag="never-consumed"))
        assert raw.expect(commands.Basic.CancelOk).consumer_tag == "never-consumed"


def test_frames_after_channel_close_are_discarded(broker: BrokerEndpoint) -> None:
    # 0-9-1 §4.2.6 / channel.close: after sending close a peer discards frames until close-ok
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(1, commands.Queue.Declare(queue=unique("q.missing"), passive=True))
        raw.send_method(1, commands.Queue.Declare(queue="", exclusive=True))
        close = raw.expect(commands.Channel.Close)
        assert close.reply_code == 404
        raw.send_method(1, commands.Queue.Declare(queue="", exclusive=True))  # still discarded
        raw.send_method(1, commands.Channel.CloseOk())
        raw.open_channel(1)
        raw.send_method(1, commands.Queue.Declare(queue="", exclusive=True))
        assert raw.expect(commands.Queue.DeclareOk).queue


def test_channel_open_on_channel_zero_is_channel_error(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.send_method(0, commands.Channel.Open())
        close = raw.wait_connection_close()
        assert_closed_with(close, 504)


@pytest.mark.timeout(60, func_only=True)
def test_bulk_publish_and_consume_in_order(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = fresh_queue(ch)
    n = 5000
    payload = b"x" * 200
    for i in range(n):
        ch.basic_publish("", q, b"%06d" % i + payload)
    ch.basic_qos(prefetch_count=250)
    seen: list[bytes] = []

    def on_message(c: BlockingChannel, m: Any, p: Any, body: bytes) -> None:
        seen.append(body[:6])
        if len(seen) % 100 == 0:
            c.basic_ack(m.delivery_tag, multiple=True)
    ch.basic_consume(q, on_message)
    deadline = time.monotonic() + 45
    while len(seen) < n and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.5)
    assert seen == [b"%06d" % i for i in range(n)]
    ch.close()
    conn.channel().queue_delete(q)


def test_ack_after_queue_deleted_is_fine(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = fresh_queue(ch)
    ch.basic_publish("", q, b"orphan")
    tag = ch.basic_get(q)[0].delivery_tag
    conn.channel().queue_delete(q)
    ch.basic_ack(tag)  # the delivery tag is the channel's, the queue is gone: no error
    assert ch.queue_declare("", exclusive=True).method.queue and ch.is_open


def test_connection_close_requeues_across_channels_in_order(broker: BrokerEndpoint) -> None:
    with broker.pika() as keeper:
        kch = keeper.channel()
        q = fresh_queue(kch)
        kch.confirm_delivery()
        publish_all(kch, q, [b"1", b"2", b"3", b"4"])
        holder = broker.pika()
        c1, c2 = holder.channel(), holder.channel()
        assert c1.basic_get(q)[2] == b"1"
        assert c2.basic_get(q)[2] == b"2"
        assert c2.basic_get(q)[2] == b"3"
        holder.close()
        wait_until(lambda: ready(kch, q) == 4, what="all four back in the queue")
        got = [kch.basic_get(q, auto_ack=True) for _ in range(4)]
        assert [g[2] for g in got] == [b"1", b"2", b"3", b"4"]
        assert [g[0].redelivered for g in got] == [True, True, True, False]
        kch.queue_delete(q)


def test_one_message_in_many_queues_is_settled_independently(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    x = unique("x.fan")
    ch.exchange_declare(x, exchange_type="fanout", auto_delete=True)
    qs = [fresh_queue(ch) for _ in range(3)]
    for q in qs:
        ch.queue_bind(q, x)
    ch.basic_publish(x, "", b"shared", pika.BasicProperties(message_id="one"))
    m0 = ch.basic_get(qs[0])[0]
    m1 = ch.basic_get(qs[1])[0]
    ch.basic_ack(m0.delivery_tag)                 # gone from q0 only
    ch.basic_nack(m1.delivery_tag, requeue=True)  # back in q1, redelivered there only
    r1 = ch.basic_get(qs[1], auto_ack=True)
    r2 = ch.basic_get(qs[2], auto_ack=True)
    assert (r1[2], r1[0].redelivered, r2[2], r2[0].redelivered) == (b"shared", True, b"shared", False)
    assert r1[1].message_id == r2[1].message_id == "one"
    assert ch.basic_get(qs[0]) == (None, None, None)
    for q in qs:
        ch.queue_delete(q)


def test_consumer_priorities_x_priority(broker: BrokerEndpoint) -> None:
    """RabbitMQ's consumer priorities: the high-priority consumer is served while it has credit."""
    with broker.pika() as conn:
        ch = conn.channel()
        q = ch.queue_declare(unique("q.cprio"), auto_delete=True).method.queue
        ch.basic_qos(prefetch_count=3)
        got: dict[str, list[bytes]] = {"low": [], "high": []}
        ch.basic_consume(q, lambda c, m, p, b: got["low"].append(b))
        ch.basic_consume(q, lambda c, m, p, b: got["high"].append(b), arguments={"x-priority": 10})
        for i in range(5):
            ch.basic_publish("", q, b"m%d" % i)
        wait_until(lambda: conn.process_data_events(0.05) or len(got["low"]) + len(got["high"]) == 5,
                   what="five deliveries")
        assert got["high"] == [b"m0", b"m1", b"m2"] and got["low"] == [b"m3", b"m4"]


def test_direct_reply_to_rpc(broker: BrokerEndpoint) -> None:
    """RabbitMQ's direct reply-to: the RPC reply reaches the requester without any reply queue."""
    with broker.pika() as server_conn, broker.pika() as client_conn:
        server = server_conn.channel()
        rpc_queue = server.queue_declare(unique("q.rpc"), auto_delete=True).method.queue

        client = client_conn.channel()
        client.queue_declare("amq.rabbitmq.reply-to", passive=True)      # how clients probe for it
        replies: list[tuple[bytes, str | None]] = []
        client.basic_consume("amq.rabbitmq.reply-to", lambda c, m, p, b: replies.append((b, p.correlation_id)),
                             auto_ack=True)
        client.basic_publish("", rpc_queue, b"6*7", pika.BasicProperties(
            reply_to="amq.rabbitmq.reply-to", correlation_id="req-1"))

        method, props, body = None, None, None
        def request_arrived() -> bool:
            nonlocal method, props, body
            method, props, body = server.basic_get(rpc_queue, auto_ack=True)
            return method is not None
        wait_until(request_arrived, what="the request")
        assert props.reply_to.startswith("amq.rabbitmq.reply-to.")
        server.basic_publish("", props.reply_to, b"42", pika.BasicProperties(correlation_id=props.correlation_id))
        wait_until(lambda: client_conn.process_data_events(0.05) or replies, what="the reply")
        assert replies == [(b"42", "req-1")]
