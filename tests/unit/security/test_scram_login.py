"""SCRAM logins against the PasswordFile provider: stored keys, the throttle, users from
before SCRAM, and which mechanisms a port offers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from broker.errors import AuthenticationFailed, ConfigurationError
from broker.model import SystemConfig, load_system_config
from broker.security.password_file import PasswordFileAuthenticationProvider
from broker.security.passwords import PasswordFile, UserEntry, hash_password
from broker.security.scram import MalformedScram, WrongProof
from broker.security.scram_login import ScramLogin, sasl_server
from broker.security.throttle import LoginThrottled
from tests.scram_client import ScramClient

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-1"]


@pytest.fixture
def system(tmp_path: Path) -> SystemConfig:
    overrides = {"deltamq.data_dir": str(tmp_path), "deltamq.login.max_failures": "3"}
    system = load_system_config(None, overrides)
    yield system
    system.close()


@pytest.fixture
def provider(system: SystemConfig) -> PasswordFileAuthenticationProvider:
    found = system.broker.authentication_provider("passwordFile")
    assert isinstance(found, PasswordFileAuthenticationProvider)
    return found


def login(provider: PasswordFileAuthenticationProvider, mechanism: str, user: str,
          password: str, source: str = "127.0.0.1") -> str:
    """One SCRAM exchange as an engine drives it; the principal's name."""
    server = sasl_server(provider, mechanism, source)
    client = ScramClient(mechanism, user, password)
    first = server.respond(client.first())
    assert first.challenge is not None and not first.complete
    final = server.respond(client.final(first.challenge))
    assert final.challenge is None and final.complete
    client.verify(final.additional_data)
    return str(final.principal.name)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_default_guest_and_model_users_log_in(provider: PasswordFileAuthenticationProvider,
                                                  mechanism: str) -> None:
    assert login(provider, mechanism, "guest", "guest") == "guest"
    provider.add_user("alice", "wonderland")          # what REST user creation calls
    assert login(provider, mechanism, "alice", "wonderland", "10.1.2.3") == "alice"


def test_the_file_keeps_keys_never_the_password(provider: PasswordFileAuthenticationProvider,
                                                tmp_path: Path) -> None:
    provider.add_user("alice", "wonderland")
    text = (tmp_path / "passwords").read_text()
    assert "wonderland" not in text
    stored = json.loads(text)["users"]["alice"]["scram"]
    assert sorted(stored) == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert set(stored["SCRAM-SHA-256"]) == {"salt", "iterations", "storedKey", "serverKey"}
    assert stored["SCRAM-SHA-256"]["iterations"] == 4096


def test_a_changed_password_changes_the_keys(provider: PasswordFileAuthenticationProvider) -> None:
    user = provider.add_user("bob", "one")
    user.set_attributes({"password": "two"})          # what a REST password change calls
    with pytest.raises(WrongProof):
        login(provider, "SCRAM-SHA-256", "bob", "one", "10.0.0.9")
    assert login(provider, "SCRAM-SHA-256", "bob", "two", "10.0.0.9") == "bob"
    user.set_attributes({"virtualHosts": ["default"]})   # other changes keep the keys
    assert login(provider, "SCRAM-SHA-1", "bob", "two", "10.0.0.9") == "bob"


def test_deltamq_user_writes_keys_the_running_provider_reads(
        provider: PasswordFileAuthenticationProvider, tmp_path: Path) -> None:
    PasswordFile(tmp_path / "passwords").add_user("carol", "c4r0l")      # deltamq user add
    assert login(provider, "SCRAM-SHA-256", "carol", "c4r0l", "10.0.0.3") == "carol"
    PasswordFile(tmp_path / "passwords").change_password("carol", "new")  # deltamq user passwd
    assert login(provider, "SCRAM-SHA-1", "carol", "new", "10.0.0.3") == "carol"


def test_iteration_count_comes_from_the_context(tmp_path: Path) -> None:
    system = load_system_config(None, {"deltamq.data_dir": str(tmp_path),
                                       "deltamq.auth.scram.iteration_count": "5000"})
    try:
        provider = system.broker.authentication_provider("passwordFile")
        assert isinstance(provider, PasswordFileAuthenticationProvider)
        provider.add_user("dave", "pw")
        server = sasl_server(provider, "SCRAM-SHA-256", "10.0.0.4")
        step = server.respond(ScramClient("SCRAM-SHA-256", "dave", "pw").first())
        assert step.challenge is not None and step.challenge.endswith(b",i=5000")
    finally:
        system.close()


def test_a_user_from_before_scram_is_told_to_set_the_password_again(
        provider: PasswordFileAuthenticationProvider, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    file = PasswordFile(tmp_path / "passwords")
    users = file.load()
    users["old"] = UserEntry(hash_password("timer"))          # no SCRAM keys, as files were
    file.save(users)
    with caplog.at_level(logging.INFO), pytest.raises(WrongProof):
        login(provider, "SCRAM-SHA-256", "old", "timer", "10.0.0.5")
    assert "user 'old' has no SCRAM-SHA-256 keys" in caplog.text
    assert "must be set again" in caplog.text
    assert provider.authenticate("old", "timer", "10.0.0.5").name == "old"     # PLAIN works


def test_a_file_whose_users_all_predate_scram_does_not_offer_it(
        provider: PasswordFileAuthenticationProvider, tmp_path: Path) -> None:
    assert provider.sasl_mechanisms[:2] == ["SCRAM-SHA-256", "SCRAM-SHA-1"]   # guest has keys
    file = PasswordFile(tmp_path / "passwords")
    file.save({"old": UserEntry(hash_password("timer"))})    # as an older release wrote it
    provider.refresh()
    assert provider.sasl_mechanisms == ["PLAIN", "AMQPLAIN"]   # Qpid JMS then picks PLAIN
    provider.add_user("new", "pw")                             # a user with keys: offered again
    assert provider.sasl_mechanisms[:2] == ["SCRAM-SHA-256", "SCRAM-SHA-1"]


def test_an_unknown_user_is_answered_like_a_known_one(
        provider: PasswordFileAuthenticationProvider, caplog: pytest.LogCaptureFixture) -> None:
    def server_first(user: str) -> bytes:
        step = sasl_server(provider, "SCRAM-SHA-256", "10.0.0.6").respond(
            ScramClient("SCRAM-SHA-256", user, "pw", nonce="n").first())
        assert step.challenge is not None
        return step.challenge.split(b",", 1)[1]               # s=...,i=... without the nonce

    assert server_first("nobody") == server_first("nobody")   # the same made-up salt each time
    assert server_first("nobody") != server_first("somebody")
    with caplog.at_level(logging.INFO), pytest.raises(WrongProof):
        login(provider, "SCRAM-SHA-256", "nobody", "pw", "10.0.0.6")
    assert "'nobody' from 10.0.0.6 refused: no such user" in caplog.text


def test_failures_feed_the_throttle_and_are_counted(system: SystemConfig,
                                                     provider: PasswordFileAuthenticationProvider
                                                     ) -> None:
    provider.add_user("erin", "right")
    for _ in range(3):                        # deltamq.login.max_failures = 3
        with pytest.raises(WrongProof):
            login(provider, "SCRAM-SHA-256", "erin", "wrong", "10.0.0.7")
    with pytest.raises(LoginThrottled, match="user 'erin'"):
        login(provider, "SCRAM-SHA-1", "erin", "right", "10.0.0.7")   # refused before the salt
    statistics = system.broker.attributes()
    assert (statistics["loginFailures"], statistics["loginsThrottled"]) == (3, 1)


def test_a_malformed_client_final_counts_as_a_failure(system: SystemConfig,
                                                      provider: PasswordFileAuthenticationProvider
                                                      ) -> None:
    server = sasl_server(provider, "SCRAM-SHA-256", "10.0.0.8")
    server.respond(b"n,,n=guest,r=abc")
    with pytest.raises(MalformedScram, match="does not end with the proof"):
        server.respond(b"c=biws,r=abc")
    assert system.broker.attributes()["loginFailures"] == 1


def test_guest_logs_in_from_loopback_only(provider: PasswordFileAuthenticationProvider) -> None:
    with pytest.raises(AuthenticationFailed, match="can only connect via localhost"):
        login(provider, "SCRAM-SHA-256", "guest", "guest", "10.9.9.9")
    assert login(provider, "SCRAM-SHA-256", "guest", "guest", "::1") == "guest"


def test_mechanisms_in_preference_order_and_narrowed_as_broker_j_does(
        provider: PasswordFileAuthenticationProvider) -> None:
    assert provider.sasl_mechanisms == ["SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "AMQPLAIN"]
    assert provider.available_mechanisms(secure=False) == provider.sasl_mechanisms
    provider.set_attributes({"secureOnlyMechanisms": ["PLAIN", "AMQPLAIN"],
                             "disabledMechanisms": ["SCRAM-SHA-1"]})
    assert provider.available_mechanisms(secure=False) == ["SCRAM-SHA-256"]
    assert provider.available_mechanisms(secure=True) == ["SCRAM-SHA-256", "PLAIN", "AMQPLAIN"]
    with pytest.raises(AuthenticationFailed):
        sasl_server(provider, "PLAIN", "127.0.0.1")           # not a SCRAM mechanism


def test_a_port_left_without_mechanisms_is_refused(
        provider: PasswordFileAuthenticationProvider) -> None:
    # the default AMQP port takes plain TCP: every mechanism secure-only leaves it nothing
    with pytest.raises(ConfigurationError, match="takes connections without TLS"):
        provider.set_attributes({"secureOnlyMechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-1",
                                                          "PLAIN", "AMQPLAIN"]})
    with pytest.raises(ConfigurationError, match="is disabled"):
        provider.set_attributes({"disabledMechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-1",
                                                        "PLAIN", "AMQPLAIN"]})
    assert provider.available_mechanisms(secure=False)[0] == "SCRAM-SHA-256"


def test_the_login_object_is_the_one_engines_get(provider: PasswordFileAuthenticationProvider
                                                 ) -> None:
    assert isinstance(sasl_server(provider, "SCRAM-SHA-1", "::1"), ScramLogin)


def test_the_ports_host_offers_what_the_provider_leaves(system: SystemConfig,
                                                        provider: PasswordFileAuthenticationProvider
                                                        ) -> None:
    from broker.security import mechanisms
    from broker.server import BrokerHost

    host = BrokerHost(system.broker, system.broker.child("Port", "AMQP"), alarms=None)
    assert host.sasl_mechanisms("127.0.0.1") == ["SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN",
                                                 "AMQPLAIN"]
    provider.set_attributes({"secureOnlyMechanisms": ["PLAIN", "AMQPLAIN"]})
    assert host.sasl_mechanisms("127.0.0.1") == ["SCRAM-SHA-256", "SCRAM-SHA-1"]
    assert isinstance(host.sasl_server("SCRAM-SHA-1", "127.0.0.1"), ScramLogin)
    # a port is secure when every transport is TLS (Broker-J's Transport.isSecure)
    assert mechanisms.is_secure(["SSL"]) and mechanisms.is_secure(["SSL", "WSS"])
    assert not mechanisms.is_secure(["TCP", "SSL"]) and not mechanisms.is_secure([])
    mechanisms.check_port("Port 'tls'", "p", ["PLAIN"], [], ["PLAIN"], ["SSL"])   # allowed
    with pytest.raises(ConfigurationError, match="without TLS"):
        mechanisms.check_port("Port 'both'", "p", ["PLAIN"], [], ["PLAIN"], ["TCP", "SSL"])
