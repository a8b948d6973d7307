"""Seeding the broker's configuration store from the initial configuration."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.errors import ConfigurationError
from broker.model import ConfigurationRecord, MemoryConfigurationStore, State
from broker.model.config_store import ordered
from broker.model.initial_config import DEFAULT_SOURCE, InitialConfiguration, Seeding, \
    read_initial_configuration, seed
from broker.model.system_config import BUILTIN_CONTEXT, load_system_config
from broker.model.system_store import clash, create_store
from tests.unit.model.conftest import FakeNamespace, Loader, PluginInstaller, minimal_config


def initial(**broker: Any) -> InitialConfiguration:
    tree = minimal_config(**broker)
    context = tree.pop("context")
    return InitialConfiguration(source="test.json", context=context, broker=tree)


def categories(records: list[ConfigurationRecord]) -> list[str]:
    return sorted(record.category for record in records)


ALL = ["AuthenticationProvider", "Broker", "Port", "VirtualHostNode"]


def test_an_empty_store_is_seeded_with_the_files_records_as_written() -> None:
    store = MemoryConfigurationStore()
    result = seed(store, initial())
    assert result.seeding is Seeding.SEEDED
    assert categories(result.records) == ALL and result.records == store.recover()
    assert result.written == result.records
    [port] = [r for r in store.recover() if r.category == "Port"]
    assert port.attributes["port"] == "${test.port}"           # unresolved


def test_a_store_holding_a_configuration_is_used_and_left_alone() -> None:
    store = MemoryConfigurationStore()
    seed(store, initial())
    before = store.recover()
    result = seed(store, initial(name="another"))
    assert result.seeding is Seeding.RECOVERED
    assert result.records == before == store.recover() and result.written == []


def test_overwrite_replaces_every_stored_record() -> None:
    store = MemoryConfigurationStore()
    first = seed(store, initial()).records
    store.save([ConfigurationRecord("extra", "Port", first[0].id, {"name": "extra"})])
    result = seed(store, initial(name="another"), overwrite=True)
    assert result.seeding is Seeding.OVERWRITTEN
    stored = store.recover()
    assert categories(stored) == ALL
    assert not {r.id for r in stored} & ({r.id for r in first} | {"extra"})
    assert [r.attributes["name"] for r in stored if r.category == "Broker"] == ["another"]


def test_overwrite_of_an_empty_store_is_a_seeding_and_no_file_leaves_it_empty() -> None:
    assert seed(MemoryConfigurationStore(), initial(), overwrite=True).seeding is Seeding.SEEDED
    store = MemoryConfigurationStore()
    result = seed(store, None)
    assert result.seeding is Seeding.EMPTY and store.recover() == []


def test_a_store_holding_something_else_than_a_broker_is_refused() -> None:
    store = MemoryConfigurationStore()
    store.save([ConfigurationRecord("v", "VirtualHost", None, {"name": "x"}),
                ConfigurationRecord("q", "Queue", "v", {"name": "q"})])
    with pytest.raises(ConfigurationError, match="the store at X holds VirtualHost records,"
                                                 " not a broker's configuration"):
        seed(store, initial(), where="the store at X")
    assert len(store) == 2                                   # untouched
    store = MemoryConfigurationStore()
    store.save([ConfigurationRecord("a", "Broker", None, {"name": "a"}),
                ConfigurationRecord("b", "Broker", None, {"name": "b"})])
    with pytest.raises(ConfigurationError, match="holds 2 Broker records"):
        seed(store, initial())


def test_reading_splits_context_defaults_from_the_broker(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"name": "b", "context": {"n": 5, "s": "x"}, "ports": []}))
    read = read_initial_configuration(str(path))
    assert read.source == str(path) and read.context == {"n": "5", "s": "x"}
    assert read.broker == {"name": "b", "ports": []}
    assert read_initial_configuration(None).source == DEFAULT_SOURCE
    path.write_text(json.dumps({"context": ["no"]}))
    with pytest.raises(ConfigurationError, match="'context' must be an object"):
        read_initial_configuration(str(path))


# -- through load_system_config, with a store that outlives the SystemConfig -----------

class DiskLikeStore:
    """A durable store for the unit tests: records kept per path across instances."""

    disks: dict[str, dict[str, ConfigurationRecord]] = {}

    def __init__(self, path: str | None = None) -> None:
        assert path is not None
        self.path = path

    def open(self) -> None:
        self.records = self.disks.setdefault(self.path, {})

    def recover(self) -> list[ConfigurationRecord]:
        return ordered(self.records.values())

    def save(self, records: Any) -> None:
        for record in records:
            self.records[record.id] = record

    def remove(self, ids: Any) -> None:
        for record_id in ids:
            self.records.pop(record_id, None)

    def close(self) -> None:
        pass


@pytest.fixture
def disk(install_plugin: PluginInstaller) -> Iterator[dict[str, dict[str, ConfigurationRecord]]]:
    install_plugin("deltamq.stores", "disklike", f"{__name__}:DiskLikeStore")
    DiskLikeStore.disks = {}
    yield DiskLikeStore.disks


def configured(tmp_path: Path, config: dict[str, Any], *, overwrite: bool = False,
               **context: str) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    overrides = {"deltamq.data_dir": str(tmp_path / "data"),
                 "deltamq.config_store_type": "disklike", **context}
    return load_system_config(str(path), overrides, store_type=None, overwrite=overwrite,
                              namespace_factory=FakeNamespace)


def test_the_store_type_and_path_come_from_context(tmp_path: Path, disk: dict[str, Any]) -> None:
    assert BUILTIN_CONTEXT["deltamq.config_store_type"] == "delta"
    assert BUILTIN_CONTEXT["deltamq.config_store_path"] == "${deltamq.data_dir}/broker"
    system = configured(tmp_path, minimal_config())
    assert isinstance(system.store, DiskLikeStore)
    assert system.store_location == str(tmp_path / "data" / "broker")
    system.close()
    system = configured(tmp_path, minimal_config(), **{"deltamq.config_store_type": "memory"})
    assert isinstance(system.store, MemoryConfigurationStore) and system.store_location is None
    with pytest.raises(ConfigurationError, match="unknown configuration store type 'tape'"):
        configured(tmp_path, minimal_config(), **{"deltamq.config_store_type": "tape"})
    with pytest.raises(ConfigurationError, match="deltamq.config_store_path is empty"):
        configured(tmp_path, minimal_config(), **{"deltamq.config_store_path": ""})


def test_restarts_use_the_store_and_the_files_context(
        tmp_path: Path, disk: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "broker.model.system_config")
    first = configured(tmp_path, minimal_config())
    assert first.seeding is Seeding.SEEDED and "was empty: seeded from" in caplog.text
    first.broker.create_child("Port", {"name": "extra", "port": "${test.port2}",
                                       "authenticationProvider": "anon",
                                       "context": {"test.port2": "6001"}})
    first.close()
    caplog.clear()

    changed = minimal_config(name="other")
    changed["context"] = {"test.port": "6002"}
    second = configured(tmp_path, changed)
    assert second.seeding is Seeding.RECOVERED and "configuration recovered from" in caplog.text
    ports = {p.name: p.port for p in second.broker.ports()}
    assert ports == {"amqp": 6002, "extra": 6001}             # stored raw, resolved anew
    assert second.broker.name == "test-broker"
    second.close()

    third = configured(tmp_path, changed, overwrite=True)
    assert third.seeding is Seeding.OVERWRITTEN and "overwritten from" in caplog.text
    assert [p.name for p in third.broker.ports()] == ["amqp"]
    assert third.broker.name == "other"


def test_a_node_at_the_broker_store_path_is_refused_and_the_seeding_withdrawn(
        tmp_path: Path, disk: dict[str, Any]) -> None:
    config = minimal_config()
    config["virtualhostnodes"] = [{"name": "broker", "type": "disklike"}]
    with pytest.raises(ConfigurationError, match=r"VirtualHostNode 'broker': storePath '.*/data/"
                                                 r"broker' is the broker's configuration store"):
        configured(tmp_path, config)
    assert disk[str(tmp_path / "data" / "broker")] == {}     # the next start seeds again

    config["virtualhostnodes"] = [{"name": "node", "type": "disklike",
                                   "storePath": "${deltamq.data_dir}/broker/inner"}]
    with pytest.raises(ConfigurationError, match="is inside the broker's configuration store"):
        configured(tmp_path, config)

    config["virtualhostnodes"] = [{"name": "broker", "type": "memory"}]      # keeps nothing there
    system = configured(tmp_path, config)
    assert system.broker.virtual_host_nodes[0].state is State.ACTIVE
    with pytest.raises(ConfigurationError, match="is the broker's configuration store"):
        system.broker.create_child("VirtualHostNode", {"name": "n2", "type": "disklike",
                                                       "storePath": "${deltamq.data_dir}/broker"})
    assert system.broker.child("VirtualHostNode", "n2") is None


def test_clash_compares_absolute_paths_and_uris() -> None:
    assert clash("data/broker", str(Path("data/broker").resolve())) == "is"
    assert clash("data/broker/x", "data/broker/") == "is inside"
    assert clash("data/brokers", "data/broker") is None
    assert clash("data", "data/broker") is None
    assert clash("s3://b/p/broker/", "s3://b/p/broker") == "is"
    assert clash("s3://b/p/broker2", "s3://b/p/broker") is None


def test_memory_is_the_default_of_load_system_config(load: Loader) -> None:
    system = load()
    assert isinstance(system.store, MemoryConfigurationStore)
    assert create_store("memory", "anywhere").recover() == []
