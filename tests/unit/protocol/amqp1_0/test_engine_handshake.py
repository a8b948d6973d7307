"""The AMQP 1.0 engine's handshake in memory: SASL, headers, open, close, bad frames."""

from __future__ import annotations

import struct

from broker.protocol.amqp1_0.definitions import (Begin, Close, Open, SaslInit, SaslMechanisms, SaslOutcome,
                                                 SaslResponse)
from broker.protocol.amqp1_0.framing import AMQP_HEADER, SASL_HEADER, TYPE_SASL, encode_frame
from broker.protocol.engine import Closing, Finished, IdleTiming, Opened, WorkRequested

from .engine_client import Client10, Host10


def test_sasl_offers_the_mechanisms_1_0_speaks_then_opens() -> None:
    client = Client10()
    assert client.received[0] == ("header", SASL_HEADER, b"")
    mechanisms = client.expect(SaslMechanisms)
    assert list(mechanisms.sasl_server_mechanisms) == ["PLAIN"]      # AMQPLAIN is 0-9-1's
    client.sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"))
    assert any(isinstance(e, WorkRequested) for e in client.events)   # hashing off the loop
    assert client.expect(SaslOutcome).code == 0
    client.raw(AMQP_HEADER)
    assert client.received[-1] == ("header", AMQP_HEADER, b"")
    client.send(Open(container_id="c1", hostname="no-such-vhost", max_frame_size=4096, channel_max=9))
    opened = client.expect(Open)
    assert opened.max_frame_size == client.host.frame_max
    assert opened.channel_max == 9
    assert client.server.max_frame_size == 4096
    assert client.server.virtual_host_name == "default"      # an unknown hostname: the default
    assert any(isinstance(e, Opened) for e in client.events)
    assert client.host.opened == [client.server]


def test_sasl_init_header_and_open_in_one_read() -> None:
    client = Client10()
    client.take()
    client.raw(encode_frame(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"),
                            frame_type=TYPE_SASL) + AMQP_HEADER + encode_frame(Open(container_id="c"))
               + encode_frame(Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10)))
    kinds = [type(v).__name__ if not isinstance(v, bytes) else v for _c, v, _p in client.take()]
    assert kinds == ["SaslOutcome", AMQP_HEADER, "Open", "Begin"]


def test_wrong_password_gets_an_auth_outcome_and_the_connection_ends() -> None:
    client = Client10()
    client.sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00nope"))
    assert client.expect(SaslOutcome).code == 1
    assert Finished(linger=False) in client.events
    assert client.host.opened == []


def test_mechanism_not_offered_is_refused() -> None:
    client = Client10()
    client.sasl(SaslInit(mechanism="ANONYMOUS"))
    assert client.expect(SaslOutcome).code == 1
    assert client.server.closed


def test_malformed_plain_response_is_refused() -> None:
    client = Client10()
    client.sasl(SaslInit(mechanism="PLAIN", initial_response=b"no-nuls"))
    assert client.expect(SaslOutcome).code == 1


def test_a_sasl_response_before_init_ends_the_connection() -> None:
    client = Client10()
    client.sasl(SaslResponse(response=b"x"))
    assert client.server.closed


def test_plain_header_where_sasl_is_required_gets_the_sasl_header() -> None:
    client = Client10(sasl=False)
    assert client.take() == [("header", SASL_HEADER, b"")]
    assert client.server.closed and Finished(linger=False) in client.events


def test_plain_header_is_anonymous_where_the_port_allows_it() -> None:
    host = Host10()
    host.anonymous = True
    client = Client10(host, sasl=False)
    client.send(Open(container_id="anon"))
    assert client.values()[0] == AMQP_HEADER
    assert client.server.principal.name == "anonymous"


def test_idle_time_out_becomes_idle_timing() -> None:
    host = Host10()
    host.idle_timeout = 30
    client = Client10(host)
    client.handshake(idle_time_out=10_000)
    timing = next(e for e in client.events if isinstance(e, IdleTiming))
    assert timing.send_after == 5.0
    assert timing.expire_after == 60.0
    client.server.keepalive()
    client._read()
    assert client.take()[-1] == (0, None, b"")                 # an empty frame


def test_open_with_max_frame_size_below_512_is_refused() -> None:
    client = Client10()
    client.sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"))
    client.raw(AMQP_HEADER)
    client.send(Open(container_id="c", max_frame_size=100))
    close = client.expect(Close)
    assert close.error.condition == "amqp:invalid-field"


def test_malformed_performative_closes_with_decode_error() -> None:
    client = Client10()
    client.handshake()
    client.take()
    body = b"\x00\x53\x11\xc0\x03\x01\x99"        # begin, a list whose one field is no valid type
    client.raw(struct.pack(">IBBH", 8 + len(body), 2, 0, 0) + body)
    close = client.expect(Close)
    assert close.error.condition == "amqp:decode-error"
    assert Closing() in client.events
    client.send(Close())
    assert client.server.closed


def test_frame_larger_than_512_before_open_is_a_framing_error() -> None:
    client = Client10()
    client.sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"))
    client.raw(AMQP_HEADER)
    client.send(Open(container_id="x" * 600))
    close = client.expect(Close)
    assert close.error.condition == "amqp:connection:framing-error"
    assert client.server.closed                    # the stream cannot be followed: no close awaited


def test_begin_before_open_is_an_illegal_state() -> None:
    client = Client10()
    client.sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"))
    client.raw(AMQP_HEADER)
    client.send(Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=1))
    assert client.expect(Open)                      # an open goes first, then the close
    assert client.expect(Close).error.condition == "amqp:illegal-state"


def test_close_is_answered_and_the_peer_closes_the_socket() -> None:
    client = Client10()
    client.handshake()
    client.send(Close())
    assert isinstance(client.expect(Close), Close)
    assert Finished(linger=True) in client.events
    assert client.host.opened == []


def test_channel_beyond_channel_max_is_refused() -> None:
    client = Client10()
    client.handshake(channel_max=1)
    client.send(Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=1), channel=5)
    assert client.expect(Close).error.condition == "amqp:connection:framing-error"


def test_the_broker_closing_the_connection_sends_connection_forced() -> None:
    from broker.errors import ConnectionForced

    client = Client10()
    client.handshake()
    client.server.close(ConnectionForced("Closed via management"))
    client._read()
    close = client.expect(Close)
    assert close.error.condition == "amqp:connection:forced"
    assert "Closed via management" in close.error.description
    assert Closing() in client.events and client.host.opened == []
    client.send(Close())
    assert client.server.closed
