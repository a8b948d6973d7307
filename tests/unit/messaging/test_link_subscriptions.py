"""Subscription queues of sending links attached to an exchange (Broker-J's naming and lifecycle)."""

from __future__ import annotations

import pytest

from broker.errors import BrokerError, NotFound, PreconditionFailed
from broker.messaging.link_registry import LinkRegistry
from broker.messaging.link_subscriptions import SELECTOR_ARGUMENT
from broker.messaging.link_terminus import (ExpiryPolicy, Terminus, TerminusDurability,
                                            subscription_queue_name)
from broker.messaging.namespace import Namespace
from broker.messaging.termini import MemoryTerminusStore

from .link_support import Endpoint, key, terminus
from .support import FakeClock, message
# the registry tests' fixtures (over this module's namespace, which has an exchange to subscribe to)
from .test_link_registry import clock, links, store  # noqa: F401

pytestmark = pytest.mark.timeout(30)

DURABLE = "qpidsub_/client-1_/orders-link_/durable"


@pytest.fixture
def ns(clock: FakeClock) -> Namespace:
    namespace = Namespace("v", clock=clock)
    namespace.declare_exchange("prices", "topic")
    return namespace


def subscribe(links: LinkRegistry, endpoint: Endpoint, binding_key: str = "stock.#",
              exchange: str = "prices") -> tuple[str | None, BrokerError | None]:
    answers: list[tuple[str | None, BrokerError | None]] = []
    links.subscribe(endpoint.link, exchange, binding_key, lambda *answer: answers.append(answer))
    [answer] = answers               # no background store: done before subscribe returns
    return answer


def durable_subscriber(links: LinkRegistry, session: str = "s1", name: str = "orders-link",
                       **fields: object) -> Endpoint:
    endpoint = Endpoint(links, session, "c1")
    links.attach(endpoint, key(name), terminus(ExpiryPolicy.NEVER, TerminusDurability.CONFIGURATION,
                                               address="prices", **fields))
    return endpoint


def test_subscription_queues_are_named_as_broker_j_names_them() -> None:
    never = Terminus(expiry_policy=ExpiryPolicy.NEVER)
    assert subscription_queue_name("client-1", "sub", never, "u") == "qpidsub_/client-1_/sub_/durable"
    # '_' doubles and '.', '(', ')', '<', '>' are escaped, so names cannot collide
    assert subscription_queue_name("my_app.1", "a(b)<c>", never, "u") == \
        "qpidsub_/my__app_:1_/a_Ob_C_Lc_R_/durable"
    shared = Terminus(expiry_policy=ExpiryPolicy.NEVER, capabilities=("shared",))
    assert subscription_queue_name("c", "sub|2", shared, "u") == "qpidsub_/c_/sub_/durable"
    shared_global = Terminus(expiry_policy=ExpiryPolicy.LINK_DETACH, capabilities=("shared", "global"))
    assert subscription_queue_name("c", "sub|global-volatile2", shared_global, "u") == \
        "qpidsub_/_global__/sub_/nondurable"
    assert subscription_queue_name("c", "sub", Terminus(), "u-1") == "qpidsub_/c_/u-1_/nondurable"


def test_a_durable_subscription_gets_a_durable_bound_queue_on_first_attach(
        links: LinkRegistry, ns: Namespace, store: MemoryTerminusStore) -> None:
    endpoint = durable_subscriber(links, selector="price > 10")
    assert subscribe(links, endpoint) == (DURABLE, None)
    queue = ns.queues[DURABLE]
    assert queue.durable and not queue.auto_delete
    [binding] = queue.bindings
    assert (binding.source.name, binding.routing_key) == ("prices", "stock.#")
    assert binding.arguments == {SELECTOR_ARGUMENT: "price > 10"}
    assert endpoint.link.subscription_queue == DURABLE
    [record] = store.recover()
    assert record.terminus["subscription-queue"] == DURABLE
    published = message("m", exchange="prices", routing_key="stock.acme", headers={"price": 20})
    assert ns.route("prices", published) == [queue]


def test_a_resumed_subscription_keeps_its_queue_and_messages(links: LinkRegistry, ns: Namespace) -> None:
    first = durable_subscriber(links)
    subscribe(links, first)
    ns.queues[DURABLE].enqueue(message("waiting"))
    links.detach(first.link, first, closed=False)
    second = durable_subscriber(links, "s2")
    assert subscribe(links, second) == (DURABLE, None)
    assert ns.queues[DURABLE].message_count == 1


def test_a_subscription_resumed_with_another_binding_is_made_anew(links: LinkRegistry,
                                                                  ns: Namespace) -> None:
    first = durable_subscriber(links)
    subscribe(links, first)
    ns.queues[DURABLE].enqueue(message("old"))
    links.detach(first.link, first, closed=False)
    second = durable_subscriber(links, "s2")
    assert subscribe(links, second, "bonds.#") == (DURABLE, None)
    queue = ns.queues[DURABLE]
    assert queue.message_count == 0 and [b.routing_key for b in queue.bindings] == ["bonds.#"]


def test_closing_the_link_deletes_its_subscription_queue(links: LinkRegistry, ns: Namespace,
                                                         store: MemoryTerminusStore) -> None:
    endpoint = durable_subscriber(links)
    subscribe(links, endpoint)
    links.detach(endpoint.link, endpoint, closed=True)
    assert DURABLE not in ns.queues and store.recover() == []


def test_an_expiring_subscription_takes_its_queue_with_it(links: LinkRegistry, ns: Namespace) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    links.attach(endpoint, key(), terminus(ExpiryPolicy.SESSION_END, timeout=5, address="prices"))
    name, error = subscribe(links, endpoint)
    assert error is None and name is not None and name.endswith("_/nondurable")
    assert not ns.queues[name].durable
    links.session_ended("s1")
    clock = ns.clock
    ns.run_due(clock() + 5)
    assert name not in ns.queues


def test_a_shared_subscription_queue_stays_while_another_link_reads_it(links: LinkRegistry,
                                                                       ns: Namespace) -> None:
    shared = ("shared",)
    one = durable_subscriber(links, "s1", "sub", capabilities=shared)
    two = durable_subscriber(links, "s2", "sub|2", capabilities=shared)
    assert subscribe(links, one)[0] == subscribe(links, two)[0] == "qpidsub_/client-1_/sub_/durable"
    links.detach(one.link, one, closed=True)
    assert "qpidsub_/client-1_/sub_/durable" in ns.queues
    links.detach(two.link, two, closed=True)
    assert "qpidsub_/client-1_/sub_/durable" not in ns.queues


def test_a_subscription_to_a_missing_exchange_makes_nothing(links: LinkRegistry, ns: Namespace) -> None:
    endpoint = durable_subscriber(links)
    name, error = subscribe(links, endpoint, exchange="nowhere")
    assert name is None and isinstance(error, NotFound)
    assert DURABLE not in ns.queues and endpoint.link.subscription_queue is None


def test_a_subscription_whose_queue_name_is_too_long_is_refused(links: LinkRegistry, ns: Namespace) -> None:
    endpoint = durable_subscriber(links, name="s" * 250)
    name, error = subscribe(links, endpoint)
    assert name is None and isinstance(error, PreconditionFailed)
    assert "at most 255 are allowed" in error.text
    assert [q for q in ns.queues if q.startswith("qpidsub_")] == []
