"""A port's transports: WebSocket (WS, or WSS over TLS) on a port of its own; what listens."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest

from broker.errors import ConfigurationError
from broker.listeners import transport_layers
from broker.model import Transport
from broker.transport.tls import TlsLayer
from broker.transport.websocket import WebSocketLayer
from tests.tls_material import make_pki
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
    (["WS", "WSS"], "cannot also carry WSS"),
    (["WSS", "TCP"], "a WebSocket port (transport WSS) cannot also carry TCP"),
])
def test_websocket_with_another_transport_is_refused(
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


def test_a_wss_port_puts_tls_under_websocket_and_needs_a_key_store(load: Loader,
                                                                   tmp_path: Path) -> None:
    config = minimal_config()
    config["ports"][0]["transports"] = ["WSS"]
    with pytest.raises(ConfigurationError, match="keyStore"):
        load(config)
    pki = make_pki(tmp_path / "pki")
    config["keystores"] = [{"name": "server", "type": "NonJavaKeyStore",
                            "privateKeyUrl": str(pki.server_key),
                            "certificateUrl": str(pki.server_cert)}]
    config["ports"][0]["keyStore"] = "server"
    [port] = load(config).broker.ports()
    layers, transport = transport_layers(port)
    tls, websocket = layers()
    assert isinstance(tls, TlsLayer) and isinstance(websocket, WebSocketLayer)
    assert transport == "WSS"
    # a client's TLS handshake, then its upgrade request through the TLS layer
    client = TlsLayer(ssl.create_default_context(cafile=str(pki.ca)), server_side=False,
                      server_hostname="localhost")
    for _ in range(10):
        tls.receive_data(client.data_to_send())
        client.receive_data(tls.data_to_send())
    assert client.handshake_complete
    upgrade = (b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
               b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: amqp\r\n\r\n")
    assert websocket.receive_data(tls.receive_data(client.send_data(upgrade))) == b""
    answer = client.receive_data(tls.send_data(websocket.data_to_send()))
    assert answer.startswith(b"HTTP/1.1 101") and b"Sec-WebSocket-Protocol: amqp" in answer
