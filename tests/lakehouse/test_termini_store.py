"""AMQP 1.0 link termini in the ``link_termini`` Delta table (Link Registry design), and the
link registry's persistence through it: commits off the event loop, recovery on restart."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from broker.errors import BrokerError
from broker.messaging.link_registry import LinkKey
from broker.messaging.link_terminus import ExpiryPolicy, Terminus, TerminusDurability
from broker.messaging.namespace import Namespace
from broker.messaging.termini import LinkRole, MemoryTerminusStore, TerminusRecord
from broker.model import load_system_config
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.termini_store import TERMINI_SCHEMA, DeltaTerminusStore
from tests.unit.messaging.link_support import Endpoint

SOURCE = {"address": "orders", "durable": 1, "expiry-policy": "never", "distribution-mode": "move"}
TARGET = {"address": "billing", "durable": 2}


def _round_trip(store: DeltaTerminusStore | MemoryTerminusStore) -> None:
    store.open()
    store.save([TerminusRecord(LinkRole.SENDING, "client-1", "orders-link", SOURCE),
                TerminusRecord(LinkRole.RECEIVING, "client-1", "orders-link", TARGET),
                TerminusRecord(LinkRole.SENDING, "client-2", "gone", SOURCE)])
    # the same tuple on the same side replaces (a resumed link's terminus)
    store.save([TerminusRecord(LinkRole.SENDING, "client-1", "orders-link", {**SOURCE, "address": "v2"})])
    store.remove([(LinkRole.SENDING, "client-2", "gone")])


def test_termini_survive_reopening_the_delta_table(tmp_path: Path) -> None:
    store = DeltaTerminusStore(tmp_path)
    _round_trip(store)
    store.close()
    again = DeltaTerminusStore(tmp_path)
    again.open()
    got = {r.key: dict(r.terminus) for r in again.recover()}
    again.close()
    assert got == {(LinkRole.SENDING, "client-1", "orders-link"): {**SOURCE, "address": "v2"},
                   (LinkRole.RECEIVING, "client-1", "orders-link"): TARGET}
    rows = AppendOnlyTable(tmp_path / "link_termini", TERMINI_SCHEMA).read(
        "SELECT role, link_name, op FROM t ORDER BY seq").to_pylist()
    assert [r["op"] for r in rows] == ["save", "save", "save", "save", "remove"]


def test_memory_termini_behave_the_same(tmp_path: Path) -> None:
    store = MemoryTerminusStore()
    _round_trip(store)
    assert {r.key for r in store.recover()} == {(LinkRole.SENDING, "client-1", "orders-link"),
                                                (LinkRole.RECEIVING, "client-1", "orders-link")}


def _delta_node(tmp_path: Path) -> Path:
    """A broker configuration with one ``delta`` virtual host node, ``node``."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "b", "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
        "ports": [{"name": "amqp", "port": "5999", "authenticationProvider": "anon"}],
        "virtualhostnodes": [{"name": "node", "type": "delta", "storePath": str(tmp_path / "node")}],
    }))
    return config


def test_a_delta_node_has_its_link_termini_table(tmp_path: Path) -> None:
    config = _delta_node(tmp_path)
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    [node] = system.broker.virtual_host_nodes
    assert isinstance(node.termini, DeltaTerminusStore)
    # a terminus that never expires (one expiring on session end is gone after a restart)
    node.termini.save([TerminusRecord(LinkRole.RECEIVING, "c", "l", {**TARGET, "expiry-policy": "never"}),
                       TerminusRecord(LinkRole.RECEIVING, "c", "expiring", TARGET)])
    system.close()
    assert (tmp_path / "node" / "link_termini" / "_delta_log").is_dir()
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    [node] = system.broker.virtual_host_nodes
    assert [r.key for r in node.termini.recover()] == [(LinkRole.RECEIVING, "c", "l")]
    system.close()


# -- the link registry over the Delta store -----------------------------------------------------

DURABLE_SOURCE = Terminus(address="amq.topic", durable=TerminusDurability.UNSETTLED_STATE,
                          expiry_policy=ExpiryPolicy.NEVER, selector="colour = 'red'",
                          capabilities=("topic",))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_registry_commits_off_the_loop_and_its_termini_come_back(
        tmp_path: Path, anyio_backend: str) -> None:
    store = DeltaTerminusStore(tmp_path)
    store.open()
    links = Namespace("v").links
    links.open(store)
    endpoint = Endpoint(links, "s1", "c1")
    durable, config_only, volatile, gone = (LinkKey("c", name, LinkRole.SENDING)
                                            for name in ("durable", "config", "volatile", "gone"))
    links.attach(endpoint, durable, DURABLE_SOURCE)
    link = endpoint.attachments[-1].link
    for n in range(50):                     # a save per change, coalesced while one is in flight
        links.record_unsettled(link, f"tag-{n}".encode(), b"\x00\x53\x24\x45")
        if n % 2:
            links.settled(link, f"tag-{n - 1}".encode())
    links.attach(endpoint, config_only, Terminus(address="q", durable=TerminusDurability.CONFIGURATION,
                                                 expiry_policy=ExpiryPolicy.NEVER))
    links.record_unsettled(endpoint.attachments[-1].link, b"x", b"y")
    links.attach(endpoint, volatile, Terminus(address="q", expiry_policy=ExpiryPolicy.NEVER))
    links.attach(endpoint, gone, Terminus(address="q", durable=TerminusDurability.CONFIGURATION))
    links.detach(endpoint.attachments[-1].link, endpoint, closed=True)
    with anyio.fail_after(30):
        while links.stored.busy:
            await anyio.sleep(0.01)
    assert links.stored.failure is None and store.writer.commits >= 1
    store.close()

    again = DeltaTerminusStore(tmp_path)
    again.open()
    recovered = Namespace("v").links
    recovered.open(again)
    again.close()
    assert {l.key for l in recovered} == {durable, config_only}
    back = recovered.get(durable)
    assert back is not None and back.terminus == DURABLE_SOURCE and back.state == "suspended"
    assert back.unsettled == link.unsettled and len(back.unsettled) == 25
    assert recovered.get(config_only).unsettled == {}  # type: ignore[union-attr]


def test_a_durable_subscription_survives_a_restart_of_its_virtual_host(tmp_path: Path) -> None:
    config = _delta_node(tmp_path)
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    [vhost] = system.broker.virtual_hosts
    links = vhost.namespace.links
    endpoint = Endpoint(links, "s1", "c1")
    key = LinkKey("jms-client", "my-subscription", LinkRole.SENDING)
    links.attach(endpoint, key, DURABLE_SOURCE)
    link = endpoint.attachments[-1].link
    answers: list[tuple[str | None, BrokerError | None]] = []
    links.subscribe(link, "amq.topic", "news.#", lambda *answer: answers.append(answer))
    queue = "qpidsub_/jms-client_/my-subscription_/durable"
    assert answers == [(queue, None)]
    links.record_unsettled(link, b"delivery-1", b"accepted?")
    links.connection_closed("c1")           # suspended; a never-expiring terminus stays
    system.close()

    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    [vhost] = system.broker.virtual_hosts
    back = vhost.namespace.links.get(key)
    assert back is not None and back.state == "suspended" and back.subscription_queue == queue
    assert back.unsettled == {b"delivery-1": b"accepted?"}
    assert [b.routing_key for b in vhost.namespace.queues[queue].bindings] == ["news.#"]
    [shown] = vhost.get_links()
    assert (shown["linkName"], shown["subscriptionQueue"], shown["durable"]) == \
        ("my-subscription", queue, "unsettled-state")
    # resumed, then closed: the terminus and its queue go, and stay gone after another restart
    resumed = Endpoint(vhost.namespace.links, "s2", "c2")
    vhost.namespace.links.attach(resumed, key, None)
    vhost.namespace.links.detach(back, resumed, closed=True)
    system.close()
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    [vhost] = system.broker.virtual_hosts
    assert len(vhost.namespace.links) == 0 and queue not in vhost.namespace.queues
    system.close()
