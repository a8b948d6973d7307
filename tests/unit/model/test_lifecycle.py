"""Lifecycle (create, open on recovery, delete, close), states and change listeners."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import ConfigurationError
from broker.model import AuthenticationProvider, ChangeListener, ConfiguredObject, State, \
    attribute
from tests.unit.model.conftest import Loader, PluginInstaller, minimal_config

calls: list[str] = []


class RecordingProvider(AuthenticationProvider):
    """A provider type that records its hooks and fails where told to."""

    type_name = "Recording"
    fail_in = attribute(str, default="", description="hook that raises")

    def _hook(self, name: str) -> None:
        calls.append(f"{name}:{self.name}")
        if self.fail_in == name:
            raise RuntimeError(f"{name} failed")

    def validate(self) -> None:
        calls.append(f"validate:{self.name}")
        if self.fail_in == "validate":
            raise ConfigurationError(f"{self.label}: told to fail")

    def on_create(self) -> None:
        self._hook("on_create")

    def on_open(self) -> None:
        self._hook("on_open")

    def on_close(self) -> None:
        self._hook("on_close")

    def on_delete(self) -> None:
        self._hook("on_delete")


class Recorder(ChangeListener):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def state_changed(self, obj: ConfiguredObject, old: State, new: State) -> None:
        self.events.append(("state", obj.name, old, new))

    def attribute_set(self, obj: ConfiguredObject, name: str, old: Any, new: Any) -> None:
        self.events.append(("attribute", obj.name, name, old, new))

    def child_added(self, obj: ConfiguredObject, child: ConfiguredObject) -> None:
        self.events.append(("added", obj.name, child.name))

    def child_removed(self, obj: ConfiguredObject, child: ConfiguredObject) -> None:
        self.events.append(("removed", obj.name, child.name))


@pytest.fixture(autouse=True)
def recording_type(install_plugin: PluginInstaller) -> None:
    install_plugin("deltamq.auth", "Recording", f"{__name__}:RecordingProvider")
    calls.clear()


def test_create_runs_phases_in_order_and_registers(load: Loader) -> None:
    broker = load().broker
    recorder = Recorder()
    broker.listeners.append(recorder)
    provider = broker.create_child("AuthenticationProvider", {"name": "r", "type": "Recording"})
    assert calls == ["validate:r", "on_create:r", "on_open:r"]
    assert provider.state is State.ACTIVE
    assert broker.child("AuthenticationProvider", "r") is provider
    assert recorder.events == [("added", "test-broker", "r")]


def test_recovery_opens_without_on_create(load: Loader) -> None:
    config = minimal_config()
    config["authenticationproviders"].append({"name": "r", "type": "Recording"})
    load(config)
    assert calls == ["validate:r", "on_open:r"]


@pytest.mark.parametrize("hook", ["on_create", "on_open"])
def test_failed_create_leaves_nothing_behind(load: Loader, hook: str) -> None:
    system = load()
    broker = system.broker
    before = len(system.store.recover())
    with pytest.raises(RuntimeError, match=f"{hook} failed"):
        broker.create_child("AuthenticationProvider",
                            {"name": "r", "type": "Recording", "failIn": hook})
    assert broker.child("AuthenticationProvider", "r") is None
    assert len(system.store.recover()) == before


def test_invalid_create_is_refused_before_any_hook(load: Loader) -> None:
    broker = load().broker
    with pytest.raises(ConfigurationError, match="told to fail"):
        broker.create_child("AuthenticationProvider",
                            {"name": "r", "type": "Recording", "failIn": "validate"})
    assert calls == ["validate:r"]
    assert broker.child("AuthenticationProvider", "r") is None


def test_failure_to_open_on_recovery_marks_errored_and_broker_runs(load: Loader) -> None:
    config = minimal_config()
    config["authenticationproviders"].append({"name": "r", "type": "Recording",
                                              "failIn": "on_open"})
    system = load(config)
    provider = system.broker.child("AuthenticationProvider", "r")
    assert provider is not None and provider.state is State.ERRORED
    assert isinstance(provider.last_error, RuntimeError)
    assert system.broker.state is State.ACTIVE
    assert system.broker.ports()[0].state is State.ACTIVE


def test_configuration_error_on_recovery_raises(load: Loader) -> None:
    config = minimal_config()
    config["authenticationproviders"].append({"name": "r", "type": "Recording",
                                              "failIn": "validate"})
    with pytest.raises(ConfigurationError, match="told to fail"):
        load(config)


def test_duplicate_names_are_refused(load: Loader) -> None:
    broker = load().broker
    with pytest.raises(ConfigurationError, match="already has a Port named 'amqp'"):
        broker.create_child("Port", {"name": "amqp", "port": 0, "authenticationProvider": "anon"})


def test_port_number_clash_is_refused(load: Loader) -> None:
    broker = load().broker
    with pytest.raises(ConfigurationError, match="port 5999 is already used by Port 'amqp'"):
        broker.create_child("Port", {"name": "second", "port": 5999,
                                     "authenticationProvider": "anon"})
    other = broker.create_child("Port", {"name": "ephemeral", "port": 0,
                                         "authenticationProvider": "anon"})
    assert other.state is State.ACTIVE


def test_wrong_child_category_is_refused(load: Loader) -> None:
    broker = load().broker
    with pytest.raises(ConfigurationError, match="a VirtualHost cannot be a child of Broker"):
        broker.create_child("VirtualHost", {"name": "v"})


def test_listeners_hear_attribute_and_state_changes(load: Loader) -> None:
    broker = load().broker
    provider = broker.create_child("AuthenticationProvider", {"name": "r", "type": "Recording"})
    recorder = Recorder()
    provider.listeners.append(recorder)
    broker.listeners.append(recorder)
    provider.set_attributes({"description": "hello"})
    provider.delete()
    assert recorder.events == [
        ("attribute", "r", "description", "", "hello"),
        ("state", "r", State.ACTIVE, State.DELETED),
        ("removed", broker.name, "r"),
    ]
    assert provider.state is State.DELETED
    assert broker.child("AuthenticationProvider", "r") is None
    assert calls[-1] == "on_delete:r"


def test_unchanged_value_is_not_announced(load: Loader) -> None:
    port = load().broker.ports()[0]
    recorder = Recorder()
    port.listeners.append(recorder)
    port.set_attributes({"port": "${test.port}"})
    assert recorder.events == []


def test_delete_removes_descendants_first(load: Loader) -> None:
    system = load()
    node = system.broker.virtual_host_nodes[0]
    vhost = node.virtual_hosts[0]
    closed: list[str] = []
    connection = vhost.register_connection(system.broker.ports()[0], remote_address="127.0.0.1:1",
                                           protocol="AMQP_0_9_1", closer=closed.append)
    node.delete()
    assert connection.state is State.DELETED and len(closed) == 1
    assert vhost.state is State.DELETED
    assert system.broker.find_virtual_host("node") is None
    assert not system.broker.virtual_host_nodes


def test_provider_in_use_cannot_be_deleted(load: Loader) -> None:
    broker = load().broker
    provider = broker.authentication_provider("anon")
    assert provider is not None
    with pytest.raises(ConfigurationError, match="used by port"):
        provider.delete()
    assert provider.state is State.ACTIVE
    broker.ports()[0].delete()
    provider.delete()
    assert provider.state is State.DELETED


def test_close_stops_everything_without_unstoring(load: Loader) -> None:
    system = load()
    stored = len(system.store.recover())
    system.close()
    assert system.state is State.STOPPED
    assert system.broker.state is State.STOPPED
    assert system.broker.virtual_hosts[0].state is State.STOPPED
    assert system.broker.virtual_hosts[0].namespace is None
    assert len(system.store.recover()) == stored


def test_changes_to_deleted_objects_are_refused(load: Loader) -> None:
    port = load().broker.ports()[0]
    port.delete()
    with pytest.raises(ConfigurationError, match="has been deleted"):
        port.set_attributes({"description": "x"})


def test_find_by_id(load: Loader) -> None:
    system = load()
    port = system.broker.ports()[0]
    assert system.find_by_id(port.id) is port
    assert system.find_by_id("nope") is None
