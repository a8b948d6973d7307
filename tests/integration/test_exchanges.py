"""Exchange class (0-9-1 §1.6, §3.1.3): declare/delete/bind, the standard exchange
types' routing, exchange-to-exchange bindings, alternate and internal exchanges."""

from __future__ import annotations

import random
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from .support import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]


def drain(ch: BlockingChannel, queue: str) -> list[bytes]:
    out: list[bytes] = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def bound_queues(ch: BlockingChannel, exchange: str, bindings: dict[str, Any],
                 **bind_kw: Any) -> dict[str, str]:
    """One exclusive queue per binding key (or header-args label); returns label → queue."""
    out = {}
    for label, spec in bindings.items():
        q = ch.queue_declare("", exclusive=True).method.queue
        if isinstance(spec, dict):
            ch.queue_bind(q, exchange, routing_key="", arguments=spec)
        else:
            ch.queue_bind(q, exchange, routing_key=spec)
        out[label] = q
    return out


def who_got(ch: BlockingChannel, queues: dict[str, str], exchange: str, key: str,
            headers: dict[str, Any] | None = None) -> set[str]:
    body = unique("m").encode()
    ch.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers))
    got = set()
    for label, q in queues.items():
        bodies = drain(ch, q)
        assert bodies in ([], [body]), f"{label} got {bodies}"
        if bodies:
            got.add(label)
    return got


# -- declare -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["direct", "topic", "fanout", "headers"])
@pytest.mark.parametrize("durable", [False, True], ids=["transient", "durable"])
def test_declare_each_type_then_passive(ch: BlockingChannel, kind: str, durable: bool) -> None:
    name = unique(f"x.{kind}")
    ch.exchange_declare(name, exchange_type=kind, durable=durable)
    ch.exchange_declare(name, exchange_type=kind, durable=durable)  # equivalent: fine
    ch.exchange_declare(name, passive=True)
    ch.exchange_delete(name)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(name, passive=True)
    assert info.value.reply_code == 404


@pytest.mark.parametrize("name", ["amq.direct", "amq.topic", "amq.fanout", "amq.headers",
                                  "amq.match"])
def test_standard_exchanges_exist(ch: BlockingChannel, name: str) -> None:
    ch.exchange_declare(name, passive=True)


def test_passive_declare_of_missing_exchange_is_not_found(ch: BlockingChannel) -> None:
    name = unique("x.missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(name, passive=True)
    assert info.value.reply_code == 404
    assert "NOT_FOUND" in info.value.reply_text and name in info.value.reply_text


@pytest.mark.parametrize("first,second", [
    (dict(exchange_type="direct"), dict(exchange_type="topic")),
    (dict(exchange_type="fanout", durable=False), dict(exchange_type="fanout", durable=True)),
    (dict(exchange_type="direct", auto_delete=False), dict(exchange_type="direct", auto_delete=True)),
], ids=["type", "durable", "auto-delete"])
def test_inequivalent_redeclare_is_precondition_failed(conn: pika.BlockingConnection,
                                                       first: dict, second: dict) -> None:
    ch = conn.channel()
    name = unique("x.redeclare")
    ch.exchange_declare(name, **first)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(name, **second)
    assert info.value.reply_code == 406
    assert "PRECONDITION_FAILED" in info.value.reply_text
    assert "inequivalent" in info.value.reply_text and name in info.value.reply_text
    conn.channel().exchange_delete(name)


def test_amq_prefix_is_access_refused(ch: BlockingChannel) -> None:
    name = "amq." + unique("x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(name, exchange_type="direct")
    assert info.value.reply_code == 403
    assert "ACCESS_REFUSED" in info.value.reply_text


def test_unknown_type_is_command_invalid_connection_error(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        ch.exchange_declare(unique("x.bogus"), exchange_type="no-such-type")
    assert info.value.reply_code == 503
    assert "COMMAND_INVALID" in info.value.reply_text and "no-such-type" in info.value.reply_text
    assert conn.is_closed


def test_delete_if_unused(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    x = unique("x.ifunused")
    ch.exchange_declare(x, exchange_type="fanout")
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_delete(x, if_unused=True)
    assert info.value.reply_code == 406
    ch = conn.channel()
    ch.exchange_declare(x, passive=True)  # still there
    ch.queue_unbind(q, x)
    ch.exchange_delete(x, if_unused=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(x, passive=True)
    assert info.value.reply_code == 404


def test_auto_delete_exchange_goes_with_its_last_binding(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    x = unique("x.autodelete")
    ch.exchange_declare(x, exchange_type="direct", auto_delete=True)
    q1 = ch.queue_declare("", exclusive=True).method.queue
    q2 = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q1, x, "k")
    ch.queue_bind(q2, x, "k")
    ch.queue_unbind(q1, x, "k")
    ch.exchange_declare(x, passive=True)  # one binding left
    ch.queue_unbind(q2, x, "k")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(x, passive=True)
    assert info.value.reply_code == 404


def test_default_exchange_cannot_be_bound(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(q, "", "anything")
    assert info.value.reply_code == 403


def test_publish_to_missing_exchange_is_not_found(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    x = unique("x.missing")
    ch.basic_publish(x, "k", b"lost")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)  # the async close arrives before this answer
    assert info.value.reply_code == 404 and x in info.value.reply_text


# -- routing ------------------------------------------------------------------------

def test_default_exchange_routes_by_queue_name(ch: BlockingChannel) -> None:
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"direct to queue")
    ch.basic_publish("", unique("q.nobody"), b"dropped")
    assert drain(ch, q) == [b"direct to queue"]


def test_direct_routing(ch: BlockingChannel) -> None:
    x = unique("x.direct")
    ch.exchange_declare(x, exchange_type="direct", auto_delete=True)
    qs = bound_queues(ch, x, {"red": "red", "green": "green", "red2": "red"})
    assert who_got(ch, qs, x, "red") == {"red", "red2"}
    assert who_got(ch, qs, x, "green") == {"green"}
    assert who_got(ch, qs, x, "blue") == set()


def test_fanout_ignores_routing_key(ch: BlockingChannel) -> None:
    x = unique("x.fanout")
    ch.exchange_declare(x, exchange_type="fanout", auto_delete=True)
    qs = bound_queues(ch, x, {"a": "", "b": "whatever", "c": "x.y"})
    assert who_got(ch, qs, x, "anything") == {"a", "b", "c"}


def test_topic_patterns(ch: BlockingChannel) -> None:
    x = unique("x.topic")
    ch.exchange_declare(x, exchange_type="topic", auto_delete=True)
    qs = bound_queues(ch, x, {
        "a.*.c": "a.*.c", "a.#": "a.#", "#.z": "#.z", "*": "*", "#": "#",
        "exact": "a.b.c", "*.*": "*.*", "a.#.c": "a.#.c",
    })
    cases = {
        "a.b.c": {"a.*.c", "a.#", "#", "exact", "a.#.c"},
        "a": {"a.#", "*", "#"},
        "a.b": {"a.#", "#", "*.*"},
        "a.b.b.c": {"a.#", "#", "a.#.c"},
        "a.c": {"a.#", "#", "*.*", "a.#.c"},
        "a..c": {"a.*.c", "a.#", "#", "a.#.c"},  # an empty word is still a word
        "z": {"#.z", "*", "#"},
        "x.y.z": {"#.z", "#"},
        "b.a.c": {"#"},
        "": {"#"},
    }
    for key, expected in cases.items():
        assert who_got(ch, qs, x, key) == expected, f"routing key {key!r}"


def _topic_matches(pattern: str, key: str) -> bool:
    """Reference matcher: '*' is exactly one word, '#' zero or more (0-9-1 §3.1.3.3)."""
    def match(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        return bool(k) and (p[0] == "*" or p[0] == k[0]) and match(p[1:], k[1:])
    return match(pattern.split("."), key.split("."))


def test_topic_routing_matches_reference_on_random_patterns(ch: BlockingChannel) -> None:
    rng = random.Random(20240501)
    words = ["a", "b", "c"]
    patterns = sorted({".".join(rng.choice(words + ["*", "#"]) for _ in range(rng.randint(1, 4)))
                       for _ in range(60)})
    keys = sorted({".".join(rng.choice(words) for _ in range(rng.randint(1, 5)))
                   for _ in range(150)})
    x = unique("x.topic-random")
    ch.exchange_declare(x, exchange_type="topic", auto_delete=True)
    queues = bound_queues(ch, x, {p: p for p in patterns})
    ch.confirm_delivery()
    for key in keys:
        ch.basic_publish(x, key, key.encode())
    for pattern, q in queues.items():
        expected = [k.encode() for k in keys if _topic_matches(pattern, k)]
        assert drain(ch, q) == expected, f"pattern {pattern!r}"


def test_headers_exchange_all_and_any(ch: BlockingChannel) -> None:
    x = unique("x.headers")
    ch.exchange_declare(x, exchange_type="headers", auto_delete=True)
    qs = bound_queues(ch, x, {
        "all": {"x-match": "all", "format": "pdf", "type": "report"},
        "any": {"x-match": "any", "format": "pdf", "type": "log"},
        "default-all": {"format": "zip", "pages": 3},
    })
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({"format": "pdf", "type": "report"}, {"all", "any"}),
        ({"format": "pdf", "type": "report", "extra": 1}, {"all", "any"}),
        ({"format": "pdf"}, {"any"}),
        ({"type": "log"}, {"any"}),
        ({"format": "zip", "pages": 3}, {"default-all"}),
        ({"format": "zip", "pages": 4}, set()),
        ({"format": "txt", "type": "memo"}, set()),
        ({}, set()),
    ]
    for headers, expected in cases:
        assert who_got(ch, qs, x, "ignored", headers) == expected, f"headers {headers}"


def test_headers_exchange_edge_cases(ch: BlockingChannel) -> None:
    x = unique("x.headers-edge")
    ch.exchange_declare(x, exchange_type="headers", auto_delete=True)
    qs = bound_queues(ch, x, {
        "x-args-ignored": {"x-match": "all", "a": 1, "x-custom": "not matched on"},
        "any-of-nothing": {"x-match": "any"},
        "all-of-nothing": {},
    })
    assert who_got(ch, qs, x, "", {"a": 1}) == {"x-args-ignored", "all-of-nothing"}
    assert who_got(ch, qs, x, "", {"a": "1"}) == {"all-of-nothing"}  # types must agree
    assert who_got(ch, qs, x, "", None) == {"all-of-nothing"}


def test_amq_match_and_amq_topic_route(ch: BlockingChannel) -> None:
    q1 = ch.queue_declare("", exclusive=True).method.queue
    q2 = ch.queue_declare("", exclusive=True).method.queue
    value, key = unique("v"), unique("t")
    ch.queue_bind(q1, "amq.match", arguments={"x-match": "all", "k": value})
    ch.queue_bind(q2, "amq.topic", routing_key=key + ".#")
    ch.basic_publish("amq.match", "", b"by headers", pika.BasicProperties(headers={"k": value}))
    ch.basic_publish("amq.topic", key + ".x.y", b"by topic")
    assert drain(ch, q1) == [b"by headers"]
    assert drain(ch, q2) == [b"by topic"]


# -- exchange-to-exchange, alternate, internal --------------------------------------

def test_exchange_to_exchange_binding(ch: BlockingChannel) -> None:
    src = unique("x.src")
    dst = unique("x.dst")
    ch.exchange_declare(src, exchange_type="topic", auto_delete=True)
    ch.exchange_declare(dst, exchange_type="fanout", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    direct_q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, dst)
    ch.queue_bind(direct_q, src, "orders.#")
    ch.exchange_bind(destination=dst, source=src, routing_key="orders.*")
    ch.basic_publish(src, "orders.new", b"1")
    ch.basic_publish(src, "orders.new.eu", b"2")   # only orders.# matches
    ch.basic_publish(src, "invoices.new", b"3")
    assert drain(ch, q) == [b"1"]
    assert drain(ch, direct_q) == [b"1", b"2"]
    ch.exchange_unbind(destination=dst, source=src, routing_key="orders.*")
    ch.basic_publish(src, "orders.new", b"4")
    assert drain(ch, q) == []
    assert drain(ch, direct_q) == [b"4"]


def test_deleting_an_exchange_removes_its_bindings(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    x, dest = unique("x.deleted"), unique("x.dest")
    ch.exchange_declare(x, exchange_type="direct")
    ch.exchange_declare(dest, exchange_type="fanout", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    q_via = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x, "k")
    ch.exchange_bind(destination=dest, source=x, routing_key="k")
    ch.queue_bind(q_via, dest)
    ch.basic_publish(x, "k", b"before")
    assert (drain(ch, q), drain(ch, q_via)) == ([b"before"], [b"before"])
    ch.exchange_delete(x)
    ch.exchange_declare(x, exchange_type="direct")  # same name, no bindings
    ch.basic_publish(x, "k", b"after")
    assert (drain(ch, q), drain(ch, q_via)) == ([], [])
    ch.exchange_delete(x)


def test_deleting_a_queue_removes_its_bindings(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    x = unique("x.keep")
    ch.exchange_declare(x, exchange_type="fanout", auto_delete=False)
    q = unique("q.rebound")
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    ch.queue_delete(q)
    ch.queue_declare(q)
    ch.basic_publish(x, "", b"not for the new queue")
    assert drain(ch, q) == []
    ch.queue_delete(q)
    ch.exchange_delete(x)


def test_exchange_to_exchange_cycle_delivers_once(ch: BlockingChannel) -> None:
    a, b = unique("x.a"), unique("x.b")
    ch.exchange_declare(a, exchange_type="fanout", auto_delete=True)
    ch.exchange_declare(b, exchange_type="fanout", auto_delete=True)
    ch.exchange_bind(destination=b, source=a)
    ch.exchange_bind(destination=a, source=b)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, a)
    ch.queue_bind(q, b)
    ch.basic_publish(a, "", b"once")
    assert drain(ch, q) == [b"once"]
    for x in (a, b):
        ch.exchange_delete(x)


def test_alternate_exchange(ch: BlockingChannel) -> None:
    ae, main = unique("x.ae"), unique("x.main")
    ch.exchange_declare(ae, exchange_type="fanout", auto_delete=True)
    ch.exchange_declare(main, exchange_type="direct", auto_delete=True,
                        arguments={"alternate-exchange": ae})
    routed = ch.queue_declare("", exclusive=True).method.queue
    unrouted = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(routed, main, "known")
    ch.queue_bind(unrouted, ae)
    ch.confirm_delivery()
    ch.basic_publish(main, "known", b"routed", mandatory=True)
    ch.basic_publish(main, "unknown", b"to the AE", mandatory=True)  # no basic.return: AE took it
    assert drain(ch, routed) == [b"routed"]
    assert drain(ch, unrouted) == [b"to the AE"]


def test_internal_exchange(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    internal, front = unique("x.internal"), unique("x.front")
    ch.exchange_declare(internal, exchange_type="fanout", internal=True, auto_delete=True)
    ch.exchange_declare(front, exchange_type="fanout", auto_delete=True)
    ch.exchange_bind(destination=internal, source=front)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, internal)
    ch.basic_publish(front, "", b"via the front door")
    assert drain(ch, q) == [b"via the front door"]
    ch.basic_publish(internal, "", b"straight in")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, passive=True)
    assert info.value.reply_code == 403
    assert "ACCESS_REFUSED" in info.value.reply_text and internal in info.value.reply_text
    assert conn.channel().queue_declare(q, passive=True).method.message_count == 0
