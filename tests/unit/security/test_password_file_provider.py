"""The PasswordFile and Anonymous providers as model objects and authenticators."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from broker.errors import AuthenticationFailed, ConfigurationError
from broker.model import State, SystemConfig, load_system_config
from broker.security import password_file as password_file_module
from broker.security.anonymous import AnonymousAuthenticationProvider
from broker.security.password_file import PasswordFileAuthenticationProvider
from broker.security.passwords import PasswordFile, verify_password
from broker.security.principal import Principal
from broker.security.sasl import authenticate as sasl_authenticate


def load(tmp_path: Path, **provider: Any) -> SystemConfig:
    config = {
        "name": "b",
        "defaultVirtualHost": "main",
        "authenticationproviders": [
            {"name": "files", "type": "PasswordFile", **provider},
            {"name": "anon", "type": "Anonymous"},
        ],
        "ports": [{"name": "amqp", "port": 0, "authenticationProvider": "files"}],
        "virtualhostnodes": [{"name": "main"}],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_system_config(str(path), {"deltamq.data_dir": str(tmp_path)},
                              namespace_factory=lambda name: None)


@pytest.fixture
def provider(tmp_path: Path) -> PasswordFileAuthenticationProvider:
    found = load(tmp_path).broker.authentication_provider("files")
    assert isinstance(found, PasswordFileAuthenticationProvider)
    return found


def test_guest_is_created_hashed(provider: PasswordFileAuthenticationProvider,
                                 tmp_path: Path) -> None:
    content = (tmp_path / "passwords").read_text()
    assert "guest" in content
    stored = json.loads(content)["users"]["guest"]["password"]
    assert stored != "guest" and verify_password("guest", stored)
    assert [u.name for u in provider.users] == ["guest"]


def test_correct_password_gives_a_principal(provider: PasswordFileAuthenticationProvider) -> None:
    assert provider.authenticate("guest", "guest", "127.0.0.1") == Principal("guest", "files")


@pytest.mark.parametrize(("user", "password"), [("guest", "wrong"), ("nobody", "guest"),
                                                ("guest", "")])
def test_wrong_credentials_are_refused_alike(provider: PasswordFileAuthenticationProvider,
                                             user: str, password: str) -> None:
    with pytest.raises(AuthenticationFailed) as raised:
        provider.authenticate(user, password, "127.0.0.1")
    assert raised.value.reply_code == 403
    assert raised.value.reply_text == ("ACCESS_REFUSED - Login was refused using authentication"
                                       " mechanism PLAIN. For details see the broker logfile.")


@pytest.mark.parametrize("host", ["10.0.0.8", "::ffff:192.0.2.1", "2001:db8::5", None])
def test_guest_only_from_loopback(provider: PasswordFileAuthenticationProvider,
                                  host: str | None) -> None:
    with pytest.raises(AuthenticationFailed, match="User 'guest' can only connect via localhost"):
        provider.authenticate("guest", "guest", host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"])
def test_guest_from_loopback_addresses(provider: PasswordFileAuthenticationProvider,
                                       host: str) -> None:
    assert provider.authenticate("guest", "guest", host).name == "guest"


def test_other_users_may_connect_from_anywhere(
        provider: PasswordFileAuthenticationProvider, tmp_path: Path) -> None:
    provider.add_user("alice", "wonderland")
    assert provider.authenticate("alice", "wonderland", "10.0.0.8").name == "alice"
    provider.set_attributes({"loopbackUsers": ["alice"]})
    with pytest.raises(AuthenticationFailed, match="'alice' can only connect via localhost"):
        provider.authenticate("alice", "wonderland", "10.0.0.8")


def test_users_created_in_the_model_are_written_hashed(
        provider: PasswordFileAuthenticationProvider, tmp_path: Path) -> None:
    user = provider.add_user("bob", "builder", ["main"])
    assert "password" not in user.attributes()
    assert "password" not in user.attributes(actual=True)
    assert user.attributes()["virtualHosts"] == ["main"]
    on_disk = PasswordFile(tmp_path / "passwords").load()
    assert on_disk["bob"].virtual_hosts == ["main"]
    assert on_disk["bob"].password != "builder"
    assert verify_password("builder", on_disk["bob"].password)
    assert "builder" not in (tmp_path / "passwords").read_text()


def test_password_change_and_delete_through_the_model(
        provider: PasswordFileAuthenticationProvider, tmp_path: Path) -> None:
    user = provider.add_user("bob", "one")
    assert provider.authenticate("bob", "one", "10.0.0.1").name == "bob"
    user.set_attributes({"password": "two"})
    with pytest.raises(AuthenticationFailed):
        provider.authenticate("bob", "one", "10.0.0.1")  # the remembered login is void
    assert provider.authenticate("bob", "two", "10.0.0.1").name == "bob"
    assert verify_password("two", PasswordFile(tmp_path / "passwords").load()["bob"].password)
    user.delete()
    assert "bob" not in PasswordFile(tmp_path / "passwords").load()
    with pytest.raises(AuthenticationFailed):
        provider.authenticate("bob", "two", "10.0.0.1")


def test_edits_to_the_file_are_seen_at_next_login(
        provider: PasswordFileAuthenticationProvider, tmp_path: Path) -> None:
    file = PasswordFile(tmp_path / "passwords")
    file.add_user("carol", "c4rol")
    os.utime(file.path, ns=(1, 1))  # make sure the stamp differs even on coarse clocks
    assert provider.authenticate("carol", "c4rol", "10.0.0.1").name == "carol"
    assert provider.user("carol") is not None
    file.remove_user("carol")
    with pytest.raises(AuthenticationFailed):
        provider.authenticate("carol", "c4rol", "10.0.0.1")
    assert provider.user("carol") is None


def test_successful_login_is_remembered(provider: PasswordFileAuthenticationProvider,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    provider.authenticate("guest", "guest", "127.0.0.1")
    verifications: list[str] = []
    real = password_file_module.verify_password

    def counting(password: str, encoded: str) -> bool:
        verifications.append(password)
        return real(password, encoded)

    monkeypatch.setattr(password_file_module, "verify_password", counting)
    for _ in range(3):
        provider.authenticate("guest", "guest", "127.0.0.1")
    assert verifications == []
    with pytest.raises(AuthenticationFailed):
        provider.authenticate("guest", "nope", "127.0.0.1")
    assert verifications == ["nope"]


def test_anonymous_refused_unless_enabled(provider: PasswordFileAuthenticationProvider) -> None:
    assert provider.sasl_mechanisms == ["SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "AMQPLAIN"]
    with pytest.raises(AuthenticationFailed, match="does not allow anonymous"):
        provider.authenticate_anonymous("127.0.0.1")
    provider.set_attributes({"allowAnonymous": True})
    assert provider.sasl_mechanisms == ["SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "AMQPLAIN",
                                        "ANONYMOUS"]
    principal = provider.authenticate_anonymous("10.0.0.1")
    assert principal.anonymous and principal.name == "anonymous"


def test_anonymous_provider(tmp_path: Path) -> None:
    anon = load(tmp_path).broker.authentication_provider("anon")
    assert isinstance(anon, AnonymousAuthenticationProvider)
    assert anon.sasl_mechanisms == ["ANONYMOUS"]
    assert anon.authenticate_anonymous(None).anonymous
    with pytest.raises(AuthenticationFailed, match="accepts mechanism ANONYMOUS only"):
        anon.authenticate("guest", "guest", "127.0.0.1")
    with pytest.raises(ConfigurationError, match="does not keep users"):
        anon.add_user("x", "y")


def test_may_access(provider: PasswordFileAuthenticationProvider) -> None:
    provider.add_user("all", "pw")
    provider.add_user("some", "pw", ["main", "other"])
    everyone = Principal("all", "files")
    some = Principal("some", "files")
    assert provider.may_access(everyone, "anything")
    assert provider.may_access(some, "main") and provider.may_access(some, "other")
    assert provider.may_access(some, "/") and provider.may_access(some, "")  # default: main
    assert not provider.may_access(some, "third")
    assert not provider.may_access(Principal("ghost", "files"), "main")
    assert provider.may_access(Principal("anonymous", "files", anonymous=True), "main")


def test_sasl_dispatch(provider: PasswordFileAuthenticationProvider) -> None:
    principal = sasl_authenticate(provider, "PLAIN", b"\x00guest\x00guest", "::1")
    assert principal.name == "guest"
    amqplain = (b"\x05LOGINS\x00\x00\x00\x05guest" b"\x08PASSWORDS\x00\x00\x00\x05guest")
    assert sasl_authenticate(provider, "AMQPLAIN", amqplain, "127.0.0.1").name == "guest"
    with pytest.raises(AuthenticationFailed, match="unsupported authentication mechanism"):
        sasl_authenticate(provider, "ANONYMOUS", b"", "127.0.0.1")
    with pytest.raises(AuthenticationFailed, match="may not act as 'admin'"):
        sasl_authenticate(provider, "PLAIN", b"admin\x00guest\x00guest", "127.0.0.1")
    wrong = b"\x05LOGINS\x00\x00\x00\x05guest" b"\x08PASSWORDS\x00\x00\x00\x05wrong"
    with pytest.raises(AuthenticationFailed, match="mechanism AMQPLAIN"):
        sasl_authenticate(provider, "AMQPLAIN", wrong, "127.0.0.1")


def test_deleting_the_provider_keeps_the_file(tmp_path: Path) -> None:
    system = load(tmp_path)
    broker = system.broker
    provider = broker.authentication_provider("files")
    assert provider is not None
    provider.add_user("dave", "pw")
    broker.ports()[0].delete()
    provider.delete()
    assert provider.state is State.DELETED
    assert set(PasswordFile(tmp_path / "passwords").load()) == {"guest", "dave"}


def test_recovered_provider_reads_existing_file(tmp_path: Path) -> None:
    PasswordFile(tmp_path / "passwords").add_user("erin", "pw", ["main"])
    provider = load(tmp_path).broker.authentication_provider("files")
    assert provider is not None
    assert [u.name for u in provider.users] == ["erin"]  # no guest added to an existing file
    assert provider.authenticate("erin", "pw", "10.1.1.1").name == "erin"
