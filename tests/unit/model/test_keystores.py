"""KeyStore, TrustStore and a port's TLS attributes: what configuration they accept and refuse."""

from __future__ import annotations

import base64
import logging
import shutil
import ssl
import warnings
from pathlib import Path
from typing import Any

import pytest

from broker.errors import ConfigurationError
from broker.model import KeyStore, TrustStore
from broker.model.operations import declared_operations
from broker.security import cert_generation
from broker.transport.tls import TlsLayer
from tests.tls_material import Pki, expired_certificate, make_pki
from tests.unit.model.conftest import Loader, minimal_config


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki", clients=("app",))


def tls_config(pki: Pki, **port: Any) -> dict[str, Any]:
    config = minimal_config()
    config["keystores"] = [{"name": "server", "type": "NonJavaKeyStore",
                            "privateKeyUrl": str(pki.server_key),
                            "certificateUrl": str(pki.server_cert)}]
    config["truststores"] = [{"name": "clients", "certificatesUrl": str(pki.ca)}]
    config["ports"][0].update({"transports": ["SSL"], "keyStore": "server", **port})
    return config


def _handshake(context: ssl.SSLContext, client_context: ssl.SSLContext) -> TlsLayer:
    """Run a handshake in memory; the client layer (its session names the server's certificate)."""
    server = TlsLayer(context)
    client = TlsLayer(client_context, server_side=False, server_hostname="localhost")
    for _ in range(10):
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
    assert client.handshake_complete and not server.closed
    return client


def test_a_tls_port_with_key_and_trust_stores(load: Loader, pki: Pki) -> None:
    broker = load(tls_config(pki, needClientAuth=True, trustStores=["clients"])).broker
    [port] = broker.ports()
    keystore = broker.child("KeyStore", "server")
    assert isinstance(keystore, KeyStore) and keystore.subject_name == "CN=localhost,O=DeltaMQ"
    assert keystore.attributes()["keyAlgorithm"] == "EC secp256r1"
    truststore = broker.child("TrustStore", "clients")
    assert isinstance(truststore, TrustStore)
    assert [d["subjectName"] for d in truststore.certificate_details] == ["CN=Test CA,O=DeltaMQ"]
    context = port.tls_context()  # type: ignore[attr-defined]
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.minimum_version is ssl.TLSVersion.TLSv1_2
    assert port.tls_context() is context  # type: ignore[attr-defined]   # cached
    _handshake(context, pki.client_context("app"))


def test_defaults_are_tls_1_2_and_up_without_client_certificates(load: Loader, pki: Pki) -> None:
    [port] = load(tls_config(pki)).broker.ports()
    assert port.tls_protocol_allow_list == ["TLSv1.2", "TLSv1.3"]  # type: ignore[attr-defined]
    context = port.tls_context()  # type: ignore[attr-defined]
    assert context.verify_mode is ssl.CERT_NONE
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(pki.ca))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)     # TLS 1.1: what is refused
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    server = TlsLayer(context)
    client = TlsLayer(old, server_side=False, server_hostname="localhost")
    for _ in range(5):
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
    assert not client.handshake_complete and (server.closed or client.closed)


@pytest.mark.parametrize(("change", "message"), [
    ({"privateKeyUrl": "/nonexistent/key.pem"}, "KeyStore 'server': file '/nonexistent/key.pem'"
                                                " does not exist"),
    ({"certificateUrl": "SERVER_KEY"}, "holds no PEM certificate"),
    ({"privateKeyUrl": "CA"}, "holds no PEM private key"),
    ({"privateKeyUrl": "CLIENT_KEY"}, "does not belong to the certificate of 'CN=localhost"),
])
def test_a_bad_key_store_is_a_configuration_error(load: Loader, pki: Pki, change: dict[str, str],
                                                  message: str) -> None:
    files = {"SERVER_KEY": str(pki.server_key), "CA": str(pki.ca),
             "CLIENT_KEY": str(pki.client_key("app"))}
    config = tls_config(pki)
    config["keystores"][0].update({k: files.get(v, v) for k, v in change.items()})
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        load(config)


def test_an_encrypted_key_needs_its_password(load: Loader, pki: Pki, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), None)
    encrypted = tmp_path / "encrypted-key.pem"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                            serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"s3cret")))
    config = tls_config(pki)
    config["keystores"][0]["privateKeyUrl"] = str(encrypted)
    with pytest.raises(ConfigurationError, match="is encrypted: set the key store's 'password'"):
        load(config)
    config["keystores"][0]["password"] = "wrong"
    with pytest.raises(ConfigurationError, match="password does not decrypt it"):
        load(config)
    config["keystores"][0]["password"] = "s3cret"
    broker = load(config).broker
    assert "password" not in broker.child("KeyStore", "server").attributes()   # secure: never listed
    _handshake(broker.ports()[0].tls_context(), pki.client_context())  # type: ignore[attr-defined]


def test_data_urls_and_file_urls_are_read(load: Loader, pki: Pki) -> None:
    config = tls_config(pki)
    config["keystores"][0]["privateKeyUrl"] = "data:;base64," + base64.b64encode(
        pki.server_key.read_bytes()).decode()
    config["keystores"][0]["certificateUrl"] = pki.server_cert.as_uri()
    broker = load(config).broker
    assert broker.child("KeyStore", "server").subject_name == "CN=localhost,O=DeltaMQ"


def test_an_expired_certificate_loads_with_a_warning(load: Loader, pki: Pki, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    expired_certificate(tmp_path / "old-key.pem", tmp_path / "old.pem")
    config = tls_config(pki)
    config["keystores"][0].update(privateKeyUrl=str(tmp_path / "old-key.pem"),
                                  certificateUrl=str(tmp_path / "old.pem"))
    with caplog.at_level(logging.WARNING):
        load(config)
    assert "KeyStore 'server': certificate 'CN=expired' expired on" in caplog.text


@pytest.mark.parametrize(("port", "message"), [
    ({"keyStore": ""}, "attribute 'keyStore' is mandatory when 'transports' includes SSL"),
    ({"keyStore": "nope"}, "key store 'nope' does not exist"),
    ({"trustStores": ["nope"]}, "trust store 'nope' does not exist"),
    ({"needClientAuth": True}, "need 'trustStores' to verify client certificates with"),
    ({"wantClientAuth": True}, "need 'trustStores' to verify client certificates with"),
    ({"tlsProtocolAllowList": ["SSLv3"]}, "must name TLS versions among"),
    ({"tlsCipherSuiteAllowList": ["NO-SUCH-CIPHER"]}, "names no cipher suite OpenSSL knows"),
])
def test_bad_tls_port_attributes_are_refused(load: Loader, pki: Pki, port: dict[str, Any],
                                             message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load(tls_config(pki, **port))


def test_management_cannot_break_a_tls_port(load: Loader, pki: Pki) -> None:
    broker = load(tls_config(pki)).broker
    [port] = broker.ports()
    with pytest.raises(ConfigurationError, match="does not exist"):
        port.set_attributes({"keyStore": "missing"})
    assert port.key_store == "server"  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="cannot be deleted: it is used by port"):
        broker.child("KeyStore", "server").delete()
    port.set_attributes({"trustStores": ["clients"], "wantClientAuth": True})
    with pytest.raises(ConfigurationError, match="cannot be deleted: it is used by port"):
        broker.child("TrustStore", "clients").delete()
    assert port.tls_context().verify_mode is ssl.CERT_OPTIONAL  # type: ignore[attr-defined]


def test_reload_serves_the_new_certificate(load: Loader, pki: Pki, tmp_path: Path) -> None:
    broker = load(tls_config(pki)).broker
    [port] = broker.ports()
    keystore = broker.child("KeyStore", "server")
    assert "reload" in declared_operations(type(keystore))
    before = _handshake(port.tls_context(), pki.client_context())  # type: ignore[attr-defined]
    renewed = make_pki(tmp_path / "renewed", clients=(), ca_name="Renewed CA")
    shutil.copy(renewed.server_key, pki.server_key)
    shutil.copy(renewed.server_cert, pki.server_cert)
    # until the reload, the port serves what it loaded
    assert _handshake(port.tls_context(),  # type: ignore[attr-defined]
                      pki.client_context()).session == before.session
    declared_operations(type(keystore))["reload"].invoke(keystore, {})
    after = _handshake(port.tls_context(), renewed.client_context())  # type: ignore[attr-defined]
    assert after.session is not None and after.session.peer is not None
    assert keystore.certificate_issuer == "CN=Renewed CA,O=DeltaMQ"


def test_a_failed_reload_keeps_the_certificate_in_use(load: Loader, pki: Pki) -> None:
    broker = load(tls_config(pki)).broker
    [port] = broker.ports()
    keystore = broker.child("KeyStore", "server")
    context = port.tls_context()  # type: ignore[attr-defined]
    pki.server_cert.write_text("not a certificate")
    with pytest.raises(ConfigurationError, match="holds no PEM certificate"):
        keystore.reload()  # type: ignore[attr-defined]
    assert port.tls_context() is context  # type: ignore[attr-defined]
    assert keystore.subject_name == "CN=localhost,O=DeltaMQ"


def test_a_context_that_cannot_be_made_is_tried_once_per_change(
        load: Loader, pki: Pki, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A reloaded store OpenSSL refuses (a key too small for its security level): the port
    keeps serving its last context, and does not try again (nor log) for every connection."""
    from broker.model import port_tls

    broker = load(tls_config(pki)).broker
    [port] = broker.ports()
    keystore = broker.child("KeyStore", "server")
    context = port.connection_tls_context()  # type: ignore[attr-defined]
    tries: list[object] = []

    def refused(*args: object, **kwargs: object) -> ssl.SSLContext:
        tries.append(args)
        raise ConfigurationError("OpenSSL refuses the key or certificate: ee key too small")

    monkeypatch.setattr(port_tls, "server_context", refused)
    keystore.reload()  # type: ignore[union-attr]
    for _ in range(3):                               # three connections accepted
        assert port.connection_tls_context() is context  # type: ignore[attr-defined]
    assert len(tries) == 1
    assert len([r for r in caplog.records if "keeps its TLS context" in r.getMessage()]) == 1
    keystore.reload()  # type: ignore[union-attr]   # a change: tried again
    assert port.connection_tls_context() is context  # type: ignore[attr-defined]
    assert len(tries) == 2


def test_auto_generated_key_store_is_made_once(load: Loader, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    config = minimal_config()
    config["keystores"] = [{"name": "dev", "type": "AutoGeneratedSelfSigned"}]
    config["ports"][0].update({"transports": ["TCP", "SSL"], "keyStore": "dev"})
    with caplog.at_level(logging.WARNING):
        broker = load(config).broker
    tls = tmp_path / "data" / "tls"
    assert sorted(p.name for p in tls.iterdir()) == ["dev-ca.pem", "dev-cert.pem", "dev-key.pem"]
    assert (tls / "dev-key.pem").stat().st_mode & 0o777 == 0o600
    assert caplog.text.count("generated a self-signed development certificate") == 1
    assert str(tls / "dev-ca.pem") in caplog.text
    context = broker.ports()[0].tls_context()  # type: ignore[attr-defined]
    client = ssl.create_default_context(cafile=str(tls / "dev-ca.pem"))
    for host in cert_generation.default_hostnames()[:2]:        # localhost and 127.0.0.1
        server = TlsLayer(context)
        layer = TlsLayer(client, server_side=False, server_hostname=host)
        for _ in range(5):
            server.receive_data(layer.data_to_send())
            layer.receive_data(server.data_to_send())
        assert layer.handshake_complete, host
    key = (tls / "dev-key.pem").read_bytes()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load(config)                                         # the next start uses them
    assert (tls / "dev-key.pem").read_bytes() == key and "generated" not in caplog.text


def test_management_keeps_key_store_files_in_the_data_directory(load: Loader, pki: Pki) -> None:
    broker = load(minimal_config()).broker
    with pytest.raises(ConfigurationError, match="outside the data directory"):
        broker.create_child("KeyStore", {"name": "x", "privateKeyUrl": str(pki.server_key),
                                         "certificateUrl": str(pki.server_cert)})
