"""The multi-step SASL exchange in the engines, in memory: SCRAM over connection.secure
(0-8, 0-9, 0-9-1) and over sasl-challenge / sasl-response / sasl-outcome (1.0), against a
real PasswordFile provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from broker.model import SystemConfig, load_system_config
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp1_0.definitions import (Open, SaslChallenge, SaslInit, SaslMechanisms,
                                                 SaslOutcome, SaslResponse)
from broker.protocol.amqp1_0.framing import AMQP_HEADER
from broker.protocol.detect import AmqpVersion
from broker.security import scram_login
from tests.scram_client import ScramClient

from .amqp1_0.engine_client import Client10
from .harness import Client, FakeHost

CAPABILITIES = {"capabilities": {"authentication_failure_close": True}}


class ProviderHost(FakeHost):
    """FakeHost whose logins go to a real PasswordFile provider (as BrokerHost's do)."""

    provider: Any = None

    def sasl_mechanisms(self, remote_host: str) -> list[str]:
        return list(self.provider.available_mechanisms(secure=False))

    def authenticate(self, username: str, password: str, remote_host: str) -> Any:
        return self.provider.authenticate(username, password, remote_host)

    def sasl_server(self, mechanism: str, remote_host: str) -> Any:
        return scram_login.sasl_server(self.provider, mechanism, remote_host)


@pytest.fixture
def system(tmp_path: Path) -> Iterator[SystemConfig]:
    system = load_system_config(None, {"deltamq.data_dir": str(tmp_path),
                                       "deltamq.login.max_failures": "2"})
    yield system
    system.close()


@pytest.fixture
def host(system: SystemConfig) -> ProviderHost:
    host = ProviderHost()
    host.provider = system.broker.authentication_provider("passwordFile")
    return host


# -- 0-8 / 0-9 / 0-9-1 ------------------------------------------------------------------

def start_ok(c: Client, mechanism: str, response: bytes) -> None:
    c.send(0, m.ConnectionStartOk(client_properties=CAPABILITIES, mechanism=mechanism,
                                  response=response, locale="en_US"))


@pytest.mark.parametrize("version", [AmqpVersion.V0_9_1, AmqpVersion.V0_9, AmqpVersion.V0_8])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
def test_0_9_1_scram_login_over_connection_secure(host: ProviderHost, version: AmqpVersion,
                                                  mechanism: str) -> None:
    c = Client(host, version)
    start = c.expect(m.ConnectionStart)
    assert start.mechanisms.split() == [b"SCRAM-SHA-256", b"SCRAM-SHA-1", b"PLAIN", b"AMQPLAIN"]
    scram = ScramClient(mechanism, "guest", "guest")
    start_ok(c, mechanism, scram.first())
    server_first = c.expect(m.ConnectionSecure, 0).challenge
    c.send(0, m.ConnectionSecureOk(response=scram.final(server_first)))
    # the server-final message comes as a last challenge (RFC 4422 section 5), then tune
    scram.verify(c.expect(m.ConnectionSecure, 0).challenge)
    assert c.server.principal is None
    c.send(0, m.ConnectionSecureOk(response=b""))
    tune = c.expect(m.ConnectionTune, 0)
    assert c.server.principal.name == "guest"
    c.send(0, m.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max))
    c.send(0, m.ConnectionOpen(virtual_host="/"))
    c.expect(m.ConnectionOpenOk, 0)


def test_0_9_1_scram_without_an_initial_response_gets_an_empty_challenge(
        host: ProviderHost) -> None:
    c = Client(host)
    c.expect(m.ConnectionStart)
    scram = ScramClient("SCRAM-SHA-256", "guest", "guest")
    start_ok(c, "SCRAM-SHA-256", b"")
    assert c.expect(m.ConnectionSecure, 0).challenge == b""
    c.send(0, m.ConnectionSecureOk(response=scram.first()))
    server_first = c.expect(m.ConnectionSecure, 0).challenge
    c.send(0, m.ConnectionSecureOk(response=scram.final(server_first)))
    scram.verify(c.expect(m.ConnectionSecure, 0).challenge)
    c.send(0, m.ConnectionSecureOk(response=b""))
    c.expect(m.ConnectionTune, 0)


def test_0_9_1_scram_wrong_password_is_refused_and_counted(host: ProviderHost,
                                                           system: SystemConfig) -> None:
    for attempt in range(3):
        c = Client(host)
        c.expect(m.ConnectionStart)
        scram = ScramClient("SCRAM-SHA-256", "guest", "wrong")
        start_ok(c, "SCRAM-SHA-256", scram.first())
        if attempt == 2:              # max_failures 2: blocked before the salt is given
            close = c.expect(m.ConnectionClose, 0)
            assert close.reply_code == 403 and "Too many failed logins" in close.reply_text
            break
        c.send(0, m.ConnectionSecureOk(response=scram.final(c.expect(m.ConnectionSecure, 0)
                                                            .challenge)))
        close = c.expect(m.ConnectionClose, 0)
        assert close.reply_code == 403 and c.server.closed and c.server.principal is None
    statistics = system.broker.attributes()
    assert (statistics["loginFailures"], statistics["loginsThrottled"]) == (2, 1)


def test_0_9_1_malformed_scram_is_refused_with_the_reason(host: ProviderHost) -> None:
    c = Client(host)
    c.expect(m.ConnectionStart)
    start_ok(c, "SCRAM-SHA-1", b"p=tls-unique,,n=guest,r=abc")
    close = c.expect(m.ConnectionClose, 0)
    assert close.reply_code == 403 and "channel binding is required" in close.reply_text


def test_0_9_1_a_non_empty_answer_to_the_server_final_is_refused(host: ProviderHost) -> None:
    c = Client(host)
    c.expect(m.ConnectionStart)
    scram = ScramClient("SCRAM-SHA-256", "guest", "guest")
    start_ok(c, "SCRAM-SHA-256", scram.first())
    c.send(0, m.ConnectionSecureOk(response=scram.final(c.expect(m.ConnectionSecure, 0).challenge)))
    c.expect(m.ConnectionSecure, 0)
    c.send(0, m.ConnectionSecureOk(response=b"more"))
    close = c.expect(m.ConnectionClose, 0)
    assert close.reply_code == 403 and "must be empty" in close.reply_text
    assert c.server.principal is None


def test_0_9_1_plain_still_logs_in_through_the_exchange(host: ProviderHost) -> None:
    c = Client(host)
    c.expect(m.ConnectionStart)
    start_ok(c, "PLAIN", b"\x00guest\x00guest")
    c.expect(m.ConnectionTune, 0)


# -- 1.0 --------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
def test_1_0_scram_login_over_challenge_and_response(host: ProviderHost, mechanism: str) -> None:
    client = Client10(host)
    offered = client.expect(SaslMechanisms).sasl_server_mechanisms
    assert list(offered) == ["SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN"]    # AMQPLAIN is 0-9-1's
    scram = ScramClient(mechanism, "guest", "guest")
    client.sasl(SaslInit(mechanism=mechanism, initial_response=scram.first()))
    challenge = client.expect(SaslChallenge).challenge
    client.sasl(SaslResponse(response=scram.final(challenge)))
    outcome = client.expect(SaslOutcome)
    assert outcome.code == 0
    scram.verify(outcome.additional_data)         # spec 5.3.3.6: the server's final data
    client.raw(AMQP_HEADER)
    client.send(Open(container_id="c"))
    client.expect(Open)
    assert client.server.principal.name == "guest"


def test_1_0_scram_without_an_initial_response(host: ProviderHost) -> None:
    client = Client10(host)
    scram = ScramClient("SCRAM-SHA-1", "guest", "guest")
    client.sasl(SaslInit(mechanism="SCRAM-SHA-1"))
    assert client.expect(SaslChallenge).challenge == b""
    client.sasl(SaslResponse(response=scram.first()))
    client.sasl(SaslResponse(response=scram.final(client.expect(SaslChallenge).challenge)))
    assert client.expect(SaslOutcome).code == 0


def test_1_0_scram_wrong_password_gets_an_auth_outcome(host: ProviderHost,
                                                       system: SystemConfig) -> None:
    client = Client10(host)
    scram = ScramClient("SCRAM-SHA-256", "guest", "wrong")
    client.sasl(SaslInit(mechanism="SCRAM-SHA-256", initial_response=scram.first()))
    client.sasl(SaslResponse(response=scram.final(client.expect(SaslChallenge).challenge)))
    outcome = client.expect(SaslOutcome)
    assert outcome.code == 1 and not outcome.additional_data
    assert client.server.closed and client.server.principal is None
    assert system.broker.attributes()["loginFailures"] == 1


def test_1_0_a_second_sasl_init_instead_of_a_response_ends_the_connection(
        host: ProviderHost) -> None:
    client = Client10(host)
    scram = ScramClient("SCRAM-SHA-256", "guest", "guest")
    client.sasl(SaslInit(mechanism="SCRAM-SHA-256", initial_response=scram.first()))
    client.expect(SaslChallenge)
    client.sasl(SaslInit(mechanism="SCRAM-SHA-256", initial_response=scram.first()))
    assert "amqp:sasl-init:list where sasl-response was expected" in client.server.close_reason
    assert client.server.state.name in ("CLOSE_SENT", "CLOSED")
    assert client.server.principal is None


def test_1_0_malformed_client_first_gets_an_auth_outcome(host: ProviderHost) -> None:
    client = Client10(host)
    client.sasl(SaslInit(mechanism="SCRAM-SHA-256", initial_response=b"n,,r=abc"))
    assert client.expect(SaslOutcome).code == 1
    assert "expected attributes n,r" in client.server.close_reason
