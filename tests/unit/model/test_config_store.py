"""Configuration stores and write-through persistence of the model."""

from __future__ import annotations

import pytest

from broker.errors import ConfigurationError
from broker.model import ConfigurationRecord, MemoryConfigurationStore, State
from broker.model.config_store import DurableConfigurationStore, ordered
from broker.model.persistence import records_from_tree
from tests.unit.model.conftest import Loader, PluginInstaller, minimal_config


def test_memory_store_round_trip_copies_records() -> None:
    store = MemoryConfigurationStore()
    store.open()
    protocols = ["AMQP_1_0"]
    attributes = {"name": "p", "protocols": protocols}
    store.save([ConfigurationRecord("1", "Port", None, attributes)])
    protocols.append("AMQP_0_9_1")  # the caller's later change is not stored
    [record] = store.recover()
    assert record == ConfigurationRecord("1", "Port", None, {"name": "p",
                                                              "protocols": ["AMQP_1_0"]})
    store.save([ConfigurationRecord("1", "Port", None, {"name": "p", "port": 1})])
    assert store.recover()[0].attributes == {"name": "p", "port": 1}
    store.remove(["1", "unknown"])
    assert store.recover() == []
    assert isinstance(store, DurableConfigurationStore)


def test_recover_orders_parents_first() -> None:
    child = ConfigurationRecord("c", "VirtualHost", "p", {})
    grandchild = ConfigurationRecord("g", "Connection", "c", {})
    parent = ConfigurationRecord("p", "VirtualHostNode", None, {})
    orphan = ConfigurationRecord("o", "Port", "missing", {})
    assert [r.id for r in ordered([grandchild, orphan, child, parent])] == ["p", "c", "g", "o"]


def test_initial_configuration_is_stored_unresolved(load: Loader) -> None:
    system = load()
    records = {r.category: r for r in system.store.recover()}
    assert set(records) == {"Broker", "AuthenticationProvider", "Port", "VirtualHostNode"}
    assert records["Broker"].parent_id is None
    assert records["Port"].parent_id == records["Broker"].id == system.broker.id
    assert records["Port"].attributes["port"] == "${test.port}"


def test_changes_are_written_through(load: Loader) -> None:
    system = load()
    broker = system.broker
    port = broker.create_child("Port", {"name": "extra", "port": "${extra.port}",
                                        "authenticationProvider": "anon",
                                        "context": {"extra.port": "6100"}})
    stored = {r.id: r for r in system.store.recover()}
    assert stored[port.id].attributes["port"] == "${extra.port}"
    assert stored[port.id].parent_id == broker.id

    port.set_attributes({"maxOpenConnections": 7})
    assert {r.id: r for r in system.store.recover()}[port.id].attributes[
        "maxOpenConnections"] == 7

    broker.set_attributes({"connection.heartbeatDelay": 30})
    assert {r.id: r for r in system.store.recover()}[broker.id].attributes[
        "connection.heartbeatDelay"] == 30

    port.delete()
    assert port.id not in {r.id for r in system.store.recover()}


def test_restart_from_store_recovers_objects_with_same_ids(load: Loader) -> None:
    store = MemoryConfigurationStore()
    first = load(store=store)
    port = first.broker.create_child("Port", {"name": "extra", "port": 6101,
                                              "authenticationProvider": "anon"})
    first.broker.ports()[0].set_attributes({"description": "changed"})
    first.close()

    # A different file: the store already holds the configuration, so only
    # the file's context is used (Broker-J's initial configuration is read once).
    second = load(minimal_config(name="ignored"), store=store)
    ports = {p.name: p for p in second.broker.ports()}
    assert set(ports) == {"amqp", "extra"}
    assert ports["extra"].id == port.id
    assert ports["extra"].port == 6101
    assert ports["amqp"].description == "changed"
    assert second.broker.name == "test-broker"
    assert second.broker.state is State.ACTIVE


def test_virtual_host_lives_in_its_node_store_not_in_system_store(load: Loader) -> None:
    system = load()
    node = system.broker.virtual_host_nodes[0]
    assert node.store is not None
    [vhost_record] = node.store.recover()
    assert vhost_record.category == "VirtualHost"
    assert vhost_record.parent_id is None
    assert vhost_record.attributes["name"] == "node"
    assert "VirtualHost" not in {r.category for r in system.store.recover()}


def test_runtime_objects_and_users_are_never_stored(load: Loader) -> None:
    system = load()
    vhost = system.broker.virtual_hosts[0]
    connection = vhost.register_connection(system.broker.ports()[0],
                                           remote_address="127.0.0.1:5", protocol="AMQP_1_0")
    connection.register_session(0)
    node = system.broker.virtual_host_nodes[0]
    assert node.store is not None
    assert {r.category for r in node.store.recover()} == {"VirtualHost"}
    assert {r.category for r in system.store.recover()} == {
        "Broker", "AuthenticationProvider", "Port", "VirtualHostNode"}


class BrokenStore(MemoryConfigurationStore):
    def open(self) -> None:
        raise OSError("disk on fire")


def test_node_whose_store_fails_is_errored_and_broker_runs(
        load: Loader, install_plugin: PluginInstaller) -> None:
    install_plugin("deltamq.stores", "broken", f"{__name__}:BrokenStore")
    config = minimal_config()
    config["virtualhostnodes"].append({"name": "bad", "type": "broken"})
    system = load(config)
    nodes = {node.name: node for node in system.broker.virtual_host_nodes}
    assert nodes["bad"].state is State.ERRORED
    assert "disk on fire" in str(nodes["bad"].last_error)
    assert nodes["node"].state is State.ACTIVE
    assert system.broker.find_virtual_host("bad") is None
    assert system.broker.find_virtual_host("node") is not None


def test_unknown_node_type_is_a_configuration_error(load: Loader) -> None:
    config = minimal_config()
    config["virtualhostnodes"][0]["type"] = "tape"
    with pytest.raises(ConfigurationError, match="unknown virtual host node type 'tape'"):
        load(config)


def test_records_from_tree_refuses_children_kept_elsewhere() -> None:
    data = {"name": "b", "virtualhostnodes": [{"name": "n", "virtualhosts": [{"name": "v"}]}]}
    with pytest.raises(ConfigurationError, match="'virtualhosts' cannot be given here"):
        records_from_tree("Broker", data, stop_at=frozenset({"VirtualHostNode"}))
    records = records_from_tree("Broker", {"name": "b", "ports": [{"name": "p", "id": "x"}]})
    assert [(r.category, r.id, r.parent_id) for r in records][1] == ("Port", "x", records[0].id)
    with pytest.raises(ConfigurationError, match="'ports' must be a list"):
        records_from_tree("Broker", {"name": "b", "ports": {"name": "p"}})
