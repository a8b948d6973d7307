"""Attribute declarations, defaults, conversion from JSON and the errors that name what is wrong."""

from __future__ import annotations

import enum

import pytest

from broker.errors import ConfigurationError
from broker.model import Broker, Port, PortProtocol, Transport, category, categories
from broker.model.attributes import attribute, camel_case, convert, derived_attributes
from tests.unit.model.conftest import Loader, minimal_config


def test_broker_defaults(load: Loader) -> None:
    broker = load().broker
    assert broker.default_virtual_host == "default"
    assert broker.heartbeat_delay == 60
    assert broker.max_frame_size == 131072
    assert broker.max_channels == 2047
    listed = broker.attributes()
    assert listed["connection.heartbeatDelay"] == 60
    assert listed["maxFrameSize"] == 131072
    assert listed["memoryHighWatermark"] > 0
    assert listed["state"] == "ACTIVE"


def test_memory_high_watermark_comes_from_a_context_variable(load: Loader) -> None:
    broker = load(context={"deltamq.memory_high_watermark": "123456"}).broker
    assert broker.memory_high_watermark == 123456
    assert "memoryHighWatermark" not in broker.attributes(actual=True)


def test_disk_free_limit_is_rabbitmqs_default_unless_a_context_variable_says_otherwise(
        load: Loader) -> None:
    assert load().broker.attributes()["diskFreeLimit"] == 50_000_000
    assert load(context={"deltamq.disk_free_limit": "0"}).broker.disk_free_limit == 0
    with pytest.raises(ConfigurationError, match="'diskFreeLimit' must not be negative"):
        load(context={"deltamq.disk_free_limit": "-1"})


def test_alarm_statistics_are_quiet_when_the_broker_is_not_served(load: Loader) -> None:
    broker = load().broker
    statistics = {name: d.__get__(broker, Broker)
                  for name, d in derived_attributes(Broker).items() if d.statistic}
    assert statistics["memoryAlarm"] is False and statistics["diskAlarm"] is False
    assert statistics["memoryUsed"] == 0 and statistics["diskFree"] == -1
    assert statistics["residentMemorySize"] > 0


def test_wire_names_are_camel_case_unless_declared() -> None:
    assert camel_case("binding_address") == "bindingAddress"
    assert camel_case("max_open_connections") == "maxOpenConnections"
    names = set(category("Port").attributes())
    assert {"bindingAddress", "maxOpenConnections", "authenticationProvider"} <= names
    assert "connection.heartbeatDelay" in category("Broker").attributes()


def test_port_values_are_converted_from_json_strings(load: Loader) -> None:
    config = minimal_config()
    config["ports"][0].update(protocols="AMQP_0_9_1, AMQP_0_8", transports='["WS"]',
                              maxOpenConnections="10")
    port = load(config).broker.ports()[0]
    assert port.port == 5999
    assert port.protocols == [PortProtocol.AMQP_0_9_1, PortProtocol.AMQP_0_8]
    assert port.transports == [Transport.WS]
    assert port.max_open_connections == 10
    assert port.attributes()["protocols"] == ["AMQP_0_9_1", "AMQP_0_8"]


@pytest.mark.parametrize(("change", "fragments"), [
    ({"port": "not-a-number"}, ["Port 'amqp'", "attribute 'port'", "integer", "not-a-number"]),
    ({"port": True}, ["attribute 'port'", "integer"]),
    ({"port": 70000}, ["attribute 'port'", "65535"]),
    ({"protocols": ["AMQP_2_0"]}, ["attribute 'protocols'", "AMQP_0_9_1", "AMQP_2_0"]),
    ({"protocols": "[not json"}, ["attribute 'protocols'", "JSON"]),
    ({"maxOpenConnections": -5}, ["maxOpenConnections"]),
    ({"colour": "red"}, ["Port 'amqp'", "unknown attribute 'colour'"]),
    ({"protocols": ["HTTP"]}, ["AMQP port cannot carry HTTP"]),
    ({"authenticationProvider": "missing"}, ["authentication provider 'missing' does not exist"]),
])
def test_bad_port_values_name_object_attribute_and_reason(
        load: Loader, change: dict[str, object], fragments: list[str]) -> None:
    config = minimal_config()
    config["ports"][0].update(change)
    with pytest.raises(ConfigurationError) as raised:
        load(config)
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_mandatory_attribute_missing_is_named(load: Loader) -> None:
    config = minimal_config()
    del config["ports"][0]["port"]
    with pytest.raises(ConfigurationError, match="Port 'amqp': attribute 'port' is mandatory"):
        load(config)


def test_bool_and_dict_conversion() -> None:
    class Colour(enum.Enum):
        RED = "red"

    flag = attribute(bool, name="flag")
    table = attribute(dict, name="table")
    colour = attribute(Colour, name="colour")
    assert convert(flag, "TRUE", "X 'x'") is True
    assert convert(flag, "off", "X 'x'") is False
    assert convert(table, '{"a": 1}', "X 'x'") == {"a": 1}
    assert convert(colour, "red", "X 'x'") is Colour.RED
    with pytest.raises(ConfigurationError, match="X 'x': attribute 'flag' must be true or false"):
        convert(flag, "maybe", "X 'x'")
    with pytest.raises(ConfigurationError, match="attribute 'table' must be an object"):
        convert(table, [1, 2], "X 'x'")
    with pytest.raises(ConfigurationError, match="attribute 'colour' must be one of RED"):
        convert(colour, "blue", "X 'x'")


def test_immutable_attribute_cannot_change(load: Loader) -> None:
    port = load().broker.ports()[0]
    with pytest.raises(ConfigurationError, match="attribute 'name' cannot be changed"):
        port.set_attributes({"name": "other"})
    with pytest.raises(ConfigurationError, match="attribute 'type' cannot be changed"):
        port.set_attributes({"type": "HTTP"})


def test_invalid_change_leaves_object_unchanged(load: Loader) -> None:
    port = load().broker.ports()[0]
    with pytest.raises(ConfigurationError):
        port.set_attributes({"maxOpenConnections": 5, "port": "x"})
    assert port.max_open_connections == -1
    assert port.port == 5999
    assert "maxOpenConnections" not in port.attributes(actual=True)


def test_descriptor_assignment_goes_through_set_attributes(load: Loader) -> None:
    port = load().broker.ports()[0]
    port.max_open_connections = 3
    assert port.attributes(actual=True)["maxOpenConnections"] == 3
    with pytest.raises(ConfigurationError):
        port.port = -1


def test_none_reverts_to_default(load: Loader) -> None:
    port = load().broker.ports()[0]
    port.set_attributes({"bindingAddress": "127.0.0.1"})
    assert port.local_host == "127.0.0.1"
    port.set_attributes({"bindingAddress": None})
    assert port.binding_address == "" and port.local_host is None


def test_metadata_is_enumerable_without_instances() -> None:
    names = [c.name for c in categories()]
    assert names[:3] == ["SystemConfig", "Broker", "AuthenticationProvider"]
    assert {"Port", "VirtualHostNode", "VirtualHost", "User", "Connection", "Session",
            "Consumer"} <= set(names)
    port = category("ports").describe()
    assert port["parent"] == "Broker"
    assert port["types"] == ["AMQP", "HTTP"]
    assert port["attributes"]["port"]["mandatory"] is True
    assert port["attributes"]["port"]["type"] == "int"
    assert port["attributes"]["protocols"]["choices"][:3] == ["AMQP_0_8", "AMQP_0_9",
                                                                "AMQP_0_9_1"]
    assert port["attributes"]["name"]["mutable"] is False
    assert "connectionCount" in port["derived"]
    user = category("User").describe()
    assert user["attributes"]["password"]["secure"] is True
    assert "memory" in category("VirtualHostNode").types()
    assert category("AuthenticationProvider").children == ("User",)
    assert set(category("AuthenticationProvider").types()) >= {"Anonymous", "PasswordFile"}
    with pytest.raises(ConfigurationError, match="unknown category 'Widget'"):
        category("Widget")


def test_type_specialisation_adds_its_attributes() -> None:
    provider = category("AuthenticationProvider")
    assert "path" not in provider.attributes()
    assert "path" in provider.attributes("PasswordFile")
    assert "allowAnonymous" in provider.attributes("PasswordFile")
    http = category("Port").attributes("HTTP")
    assert http["protocols"].default == ["HTTP"]


def test_unknown_type_lists_the_known_ones(load: Loader) -> None:
    config = minimal_config()
    config["authenticationproviders"][0]["type"] = "Kerberos"
    with pytest.raises(ConfigurationError, match="unknown AuthenticationProvider type"
                                                 " 'Kerberos'; known: .*PasswordFile"):
        load(config)


def test_category_classes_are_the_registered_bases() -> None:
    assert category("Broker").base is Broker
    assert category("Port").base is Port
