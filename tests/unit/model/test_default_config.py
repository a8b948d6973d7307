"""The embedded default configuration loads into the expected tree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from broker.model import AmqpPort, HttpPort, PortProtocol, State, SystemConfig, Transport, \
    load_system_config
from broker.model.system_config import REPOSITORY_CONFIG, default_configuration_text
from broker.security.password_file import PasswordFileAuthenticationProvider
from tests.unit.model.conftest import FakeNamespace

IMPLEMENTED_AMQP = [PortProtocol.AMQP_0_8, PortProtocol.AMQP_0_9, PortProtocol.AMQP_0_9_1, PortProtocol.AMQP_1_0]


@pytest.fixture
def system(tmp_path: Path) -> SystemConfig:
    return load_system_config(None, {"deltamq.data_dir": str(tmp_path / "data")},
                              namespace_factory=FakeNamespace)


def test_packaged_default_is_the_repository_file() -> None:
    assert REPOSITORY_CONFIG.name == "config.json"
    assert default_configuration_text() == REPOSITORY_CONFIG.read_text(encoding="utf-8")
    assert json.loads(default_configuration_text())["context"]["deltamq.data_dir"] == "./data"


def test_amqp_port_on_every_interface_with_every_implemented_protocol(system: SystemConfig) -> None:
    amqp, amqps, websocket = system.broker.ports("AMQP")
    assert isinstance(amqp, AmqpPort) and amqp.name == "AMQP" and websocket.name == "WebSocket"
    assert amqp.port == 5672
    assert amqp.binding_address == "" and amqp.local_host is None
    assert amqp.protocols == IMPLEMENTED_AMQP
    assert amqp.transports == [Transport.TCP]
    assert amqp.max_open_connections == -1
    assert isinstance(amqp.provider, PasswordFileAuthenticationProvider)
    assert (amqps.name, amqps.port, amqps.transports) == ("AMQPS", 5671, [Transport.SSL])
    assert amqps.protocols == IMPLEMENTED_AMQP and amqps.provider is amqp.provider
    assert amqps.key_store == "amqps"                     # generated at first start (docs/tls.md)


def test_websocket_port_serves_every_implemented_protocol_over_ws(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELTAMQ_WS_PORT", raising=False)    # tests/conftest.py sets it to 0
    system = load_system_config(None, {"deltamq.data_dir": str(tmp_path / "data")},
                                namespace_factory=FakeNamespace)
    [websocket] = [port for port in system.broker.ports("AMQP") if port.name == "WebSocket"]
    assert websocket.port == 5673
    assert websocket.transports == [Transport.WS]
    assert websocket.protocols == IMPLEMENTED_AMQP
    assert websocket.provider is system.broker.ports("AMQP")[0].provider


def test_http_port_is_modelled(system: SystemConfig) -> None:
    [http] = system.broker.ports("HTTP")
    assert isinstance(http, HttpPort)
    assert http.port == 8080
    assert http.protocols == [PortProtocol.HTTP]


def test_password_file_is_created_with_guest(system: SystemConfig, tmp_path: Path) -> None:
    provider = system.broker.ports("AMQP")[0].provider
    assert isinstance(provider, PasswordFileAuthenticationProvider)
    assert provider.path == str(tmp_path / "data" / "passwords")
    assert [user.name for user in provider.users] == ["guest"]
    content = (tmp_path / "data" / "passwords").read_text()
    assert "guest" in content and '"guest"' in content
    assert provider.authenticate("guest", "guest", "127.0.0.1").name == "guest"


def test_default_virtual_host(system: SystemConfig) -> None:
    broker = system.broker
    [node] = broker.virtual_host_nodes
    assert (node.name, node.type) == ("default", "delta")     # durable state in Delta tables
    assert type(node.store).__name__ == "DeltaConfigurationStore"
    vhost = broker.find_virtual_host("default")
    assert vhost is not None and vhost.state is State.ACTIVE
    assert broker.find_virtual_host("/") is vhost
    assert broker.find_virtual_host("") is vhost
    assert broker.find_virtual_host("/default") is vhost
    assert broker.find_virtual_host("nope") is None
    assert isinstance(vhost.namespace, FakeNamespace)
    assert vhost.namespace.vhost_name == "default"
    assert node.store_path.endswith("data/default")


def test_overrides_change_ports_and_data_dir(tmp_path: Path) -> None:
    system = load_system_config(None, {"deltamq.data_dir": str(tmp_path / "elsewhere"),
                                       "deltamq.amqp_port": "5673",
                                       "deltamq.amqps_port": "5675", "deltamq.ws_port": "5674",
                                       "deltamq.http_port": "0"},
                                namespace_factory=FakeNamespace)
    assert system.broker.ports("AMQP")[0].port == 5673
    assert [port.port for port in system.broker.ports("AMQP")] == [5673, 5675, 5674]
    assert system.broker.ports("HTTP")[0].port == 0
    assert (tmp_path / "elsewhere" / "passwords").is_file()


def test_missing_messaging_layer_errors_the_vhost_clearly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "broker.messaging.namespace", None)  # import fails
    system = load_system_config(None, {"deltamq.data_dir": str(tmp_path)})
    vhost = system.broker.find_virtual_host("/")
    assert vhost is not None and vhost.state is State.ERRORED
    assert "broker.messaging.namespace.Namespace" in str(vhost.last_error)
    assert system.broker.state is State.ACTIVE


def test_unreadable_or_invalid_files_are_configuration_errors(tmp_path: Path) -> None:
    from broker.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="cannot read configuration"):
        load_system_config(str(tmp_path / "absent.json"), {})
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x",\n  oops}')
    with pytest.raises(ConfigurationError, match="invalid JSON at line 2"):
        load_system_config(str(bad), {})
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigurationError, match="must be a JSON object"):
        load_system_config(str(bad), {})
