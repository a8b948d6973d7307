"""Namespace.when_stored: a durable change takes effect once a background store has it."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import BrokerError, PreconditionFailed, StoreFailed
from broker.messaging.namespace import Namespace

from .store_fake import ManualStore

FULL = OSError(28, "No space left on device")


@pytest.fixture
def store() -> ManualStore:
    return ManualStore()


@pytest.fixture
def ns(store: ManualStore) -> Namespace:
    namespace = Namespace("v")
    namespace.listeners.append(store)
    return namespace


class Outcome:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, BrokerError | None]] = []

    def __call__(self, result: Any, error: BrokerError | None) -> None:
        self.calls.append((result, error))

    @property
    def error(self) -> BrokerError | None:
        assert len(self.calls) == 1, self.calls
        return self.calls[0][1]


def test_a_durable_queue_exists_only_once_stored(ns: Namespace, store: ManualStore) -> None:
    done = Outcome()
    ns.when_stored(lambda: ns.declare_queue("orders", durable=True), done)
    assert done.calls == [] and "orders" not in ns.queues and len(store.in_flight) == 1
    store.land()
    assert "orders" in ns.queues and done.error is None
    queue, messages, consumers = done.calls[0][0]
    assert queue is ns.queues["orders"] and (messages, consumers) == (0, 0)
    assert list(store.records.values())[0]["name"] == "orders"


def test_what_needs_no_store_is_answered_at_once(ns: Namespace, store: ManualStore) -> None:
    done = Outcome()
    ns.when_stored(lambda: ns.declare_queue("scratch"), done)
    assert done.error is None and "scratch" in ns.queues and store.submitted == 0
    refused = Outcome()
    ns.when_stored(lambda: ns.declare_queue("amq.nope", durable=True), refused)
    assert refused.error is not None and refused.error.reply_code == 403


def test_a_failed_store_leaves_nothing(ns: Namespace, store: ManualStore) -> None:
    ns.declare_exchange("events", "topic", durable=True)
    done = Outcome()
    ns.when_stored(lambda: ns.declare_queue("orders", durable=True), done)
    bound = Outcome()
    ns.when_stored(lambda: ns.bind_exchange("events", "amq.topic", "#"), bound)
    store.land(FULL)
    for each in (done, bound):
        assert isinstance(each.error, StoreFailed) and "No space left on device" in each.error.text
    assert "orders" not in ns.queues and not ns.exchange("amq.topic").bindings
    assert [r["name"] for r in store.records.values()] == ["events"]
    assert ns.store_failure is not None


def test_a_delete_takes_effect_once_stored_and_a_failed_one_changes_nothing(
        ns: Namespace, store: ManualStore) -> None:
    ns.declare_queue("orders", durable=True)
    refused = Outcome()
    ns.when_stored(lambda: ns.delete_queue("orders"), refused)
    assert "orders" in ns.queues
    store.land(FULL)
    assert isinstance(refused.error, StoreFailed) and "orders" in ns.queues and store.records
    deleted = Outcome()
    ns.when_stored(lambda: ns.delete_queue("orders"), deleted)
    store.land()
    assert deleted.error is None and "orders" not in ns.queues and not store.records
    assert ns.store_failure is None                 # writes succeed again


def test_a_second_declare_of_an_object_in_flight_waits_and_is_checked_against_it(
        ns: Namespace, store: ManualStore) -> None:
    first, same, other = Outcome(), Outcome(), Outcome()
    ns.when_stored(lambda: ns.declare_queue("orders", durable=True, arguments={"x-max-length": 1}), first)
    ns.when_stored(lambda: ns.declare_queue("orders", durable=True, arguments={"x-max-length": 1}), same)
    ns.when_stored(lambda: ns.declare_queue("orders", durable=True, arguments={"x-max-length": 2}), other)
    assert len(store.in_flight) == 1              # the others wait for the first
    store.land_all()
    assert first.error is None and same.error is None
    assert same.calls[0][0][0] is first.calls[0][0][0]
    assert isinstance(other.error, PreconditionFailed)
    assert [r["arguments"] for r in store.records.values()] == [{"x-max-length": 1}]
    assert store.submitted == 1


def test_an_operation_refused_after_its_store_has_the_store_undone(ns: Namespace, store: ManualStore) -> None:
    ns.declare_exchange("alt", "fanout", durable=True)
    done = Outcome()
    # the queue names an alternate exchange (Broker-J's spelling) that goes while its record is stored
    ns.when_stored(lambda: ns.declare_queue("orders", durable=True,
                                            arguments={"alternateExchange": "alt"}), done)
    ns._exchanges.pop("alt")                        # gone meanwhile (a test's shortcut)
    store.land()                                    # the queue's record is durable, the retry is refused
    assert done.error is not None and done.error.reply_code == 404
    assert "orders" not in ns.queues
    store.land_all()                                # its removal is stored behind
    assert [r["name"] for r in store.records.values()] == ["alt"]


def test_a_cascade_the_broker_makes_is_made_at_once_and_stored_behind(ns: Namespace, store: ManualStore) -> None:
    ns.declare_exchange("events", "topic", durable=True)
    ns.declare_queue("orders", durable=True)
    ns.bind_queue("orders", "events", "a.#")
    deleted = Outcome()
    ns.when_stored(lambda: ns.delete_queue("orders"), deleted)
    store.land()
    assert deleted.error is None and not ns.exchange("events").bindings
    assert len(store.in_flight) == 1               # the binding's removal, after the queue's
    store.land()
    assert [r["name"] for r in store.records.values()] == ["events"]
