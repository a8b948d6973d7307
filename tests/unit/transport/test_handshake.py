"""Handshake limits from the context, and the log lines of many closed connections."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from broker.errors import ConfigurationError
from broker.transport.handshake import HandshakeLimits, Notices, OpeningConnections


class Timers:
    """A clock the test moves, and the callbacks due by then."""

    def __init__(self) -> None:
        self.now = 0.0
        self.due: list[tuple[float, Callable[[], None]]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        self.due.append((self.now + delay, callback))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        ready = [c for t, c in self.due if t <= self.now]
        self.due = [(t, c) for t, c in self.due if t > self.now]
        for callback in ready:
            callback()


def _context(**values: str) -> Callable[[str], str]:
    defaults = {"deltamq.connection_open_timeout": "10",
                "deltamq.max_opening_connections_per_address": "100",
                "deltamq.connection_close_timeout": "30"}
    defaults.update({f"deltamq.{k}": v for k, v in values.items()})
    return lambda text: defaults[text[2:-1]]


def test_limits_come_from_the_context_variables() -> None:
    limits = HandshakeLimits.resolved(_context(connection_open_timeout="1.5",
                                               max_opening_connections_per_address="-1"))
    assert limits == HandshakeLimits(open_timeout=1.5, max_opening_per_address=-1,
                                     close_timeout=30.0)
    assert HandshakeLimits.resolved(_context()) == HandshakeLimits()


@pytest.mark.parametrize("variable,value", [
    ("connection_open_timeout", "0"), ("connection_open_timeout", "soon"),
    ("connection_close_timeout", "-1"), ("max_opening_connections_per_address", "0"),
    ("max_opening_connections_per_address", "2.5")])
def test_bad_limits_are_a_configuration_error_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=f"deltamq.{variable}"):
        HandshakeLimits.resolved(_context(**{variable: value}))


def test_closing_timeout_is_the_heartbeat_when_that_is_shorter() -> None:
    # RabbitMQ: the closing timeout is 30 s, or the heartbeat interval when shorter
    limits = HandshakeLimits(close_timeout=30)
    assert limits.closing_timeout(0) == 30 and limits.closing_timeout(60) == 30
    assert limits.closing_timeout(5) == 5


def test_twenty_thousand_timeouts_log_one_line_then_one_summary_per_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    timers = Timers()
    opening = OpeningConnections(notices=Notices(interval=30, clock=lambda: timers.now,
                                                 call_later=timers.call_later))
    limits = HandshakeLimits()
    with caplog.at_level(logging.INFO, logger="broker.transport.handshake"):
        for i in range(20000):
            opening.expired(f"10.0.{i % 5}.1" if i % 10 else "10.0.0.9", limits, "no protocol header")
        assert [r.getMessage() for r in caplog.records] == [
            "closing connection from 10.0.0.9: not opened within 10 s (no protocol header)"]
        timers.advance(29.9)
        assert len(caplog.records) == 1
        timers.advance(0.1)
        assert caplog.records[-1].getMessage() == (
            "19999 more connections closed: not opened within 10 s (from 10.0.1.1: 4000,"
            " 10.0.2.1: 4000, 10.0.3.1: 4000 and 3 more addresses)")
        opening.expired("10.0.0.1", limits, "awaiting connection.open")   # within the next interval
        timers.advance(30)
        assert caplog.records[-1].getMessage() == (
            "1 more connections closed: not opened within 10 s (from 10.0.0.1: 1)")
        timers.advance(60)                           # a quiet interval: the next is told alone
        opening.expired("10.0.0.2", limits, "awaiting connection.open")
    assert len(caplog.records) == 4 and "10.0.0.2" in caplog.records[-1].getMessage()
    assert opening.timed_out == 20002


def test_refusals_are_counted_and_summed_up_at_shutdown(caplog: pytest.LogCaptureFixture) -> None:
    timers = Timers()
    opening = OpeningConnections(notices=Notices(clock=lambda: timers.now,
                                                 call_later=timers.call_later))
    limits = HandshakeLimits(max_opening_per_address=2)
    with caplog.at_level(logging.WARNING, logger="broker.transport.handshake"):
        assert [opening.admit("10.1.1.1", limits) for _ in range(5)] == [True, True, False, False, False]
        assert opening.admit("10.1.1.2", limits)
        opening.done("10.1.1.1")
        assert opening.admit("10.1.1.1", limits)
        opening.notices.flush()
    assert opening.refused == 3 and opening.count == 3
    assert [r.getMessage() for r in caplog.records] == [
        "closing a new connection from 10.1.1.1: it already has 2 connections that have not"
        " finished opening (deltamq.max_opening_connections_per_address)",
        "2 more new connections closed at once: their address had 2 connections opening"
        " (from 10.1.1.1: 2)"]
