"""A configuration change the store cannot make durable is refused and leaves no trace."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker.errors import StoreFailed
from broker.messaging.namespace import Namespace


class FailingStore:
    """A namespace listener whose writes fail while ``failure`` is set (as a full disk fails them)."""

    def __init__(self) -> None:
        self.failure: OSError | None = None
        self.records: dict[str, dict[str, Any]] = {}

    def _write(self) -> None:
        if self.failure is not None:
            raise self.failure

    @staticmethod
    def _key(obj: Any) -> str:
        return repr(sorted(obj.to_record().items()))

    def object_created(self, obj: Any) -> None:
        self._write()
        self.records[self._key(obj)] = obj.to_record()

    def object_deleted(self, obj: Any) -> None:
        self._write()
        self.records.pop(self._key(obj), None)


@pytest.fixture
def store() -> FailingStore:
    return FailingStore()


@pytest.fixture
def ns(store: FailingStore) -> Namespace:
    namespace = Namespace("v")
    namespace.listeners.append(store)
    return namespace


FULL = OSError(28, "No space left on device")


def test_a_durable_queue_and_exchange_are_not_created_when_the_store_fails(
        ns: Namespace, store: FailingStore) -> None:
    store.failure = FULL
    with pytest.raises(StoreFailed) as info:
        ns.declare_queue("orders", durable=True)
    assert info.value.reply_code == 541 and not info.value.hard
    assert "queue 'orders'" in info.value.text and "No space left on device" in info.value.text
    assert "orders" not in ns.queues
    with pytest.raises(StoreFailed):
        ns.declare_exchange("events", "topic", durable=True)
    assert "events" not in ns.exchanges
    ns.declare_queue("scratch")                      # nothing to store: still works
    assert store.records == {}
    store.failure = None
    ns.declare_queue("orders", durable=True)
    assert "orders" in ns.queues and len(store.records) == 1


def test_bindings_and_deletions_are_refused_and_change_nothing(ns: Namespace, store: FailingStore) -> None:
    ns.declare_exchange("events", "topic", durable=True)
    ns.declare_queue("orders", durable=True)
    ns.bind_queue("orders", "events", "a.#")
    stored = dict(store.records)
    store.failure = FULL
    with pytest.raises(StoreFailed):
        ns.bind_queue("orders", "events", "b.#")
    assert [b.routing_key for b in ns.queues["orders"].bindings] == ["a.#"]
    assert ns.exchange("events").find_binding(ns.queues["orders"], "b.#") is None
    with pytest.raises(StoreFailed):
        ns.unbind_queue("orders", "events", "a.#")
    with pytest.raises(StoreFailed):
        ns.delete_queue("orders")
    with pytest.raises(StoreFailed):
        ns.delete_exchange("events")
    assert "orders" in ns.queues and "events" in ns.exchanges
    assert [b.routing_key for b in ns.queues["orders"].bindings] == ["a.#"]
    assert store.records == stored


def test_the_store_failing_and_recovering_is_logged_once_each(
        ns: Namespace, store: FailingStore, caplog: pytest.LogCaptureFixture) -> None:
    store.failure = FULL
    with caplog.at_level(logging.INFO, logger="broker.messaging.namespace"):
        for attempt in range(5):
            with pytest.raises(StoreFailed):
                ns.declare_queue(f"q{attempt}", durable=True)
        store.failure = None
        ns.declare_queue("ok", durable=True)
        ns.declare_queue("ok2", durable=True)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["configuration store of virtual host 'v': writes failing: [Errno 28] No space left on device",
                     "configuration store of virtual host 'v': writes succeed again"]
    assert all(r.exc_info is None for r in caplog.records)
