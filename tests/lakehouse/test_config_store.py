"""The ``delta`` configuration store: a Delta table of configuration changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from broker.errors import ConfigurationError
from broker.messaging.message import Message, MessageProperties
from broker.model import load_system_config
from broker.model.config_store import ConfigurationRecord
from lakehouse.config_store import CONFIG_SCHEMA, DeltaConfigurationStore
from lakehouse.delta_table import AppendOnlyTable


def _records(store: DeltaConfigurationStore) -> dict[str, ConfigurationRecord]:
    return {r.id: r for r in store.recover()}


def test_changes_survive_reopening(tmp_path: Path) -> None:
    store = DeltaConfigurationStore(str(tmp_path))
    store.open()
    assert store.recover() == []
    store.save([ConfigurationRecord("vh", "VirtualHost", None, {"name": "default"}),
                ConfigurationRecord("q1", "Queue", "vh", {"name": "orders", "durable": True})])
    store.save([ConfigurationRecord("q2", "Queue", "vh", {"name": "billing"})])
    store.save([ConfigurationRecord("q1", "Queue", "vh", {"name": "orders", "durable": True, "v": 2})])
    store.remove(["q2"])
    store.close()

    again = DeltaConfigurationStore(str(tmp_path))
    again.open()
    records = again.recover()
    assert [r.id for r in records] == ["vh", "q1"]          # parents first
    assert _records(again)["q1"].attributes == {"name": "orders", "durable": True, "v": 2}
    again.close()


def test_the_store_keeps_what_was_written_not_the_callers_object(tmp_path: Path) -> None:
    store = DeltaConfigurationStore(str(tmp_path))
    store.open()
    attributes = {"name": "orders"}
    store.save([ConfigurationRecord("q", "Queue", None, attributes)])
    attributes["name"] = "changed later"
    assert _records(store)["q"].attributes == {"name": "orders"}
    store.close()


def test_every_commit_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the commit path is the same in the writer process: watched here in the writer thread
    monkeypatch.setattr("lakehouse.config_store.MODE", "thread")
    store = DeltaConfigurationStore(str(tmp_path))
    store.open()
    synced: list[str] = []
    real_open = os.open

    def tracking_open(path: object, *args: object, **kwargs: object) -> int:
        fd = real_open(path, *args, **kwargs)  # type: ignore[arg-type]
        names[fd] = str(path)
        return fd

    names: dict[int, str] = {}
    monkeypatch.setattr(os, "open", tracking_open)
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(names[fd]))
    store.save([ConfigurationRecord("q", "Queue", None, {"name": "orders"})])
    table = tmp_path / "config"
    log = table / "_delta_log"
    commit = log / f"{store.table.version:020d}.json"
    added = [json.loads(line)["add"]["path"] for line in commit.read_text().splitlines()
             if "add" in json.loads(line)]
    assert added and all(str(table / p) in synced for p in added)
    # the commit file's content is fsynced before it is linked into place as <version>.json
    assert str(commit) in synced or any(
        name.startswith(str(log / ".deltamq-")) and name.endswith(".json.tmp") for name in synced)
    assert str(log) in synced and str(table) in synced
    assert synced.index(str(log)) > max(i for i, name in enumerate(synced) if name.endswith(".parquet"))


def test_the_table_is_plain_delta_with_the_documented_schema(tmp_path: Path) -> None:
    store = DeltaConfigurationStore(str(tmp_path))
    store.open()
    store.save([ConfigurationRecord("q", "Queue", None, {"name": "orders"})])
    store.close()
    table = AppendOnlyTable(tmp_path / "config", CONFIG_SCHEMA)
    rows = table.read("SELECT id, category, op, attributes FROM t").to_pylist()
    assert rows == [{"id": "q", "category": "Queue", "op": "save", "attributes": "{\"name\": \"orders\"}"}]
    from deltalake import DeltaTable

    delta = DeltaTable(str(tmp_path / "config"))
    assert (delta.protocol().min_reader_version, delta.protocol().min_writer_version) == (1, 2)
    assert delta.metadata().configuration["delta.appendOnly"] == "true"


def test_durable_topology_survives_a_restart_of_the_model(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "b", "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
        "ports": [{"name": "amqp", "port": "5999", "authenticationProvider": "anon"}],
        "virtualhostnodes": [{"name": "node", "type": "delta", "storePath": str(tmp_path / "node")}],
    }))
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    ns = system.broker.find_virtual_host("node").namespace
    ns.declare_exchange("orders", "topic", durable=True)
    ns.declare_queue("billing", durable=True, arguments={"x-max-priority": 3})
    ns.bind_queue("billing", "orders", "order.#")
    ns.declare_queue("scratch")                              # not durable
    system.close()

    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})
    vhost = system.broker.find_virtual_host("node")
    ns = vhost.namespace
    assert "billing" in ns.queues and "scratch" not in ns.queues
    assert ns.queue("billing").type == "priority"
    message = Message(exchange="orders", routing_key="order.created", body=b"x",
                      properties=MessageProperties(), arrival=0.0)
    assert [q.name for q in ns.route("orders", message)] == ["billing"]
    assert vhost.child("Queue", "billing") is not None      # and it is in the model tree
    system.close()


def _serve_config(tmp_path: Path, nodes: list[dict[str, object]]) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "b", "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
        "ports": [{"name": "amqp", "port": "${test.port}", "authenticationProvider": "anon"}],
        "virtualhostnodes": nodes, "context": {"test.port": "5999"}}))
    return config


def test_the_broker_configuration_is_a_delta_table_under_the_data_dir(tmp_path: Path) -> None:
    """What `deltamq serve` does: store_type=None, the default `delta` store."""
    config = _serve_config(tmp_path, [{"name": "node", "type": "delta"}])
    context = {"deltamq.data_dir": str(tmp_path / "data")}
    system = load_system_config(str(config), context, store_type=None)
    assert isinstance(system.store, DeltaConfigurationStore)
    extra = system.broker.create_child("Port", {"name": "extra", "port": 6001,
                                                "authenticationProvider": "anon"})
    system.close()
    from deltalake import DeltaTable

    table = DeltaTable(str(tmp_path / "data" / "broker" / "config"))
    rows = table.to_pyarrow_table().to_pylist()
    assert {row["category"] for row in rows} == {"Broker", "AuthenticationProvider", "Port",
                                                 "VirtualHostNode"}
    assert {json.loads(row["attributes"])["port"] for row in rows if row["category"] == "Port"} \
        == {"${test.port}", 6001}

    system = load_system_config(str(config), {**context, "test.port": "6002"}, store_type=None)
    ports = {port.name: port for port in system.broker.ports()}
    assert ports["extra"].id == extra.id and ports["amqp"].port == 6002
    assert system.broker.find_virtual_host("node") is not None
    system.close()


def test_an_old_node_named_broker_is_not_taken_for_the_broker_configuration(
        tmp_path: Path) -> None:
    """A data dir from before the broker's store, with a node called 'broker' in it."""
    node_store = DeltaConfigurationStore(str(tmp_path / "data" / "broker"))
    node_store.open()
    node_store.save([ConfigurationRecord("vh", "VirtualHost", None, {"name": "broker"})])
    node_store.close()
    config = _serve_config(tmp_path, [{"name": "broker", "type": "delta"}])
    with pytest.raises(ConfigurationError, match=r"configuration store '.*/data/broker' holds"
                                                 " VirtualHost records, not a broker's"
                                                 " configuration"):
        load_system_config(str(config), {"deltamq.data_dir": str(tmp_path / "data")},
                           store_type=None)
    assert _records(_reopened(tmp_path / "data" / "broker")).keys() == {"vh"}   # untouched
    # elsewhere, it starts: the node is found where it always was
    system = load_system_config(str(config), {
        "deltamq.data_dir": str(tmp_path / "data"),
        "deltamq.config_store_path": str(tmp_path / "broker-config")}, store_type=None)
    assert system.broker.find_virtual_host("broker") is not None
    system.close()


def _reopened(path: Path) -> DeltaConfigurationStore:
    store = DeltaConfigurationStore(str(path))
    store.open()
    return store
