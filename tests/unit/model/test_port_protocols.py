"""A port may enable only the protocols an engine implements (the engine registry says which)."""

from __future__ import annotations

import logging

import pytest

from broker.errors import ConfigurationError
from broker.model import PortProtocol, category
from broker.model.port import IMPLEMENTED_PROTOCOLS, LEGACY_DEFAULT_PROTOCOLS
from broker.protocol.engine import ENGINES
from tests.unit.model.conftest import Loader, minimal_config

IMPLEMENTED_TEXT = "this broker implements AMQP_0_8, AMQP_0_9, AMQP_0_9_1, AMQP_1_0"


def test_the_implemented_protocols_are_the_engine_registrys() -> None:
    assert [p.name for p in IMPLEMENTED_PROTOCOLS] == ENGINES.protocols == [
        "AMQP_0_8", "AMQP_0_9", "AMQP_0_9_1", "AMQP_1_0"]


def test_a_port_enables_every_implemented_protocol_by_default(load: Loader) -> None:
    [port] = load(minimal_config()).broker.ports()
    assert port.protocols == IMPLEMENTED_PROTOCOLS


@pytest.mark.parametrize(("protocols", "named"), [
    (["AMQP_0_9_1", "AMQP_0_10"], "names AMQP_0_10, which is not implemented"),
    (["AMQP_0_10", "AMQP_1_0"], "names AMQP_0_10, which is not implemented"),
])
def test_the_configuration_file_cannot_enable_an_unimplemented_protocol(
        load: Loader, protocols: list[str], named: str) -> None:
    config = minimal_config()
    config["ports"][0]["protocols"] = protocols
    with pytest.raises(ConfigurationError) as raised:
        load(config)
    assert "Port 'amqp': attribute 'protocols' " + named in str(raised.value)
    assert IMPLEMENTED_TEXT in str(raised.value)


def test_nor_can_a_context_variable(load: Loader) -> None:
    config = minimal_config()
    config["ports"][0]["protocols"] = "${test.protocols}"
    with pytest.raises(ConfigurationError, match="names AMQP_0_10, which is not implemented"):
        load(config, {"test.protocols": '["AMQP_0_10"]'})
    [port] = load(config, {"test.protocols": '["AMQP_0_9"]'}).broker.ports()
    assert port.protocols == [PortProtocol.AMQP_0_9]


def test_nor_management_creating_or_changing_a_port(load: Loader) -> None:
    broker = load(minimal_config()).broker
    with pytest.raises(ConfigurationError, match=IMPLEMENTED_TEXT):
        broker.create_child("Port", {"name": "new", "port": 0, "authenticationProvider": "anon",
                                     "protocols": ["AMQP_0_10"]})
    assert [p.name for p in broker.ports()] == ["amqp"]
    [port] = broker.ports()
    with pytest.raises(ConfigurationError, match="names AMQP_0_10, which is not implemented"):
        port.set_attributes({"protocols": ["AMQP_0_9_1", "AMQP_0_10"]})
    assert port.protocols == IMPLEMENTED_PROTOCOLS          # unchanged


def test_a_port_stored_with_the_old_default_list_serves_the_implemented_ones(
        load: Loader, caplog: pytest.LogCaptureFixture) -> None:
    # what every earlier release's conf/config.json gave its AMQP port, and its stores kept
    config = minimal_config()
    config["ports"][0]["protocols"] = list(LEGACY_DEFAULT_PROTOCOLS)
    with caplog.at_level(logging.WARNING):
        [port] = load(config).broker.ports()
    assert port.protocols == IMPLEMENTED_PROTOCOLS
    assert "'protocols' names AMQP_0_10, which is not implemented" in caplog.text


def test_metadata_offers_only_the_implemented_protocols() -> None:
    amqp = category("Port").attributes("AMQP")["protocols"].as_dict()
    assert amqp["choices"] == amqp["default"] == ["AMQP_0_8", "AMQP_0_9", "AMQP_0_9_1", "AMQP_1_0"]
    assert category("Port").attributes("HTTP")["protocols"].as_dict()["choices"] == ["HTTP"]


def test_an_unknown_protocol_name_is_told_the_implemented_ones(load: Loader) -> None:
    config = minimal_config()
    config["ports"][0]["protocols"] = ["AMQP_0_9_1", "AMQP_2_0"]
    with pytest.raises(ConfigurationError) as raised:
        load(config)
    assert str(raised.value) == ("Port 'amqp': attribute 'protocols' may name AMQP_0_8, AMQP_0_9,"
                                 " AMQP_0_9_1, AMQP_1_0; got 'AMQP_2_0'")
