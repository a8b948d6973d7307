"""SASL EXTERNAL: offered only with a client certificate; the certificate names the user."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.errors import AuthenticationFailed
from broker.model import load_system_config
from broker.model.authentication import AuthenticationProvider
from broker.security import external
from broker.transport.tls import PeerCertificate
from tests.unit.model.conftest import FakeNamespace, minimal_config

APP = PeerCertificate("CN=app,O=DeltaMQ", "app", ())
PERSON = PeerCertificate("CN=person,O=Example,DC=example,DC=com", "person", ("example", "com"))
GUEST = PeerCertificate("CN=guest,O=DeltaMQ", "guest", ())


def test_offered_first_with_a_certificate_and_never_without() -> None:
    assert external.offered(["PLAIN", "AMQPLAIN"], APP) == ["EXTERNAL", "PLAIN", "AMQPLAIN"]
    assert external.offered(["PLAIN", "AMQPLAIN"], None) == ["PLAIN", "AMQPLAIN"]
    assert external.offered(["EXTERNAL", "PLAIN"], None) == ["PLAIN"]


@pytest.mark.parametrize(("peer", "full_dn", "name"), [
    (APP, False, "app"),
    (APP, True, "CN=app,O=DeltaMQ"),
    (PERSON, False, "person@example.com"),                 # Broker-J: CN@DC.DC
    (PERSON, True, "CN=person,O=Example,DC=example,DC=com"),
    (PeerCertificate("O=NoCN", "", ()), False, "O=NoCN"),    # no CN: the DN
])
def test_user_name(peer: PeerCertificate, full_dn: bool, name: str) -> None:
    assert external.user_name(peer, full_dn) == name


@pytest.fixture
def provider(tmp_path: Path) -> AuthenticationProvider:
    config = minimal_config(authenticationproviders=[{"name": "passwordFile",
                                                      "type": "PasswordFile"}])
    config["ports"][0]["authenticationProvider"] = "passwordFile"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    system = load_system_config(str(path), {"deltamq.data_dir": str(tmp_path / "data")},
                                namespace_factory=FakeNamespace)
    provider = system.broker.authentication_provider("passwordFile")
    assert provider is not None
    provider.add_user("app", "irrelevant")
    return provider


def test_a_known_user_logs_in_with_the_certificate(provider: AuthenticationProvider) -> None:
    principal = external.authenticate(provider, APP, b"", "10.0.0.1", use_full_dn=False)
    assert (principal.name, principal.provider) == ("app", "passwordFile")
    assert external.authenticate(provider, APP, b"app", "10.0.0.1", use_full_dn=False).name == "app"


@pytest.mark.parametrize(("peer", "response", "remote", "why"), [
    (None, b"", "127.0.0.1", "presented no trusted client certificate"),
    (PERSON, b"", "127.0.0.1", "names user 'person@example.com', whom"),
    (APP, b"someone-else", "127.0.0.1", "User 'app' may not act as 'someone-else'"),
    (APP, b"\xff", "127.0.0.1", "not UTF-8"),
    (GUEST, b"", "10.0.0.1", "User 'guest' can only connect via localhost"),
])
def test_refused(provider: AuthenticationProvider, peer: PeerCertificate | None, response: bytes,
                 remote: str, why: str) -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        external.authenticate(provider, peer, response, remote, use_full_dn=False)
    assert refused.value.text.startswith("Login was refused using authentication mechanism"
                                         " EXTERNAL")
    assert why in refused.value.text


def test_guest_by_certificate_from_loopback(provider: AuthenticationProvider) -> None:
    assert external.authenticate(provider, GUEST, b"", "127.0.0.1", use_full_dn=False).name == "guest"
