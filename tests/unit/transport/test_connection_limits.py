"""Connection limits per port and per user, and what each protocol's client hears when refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker import errors
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp1_0.definitions import Close
from broker.transport.connection_limits import ConnectionLimitReached, ConnectionLimits, per_user_limit
from broker.transport.handshake import Notices

from ..protocol.amqp1_0.engine_client import Client10, Host10
from ..protocol.harness import Client, FakeHost


def _limits() -> ConnectionLimits:
    now = [0.0]
    return ConnectionLimits(notices=Notices(logging.getLogger("deltamq"), clock=lambda: now[0],
                                            call_later=lambda delay, callback: None))


def test_a_port_refuses_past_max_open_connections_and_takes_one_again_after_a_close() -> None:
    limits = _limits()
    first, second = object(), object()
    for connection in (first, second):
        limits.admit("amqp", 2, "guest", -1)
        limits.opened(connection, "amqp", "guest")
    with pytest.raises(ConnectionLimitReached, match="port 'amqp' has reached its maxOpenConnections of 2"):
        limits.admit("amqp", 2, "guest", -1)
    limits.admit("other", 2, "guest", -1)               # another port has its own count
    limits.closed(first)
    limits.closed(first)                                 # twice: counted once
    limits.admit("amqp", 2, "guest", -1)
    assert limits.refused == {"amqp": 1} and limits.refused_total == 1


def test_a_user_is_limited_across_ports_and_others_are_not() -> None:
    limits = _limits()
    limits.admit("a", -1, "alice", 1)
    limits.opened(object(), "a", "alice")
    with pytest.raises(ConnectionLimitReached, match="user 'alice' has reached the connection limit per"
                                                     " user of 1"):
        limits.admit("b", -1, "alice", 1)
    limits.admit("b", -1, "bob", 1)
    assert limits.by_user == {"alice": 1}


def test_the_refusal_is_530_for_0_9_1_and_resource_limit_exceeded_for_1_0() -> None:
    from broker.protocol.amqp1_0.conditions import condition_of

    refusal = ConnectionLimitReached("x")
    assert (refusal.reply_code, refusal.hard) == (530, True)
    assert condition_of(refusal) == "amqp:resource-limit-exceeded"


def test_refusals_are_logged_once_then_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    limits = _limits()
    limits.opened(object(), "amqp", "guest")
    with caplog.at_level(logging.WARNING, "deltamq"):
        for _ in range(3):
            with pytest.raises(ConnectionLimitReached):
                limits.admit("amqp", 1, "guest", -1)
        assert len(caplog.records) == 1
        limits.notices.flush()
    assert "2 more connections refused" in caplog.records[-1].getMessage()


@pytest.mark.parametrize("text,value", [("-1", -1), ("0", 0), ("25", 25)])
def test_the_per_user_limit_is_read_from_context(text: str, value: int) -> None:
    assert per_user_limit(lambda ref: text) == value


@pytest.mark.parametrize("text", ["many", "-2", "1.5"])
def test_a_per_user_limit_that_is_no_count_is_refused(text: str) -> None:
    with pytest.raises(errors.ConfigurationError, match="deltamq.connection_limit_per_user"):
        per_user_limit(lambda ref: text)


class _Full:
    """Open refused as the broker's host refuses it when a limit is reached."""

    def open_virtual_host(self, name: str, principal: Any) -> Any:
        raise ConnectionLimitReached("connection refused: port 'amqp' has reached its"
                                     " maxOpenConnections of 1")


class FullHost(_Full, FakeHost):
    pass


class FullHost10(_Full, Host10):
    pass


def test_a_0_9_1_client_over_the_limit_gets_connection_close_530() -> None:
    client = Client(FullHost())
    client.expect(m.ConnectionStart)
    client.send(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                       response=b"\x00guest\x00guest", locale="en_US"))
    tune = client.expect(m.ConnectionTune)
    client.send(0, m.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0))
    client.send(0, m.ConnectionOpen(virtual_host="/"))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 530
    assert close.reply_text == "NOT_ALLOWED - connection refused: port 'amqp' has reached its maxOpenConnections of 1"


def test_a_1_0_client_over_the_limit_gets_open_then_close_with_resource_limit_exceeded() -> None:
    client = Client10(FullHost10())
    client.handshake()                                   # spec 2.4.1: an open goes first
    close = client.expect(Close)
    assert close.error.condition == "amqp:resource-limit-exceeded"
    assert "maxOpenConnections of 1" in close.error.description
