"""A port's transports: WebSocket (WS) on a port of its own; WSS not yet; what listens."""

from __future__ import annotations

import re

import pytest

from broker.errors import ConfigurationError
from broker.listeners import transport_layers
from broker.model import Transport
from broker.transport.websocket import WebSocketLayer
from tests.unit.model.conftest import Loader, minimal_config


def test_a_websocket_port_is_accepted_and_gets_the_websocket_layer(load: Loader) -> None:
    config = minimal_config()
    config["ports"][0]["transports"] = ["WS"]
    [port] = load(config).broker.ports()
    assert port.transports == [Transport.WS]
    layers, transport = transport_layers(port)
    [layer] = layers()
    assert isinstance(layer, WebSocketLayer) and transport == "WS"
    assert layer.settings.max_message_size == 16 << 20 and layer.settings.subprotocol_required


def test_the_port_context_sets_the_websocket_limits(load: Loader) -> None:
    config = minimal_config()
    config["ports"][0]["transports"] = ["WS"]
    config["ports"][0]["context"] = {"deltamq.websocket_max_message_size": "4096",
                                     "deltamq.websocket_subprotocol_required": "false"}
    [port] = load(config).broker.ports()
    [layer] = transport_layers(port)[0]()
    assert isinstance(layer, WebSocketLayer)
    assert layer.settings.max_message_size == 4096 and not layer.settings.subprotocol_required


def test_a_tcp_port_has_no_layers(load: Loader) -> None:
    [port] = load(minimal_config()).broker.ports()
    layers, transport = transport_layers(port)
    assert list(layers()) == [] and transport == "TCP"


@pytest.mark.parametrize(("transports", "message"), [
    (["TCP", "WS"], "a WebSocket port (transport WS) cannot also carry TCP"),
    (["WS", "SSL"], "cannot also carry SSL"),
    (["WSS"], "transport WSS (WebSocket over TLS) is not available"),
])
def test_websocket_with_another_transport_or_over_tls_is_refused(
        load: Loader, transports: list[str], message: str) -> None:
    config = minimal_config()
    config["ports"][0]["transports"] = transports
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        load(config)
    broker = load(minimal_config()).broker
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        broker.create_child("Port", {"name": "new", "port": 0, "authenticationProvider": "anon",
                                     "transports": transports})
    assert [p.name for p in broker.ports()] == ["amqp"]
