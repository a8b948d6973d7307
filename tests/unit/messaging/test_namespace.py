from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import Any, Callable

import pytest

from broker.errors import AccessRefused, BrokerError, CommandInvalid, NotFound, PreconditionFailed, ResourceLocked
from broker.messaging import Binding, Exchange, Namespace, Queue

from .support import RecordingConsumer, message


@pytest.fixture
def namespace() -> Namespace:
    return Namespace("v")


def error_of(call: Callable[[], Any]) -> BrokerError:
    with pytest.raises(BrokerError) as caught:
        call()
    return caught.value


# -- passive declares and lookups ----------------------------------------------------------

def test_passive_declare_of_missing_objects(namespace: Namespace) -> None:
    error = error_of(lambda: namespace.declare_queue("q", passive=True))
    assert isinstance(error, NotFound) and error.reply_text == "NOT_FOUND - no queue 'q' in vhost 'v'"
    error = error_of(lambda: namespace.declare_exchange("x", "direct", passive=True))
    assert isinstance(error, NotFound) and error.reply_text == "NOT_FOUND - no exchange 'x' in vhost 'v'"
    assert isinstance(error_of(lambda: namespace.queue("q")), NotFound)
    assert isinstance(error_of(lambda: namespace.exchange("x")), NotFound)


def test_passive_declare_reports_counts_and_ignores_type(namespace: Namespace) -> None:
    queue, _, _ = namespace.declare_queue("q")
    queue.enqueue(message())
    queue.enqueue(message())
    queue.add_consumer(RecordingConsumer(credit=0))
    assert namespace.declare_queue("q", passive=True, durable=True) == (queue, 2, 1)
    namespace.declare_exchange("x", "topic")
    assert namespace.declare_exchange("x", "fanout", passive=True).type == "topic"
    assert namespace.declare_exchange("", "direct", passive=True) is namespace.default_exchange


def test_declare_returns_existing_with_counts(namespace: Namespace) -> None:
    queue, messages, consumers = namespace.declare_queue("q", durable=True)
    assert (messages, consumers) == (0, 0) and queue.durable and queue.name == "q"
    queue.enqueue(message())
    assert namespace.declare_queue("q", durable=True) == (queue, 1, 0)
    exchange = namespace.declare_exchange("x", "direct")
    assert namespace.declare_exchange("x", "direct") is exchange


# -- equivalence -------------------------------------------------------------------------

@pytest.mark.parametrize(("first", "second", "text"), [
    ({"durable": False}, {"durable": True},
     "inequivalent arg 'durable' for queue 'q' in vhost 'v': received 'true' but current is 'false'"),
    ({"auto_delete": True}, {},
     "inequivalent arg 'auto_delete' for queue 'q' in vhost 'v': received 'false' but current is 'true'"),
    ({"arguments": {"x-max-length": 10}}, {"arguments": {"x-max-length": 20}},
     "inequivalent arg 'x-max-length' for queue 'q' in vhost 'v': received the value '20' of type "
     "'long' but current is the value '10' of type 'long'"),
    ({}, {"arguments": {"x-message-ttl": 5}},
     "inequivalent arg 'x-message-ttl' for queue 'q' in vhost 'v': received the value '5' of type "
     "'long' but current is none"),
])
def test_queue_redeclare_must_be_equivalent(namespace: Namespace, first: dict[str, Any],
                                            second: dict[str, Any], text: str) -> None:
    namespace.declare_queue("q", **first)
    error = error_of(lambda: namespace.declare_queue("q", **second))
    assert isinstance(error, PreconditionFailed) and error.text == text


def test_queue_redeclare_ignores_unknown_arguments(namespace: Namespace) -> None:
    namespace.declare_queue("q", arguments={"x-custom": 1, "x-max-length": 5})
    namespace.declare_queue("q", arguments={"x-custom": 2, "x-max-length": 5})


@pytest.mark.parametrize(("first", "second", "text"), [
    ({"type": "direct"}, {"type": "topic"},
     "inequivalent arg 'type' for exchange 'x' in vhost 'v': received 'topic' but current is 'direct'"),
    ({"type": "direct", "durable": True}, {"type": "direct"},
     "inequivalent arg 'durable' for exchange 'x' in vhost 'v': received 'false' but current is 'true'"),
    ({"type": "direct"}, {"type": "direct", "auto_delete": True},
     "inequivalent arg 'auto_delete' for exchange 'x' in vhost 'v': received 'true' but current is 'false'"),
    ({"type": "direct"}, {"type": "direct", "internal": True},
     "inequivalent arg 'internal' for exchange 'x' in vhost 'v': received 'true' but current is 'false'"),
    ({"type": "direct", "arguments": {"alternate-exchange": "a"}}, {"type": "direct"},
     "inequivalent arg 'alternate-exchange' for exchange 'x' in vhost 'v': received none but current "
     "is the value 'a' of type 'longstr'"),
])
def test_exchange_redeclare_must_be_equivalent(namespace: Namespace, first: dict[str, Any],
                                               second: dict[str, Any], text: str) -> None:
    namespace.declare_exchange("x", **first)
    error = error_of(lambda: namespace.declare_exchange("x", **second))
    assert isinstance(error, PreconditionFailed) and error.text == text


# -- names ----------------------------------------------------------------------------------

def test_reserved_and_invalid_names(namespace: Namespace) -> None:
    error = error_of(lambda: namespace.declare_exchange("amq.foo", "direct"))
    assert isinstance(error, AccessRefused)
    assert error.reply_text == "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'"
    assert isinstance(error_of(lambda: namespace.declare_exchange("amq.direct", "direct")), AccessRefused)
    error = error_of(lambda: namespace.declare_queue("amq.q"))
    assert isinstance(error, AccessRefused)
    assert error.text == "queue name 'amq.q' contains reserved prefix 'amq.*'"
    error = error_of(lambda: namespace.declare_exchange("x", "foo"))
    assert isinstance(error, CommandInvalid) and error.hard
    assert error.reply_text == "COMMAND_INVALID - invalid exchange type 'foo'"
    error = error_of(lambda: namespace.declare_exchange("", "direct"))
    assert isinstance(error, AccessRefused) and error.text == "operation not permitted on the default exchange"


def test_names_longer_than_255_bytes_are_refused(namespace: Namespace) -> None:
    namespace.declare_queue("q" * 255)
    long_name = "é" * 128  # 256 bytes in UTF-8
    assert isinstance(error_of(lambda: namespace.declare_queue(long_name)), PreconditionFailed)
    assert isinstance(error_of(lambda: namespace.declare_exchange(long_name, "direct")), PreconditionFailed)


def test_server_named_queues(namespace: Namespace) -> None:
    first, _, _ = namespace.declare_queue("")
    second, _, _ = namespace.declare_queue("", exclusive_owner="c1")
    assert first.name.startswith("amq.gen-") and second.name.startswith("amq.gen-")
    assert first.name != second.name and len(first.name) > 20
    assert namespace.queue(first.name) is first


# -- deletes -------------------------------------------------------------------------------

def test_delete_queue_if_unused_and_if_empty(namespace: Namespace) -> None:
    queue, _, _ = namespace.declare_queue("q")
    consumer = RecordingConsumer(credit=0)
    queue.add_consumer(consumer)
    error = error_of(lambda: namespace.delete_queue("q", if_unused=True))
    assert isinstance(error, PreconditionFailed) and error.text == "queue 'q' in vhost 'v' in use"
    queue.remove_consumer(consumer)
    queue.enqueue(message())
    error = error_of(lambda: namespace.delete_queue("q", if_empty=True))
    assert isinstance(error, PreconditionFailed) and error.text == "queue 'q' in vhost 'v' not empty"
    assert namespace.delete_queue("q", if_unused=True) == 1
    assert "q" not in namespace.queues and queue.deleted
    assert namespace.delete_queue("q") == 0  # idempotent, as RabbitMQ


def test_delete_queue_removes_its_bindings_and_cancels_consumers(namespace: Namespace) -> None:
    queue, _, _ = namespace.declare_queue("q")
    namespace.bind_queue("q", "amq.topic", "#")
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    namespace.delete_queue("q")
    assert consumer.cancelled_by == [queue]
    assert namespace.exchange("amq.topic").bindings == {}
    assert namespace.route("amq.topic", message(routing_key="a")) == []


def test_delete_exchange_rules(namespace: Namespace) -> None:
    namespace.declare_exchange("x", "direct")
    namespace.declare_queue("q")
    namespace.bind_queue("q", "x", "k")
    error = error_of(lambda: namespace.delete_exchange("x", if_unused=True))
    assert isinstance(error, PreconditionFailed) and error.text == "exchange 'x' in vhost 'v' in use"
    namespace.delete_exchange("x")
    assert "x" not in namespace.exchanges and namespace.queue("q").bindings == set()
    namespace.delete_exchange("x")  # idempotent
    error = error_of(lambda: namespace.delete_exchange(""))
    assert isinstance(error, AccessRefused) and error.text == "operation not permitted on the default exchange"
    assert isinstance(error_of(lambda: namespace.delete_exchange("amq.topic")), AccessRefused)


# -- bindings ------------------------------------------------------------------------------

def test_binding_errors(namespace: Namespace) -> None:
    namespace.declare_queue("q")
    error = error_of(lambda: namespace.bind_queue("q", "", "q"))
    assert isinstance(error, AccessRefused) and error.text == "operation not permitted on the default exchange"
    assert isinstance(error_of(lambda: namespace.unbind_queue("q", "", "q")), AccessRefused)
    error = error_of(lambda: namespace.bind_queue("missing", "amq.direct", "k"))
    assert error.reply_text == "NOT_FOUND - no queue 'missing' in vhost 'v'"
    error = error_of(lambda: namespace.bind_queue("q", "missing", "k"))
    assert error.reply_text == "NOT_FOUND - no exchange 'missing' in vhost 'v'"
    namespace.unbind_queue("q", "amq.direct", "never-bound")  # succeeds, as RabbitMQ


def test_rebinding_is_idempotent(namespace: Namespace) -> None:
    namespace.declare_queue("q")
    namespace.bind_queue("q", "amq.direct", "k")
    namespace.bind_queue("q", "amq.direct", "k")
    assert len(namespace.exchange("amq.direct").bindings) == 1
    assert len(namespace.queue("q").bindings) == 1


# -- exclusive and auto-delete queues -------------------------------------------------------

LOCKED = ("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'mine' in vhost 'v'. "
          "It could be originally declared on another connection or the exclusive property value "
          "does not match that of the original declaration.")


def test_exclusive_queue_is_locked_to_its_owner(namespace: Namespace) -> None:
    namespace.declare_queue("mine", exclusive_owner="c1")
    for call in (lambda: namespace.declare_queue("mine", exclusive_owner="c2"),
                 lambda: namespace.declare_queue("mine", passive=True, owner="c2"),
                 lambda: namespace.queue("mine", owner="c2"),
                 lambda: namespace.queue("mine"),
                 lambda: namespace.bind_queue("mine", "amq.direct", "k", owner="c2"),
                 lambda: namespace.delete_queue("mine", owner="c2")):
        error = error_of(call)
        assert isinstance(error, ResourceLocked) and error.reply_text == LOCKED
    assert namespace.queue("mine", owner="c1").exclusive
    namespace.declare_queue("mine", exclusive_owner="c1")
    namespace.declare_queue("mine", passive=True, owner="c1")
    namespace.declare_queue("mine", passive=True, exclusive_owner="c1")
    namespace.bind_queue("mine", "amq.direct", "k", owner="c1")


def test_redeclare_must_match_exclusivity_exactly(namespace: Namespace) -> None:
    """RabbitMQ's strict check: even the owner cannot redeclare its exclusive queue as shared."""
    namespace.declare_queue("mine", exclusive_owner="c1")
    error = error_of(lambda: namespace.declare_queue("mine", owner="c1"))
    assert isinstance(error, ResourceLocked) and error.reply_text == LOCKED
    namespace.declare_queue("shared")
    error = error_of(lambda: namespace.declare_queue("shared", exclusive_owner="c1"))
    assert isinstance(error, ResourceLocked) and "locked queue 'shared'" in error.text


def test_passive_declare_without_a_known_caller_is_not_locked(namespace: Namespace) -> None:
    namespace.declare_queue("mine", exclusive_owner="c1")
    queue, _, _ = namespace.declare_queue("mine", passive=True)
    assert queue.exclusive_owner == "c1"


def test_owner_closed_deletes_only_its_exclusive_queues(namespace: Namespace) -> None:
    namespace.declare_queue("a", exclusive_owner="c1")
    namespace.declare_queue("b", exclusive_owner="c1")
    namespace.declare_queue("c", exclusive_owner="c2")
    namespace.declare_queue("shared")
    namespace.owner_closed("c1")
    assert sorted(namespace.queues) == ["c", "shared"]


def test_auto_delete_queue_goes_with_its_last_consumer(namespace: Namespace) -> None:
    queue, _, _ = namespace.declare_queue("q", auto_delete=True)
    first, second = RecordingConsumer("1"), RecordingConsumer("2")
    queue.add_consumer(first)
    queue.add_consumer(second)
    queue.remove_consumer(first)
    assert "q" in namespace.queues
    queue.remove_consumer(second)
    assert "q" not in namespace.queues and queue.deleted


def test_auto_delete_queue_without_consumers_stays(namespace: Namespace) -> None:
    namespace.declare_queue("q", auto_delete=True)
    namespace.run_due(1e12)
    assert "q" in namespace.queues


# -- durable objects: listeners, records, restore ----------------------------------------------

class Journal:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def object_created(self, obj: Exchange | Queue | Binding) -> None:
        self.events.append(("created", json.loads(json.dumps(obj.to_record()))))

    def object_deleted(self, obj: Exchange | Queue | Binding) -> None:
        self.events.append(("deleted", json.loads(json.dumps(obj.to_record()))))


def test_listeners_hear_only_durable_objects(namespace: Namespace) -> None:
    journal = Journal()
    namespace.listeners.append(journal)
    namespace.declare_exchange("dx", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    namespace.declare_exchange("tx", "topic")
    namespace.declare_queue("dq", durable=True, arguments={"x-max-length": 5})
    namespace.declare_queue("tq")
    namespace.declare_queue("ex", durable=True, exclusive_owner="c1")
    namespace.bind_queue("dq", "dx", "a.#")
    namespace.bind_queue("tq", "dx", "a.#")
    namespace.bind_queue("dq", "tx", "a.#")
    namespace.bind_queue("dq", "amq.direct", "k")
    created = [(event, record["object"], record.get("name") or record.get("destination"))
               for event, record in journal.events]
    assert created == [("created", "exchange", "dx"), ("created", "queue", "dq"),
                       ("created", "binding", "dq"), ("created", "binding", "dq")]
    assert journal.events[2][1] == {"object": "binding", "source": "dx", "destination": "dq",
                                    "destination_type": "queue", "routing_key": "a.#", "arguments": {}}
    journal.events.clear()
    namespace.delete_queue("dq")
    # the queue's removal is stored first (a failure refuses the delete); recovery
    # ignores bindings to a queue that is gone
    assert [(event, record["object"]) for event, record in journal.events] == [
        ("deleted", "queue"), ("deleted", "binding"), ("deleted", "binding")]


def test_records_restore_a_fresh_namespace(namespace: Namespace) -> None:
    stamp = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    namespace.declare_exchange("orders", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    namespace.declare_exchange("ae", "fanout", durable=True)
    namespace.declare_exchange("edge", "headers", durable=True, internal=True)
    namespace.declare_queue("work", durable=True, arguments={"x-max-priority": 5, "x-dead-letter-exchange": "ae"})
    namespace.declare_queue("lost", durable=True)
    namespace.declare_queue("transient")
    namespace.bind_queue("work", "orders", "order.*")
    namespace.bind_queue("lost", "ae", "")
    namespace.bind_exchange("edge", "orders", "hdr.#")
    namespace.bind_queue("work", "edge", "", {"x-match": "any", "raw": b"\x00\x01", "when": stamp,
                                              "amount": Decimal("1.50")})
    namespace.bind_queue("transient", "orders", "order.#")
    records = json.loads(json.dumps(namespace.records()))

    restored = Namespace("v")
    journal = Journal()
    restored.listeners.append(journal)
    restored.restore(reversed(records))  # any order
    assert journal.events == []
    assert sorted(restored.queues) == ["lost", "work"]
    assert restored.queue("work").type == "priority"
    assert restored.exchange("edge").internal and restored.exchange("orders").alternate == "ae"
    binding = next(iter(restored.queue("work").bindings - {
        b for b in restored.queue("work").bindings if b.source.name == "orders"}))
    assert binding.arguments == {"x-match": "any", "raw": b"\x00\x01", "when": stamp, "amount": Decimal("1.50")}
    assert sorted(q.name for q in restored.route("orders", message(routing_key="order.new"))) == ["work"]
    assert [q.name for q in restored.route("orders", message(routing_key="other"))] == ["lost"]
    assert [q.name for q in restored.route("orders", message(routing_key="hdr.x", headers={"raw": b"\x00\x01"}))] == ["work"]
    assert sorted(map(json.dumps, json.loads(json.dumps(restored.records())))) == sorted(map(json.dumps, records))


# -- Qpid's exchange.bound ------------------------------------------------------------------

def test_binding_status_answers_exchange_bound(namespace: Namespace) -> None:
    namespace.declare_exchange("x", "direct")
    namespace.declare_exchange("empty", "direct")
    namespace.declare_queue("q")
    namespace.declare_queue("other")
    namespace.bind_queue("q", "x", "k")
    status = namespace.binding_status
    assert status("x", "q", "k") == (0, "")
    assert status("x", "q") == (0, "")
    assert status("x", "", "k") == (0, "")
    assert status("x") == (0, "")
    assert status("missing", "q", "k") == (1, "Exchange 'missing' not found")
    assert status("x", "nope", "k") == (2, "Queue 'nope' not found")
    assert status("empty") == (3, "")
    assert status("x", "other") == (4, "Queue 'other' not bound to exchange 'x'")
    assert status("x", "", "j") == (5, "No queue bound with routing key 'j' to exchange 'x'")
    assert status("x", "q", "j") == (6, "Queue 'q' not bound with routing key 'j' to exchange 'x'")
    assert status("", "q", "q") == (0, "") and status("", "q", "other")[0] == 6
    assert status("", "", "q") == (0, "") and status("", "", "nope")[0] == 5


def test_namespace_exposes_its_clock() -> None:
    ticks = iter([1.0, 2.0, 3.0])
    namespace = Namespace("v", lambda: next(ticks))
    assert namespace.clock() == 1.0


def test_restore_refuses_unknown_records(namespace: Namespace) -> None:
    with pytest.raises(ValueError):
        namespace.restore([{"object": "consumer", "name": "c"}])
