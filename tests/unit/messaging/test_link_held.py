"""The link registry keeps the unsettled deliveries of a suspended sending link (durability
unsettled-state) acquired for its resume, and requeues them when the link goes."""

from __future__ import annotations

import pytest

from broker.messaging.link_registry import LinkRegistry
from broker.messaging.link_terminus import ExpiryPolicy, TerminusDurability
from broker.messaging.namespace import Namespace
from broker.messaging.queue import Queue
from broker.messaging.queue_entry import QueueEntry
from broker.messaging.termini import MemoryTerminusStore

from .link_support import Endpoint, key, terminus
from .support import FakeClock, message

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ns(clock: FakeClock) -> Namespace:
    namespace = Namespace("v", clock=clock)
    namespace.links.open(MemoryTerminusStore())
    namespace.declare_queue("orders")
    return namespace


def _taken(queue: Queue, count: int) -> list[QueueEntry]:
    for i in range(count):
        queue.enqueue(message(f"m{i}"))
    entries = [queue.get() for _ in range(count)]
    assert all(entry is not None for entry in entries)
    return entries  # type: ignore[return-value]


def _suspended(links: LinkRegistry, policy: ExpiryPolicy, timeout: int) -> Endpoint:
    endpoint = Endpoint(links, "s1", "c1")
    links.attach(endpoint, key(), terminus(policy, TerminusDurability.UNSETTLED_STATE, timeout=timeout))
    return endpoint


def test_held_entries_stay_acquired_while_the_link_is_kept(ns: Namespace) -> None:
    queue = ns.queue("orders")
    endpoint = _suspended(ns.links, ExpiryPolicy.NEVER, 0)
    entries = _taken(queue, 2)
    for i, entry in enumerate(entries):
        ns.links.hold(endpoint.link, bytes([i]), entry)
    ns.links.detach(endpoint.link, endpoint, closed=False)
    assert queue.message_count == 0 and queue.unacked_count == 2
    assert set(endpoint.link.held) == {b"\x00", b"\x01"}


def test_held_entries_are_requeued_when_the_terminus_expires(ns: Namespace, clock: FakeClock) -> None:
    queue = ns.queue("orders")
    endpoint = _suspended(ns.links, ExpiryPolicy.LINK_DETACH, 30)
    [entry] = _taken(queue, 1)
    ns.links.hold(endpoint.link, b"t", entry)
    ns.links.detach(endpoint.link, endpoint, closed=False)
    assert queue.message_count == 0
    ns.run_due(clock.advance(30))
    assert queue.message_count == 1 and queue.unacked_count == 0
    assert ns.links.get(key()) is None


def test_held_entries_are_requeued_when_the_link_is_closed(ns: Namespace) -> None:
    queue = ns.queue("orders")
    endpoint = _suspended(ns.links, ExpiryPolicy.NEVER, 0)
    [entry] = _taken(queue, 1)
    ns.links.hold(endpoint.link, b"t", entry)
    ns.links.detach(endpoint.link, endpoint, closed=True)
    assert queue.message_count == 1


def test_holding_for_a_link_already_removed_requeues_at_once(ns: Namespace) -> None:
    queue = ns.queue("orders")
    endpoint = _suspended(ns.links, ExpiryPolicy.NEVER, 0)
    link = endpoint.link
    ns.links.detach(link, endpoint, closed=True)
    [entry] = _taken(queue, 1)
    ns.links.hold(link, b"t", entry)
    assert queue.message_count == 1 and link.held == {}


def test_release_held_requeues_and_empties(ns: Namespace) -> None:
    queue = ns.queue("orders")
    endpoint = _suspended(ns.links, ExpiryPolicy.NEVER, 0)
    for i, entry in enumerate(_taken(queue, 3)):
        ns.links.hold(endpoint.link, bytes([i]), entry)
    ns.links.release_held(endpoint.link)
    assert queue.message_count == 3 and endpoint.link.held == {}
