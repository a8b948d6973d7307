"""Queue features clients reach through queue-declare arguments, spelled the
RabbitMQ way: priorities, TTLs, queue expiry, length limits, dead lettering
(with x-death), delivery limits and single active consumer."""

from __future__ import annotations

import time
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.waiting import wait_until

from .support import BrokerEndpoint, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]


def declare(ch: BlockingChannel, **arguments: Any) -> str:
    q = unique("q.feat")
    ch.queue_declare(q, arguments={k.replace("_", "-"): v for k, v in arguments.items()})
    return q


def drain(ch: BlockingChannel, q: str) -> list[bytes]:
    out = []
    while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
        out.append(m[2])
    return out


def get_one(ch: BlockingChannel, q: str, timeout: float = 5.0) -> tuple[Any, Any, bytes]:
    return wait_until(lambda: (m := ch.basic_get(q, auto_ack=True))[0] is not None and m,
                      timeout, what=f"a message on {q}")


def dead_letter_setup(ch: BlockingChannel) -> tuple[str, str]:
    """A fanout dead-letter exchange and the queue behind it."""
    dlx = unique("x.dlx")
    ch.exchange_declare(dlx, exchange_type="fanout", auto_delete=True)
    dlq = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(dlq, dlx)
    return dlx, dlq


def cleanup(conn: pika.BlockingConnection, *queues: str) -> None:
    ch = conn.channel()
    for q in queues:
        ch.queue_delete(q)


# -- priority -----------------------------------------------------------------------------

def test_priority_queue_order(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = declare(ch, x_max_priority=10)
    sent = [("p0-a", 0), ("p5-a", 5), ("p10-a", 10), ("p5-b", 5), ("p1", 1), ("none", None),
            ("p9", 9), ("p15", 15), ("p0-b", 0)]
    for body, prio in sent:
        ch.basic_publish("", q, body.encode(), pika.BasicProperties(priority=prio))
    # above x-max-priority counts as the maximum; no priority counts as 0; FIFO within one
    expected = [b"p10-a", b"p15", b"p9", b"p5-a", b"p5-b", b"p1", b"p0-a", b"none", b"p0-b"]
    assert drain(ch, q) == expected
    cleanup(conn, q)


def test_priority_queue_consumer_and_requeue(conn: pika.BlockingConnection,
                                             ch: BlockingChannel) -> None:
    q = declare(ch, x_max_priority=5)
    for body, prio in (("low", 1), ("high", 5), ("mid", 3)):
        ch.basic_publish("", q, body.encode(), pika.BasicProperties(priority=prio))
    method, props, body = ch.basic_get(q)
    assert (body, props.priority) == (b"high", 5)
    ch.basic_nack(method.delivery_tag, requeue=True)  # goes back ahead of lower priorities
    got: list[bytes] = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    wait_until(lambda: conn.process_data_events(0.05) or len(got) == 3)
    assert got == [b"high", b"mid", b"low"]
    cleanup(conn, q)


# -- TTL and expiry ------------------------------------------------------------------------

def test_queue_message_ttl(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = declare(ch, x_message_ttl=200)
    ch.basic_publish("", q, b"old-1")
    ch.basic_publish("", q, b"old-2")
    wait_until(lambda: ch.queue_declare(q, passive=True).method.message_count == 0, 5,
               what="both old messages expired")
    ch.basic_publish("", q, b"fresh")
    assert drain(ch, q) == [b"fresh"]
    ch.basic_publish("", q, b"will expire")
    wait_until(lambda: ch.queue_declare(q, passive=True).method.message_count == 0, 5,
               what="expired message removed from the count")
    cleanup(conn, q)


def test_per_message_expiration(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = declare(ch)
    for body, exp in (("a", "100"), ("b", None), ("c", "100"), ("d", "60000"), ("e", "0")):
        ch.basic_publish("", q, body.encode(), pika.BasicProperties(expiration=exp))
    # the 100 ms expirations run out (what is tested; expired messages that are not at
    # the head stay counted until a get reaches them, so there is nothing to poll)
    time.sleep(0.3)
    got = []
    while (m := ch.basic_get(q, auto_ack=True))[0] is not None:
        got.append((m[2], m[1].expiration))
    assert got == [(b"b", None), (b"d", "60000")]
    cleanup(conn, q)


def test_shorter_of_queue_and_message_ttl_applies(conn: pika.BlockingConnection,
                                                  ch: BlockingChannel) -> None:
    q = declare(ch, x_message_ttl=150)
    ch.basic_publish("", q, b"long", pika.BasicProperties(expiration="60000"))
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="10"))
    wait_until(lambda: ch.queue_declare(q, passive=True).method.message_count == 0, 5,
               what="both messages expired by the queue's TTL")
    assert drain(ch, q) == []
    cleanup(conn, q)


def test_queue_expires_when_unused(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = declare(ch, x_expires=300)
    kept = declare(ch, x_expires=300)
    tag = ch.basic_consume(kept, lambda *a: None)  # a consumer keeps a queue in use

    def gone() -> bool:
        try:
            conn.channel().queue_declare(q, passive=True)
            return False
        except pika.exceptions.ChannelClosedByBroker as e:
            assert e.reply_code == 404
            return True
    # every queue.declare, even passive, renews the lease: look less often than x-expires
    wait_until(gone, 6, interval=1.0, what="queue with x-expires=300 deleted")
    ch.queue_declare(kept, passive=True)
    ch.basic_cancel(tag)
    cleanup(conn, kept)


# -- length limits -------------------------------------------------------------------------

def test_max_length_drops_head(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = declare(ch, x_max_length=3)
    ch.confirm_delivery()
    for i in range(1, 6):
        ch.basic_publish("", q, str(i).encode())
    assert ch.queue_declare(q, passive=True).method.message_count == 3
    assert drain(ch, q) == [b"3", b"4", b"5"]
    cleanup(conn, q)


def test_max_length_bytes_drops_head(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = declare(ch, x_max_length_bytes=10)
    for body in (b"aaaa", b"bbbb", b"cccc", b"dddd"):
        ch.basic_publish("", q, body)
    assert drain(ch, q) == [b"cccc", b"dddd"]
    cleanup(conn, q)


def test_max_length_reject_publish_nacks(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    q = declare(ch, x_max_length=2, x_overflow="reject-publish")
    ch.confirm_delivery()
    ch.basic_publish("", q, b"1")
    ch.basic_publish("", q, b"2")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"3")
    assert ch.basic_get(q, auto_ack=True)[2] == b"1"
    ch.basic_publish("", q, b"4")  # room again: acked
    assert drain(ch, q) == [b"2", b"4"]
    cleanup(conn, q)


# -- dead lettering ------------------------------------------------------------------------

def _death(props: Any) -> list[dict[str, Any]]:
    headers = props.headers or {}
    assert "x-death" in headers, f"no x-death header in {headers}"
    return list(headers["x-death"])


def test_dead_letter_on_reject_with_routing_key(conn: pika.BlockingConnection,
                                               ch: BlockingChannel) -> None:
    dlx = unique("x.dlx")
    ch.exchange_declare(dlx, exchange_type="direct", auto_delete=True)
    dlq = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(dlq, dlx, "dead")
    src_x = unique("x.src")
    ch.exchange_declare(src_x, exchange_type="direct", auto_delete=True)
    q = declare(ch, x_dead_letter_exchange=dlx, x_dead_letter_routing_key="dead")
    ch.queue_bind(q, src_x, "orig-key")
    ch.basic_publish(src_x, "orig-key", b"bad", pika.BasicProperties(headers={"keep": "me"},
                                                                      message_id="m-1"))
    method, _, _ = get_one_ack(ch, q)
    ch.basic_reject(method.delivery_tag, requeue=False)
    dm, props, body = get_one(ch, dlq)
    assert body == b"bad" and props.message_id == "m-1" and props.headers["keep"] == "me"
    assert (dm.exchange, dm.routing_key) == (dlx, "dead")
    [death] = _death(props)
    assert death["reason"] == "rejected" and death["queue"] == q
    assert death["exchange"] == src_x and list(death["routing-keys"]) == ["orig-key"]
    assert death["count"] == 1 and "time" in death
    assert props.headers["x-first-death-reason"] == "rejected"
    assert props.headers["x-first-death-queue"] == q
    assert props.headers["x-first-death-exchange"] == src_x
    cleanup(conn, q)


def get_one_ack(ch: BlockingChannel, q: str) -> tuple[Any, Any, bytes]:
    return wait_until(lambda: (m := ch.basic_get(q))[0] is not None and m, what=f"message on {q}")


def test_dead_letter_on_nack_keeps_original_routing_key(conn: pika.BlockingConnection,
                                                        ch: BlockingChannel) -> None:
    dlx, dlq = dead_letter_setup(ch)
    q = declare(ch, x_dead_letter_exchange=dlx)
    ch.basic_publish("", q, b"n1")
    ch.basic_publish("", q, b"n2")
    m1 = get_one_ack(ch, q)[0]
    get_one_ack(ch, q)
    ch.basic_nack(m1.delivery_tag + 1, multiple=True, requeue=False)
    got = [get_one(ch, dlq), get_one(ch, dlq)]
    assert [g[2] for g in got] == [b"n1", b"n2"]
    assert all(g[0].routing_key == q for g in got)  # no dead-letter key: the original one
    assert all(_death(g[1])[0]["reason"] == "rejected" for g in got)
    cleanup(conn, q)


def test_dead_letter_on_queue_ttl(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    dlx, dlq = dead_letter_setup(ch)
    q = declare(ch, x_message_ttl=100, x_dead_letter_exchange=dlx)
    ch.basic_publish("", q, b"too slow")
    dm, props, body = get_one(ch, dlq)
    assert body == b"too slow"
    [death] = _death(props)
    assert (death["reason"], death["queue"], death["exchange"], list(death["routing-keys"]),
            death["count"]) == ("expired", q, "", [q], 1)
    assert "original-expiration" not in death
    cleanup(conn, q)


def test_unacked_message_past_its_ttl_expires_when_requeued(conn: pika.BlockingConnection,
                                                           ch: BlockingChannel) -> None:
    dlx, dlq = dead_letter_setup(ch)
    q = declare(ch, x_message_ttl=200, x_dead_letter_exchange=dlx)
    ch.basic_publish("", q, b"held too long")
    tag = get_one_ack(ch, q)[0].delivery_tag  # TTL does not run out while we hold it ...
    time.sleep(0.3)                           # the 200 ms TTL runs out (what is tested) ...
    ch.basic_nack(tag, requeue=True)          # ... but back in the queue it is already dead
    dm, props, body = get_one(ch, dlq)
    assert body == b"held too long" and _death(props)[0]["reason"] == "expired"
    assert drain(ch, q) == []
    cleanup(conn, q)


def test_dead_letter_on_message_expiration(conn: pika.BlockingConnection,
                                           ch: BlockingChannel) -> None:
    dlx, dlq = dead_letter_setup(ch)
    q = declare(ch, x_dead_letter_exchange=dlx)
    ch.basic_publish("", q, b"ephemeral", pika.BasicProperties(expiration="100"))
    dm, props, body = get_one(ch, dlq)
    assert body == b"ephemeral"
    assert props.expiration is None  # removed, so it does not expire again in the DLQ
    [death] = _death(props)
    assert death["reason"] == "expired" and death["original-expiration"] == "100"
    cleanup(conn, q)


def test_dead_letter_on_max_length(conn: pika.BlockingConnection, ch: BlockingChannel) -> None:
    dlx, dlq = dead_letter_setup(ch)
    q = declare(ch, x_max_length=1, x_dead_letter_exchange=dlx)
    ch.basic_publish("", q, b"pushed out")
    ch.basic_publish("", q, b"stays")
    dm, props, body = get_one(ch, dlq)
    assert body == b"pushed out"
    [death] = _death(props)
    assert (death["reason"], death["queue"]) == ("maxlen", q)
    assert drain(ch, q) == [b"stays"]
    cleanup(conn, q)


def test_x_death_accumulates_across_cycles(conn: pika.BlockingConnection,
                                           ch: BlockingChannel) -> None:
    # a → (expired) → b → (rejected) → a → (expired) → b
    a, b = unique("q.cycle-a"), unique("q.cycle-b")
    ch.queue_declare(a, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": b})
    ch.queue_declare(b, arguments={"x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": a})
    ch.basic_publish("", a, b"loop")
    m, props, _ = get_one_ack(ch, b)
    assert [(d["queue"], d["reason"], d["count"]) for d in _death(props)] == [(a, "expired", 1)]
    ch.basic_reject(m.delivery_tag, requeue=False)
    m, props, _ = get_one_ack(ch, b)
    deaths = {(d["queue"], d["reason"]): d["count"] for d in _death(props)}
    assert deaths == {(a, "expired"): 2, (b, "rejected"): 1}
    assert _death(props)[0]["queue"] == a  # most recent first
    assert props.headers["x-first-death-queue"] == a
    assert props.headers["x-first-death-reason"] == "expired"
    ch.basic_ack(m.delivery_tag)
    cleanup(conn, a, b)


# -- single active consumer ------------------------------------------------------------------

def test_single_active_consumer_failover(broker: BrokerEndpoint) -> None:
    with broker.pika() as setup_conn, broker.pika() as b_conn:
        setup = setup_conn.channel()
        q = unique("q.sac")
        setup.queue_declare(q, arguments={"x-single-active-consumer": True})
        a_conn = broker.pika()
        a_ch, b_ch = a_conn.channel(), b_conn.channel()
        a_got: list[tuple[Any, bytes]] = []
        b_got: list[tuple[Any, bytes]] = []
        a_ch.basic_consume(q, lambda c, m, p, body: a_got.append((m, body)))
        b_ch.basic_consume(q, lambda c, m, p, body: b_got.append((m, body)))
        assert setup.queue_declare(q, passive=True).method.consumer_count == 2
        for i in (1, 2, 3):
            setup.basic_publish("", q, f"m{i}".encode())

        def pump() -> bool:
            a_conn.process_data_events(0.05)
            b_conn.process_data_events(0.05)
            return False
        wait_until(lambda: pump() or len(a_got) == 3, what="A gets everything")
        pump()
        assert [b for _, b in a_got] == [b"m1", b"m2", b"m3"] and b_got == []
        a_ch.basic_ack(a_got[0][0].delivery_tag)   # m2, m3 stay unacked on A
        a_conn.close()                               # B takes over, m2 and m3 first
        setup.basic_publish("", q, b"m4")
        wait_until(lambda: b_conn.process_data_events(0.05) or len(b_got) == 3,
                   what="B gets the rest after failover")
        assert [b for _, b in b_got] == [b"m2", b"m3", b"m4"]
        assert [m.redelivered for m, _ in b_got] == [True, True, False]
        b_ch.basic_ack(b_got[-1][0].delivery_tag, multiple=True)
        setup.queue_delete(q)
