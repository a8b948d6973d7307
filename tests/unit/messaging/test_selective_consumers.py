"""Consumers and bindings with message selectors (Broker-J's x-filter-jms-selector) in the messaging core."""

from __future__ import annotations

import pytest

from broker.messaging.exchange import Binding, DirectExchange, FanoutExchange, HeadersExchange, TopicExchange
from broker.messaging.message import Message
from broker.messaging.namespace import Namespace
from broker.messaging.priority_queue import PriorityQueue
from broker.messaging.queue import Queue
from broker.messaging.selectors import SELECTOR_ARGUMENT, SelectorError, compile_selector

from .support import FakeClock, RecordingConsumer, drain, message


def _consumer(tag: str, selector: str | None = None, *, credit: int | None = None,
              priority: int = 0) -> RecordingConsumer:
    consumer = RecordingConsumer(tag, credit=credit)
    consumer.selector = compile_selector(selector) if selector else None  # type: ignore[attr-defined]
    if priority:
        consumer.priority = priority  # type: ignore[attr-defined]
    return consumer


def _colored(body: str, color: str | None) -> Message:
    return message(body, headers={"color": color} if color is not None else None)


def test_each_consumer_gets_only_what_it_selects() -> None:
    queue = Queue("q")
    red, blue = _consumer("red", "color = 'red'"), _consumer("blue", "color = 'blue'")
    queue.add_consumer(red)
    queue.add_consumer(blue)
    for body, color in [("r1", "red"), ("b1", "blue"), ("r2", "red"), ("g1", "green"), ("b2", "blue")]:
        queue.enqueue(_colored(body, color))
    queue.dispatch()
    assert red.bodies == [b"r1", b"r2"]
    assert blue.bodies == [b"b1", b"b2"]
    assert queue.message_count == 1 and drain(queue) == [b"g1"]   # nobody selects green: it stays


def test_an_unmatched_head_does_not_block_later_matches() -> None:
    queue = Queue("q")
    for body, color in [("g1", "green"), ("g2", "green"), ("r1", "red")]:
        queue.enqueue(_colored(body, color))
    red = _consumer("red", "color = 'red'")
    queue.add_consumer(red)
    queue.dispatch()
    assert red.bodies == [b"r1"]
    # the passed-over messages kept their places
    assert drain(queue) == [b"g1", b"g2"]


def test_an_arrival_behind_unmatched_messages_reaches_its_consumer() -> None:
    queue = Queue("q")
    red = _consumer("red", "color = 'red'")
    queue.add_consumer(red)
    queue.enqueue(_colored("g1", "green"))
    assert queue.message_count == 1 and red.bodies == []
    queue.enqueue(_colored("r1", "red"))
    assert red.bodies == [b"r1"]          # delivered on arrival, not at the next dispatch
    queue.enqueue(_colored("g2", "green"))
    assert queue.message_count == 2


def test_a_consumer_without_credit_keeps_its_messages_waiting_in_order() -> None:
    queue = Queue("q")
    red = _consumer("red", "color = 'red'", credit=1)
    anything = _consumer("any", "color IS NOT NULL", credit=0)
    queue.add_consumer(red)
    queue.add_consumer(anything)
    for body, color in [("r1", "red"), ("r2", "red"), ("b1", "blue"), ("r3", "red")]:
        queue.enqueue(_colored(body, color))
    queue.dispatch()
    assert red.bodies == [b"r1"]
    red.credit = 5
    queue.dispatch()
    assert red.bodies == [b"r1", b"r2", b"r3"]
    anything.credit = 5
    queue.dispatch()
    assert anything.bodies == [b"b1"]


def test_selective_and_plain_consumers_share_round_robin() -> None:
    queue = Queue("q")
    red, plain = _consumer("red", "color = 'red'"), _consumer("plain")
    queue.add_consumer(red)
    queue.add_consumer(plain)
    for i in range(4):
        queue.enqueue(_colored(f"r{i}", "red"))
    queue.enqueue(_colored("b", "blue"))
    queue.dispatch()
    assert red.bodies == [b"r0", b"r2"] and plain.bodies == [b"r1", b"r3", b"b"]


def test_priorities_apply_among_matching_consumers() -> None:
    queue = Queue("q")
    high = _consumer("high", "color = 'red'", priority=10)
    low = _consumer("low", priority=1)
    queue.add_consumer(low)
    queue.add_consumer(high)
    for body, color in [("r1", "red"), ("b1", "blue"), ("r2", "red")]:
        queue.enqueue(_colored(body, color))
    queue.dispatch()
    assert high.bodies == [b"r1", b"r2"] and low.bodies == [b"b1"]


def test_redelivered_messages_answer_jms_redelivered() -> None:
    queue = Queue("q")
    first = _consumer("first")
    queue.add_consumer(first)
    queue.enqueue(message("m"))
    queue.dispatch()
    queue.remove_consumer(first)
    again = _consumer("again", "JMSRedelivered AND JMSXDeliveryCount = 2")
    queue.add_consumer(again)
    queue.release(first.entries[0])
    assert again.bodies == [b"m"]


def test_when_the_last_selective_consumer_goes_dispatch_is_plain_again() -> None:
    queue = Queue("q")
    red = _consumer("red", "color = 'red'")
    queue.add_consumer(red)
    queue.enqueue(_colored("g", "green"))
    queue.remove_consumer(red)
    plain = _consumer("plain")
    queue.add_consumer(plain)
    queue.dispatch()
    assert plain.bodies == [b"g"]


def test_selectors_work_on_other_queue_kinds() -> None:
    queue = PriorityQueue("p", arguments={"x-max-priority": 9})
    for body, color, priority in [("r-low", "red", 1), ("b-high", "blue", 9), ("r-high", "red", 8)]:
        queue.enqueue(message(body, headers={"color": color}, priority=priority))
    red = _consumer("red", "color = 'red'")
    queue.add_consumer(red)
    queue.dispatch()
    assert red.bodies == [b"r-high", b"r-low"]
    assert drain(queue) == [b"b-high"]


def test_expired_messages_are_retired_during_a_selective_scan() -> None:
    clock = FakeClock()
    queue = Queue("q", clock=clock, arguments={"x-message-ttl": 1000})
    queue.enqueue(_colored("old", "red"))
    clock.advance(2)
    red = _consumer("red", "color = 'red'")
    queue.add_consumer(red)
    queue.dispatch()
    assert red.bodies == [] and queue.message_count == 0


# -- bindings ---------------------------------------------------------------------------------------


def _bound(exchange_type: type, key: str = "k", **arguments: object) -> tuple[object, Queue, Queue]:
    exchange = exchange_type("x")
    red, rest = Queue("red"), Queue("rest")
    exchange.add_binding(Binding(exchange, red, key, {SELECTOR_ARGUMENT: "color = 'red'", **arguments}))
    exchange.add_binding(Binding(exchange, rest, key, dict(arguments)))
    return exchange, red, rest


@pytest.mark.parametrize("exchange_type,key,arguments", [
    (DirectExchange, "k", {}), (FanoutExchange, "k", {}), (TopicExchange, "k.#", {}),
    (HeadersExchange, "", {"x-match": "any", "color": None}),
])
def test_a_selective_binding_routes_only_matches(exchange_type: type, key: str, arguments: dict) -> None:
    exchange, red, rest = _bound(exchange_type, key, **arguments)
    red_message = message("r", routing_key="k.1" if key.endswith("#") else "k", headers={"color": "red"})
    blue_message = message("b", routing_key="k.1" if key.endswith("#") else "k", headers={"color": "blue"})
    assert set(exchange.route(red_message)) == {red, rest}   # type: ignore[attr-defined]
    assert list(exchange.route(blue_message)) == [rest]       # type: ignore[attr-defined]


def test_a_queue_bound_twice_is_routed_once_if_any_binding_matches() -> None:
    exchange = DirectExchange("x")
    queue = Queue("q")
    exchange.add_binding(Binding(exchange, queue, "k", {SELECTOR_ARGUMENT: "n = 1"}))
    exchange.add_binding(Binding(exchange, queue, "k", {SELECTOR_ARGUMENT: "n > 0"}))
    assert list(exchange.route(message("m", routing_key="k", headers={"n": 1}))) == [queue]
    assert list(exchange.route(message("m", routing_key="k", headers={"n": 0}))) == []
    exchange.add_binding(Binding(exchange, queue, "k"))                  # an unfiltered one too
    assert list(exchange.route(message("m", routing_key="k", headers={"n": 0}))) == [queue]


def test_unbinding_the_selective_binding_restores_plain_routing() -> None:
    exchange = TopicExchange("x")
    queue = Queue("q")
    binding = Binding(exchange, queue, "#", {SELECTOR_ARGUMENT: "n = 1"})
    exchange.add_binding(binding)
    assert list(exchange.route(message("m", routing_key="a", headers={"n": 2}))) == []
    exchange.remove_binding(binding)
    exchange.add_binding(Binding(exchange, queue, "#"))
    assert list(exchange.route(message("m", routing_key="a", headers={"n": 2}))) == [queue]


def test_a_bad_binding_selector_is_refused_before_anything_changes() -> None:
    namespace = Namespace(vhost_name="default", clock=FakeClock())
    namespace.declare_queue("q")
    namespace.declare_exchange("x", "direct")
    with pytest.raises(SelectorError) as caught:
        namespace.bind_queue("q", "x", "k", {SELECTOR_ARGUMENT: "color = "})
    assert caught.value.reply_code == 406 and "position 8" in caught.value.reply_text
    assert namespace.queue("q").bindings == set()


def test_dead_letters_follow_selective_bindings() -> None:
    namespace = Namespace(vhost_name="default", clock=FakeClock())
    namespace.declare_exchange("dlx", "fanout")
    namespace.declare_queue("red-letters")
    namespace.bind_queue("red-letters", "dlx", "", {SELECTOR_ARGUMENT: "color = 'red'"})
    namespace.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx"})
    work = namespace.queue("work")
    work.enqueue(_colored("r", "red"))
    work.enqueue(_colored("b", "blue"))
    for entry in [work.get(), work.get()]:
        assert entry is not None
        work.reject(entry)
    assert drain(namespace.queue("red-letters")) == [b"r"]


def test_selective_bindings_survive_a_restore_and_bad_stored_ones_are_skipped(
        caplog: pytest.LogCaptureFixture) -> None:
    namespace = Namespace(vhost_name="default", clock=FakeClock())
    namespace.declare_exchange("x", "fanout", durable=True)
    namespace.declare_queue("q", durable=True)
    namespace.bind_queue("q", "x", "", {SELECTOR_ARGUMENT: "n = 1"})
    records = namespace.records()
    stored_badly = {"object": "binding", "source": "x", "destination": "q", "destination_type": "queue",
                    "routing_key": "other", "arguments": {SELECTOR_ARGUMENT: "n ="}}
    restored = Namespace(vhost_name="default", clock=FakeClock())
    restored.restore([*records, stored_badly])
    assert [b.routing_key for b in restored.queue("q").bindings] == [""]
    assert "not restored" in caplog.text and "position 3" in caplog.text
    assert [q.name for q in restored.route("x", message("m", headers={"n": 1}))] == ["q"]
    assert restored.route("x", message("m", headers={"n": 2})) == []


def test_an_exchange_to_exchange_binding_can_select_too() -> None:
    namespace = Namespace(vhost_name="default", clock=FakeClock())
    namespace.declare_exchange("all", "fanout")
    namespace.declare_exchange("urgent", "fanout")
    namespace.declare_queue("pager")
    namespace.bind_queue("pager", "urgent", "")
    namespace.bind_exchange("urgent", "all", "", {SELECTOR_ARGUMENT: "JMSPriority >= 8"})
    assert [q.name for q in namespace.route("all", message("m", priority=9))] == ["pager"]
    assert namespace.route("all", message("m", priority=5)) == []
    assert namespace.route("all", message("m")) == []           # no priority: JMS's 4
