"""Exchanges and queues in the model tree, and durable ones through the config store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.model import State, SystemConfig, VirtualHost, load_system_config
from broker.model.messaging_objects import NamespaceRecords
from broker.model.registry import TREE

from .conftest import minimal_config


@pytest.fixture
def system(tmp_path: Path) -> SystemConfig:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(minimal_config()))
    return load_system_config(str(path), {"deltamq.data_dir": str(tmp_path / "data")})


@pytest.fixture
def vhost(system: SystemConfig) -> VirtualHost:
    vhost = system.broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    return vhost


def _message(routing_key: str) -> Message:
    return Message(exchange="orders", routing_key=routing_key, body=b"x",
                   properties=MessageProperties(), arrival=0.0)


def test_exchanges_and_queues_are_children_of_the_virtual_host(vhost: VirtualHost) -> None:
    assert TREE["VirtualHost"] == ("Exchange", "Queue", "VirtualHostAccessControlProvider")
    names = {x.name for x in vhost.exchanges}
    assert {"amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} <= names
    ns = vhost.namespace
    ns.declare_exchange("orders", "topic", durable=True)
    ns.declare_queue("billing", durable=True, arguments={"x-max-priority": 5})
    ns.bind_queue("billing", "orders", "order.*")
    ns.route("orders", _message("order.created"))[0].enqueue(_message("order.created"))
    queue = vhost.child("Queue", "billing")
    exchange = vhost.child("Exchange", "orders")
    assert queue is not None and exchange is not None
    attrs = queue.attributes()
    assert attrs["durable"] is True and attrs["type"] == "priority"
    assert attrs["arguments"] == {"x-max-priority": 5}
    assert attrs["queueDepthMessages"] == 1 and attrs["consumerCount"] == 0
    assert exchange.attributes()["type"] == "topic"
    assert exchange.attributes()["bindings"] == [
        {"destination": "billing", "bindingKey": "order.*", "arguments": {}}]


def test_a_queue_deleted_by_a_client_leaves_the_model(vhost: VirtualHost) -> None:
    vhost.namespace.declare_queue("short-lived")
    view = vhost.child("Queue", "short-lived")
    assert view is not None
    vhost.namespace.delete_queue("short-lived")
    assert vhost.child("Queue", "short-lived") is None and view.state is State.DELETED


def test_deleting_the_model_object_deletes_the_queue(vhost: VirtualHost) -> None:
    vhost.namespace.declare_queue("doomed")
    view = vhost.child("Queue", "doomed")
    assert view is not None
    view.delete()
    assert "doomed" not in vhost.namespace.queues
    assert vhost.child("Queue", "doomed") is None


def test_durable_objects_are_written_through_the_store_and_restored(vhost: VirtualHost) -> None:
    ns = vhost.namespace
    store = vhost.parent.store
    ns.declare_exchange("orders", "topic", durable=True)
    ns.declare_queue("billing", durable=True, arguments={"x-message-ttl": 60000})
    ns.bind_queue("billing", "orders", "order.*")
    ns.declare_queue("transient")                      # not durable: not stored
    ns.declare_exchange("scratch", "fanout")           # not durable: not stored
    stored = {(r.category, r.attributes.get("name", r.attributes.get("routing_key")))
              for r in store.recover() if r.category in ("Exchange", "Queue", "Binding")}
    assert stored == {("Exchange", "orders"), ("Queue", "billing"), ("Binding", "order.*")}
    assert all(r.parent_id == vhost.id for r in store.recover() if r.category == "Queue")

    # a restart: a fresh namespace restored from the same store routes as before
    fresh = Namespace(vhost_name=vhost.name)
    NamespaceRecords(vhost, store).restore(fresh)
    assert set(fresh.queues) == {"billing"}
    assert fresh.queue("billing").arguments == {"x-message-ttl": 60000}
    assert [q.name for q in fresh.route("orders", _message("order.created"))] == ["billing"]

    ns.delete_queue("billing")                         # its binding goes with it
    assert not [r for r in store.recover() if r.category in ("Queue", "Binding")]


def test_the_context_variable_chooses_what_unknown_declare_arguments_get(tmp_path: Path) -> None:
    config = minimal_config(virtualhostnodes=[{
        "name": "node", "type": "memory", "context": {"queue.behaviourOnUnknownDeclareArgument": "fail"}}])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    system = load_system_config(str(path), {"deltamq.data_dir": str(tmp_path / "data")})
    vhost = system.broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    assert vhost.namespace.unknown_arguments == "FAIL"


def test_the_default_is_to_ignore_unknown_declare_arguments(vhost: VirtualHost) -> None:
    assert vhost.namespace is not None and vhost.namespace.unknown_arguments == "IGNORE"
