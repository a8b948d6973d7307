"""FileKeyStore and FileTrustStore: Java key stores (PKCS12) as Broker-J users have them.

Stores come from ``cryptography`` and from the JDK's own ``keytool`` (the
tests that need it are skipped when it is not installed): a store with two
key entries and a trusted certificate, a trust store, and a JKS store, which
is refused with the conversion to make.
"""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from broker.errors import ConfigurationError
from broker.model import KeyStore
from broker.model.operations import declared_operations
from tests.tls_material import Pki, make_pki, write_pkcs12
from tests.unit.model.conftest import Loader, minimal_config
from tests.unit.model.test_keystores import _handshake

PASSWORD = "store-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("app",))


def write_p12(path: Path, pki: Pki, *, with_key: bool = True) -> Path:
    return write_pkcs12(path, pki, PASSWORD, with_key=with_key)


def config(key_store: dict[str, Any], trust_store: dict[str, Any] | None = None,
           **port: Any) -> dict[str, Any]:
    result = minimal_config()
    result["keystores"] = [{"name": "server", "type": "FileKeyStore", "password": PASSWORD,
                            **key_store}]
    if trust_store is not None:
        result["truststores"] = [{"name": "clients", "type": "FileTrustStore",
                                  "password": PASSWORD, **trust_store}]
    result["ports"][0].update({"transports": ["SSL"], "keyStore": "server", **port})
    return result


def test_a_pkcs12_key_store_serves_its_key_and_chain(load: Loader, pki: Pki,
                                                     tmp_path: Path) -> None:
    store = write_p12(tmp_path / "server.p12", pki)
    broker = load(config({"storeUrl": str(store)})).broker
    keystore = broker.child("KeyStore", "server")
    assert isinstance(keystore, KeyStore) and keystore.subject_name == "CN=localhost,O=DeltaMQ"
    assert [c.subject.rfc4514_string() for c in keystore.material.chain] == \
        ["CN=localhost,O=DeltaMQ", "CN=Test CA,O=DeltaMQ"]
    attributes = keystore.attributes()
    assert attributes["keyStoreType"] == "PKCS12" and attributes.get("password") != PASSWORD
    [port] = broker.ports()
    _handshake(port.tls_context(), pki.client_context())  # type: ignore[attr-defined]


def test_a_pkcs12_trust_store_verifies_client_certificates(load: Loader, pki: Pki,
                                                           tmp_path: Path) -> None:
    keys = write_p12(tmp_path / "server.p12", pki)
    trust = write_p12(tmp_path / "trust.p12", pki, with_key=False)
    broker = load(config({"storeUrl": str(keys)}, {"storeUrl": str(trust)},
                         trustStores=["clients"], needClientAuth=True)).broker
    truststore = broker.child("TrustStore", "clients")
    assert [d["subjectName"] for d in truststore.certificate_details] == \
        ["CN=Test CA,O=DeltaMQ"]  # type: ignore[attr-defined]
    [port] = broker.ports()
    client = _handshake(port.tls_context(), pki.client_context("app"))  # type: ignore[attr-defined]
    assert client.session is not None


@pytest.mark.parametrize("change,message", [
    ({"password": "wrong"}, "the password does not open"),
    ({"certificateAlias": "nope"}, "the store has no entry 'nope' (attribute 'certificateAlias');"
                                   " its entries: ca, server"),
    ({"certificateAlias": "ca"}, "entry 'ca' is a certificate without a private key"),
    ({"keyStoreType": "JCEKS"}, "attribute 'keyStoreType' must be PKCS12 or JKS; got 'JCEKS'"),
    ({"keyManagerFactoryAlgorithm": "X"}, "'keyManagerFactoryAlgorithm' must be one of SunX509"),
    ({"storeUrl": "/no/such.p12"}, "file '/no/such.p12' does not exist"),
])
def test_bad_key_store_settings_are_precise_errors(load: Loader, pki: Pki, tmp_path: Path,
                                                   change: dict[str, str], message: str) -> None:
    store = write_p12(tmp_path / "server.p12", pki)
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(config({"storeUrl": str(store), **change}))


def test_a_store_in_a_data_url(load: Loader, pki: Pki, tmp_path: Path) -> None:
    """As Broker-J's management uploads a store: the file's bytes in a data: URL."""
    store = write_p12(tmp_path / "server.p12", pki)
    url = "data:;base64," + base64.b64encode(store.read_bytes()).decode()
    broker = load(config({"storeUrl": url})).broker
    assert broker.child("KeyStore", "server").subject_name == "CN=localhost,O=DeltaMQ"  # type: ignore[union-attr]


def test_a_trust_store_reload_trusts_what_the_file_holds_now(load: Loader, pki: Pki,
                                                            tmp_path: Path) -> None:
    keys = write_p12(tmp_path / "server.p12", pki)
    other = make_pki(tmp_path / "other", clients=("app",), ca_name="Other CA")
    trust = write_p12(tmp_path / "trust.p12", other, with_key=False)
    broker = load(config({"storeUrl": str(keys)}, {"storeUrl": str(trust)},
                         trustStores=["clients"], needClientAuth=True)).broker
    [port] = broker.ports()
    with pytest.raises(AssertionError):       # our client's CA is not trusted yet
        _handshake(port.tls_context(), pki.client_context("app"))  # type: ignore[attr-defined]
    write_p12(trust, pki, with_key=False)
    broker.child("TrustStore", "clients").reload()  # type: ignore[union-attr]
    _handshake(port.tls_context(), pki.client_context("app"))  # type: ignore[attr-defined]


def test_a_store_without_a_key_is_no_key_store(load: Loader, pki: Pki, tmp_path: Path) -> None:
    store = write_p12(tmp_path / "trust.p12", pki, with_key=False)
    with pytest.raises(ConfigurationError, match="holds no private key, only certificates"):
        load(config({"storeUrl": str(store)}))


def test_a_store_in_a_data_url_is_not_repeated_whole_in_errors(load: Loader, pki: Pki,
                                                                tmp_path: Path) -> None:
    store = write_p12(tmp_path / "trust.p12", pki, with_key=False)
    url = "data:;base64," + base64.b64encode(store.read_bytes()).decode()
    with pytest.raises(ConfigurationError, match="data: URL holds no private key") as raised:
        load(config({"storeUrl": url}))
    assert url[20:80] not in str(raised.value)


def test_the_certificate_alias_is_matched_without_regard_to_case(load: Loader, pki: Pki,
                                                                 tmp_path: Path) -> None:
    """As Java's PKCS12 key store (and so Broker-J) looks entries up."""
    store = write_p12(tmp_path / "server.p12", pki)             # its key entry: 'server'
    broker = load(config({"storeUrl": str(store), "certificateAlias": "Server"})).broker
    assert broker.child("KeyStore", "server").subject_name == "CN=localhost,O=DeltaMQ"  # type: ignore[union-attr]
    with pytest.raises(ConfigurationError, match="entry 'CA' is a certificate without a private"):
        load(config({"storeUrl": str(store), "certificateAlias": "CA"}))


def test_a_file_that_is_no_store_is_named(load: Loader, pki: Pki) -> None:
    with pytest.raises(ConfigurationError, match="is not a PKCS12 key store"):
        load(config({"storeUrl": str(pki.server_cert)}))


def test_type_jks_reads_a_pkcs12_file_as_java_does(load: Loader, pki: Pki, tmp_path: Path) -> None:
    store = write_p12(tmp_path / "server.p12", pki)
    broker = load(config({"storeUrl": str(store), "keyStoreType": "jks"})).broker
    assert broker.child("KeyStore", "server").subject_name == "CN=localhost,O=DeltaMQ"  # type: ignore[union-attr]


def test_a_jks_file_is_refused_with_the_conversion_to_make(load: Loader, tmp_path: Path) -> None:
    store = tmp_path / "server.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + bytes(64))   # JKS magic, version 2
    with pytest.raises(ConfigurationError, match="is a JKS key store, which DeltaMQ cannot read;"
                                                 " convert it to PKCS12 \\(keytool -importkeystore"):
        load(config({"storeUrl": str(store), "keyStoreType": "JKS"}))


def test_reload_reads_the_store_again_and_a_bad_one_keeps_the_key(load: Loader, pki: Pki,
                                                                  tmp_path: Path) -> None:
    store = write_p12(tmp_path / "server.p12", pki)
    broker = load(config({"storeUrl": str(store)})).broker
    keystore = broker.child("KeyStore", "server")
    renewed = make_pki(tmp_path / "renewed", clients=(), ca_name="Renewed CA")
    write_p12(store, renewed)
    assert keystore.certificate_issuer == "CN=Test CA,O=DeltaMQ"  # type: ignore[attr-defined]
    declared_operations(type(keystore))["reload"].invoke(keystore, {})
    assert keystore.certificate_issuer == "CN=Renewed CA,O=DeltaMQ"  # type: ignore[attr-defined]
    [port] = broker.ports()
    _handshake(port.tls_context(), renewed.client_context())  # type: ignore[attr-defined]
    store.write_bytes(b"\x30\x03\x02\x01\x03")                 # a DER sequence, no store
    with pytest.raises(ConfigurationError, match="is not a PKCS12 key store"):
        keystore.reload()  # type: ignore[attr-defined]
    assert keystore.certificate_issuer == "CN=Renewed CA,O=DeltaMQ"  # type: ignore[attr-defined]


# -- stores made by the JDK's keytool ------------------------------------------------------

KEYTOOL = shutil.which("keytool")
needs_keytool = pytest.mark.skipif(KEYTOOL is None, reason="the JDK's keytool is not installed")


@dataclass(frozen=True)
class JavaStores:
    keys: Path        # PKCS12: key entries 'one' (EC) and 'two' (RSA, for localhost), cert 'ca'
    trust: Path       # PKCS12: the test CA, as 'clients-ca'
    jks: Path         # JKS: key entry 'old'


def keytool(*args: str) -> None:
    assert KEYTOOL is not None
    subprocess.run([KEYTOOL, *args], check=True, capture_output=True, timeout=120)


def _key_pair(store: Path, alias: str, store_type: str, *extra: str) -> None:
    keytool("-genkeypair", "-alias", alias, "-dname", f"CN={alias},O=Java", "-validity", "30",
            "-keystore", str(store), "-storetype", store_type, "-storepass", PASSWORD,
            "-keypass", PASSWORD, *extra)


@pytest.fixture(scope="module")
def java_stores(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> JavaStores:
    if KEYTOOL is None:
        pytest.skip("the JDK's keytool is not installed")
    directory = tmp_path_factory.mktemp("keytool")
    stores = JavaStores(directory / "keys.p12", directory / "trust.p12", directory / "old.jks")
    _key_pair(stores.keys, "one", "PKCS12", "-keyalg", "EC", "-groupname", "secp256r1")
    _key_pair(stores.keys, "two", "PKCS12", "-keyalg", "RSA", "-keysize", "2048",
              "-ext", "SAN=dns:localhost")
    for store, alias in ((stores.keys, "ca"), (stores.trust, "clients-ca")):
        keytool("-importcert", "-noprompt", "-alias", alias, "-file", str(pki.ca),
                "-keystore", str(store), "-storetype", "PKCS12", "-storepass", PASSWORD)
    _key_pair(stores.jks, "old", "JKS", "-keyalg", "EC", "-groupname", "secp256r1")
    return stores


def _trusting(certificate: x509.Certificate) -> ssl.SSLContext:
    context = ssl.create_default_context(
        cadata=certificate.public_bytes(serialization.Encoding.PEM).decode())
    return context


@needs_keytool
def test_keytool_store_first_key_entry_or_the_alias(load: Loader, java_stores: JavaStores) -> None:
    first = load(config({"storeUrl": str(java_stores.keys)})).broker.child("KeyStore", "server")
    assert first.subject_name == "CN=one,O=Java"  # type: ignore[union-attr]
    assert first.key_algorithm == "EC secp256r1"  # type: ignore[union-attr]
    broker = load(config({"storeUrl": str(java_stores.keys), "certificateAlias": "two"})).broker
    second = broker.child("KeyStore", "server")
    assert second.subject_name == "CN=two,O=Java"  # type: ignore[union-attr]
    assert second.key_algorithm == "RSA 2048"  # type: ignore[union-attr]
    [port] = broker.ports()
    _handshake(port.tls_context(), _trusting(second.material.certificate))  # type: ignore[attr-defined,union-attr]
    upper = load(config({"storeUrl": str(java_stores.keys), "certificateAlias": "TWO"})).broker
    assert upper.child("KeyStore", "server").subject_name == "CN=two,O=Java"  # type: ignore[union-attr]


@needs_keytool
@pytest.mark.parametrize("change,message", [
    ({"certificateAlias": "ca"}, "entry 'ca' is a certificate without a private key"),
    ({"certificateAlias": "three"}, "no entry 'three' .*; its entries: ca, one, two"),
    ({"password": "not-it"}, "the password does not open"),
])
def test_keytool_store_errors(load: Loader, java_stores: JavaStores, change: dict[str, str],
                              message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load(config({"storeUrl": str(java_stores.keys), **change}))


@needs_keytool
def test_keytool_trust_store_verifies_client_certificates(load: Loader, pki: Pki, tmp_path: Path,
                                                          java_stores: JavaStores) -> None:
    keys = write_p12(tmp_path / "server.p12", pki)
    broker = load(config({"storeUrl": str(keys)}, {"storeUrl": str(java_stores.trust)},
                         trustStores=["clients"], needClientAuth=True)).broker
    [port] = broker.ports()
    client = _handshake(port.tls_context(), pki.client_context("app"))  # type: ignore[attr-defined]
    assert client.session is not None


@needs_keytool
def test_a_keytool_jks_store_is_refused_with_the_conversion_to_make(
        load: Loader, java_stores: JavaStores) -> None:
    with pytest.raises(ConfigurationError, match="JKS key store, which DeltaMQ cannot read.*"
                                                 "-deststoretype PKCS12"):
        load(config({"storeUrl": str(java_stores.jks), "keyStoreType": "JKS"}))
