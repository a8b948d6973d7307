"""An HTTP port with transport SSL: what it accepts, and the TLS context uvicorn serves with."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from broker.errors import ConfigurationError
from broker.transport.tls import TlsLayer
from tests.tls_material import Pki, make_pki
from tests.unit.model.conftest import Loader, minimal_config


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki", clients=("app",))


def https_config(pki: Pki, **port: Any) -> dict[str, Any]:
    config = minimal_config()
    config["keystores"] = [{"name": "server", "privateKeyUrl": str(pki.server_key),
                            "certificateUrl": str(pki.server_cert)}]
    config["truststores"] = [{"name": "clients", "certificatesUrl": str(pki.ca)}]
    config["ports"].append({"name": "https", "type": "HTTP", "port": 0, "protocols": ["HTTP"],
                            "transports": ["SSL"], "keyStore": "server",
                            "authenticationProvider": "anon", **port})
    return config


def _handshake(server: TlsLayer, client: TlsLayer) -> bool:
    for _ in range(10):
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
    return client.handshake_complete and not client.closed and not server.closed


def _client(pki: Pki, cn: str | None = None) -> TlsLayer:
    return TlsLayer(pki.client_context(cn), server_side=False, server_hostname="localhost")


@pytest.mark.parametrize("port,message", [
    ({"transports": ["TCP", "SSL"]}, "an HTTP port's 'transports' are [\"TCP\"] (HTTP) or"
                                     " [\"SSL\"] (HTTPS); got ['TCP', 'SSL']"),
    ({"transports": ["WS"]}, "got ['WS']"),
    ({"keyStore": ""}, "attribute 'keyStore' is mandatory when 'transports' includes SSL"),
    ({"keyStore": "nope"}, "key store 'nope' does not exist"),
    ({"needClientAuth": True}, "need 'trustStores' to verify client certificates"),
])
def test_bad_https_ports_are_refused(load: Loader, pki: Pki, port: dict[str, Any],
                                     message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        load(https_config(pki, **port))


def test_an_https_port_serves_its_key_store_and_asks_for_client_certificates(
        load: Loader, pki: Pki) -> None:
    broker = load(https_config(pki, trustStores=["clients"], needClientAuth=True)).broker
    [https] = [p for p in broker.ports() if p.name == "https"]
    assert https.serves_tls  # type: ignore[attr-defined]
    context = https.https_tls_context()  # type: ignore[attr-defined]
    assert _handshake(TlsLayer(context), _client(pki, "app"))
    without = _client(pki)
    server = TlsLayer(context)
    _handshake(server, without)
    assert server.closed and "certificate" in server.close_reason   # needClientAuth


def test_a_reloaded_key_store_reaches_the_context_uvicorn_holds(load: Loader, pki: Pki,
                                                                tmp_path: Path) -> None:
    """uvicorn keeps one context for all its connections: a reload must still reach them."""
    broker = load(https_config(pki)).broker
    [https] = [p for p in broker.ports() if p.name == "https"]
    held = https.https_tls_context()  # type: ignore[attr-defined]
    renewed = make_pki(tmp_path / "renewed", clients=(), ca_name="Renewed CA")
    assert not _handshake(TlsLayer(held), _client(renewed))  # the renewed CA: not yet served
    shutil.copy(renewed.server_key, pki.server_key)
    shutil.copy(renewed.server_cert, pki.server_cert)
    broker.child("KeyStore", "server").reload()  # type: ignore[union-attr]
    assert _handshake(TlsLayer(held), _client(renewed))
    assert not _handshake(TlsLayer(held), _client(pki))       # the old CA no longer verifies it
