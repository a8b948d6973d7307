"""Broker-J's connection limit rules and ACL ``from_hostname``, against a broker started as a user
starts it and configured over REST: pika is refused with 530 past a frequency limit (counted in
the port's and the broker's connectionsRefused), and a from_hostname rule matches 127.0.0.1 once its
name (localhost) has been looked up."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest
from pika.exceptions import AMQPConnectionError, ProbableAccessDeniedError

from tests.mgmt.conftest import wait_for_http
from tests.waiting import wait_until

from .conftest import DeltaMQProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("connection limit rules are DeltaMQ's: it starts a broker of its own",
                allow_module_level=True)

USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret",
         "dave": "dave-secret"}


def rest(proc: DeltaMQProcess) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{proc.http_port}/api/latest/",
                        auth=("guest", "guest"), timeout=30)


@pytest.fixture(scope="module")
def proc() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as process:
        wait_for_http(process)
        with rest(process) as api:
            for name, password in USERS.items():
                api.put(f"user/passwordFile/{name}", json={"password": password}
                        ).raise_for_status()
            api.put("brokerconnectionlimitprovider/limits", json={
                "type": "RulesBased",
                "rules": ["CLT alice connection_frequency_limit=2/1h", "CLT bob connection_limit=1"],
            }).raise_for_status()
        yield process


def connect(proc: DeltaMQProcess, user: str, password: str | None = None) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", proc.amqp_port, credentials=pika.PlainCredentials(user, password or USERS[user]),
        connection_attempts=1, socket_timeout=10))


def statistics(proc: DeltaMQProcess, path: str) -> dict[str, Any]:
    with rest(proc) as api:
        answer = api.get(path)
        answer.raise_for_status()
        found = answer.json()
        return dict((found[0] if isinstance(found, list) else found)["statistics"])


def test_pika_past_the_frequency_limit_is_refused_with_530_and_counted(proc: DeltaMQProcess) -> None:
    refused_before = statistics(proc, "broker")["connectionsRefused"]
    for _ in range(2):
        connect(proc, "alice").close()               # closing does not give the chance back
    with pytest.raises(ProbableAccessDeniedError) as refused:       # pika's name for a close at open
        connect(proc, "alice")
    assert "(530) \"NOT_ALLOWED - connection refused: user 'alice' has reached its connection" \
           " frequency limit of 2 per 3600 s on port 'AMQP'" in str(refused.value)
    assert statistics(proc, "broker")["connectionsRefused"] == refused_before + 1
    assert statistics(proc, "port/AMQP")["connectionsRefused"] >= 1
    connect(proc, "bob").close()                     # other users keep their own limits


def test_pika_past_the_count_limit_is_refused_until_one_closes(proc: DeltaMQProcess) -> None:
    first = connect(proc, "bob")
    with pytest.raises(ProbableAccessDeniedError) as refused:
        connect(proc, "bob")
    assert "(530)" in str(refused.value) and "connection limit of 1" in str(refused.value)
    first.close()

    def bob_gets_in() -> bool:                  # once the broker has seen the close
        try:
            connect(proc, "bob").close()
        except ProbableAccessDeniedError:
            return False
        return True

    wait_until(bob_gets_in, timeout=10)


def _localhost_named() -> bool:
    try:
        return socket.gethostbyaddr("127.0.0.1")[0] == "localhost"
    except OSError:
        return False


@pytest.mark.skipif(not _localhost_named(), reason="127.0.0.1 is not named localhost here")
def test_from_hostname_matches_once_the_name_is_known(proc: DeltaMQProcess) -> None:
    with rest(proc) as api:
        api.put("accesscontrolprovider/hostnames", json={"type": "RuleBased", "rules": [
            'ACL ALLOW carol ACCESS VIRTUALHOST from_hostname="local.*"',
            'ACL ALLOW dave ACCESS VIRTUALHOST from_hostname="elsewhere\\.example"',
            "ACL ALLOW guest ALL ALL",
            "ACL ALLOW ALL ACCESS MANAGEMENT",
            "ACL DENY-LOG ALL ALL ALL"]}).raise_for_status()
    try:
        # the first connections start the look-up; until it answers the rule does not match
        def carol_gets_in() -> bool:
            try:
                connect(proc, "carol").close()
            except AMQPConnectionError:          # refused: ACCESS VIRTUALHOST denied
                return False
            return True

        wait_until(carol_gets_in, timeout=30)
        with pytest.raises(AMQPConnectionError):
            connect(proc, "dave")                  # localhost is not elsewhere.example
    finally:
        with rest(proc) as api:
            api.delete("accesscontrolprovider/hostnames").raise_for_status()
