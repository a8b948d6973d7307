from __future__ import annotations

from typing import Any

import pytest

from broker.errors import AccessRefused, NotFound, PreconditionFailed
from broker.messaging import Namespace

from .support import message


@pytest.fixture
def namespace() -> Namespace:
    ns = Namespace("v")
    for name in ("q1", "q2", "q3"):
        ns.declare_queue(name)
    return ns


def routed(namespace: Namespace, exchange: str, routing_key: str = "",
           headers: dict[str, Any] | None = None) -> list[str]:
    return sorted(q.name for q in namespace.route(exchange, message(routing_key=routing_key, headers=headers)))


def test_every_vhost_has_the_standard_exchanges(namespace: Namespace) -> None:
    kinds = {name: namespace.exchange(name).type for name in
             ("", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match")}
    assert kinds == {"": "direct", "amq.direct": "direct", "amq.fanout": "fanout",
                     "amq.topic": "topic", "amq.headers": "headers", "amq.match": "headers"}
    assert all(namespace.exchange(name).durable for name in kinds)


def test_default_exchange_routes_by_queue_name(namespace: Namespace) -> None:
    assert routed(namespace, "", "q2") == ["q2"]
    assert routed(namespace, "", "missing") == []
    namespace.delete_queue("q2")
    assert routed(namespace, "", "q2") == []


def test_direct_exchange_exact_key_and_each_queue_once(namespace: Namespace) -> None:
    namespace.bind_queue("q1", "amq.direct", "a")
    namespace.bind_queue("q1", "amq.direct", "a", {"x-any": 1})  # second binding, same route
    namespace.bind_queue("q2", "amq.direct", "a")
    namespace.bind_queue("q3", "amq.direct", "b")
    assert routed(namespace, "amq.direct", "a") == ["q1", "q2"]
    assert routed(namespace, "amq.direct", "b") == ["q3"]
    assert routed(namespace, "amq.direct", "A") == []
    namespace.unbind_queue("q1", "amq.direct", "a")
    assert routed(namespace, "amq.direct", "a") == ["q1", "q2"]  # the other binding remains
    namespace.unbind_queue("q1", "amq.direct", "a", {"x-any": 1})
    assert routed(namespace, "amq.direct", "a") == ["q2"]


def test_fanout_ignores_routing_key(namespace: Namespace) -> None:
    namespace.bind_queue("q1", "amq.fanout", "x")
    namespace.bind_queue("q2", "amq.fanout", "y")
    assert routed(namespace, "amq.fanout", "anything") == ["q1", "q2"]


def test_topic_exchange_routes_and_cache_follows_bindings(namespace: Namespace) -> None:
    namespace.bind_queue("q1", "amq.topic", "stock.*.nyse")
    namespace.bind_queue("q2", "amq.topic", "stock.#")
    assert routed(namespace, "amq.topic", "stock.ibm.nyse") == ["q1", "q2"]
    namespace.bind_queue("q3", "amq.topic", "#.nyse")
    assert routed(namespace, "amq.topic", "stock.ibm.nyse") == ["q1", "q2", "q3"]
    namespace.unbind_queue("q2", "amq.topic", "stock.#")
    assert routed(namespace, "amq.topic", "stock.ibm.nyse") == ["q1", "q3"]


HEADER_CASES = [
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 0}, True),
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1}, False),
    ({"x-match": "all", "a": 1}, {"a": 2}, False),
    ({"a": 1}, {"a": 1}, True),  # all is the default
    ({"x-match": "any", "a": 1, "b": 2}, {"b": 2}, True),
    ({"x-match": "any", "a": 1, "b": 2}, {"a": 3, "b": 3}, False),
    ({"x-match": "any"}, {"a": 1}, False),
    ({"x-match": "all"}, {}, True),
    ({"x-match": "all", "a": None}, {"a": "whatever"}, True),  # void matches presence
    ({"x-match": "all", "a": None}, {}, False),
    ({"x-match": "any", "a": None}, {"a": 0}, True),
    ({"x-match": "all", "x-extra": 1, "a": 1}, {"a": 1}, True),  # x- keys ignored by all/any
    ({"x-match": "any", "x-extra": 1}, {"x-extra": 1}, False),
    ({"x-match": "all-with-x", "x-extra": 1, "a": 1}, {"a": 1}, False),
    ({"x-match": "all-with-x", "x-extra": 1, "a": 1}, {"a": 1, "x-extra": 1}, True),
    ({"x-match": "any-with-x", "x-extra": 1}, {"x-extra": 1}, True),
    ({"x-match": "all", "a": "text"}, {"a": b"text"}, True),  # longstr as bytes or str
    ({"x-match": "all", "a": 1}, {"a": True}, False),  # bool is not 1
    ({"x-match": b"any", "a": 1}, {"a": 1}, True),
]


@pytest.mark.parametrize(("binding", "headers", "matches"), HEADER_CASES)
def test_headers_exchange(namespace: Namespace, binding: dict[str, Any], headers: dict[str, Any],
                          matches: bool) -> None:
    namespace.bind_queue("q1", "amq.headers", "", binding)
    assert (routed(namespace, "amq.headers", "ignored", headers) == ["q1"]) is matches


def test_headers_exchange_without_headers_and_bad_x_match(namespace: Namespace) -> None:
    namespace.bind_queue("q1", "amq.match", "", {"x-match": "any", "a": 1})
    assert routed(namespace, "amq.match", "", None) == []
    with pytest.raises(PreconditionFailed) as caught:
        namespace.bind_queue("q2", "amq.match", "", {"x-match": "some"})
    assert "Invalid x-match field value 'some'" in caught.value.text
    assert namespace.queue("q2").bindings == set()


def test_exchange_to_exchange_binding(namespace: Namespace) -> None:
    namespace.declare_exchange("edge", "topic")
    namespace.declare_exchange("inner", "direct")
    namespace.bind_exchange("inner", "edge", "orders.#")
    namespace.bind_queue("q1", "inner", "orders.eu")
    namespace.bind_queue("q2", "edge", "orders.*")
    assert routed(namespace, "edge", "orders.eu") == ["q1", "q2"]
    assert routed(namespace, "edge", "orders.us") == ["q2"]
    assert routed(namespace, "edge", "orders.eu.x") == []
    namespace.unbind_exchange("inner", "edge", "orders.#")
    assert routed(namespace, "edge", "orders.eu") == ["q2"]


def test_exchange_cycles_route_each_queue_once(namespace: Namespace) -> None:
    namespace.declare_exchange("a", "fanout")
    namespace.declare_exchange("b", "fanout")
    namespace.bind_exchange("b", "a", "")
    namespace.bind_exchange("a", "b", "")
    namespace.bind_exchange("a", "a", "")
    namespace.bind_queue("q1", "a", "")
    namespace.bind_queue("q1", "b", "")
    namespace.bind_queue("q2", "b", "")
    assert routed(namespace, "a") == ["q1", "q2"]
    assert routed(namespace, "b") == ["q1", "q2"]


def test_alternate_exchange_takes_unroutable_messages(namespace: Namespace) -> None:
    namespace.declare_exchange("ae", "fanout")
    namespace.bind_queue("q3", "ae", "")
    namespace.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    namespace.bind_queue("q1", "main", "known")
    assert routed(namespace, "main", "known") == ["q1"]
    assert routed(namespace, "main", "unknown") == ["q3"]
    namespace.declare_exchange("qpid-style", "direct", arguments={"x-qpid-alternate-exchange": "ae"})
    assert routed(namespace, "qpid-style", "x") == ["q3"]


def test_alternate_exchange_chains_and_cycles(namespace: Namespace) -> None:
    namespace.declare_exchange("ae2", "fanout")
    namespace.declare_exchange("ae1", "direct", arguments={"alternate-exchange": "ae2"})
    namespace.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae1"})
    assert routed(namespace, "main", "x") == []
    namespace.bind_queue("q2", "ae2", "")
    assert routed(namespace, "main", "x") == ["q2"]
    namespace.declare_exchange("loop1", "direct", arguments={"alternate-exchange": "loop2"})
    namespace.declare_exchange("loop2", "direct", arguments={"alternate-exchange": "loop1"})
    assert routed(namespace, "loop1", "x") == []
    namespace.declare_exchange("dangling", "direct", arguments={"alternate-exchange": "missing"})
    assert routed(namespace, "dangling", "x") == []


def test_alternate_exchange_not_used_when_an_exchange_binding_matched(namespace: Namespace) -> None:
    namespace.declare_exchange("ae", "fanout")
    namespace.bind_queue("q3", "ae", "")
    namespace.declare_exchange("empty", "fanout")
    namespace.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    namespace.bind_exchange("empty", "main", "k")
    assert routed(namespace, "main", "k") == []  # matched a binding (to an empty exchange)
    assert routed(namespace, "main", "other") == ["q3"]


def test_internal_exchange_refuses_direct_publish_but_routes_e2e(namespace: Namespace) -> None:
    namespace.declare_exchange("hidden", "fanout", internal=True)
    namespace.bind_queue("q1", "hidden", "")
    namespace.bind_exchange("hidden", "amq.fanout", "")
    with pytest.raises(AccessRefused) as caught:
        namespace.route("hidden", message())
    assert caught.value.reply_text == "ACCESS_REFUSED - cannot publish to internal exchange 'hidden' in vhost 'v'"
    assert routed(namespace, "amq.fanout") == ["q1"]


def test_route_to_missing_exchange(namespace: Namespace) -> None:
    with pytest.raises(NotFound) as caught:
        namespace.route("nope", message())
    assert caught.value.reply_text == "NOT_FOUND - no exchange 'nope' in vhost 'v'"


def test_auto_delete_exchange_goes_with_its_last_binding(namespace: Namespace) -> None:
    namespace.declare_exchange("temp", "direct", auto_delete=True)
    assert "temp" in namespace.exchanges  # never bound: stays
    namespace.bind_queue("q1", "temp", "a")
    namespace.bind_queue("q2", "temp", "b")
    namespace.unbind_queue("q1", "temp", "a")
    assert "temp" in namespace.exchanges
    namespace.delete_queue("q2")  # removes the last binding
    assert "temp" not in namespace.exchanges and namespace.exchange("amq.direct")


def test_auto_delete_cascades_through_exchange_bindings(namespace: Namespace) -> None:
    namespace.declare_exchange("upstream", "fanout", auto_delete=True)
    namespace.declare_exchange("downstream", "fanout")
    namespace.bind_exchange("downstream", "upstream", "")
    namespace.bind_queue("q1", "downstream", "")
    namespace.delete_exchange("downstream")
    assert "upstream" not in namespace.exchanges
    assert namespace.queue("q1").bindings == set()


def test_deleting_exchange_removes_bindings_both_ways(namespace: Namespace) -> None:
    namespace.declare_exchange("mid", "fanout")
    namespace.bind_exchange("mid", "amq.fanout", "")
    namespace.bind_queue("q1", "mid", "")
    namespace.delete_exchange("mid")
    assert namespace.exchange("amq.fanout").bindings == {}
    assert namespace.queue("q1").bindings == set()
    assert routed(namespace, "amq.fanout") == []


def test_exchange_bindings_to_default_exchange_are_refused(namespace: Namespace) -> None:
    for call in (lambda: namespace.bind_exchange("", "amq.direct", "k"),
                 lambda: namespace.bind_exchange("amq.direct", "", "k"),
                 lambda: namespace.unbind_exchange("", "amq.direct", "k")):
        with pytest.raises(AccessRefused) as caught:
            call()
        assert caught.value.text == "operation not permitted on the default exchange"
