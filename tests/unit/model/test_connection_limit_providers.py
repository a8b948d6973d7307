"""Connection limit providers as configured objects, and their rules refusing connections in the
engines (0-9-1: connection.close 530; 1.0: amqp:resource-limit-exceeded), counted as refusals."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from broker.errors import ConfigurationError
from broker.model.operations import declared_operations
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp1_0.definitions import Close
from broker.transport.connection_limits import ConnectionLimitReached, ConnectionLimits
from broker.transport.handshake import Notices
from tests.unit.model.conftest import Loader, minimal_config
from tests.unit.protocol.amqp1_0.engine_client import Client10, Host10
from tests.unit.protocol.harness import Client, FakeHost


def invoke(obj: Any, name: str, **arguments: Any) -> Any:
    return declared_operations(type(obj))[name].invoke(obj, arguments)


def outside_the_loop(limits: ConnectionLimits) -> ConnectionLimits:
    """Refusal notices timed by a fixed clock (the broker's use the event loop's)."""
    limits.notices = Notices(logging.getLogger("deltamq"), clock=lambda: 0.0,
                             call_later=lambda delay, callback: None)
    return limits


def test_a_rules_based_provider_limits_connections_and_refusals_are_counted(load: Loader) -> None:
    broker = load(minimal_config(brokerconnectionlimitproviders=[{
        "name": "limits", "type": "RulesBased",
        "rules": ["CLT alice connection_limit=1",
                  {"identity": "bob", "port": "amqp", "frequencyLimit": 1, "frequencyPeriod": 60000}],
    }])).broker
    limits = outside_the_loop(broker.connection_limits)
    provider = broker.children("BrokerConnectionLimitProvider")[0]
    assert provider.rule_count == 2
    limits.admit("amqp", -1, "alice", -1)
    limits.opened("a1", "amqp", "alice")
    with pytest.raises(ConnectionLimitReached, match="connection limit of 1"):
        limits.admit("amqp", -1, "alice", -1)
    limits.admit("amqp", -1, "bob", -1)
    limits.opened("b1", "amqp", "bob")
    limits.closed("b1")
    with pytest.raises(ConnectionLimitReached, match="frequency limit of 1 per 60 s"):
        limits.admit("amqp", -1, "bob", -1)
    assert broker.connections_refused == 2
    assert broker.children("Port")[0].connections_refused == 2
    invoke(provider, "resetCounters")
    limits.admit("amqp", -1, "bob", -1)
    assert "CLT bob port=amqp connection_frequency_limit=1/60S" in invoke(provider, "extractRules")
    invoke(provider, "clearRules")
    limits.admit("amqp", -1, "alice", -1)              # no rule: no limit
    provider.delete()
    assert limits.rules.rules == []


def test_a_group_rule_applies_to_the_groups_members(load: Loader) -> None:
    broker = load(minimal_config(brokerconnectionlimitproviders=[{
        "name": "limits", "type": "RulesBased", "rules": ["CLT interns BLOCK"]}])).broker
    outside_the_loop(broker.connection_limits)
    with pytest.raises(ConnectionLimitReached, match="blocked"):
        broker.connection_limits.admit("amqp", -1, "ivan", -1, frozenset({"interns"}))
    broker.connection_limits.admit("amqp", -1, "ivan", -1)


def test_a_file_provider_reads_its_file_and_reloads_it(load: Loader, tmp_path: Path) -> None:
    path = tmp_path / "data" / "limits.clt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("CONFIG default_frequency_period=0\nCLT alice connection_frequency_limit=1\n"
                    "CLT bob BLOCK\n")
    broker = load(minimal_config(brokerconnectionlimitproviders=[{
        "name": "file", "type": "ConnectionLimitFile", "path": str(path)}])).broker
    limits = outside_the_loop(broker.connection_limits)
    limits.opened("a1", "amqp", "alice")
    limits.admit("amqp", -1, "alice", -1)      # a period of 0: frequency limits are off
    with pytest.raises(ConnectionLimitReached):
        limits.admit("amqp", -1, "bob", -1)
    provider = broker.children("BrokerConnectionLimitProvider")[0]
    path.write_text("CLT bob connection_limit=5\nCLT bob speed=1\n")
    with pytest.raises(ConfigurationError, match=r"limits\.clt: .* at line 2"):
        invoke(provider, "reload")
    with pytest.raises(ConnectionLimitReached):
        limits.admit("amqp", -1, "bob", -1)     # unchanged
    path.write_text("CLT bob connection_limit=5\n")
    invoke(provider, "reload")
    limits.admit("amqp", -1, "bob", -1)


def test_each_provider_limits_on_its_own(load: Loader) -> None:
    broker = load(minimal_config(brokerconnectionlimitproviders=[
        {"name": "everyone", "type": "RulesBased", "rules": ["CLT ALL connection_limit=1"]},
        {"name": "alice", "type": "RulesBased", "rules": ["CLT alice connection_limit=5"]}])).broker
    limits = outside_the_loop(broker.connection_limits)
    limits.admit("amqp", -1, "alice", -1)
    limits.opened("a1", "amqp", "alice")
    with pytest.raises(ConnectionLimitReached, match="connection limit of 1"):
        limits.admit("amqp", -1, "alice", -1)     # the other provider's rule for alice is laxer
    broker.children("BrokerConnectionLimitProvider")[0].delete()
    limits.admit("amqp", -1, "alice", -1)


def test_a_negative_default_period_turns_every_frequency_limit_off(load: Loader) -> None:
    broker = load(minimal_config(brokerconnectionlimitproviders=[{
        "name": "limits", "type": "RulesBased", "defaultFrequencyPeriod": -1,
        "rules": ["CLT alice connection_frequency_limit=1/1h",
                  "CLT bob connection_frequency_limit=1/1h connection_limit=3"]}])).broker
    limits = outside_the_loop(broker.connection_limits)
    for user in ("alice", "bob"):
        limits.opened(f"{user}1", "amqp", user)
        limits.admit("amqp", -1, user, -1)        # a period of its own, but off (Broker-J)
    assert [(r.identity, r.count, r.frequency) for r in limits.rules.rules] == [("bob", 3, None)]


def test_a_bad_rule_refuses_the_provider(load: Loader) -> None:
    with pytest.raises(ConfigurationError, match="rule 1"):
        load(minimal_config(brokerconnectionlimitproviders=[{
            "name": "limits", "type": "RulesBased", "rules": ["CLT alice connection_limit=many"]}]))


# -- in the engines -----------------------------------------------------------------------

class _Limited:
    """Opens as the broker's host does: the connection limits admit, then count the connection."""

    limits: ConnectionLimits

    def open_virtual_host(self, name: str, principal: Any) -> Any:
        self.limits.admit("amqp", -1, principal.name, -1)
        return super().open_virtual_host(name, principal)  # type: ignore[misc]

    def connection_opened(self, connection: Any) -> None:
        self.limits.opened(connection, "amqp", connection.principal.name)
        super().connection_opened(connection)  # type: ignore[misc]

    def connection_closed(self, connection: Any) -> None:
        self.limits.closed(connection)
        super().connection_closed(connection)  # type: ignore[misc]


class LimitedHost(_Limited, FakeHost):
    pass


class LimitedHost10(_Limited, Host10):
    pass


def _with_rules(host: _Limited, text: str) -> _Limited:
    from broker.security.connection_limit_rules import parse

    host.limits = outside_the_loop(ConnectionLimits())
    host.limits.rules.rules = parse(text).rules
    return host


def test_0_9_1_past_the_frequency_limit_is_closed_with_530() -> None:
    host = _with_rules(LimitedHost(), "CLT guest connection_frequency_limit=2/1m")
    for _ in range(2):
        client = Client(host)                                 # type: ignore[arg-type]
        client.handshake()
        client.send(0, m.ConnectionClose(reply_code=200))
    refused = Client(host)                                    # type: ignore[arg-type]
    refused.open_connection()
    close = refused.expect(m.ConnectionClose, 0)
    assert close.reply_code == 530 and "frequency limit of 2 per 60 s" in close.reply_text
    assert host.limits.refused_total == 1


def test_1_0_past_the_count_limit_is_closed_with_resource_limit_exceeded() -> None:
    host = _with_rules(LimitedHost10(), "CLT guest connection_limit=1")
    first = Client10(host)                                    # type: ignore[arg-type]
    first.handshake()
    refused = Client10(host)                                  # type: ignore[arg-type]
    refused.handshake()
    close = refused.expect(Close)
    assert close.error.condition == "amqp:resource-limit-exceeded"
    assert "connection limit of 1" in close.error.description
    assert host.limits.refused_total == 1


# -- every close path stops counting (a connection left counted would lock its user out) ----

class _Bug(RuntimeError):
    pass


def _raise(*args: object, **kwargs: object) -> None:
    raise _Bug("injected")


def test_0_9_1_a_connection_whose_close_fails_too_stops_counting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.protocol.amqp0_9_1.channel import Channel

    host = _with_rules(LimitedHost(), "CLT guest connection_limit=1")
    victim = Client(host)                                     # type: ignore[arg-type]
    victim.handshake()
    monkeypatch.setattr(Channel, "_basic_qos", _raise)       # a bug in a handler...
    monkeypatch.setattr(Channel, "release_all", _raise)      # ...and in the teardown it causes
    victim.open_channel(2)
    victim.send(2, m.BasicQos(prefetch_count=1))
    assert victim.server.closed
    monkeypatch.undo()
    again = Client(host)                                      # type: ignore[arg-type]
    again.handshake()                                         # not refused: the limit is 1
    assert host.limits.refused_total == 0 and host.limits.by_user["guest"] == 1


def test_1_0_a_connection_whose_close_fails_too_stops_counting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.protocol.amqp1_0.session import Session

    host = _with_rules(LimitedHost10(), "CLT guest connection_limit=1")
    victim = Client10(host)                                   # type: ignore[arg-type]
    victim.open_senders()
    monkeypatch.setattr(Session, "_attach", _raise)           # a bug in a handler...
    monkeypatch.setattr(Session, "release_all", _raise)       # ...and in the teardown it causes
    victim.attach_sender("q")
    assert victim.server.closed
    monkeypatch.undo()
    again = Client10(host)                                    # type: ignore[arg-type]
    assert again.handshake().container_id                     # opened: not refused
    assert not any(isinstance(value, Close) for value in again.values())
    assert host.limits.refused_total == 0 and host.limits.by_user["guest"] == 1
