"""The idle-time-out of AMQP 1.0's open, both ways (spec 2.4.5), in the engine alone.

What the broker offers is the Broker's ``connection.idleTimeout`` (seconds; none by
default); what the client offers, the broker honours by beating at half of it.  The
transport's side (the timer, the close of a silent peer) is in tests/unit/transport.
"""

from __future__ import annotations

from broker.protocol.amqp1_0.connection import MIN_PEER_IDLE_TIME_OUT_MS
from broker.protocol.amqp1_0.definitions import Close
from broker.protocol.engine import Finished, IdleTiming

from .engine_client import Client10, Host10


def _client(idle_timeout: int) -> Client10:
    host = Host10()
    host.idle_timeout = idle_timeout
    return Client10(host)


def _timings(client: Client10) -> list[IdleTiming]:
    return [e for e in client.events if isinstance(e, IdleTiming)]


def test_by_default_the_open_offers_no_idle_time_out_and_nothing_is_timed() -> None:
    client = _client(0)
    assert Host10().idle_timeout == 0                     # the harness mirrors the broker's default
    opened = client.handshake()
    assert opened.idle_time_out is None
    assert _timings(client) == []                         # no beats, no expiry
    assert client.server.is_open


def test_an_offered_idle_time_out_is_in_the_open_and_a_silent_peer_expires_at_twice_it() -> None:
    client = _client(15)
    opened = client.handshake()
    assert opened.idle_time_out == 15_000
    [timing] = _timings(client)
    assert timing.send_after == 0                         # the client asked for no beats
    assert timing.expire_after == 30.0                    # the offer is half the threshold
    assert timing.interval == 15.0


def test_the_peers_idle_time_out_is_honoured_when_the_broker_offers_none() -> None:
    client = _client(0)
    opened = client.handshake(idle_time_out=4_000)
    assert opened.idle_time_out is None
    [timing] = _timings(client)
    assert (timing.interval, timing.send_after, timing.expire_after) == (4.0, 2.0, 0)
    client.take()
    client.server.keepalive()
    client._read()
    assert client.take() == [(0, None, b"")]              # the beat is an empty frame


def test_both_offers_apply_together() -> None:
    client = _client(20)
    assert client.handshake(idle_time_out=8_000).idle_time_out == 20_000
    [timing] = _timings(client)
    assert (timing.send_after, timing.expire_after) == (4.0, 40.0)


def test_an_idle_time_out_below_a_second_is_refused() -> None:
    client = _client(0)
    client.handshake(idle_time_out=MIN_PEER_IDLE_TIME_OUT_MS - 1)
    close = client.expect(Close)
    assert close.error.condition == "amqp:not-allowed"
    assert "idle-time-out 999 ms" in close.error.description
    assert _timings(client) == []
    assert client.server.closed


def test_an_idle_time_out_of_exactly_a_second_is_taken() -> None:
    client = _client(0)
    client.handshake(idle_time_out=MIN_PEER_IDLE_TIME_OUT_MS)
    assert client.server.is_open
    assert _timings(client)[0].send_after == 0.5


def test_an_expired_peer_gets_a_close_explaining_why_and_the_connection_finishes() -> None:
    client = _client(5)
    client.handshake()
    client.take()
    client.host.idle_timeout = 9                          # a later change: for later connections
    client.server.idle_expired(10.4)
    client._read()
    close = client.expect(Close)
    assert close.error.condition == "amqp:resource-limit-exceeded"
    assert close.error.description == "no frame received for 10 s (idle-time-out 5000 ms)"
    assert Finished(linger=False) in client.events
    assert client.server.closed


def test_expiry_before_the_open_writes_nothing() -> None:
    client = _client(5)
    client.take()
    client.server.idle_expired(10.0)
    client._read()
    assert client.take() == []
    assert not client.server.closed
