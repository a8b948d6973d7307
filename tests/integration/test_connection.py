"""Connection class (0-9-1 §1.4.2): login, virtual hosts, tuning, heartbeats,
large content, and the protocol header; driven with pika, py-amqp and a bare socket."""

from __future__ import annotations

import time

import amqp
import pika
import pika.exceptions
import pytest
from pamqp import commands
from pamqp import body as pbody
from pamqp import header as pheader
from pamqp import heartbeat as pheartbeat

from .support import (FRAME_BODY, FRAME_HEADER, FRAME_METHOD, FRAME_OVERHEAD,
                      PROTOCOL_HEADER_0_9_1, BrokerEndpoint, assert_closed_with, pika_reply, unique)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]

CAPABILITIES = ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                "consumer_cancel_notify", "connection.blocked", "authentication_failure_close",
                "per_consumer_qos")


def _roundtrip_pika(conn: pika.BlockingConnection, body: bytes = b"ping") -> None:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, body)
    method, _, got = ch.basic_get(q, auto_ack=True)
    assert method is not None and got == body
    ch.close()


# -- login ---------------------------------------------------------------------

def test_plain_login_with_pika_and_server_capabilities(broker: BrokerEndpoint) -> None:
    with broker.pika() as conn:
        props = conn._impl.server_properties
        caps = props["capabilities"]
        missing = [c for c in CAPABILITIES if caps.get(c) is not True]
        assert not missing, f"capabilities not advertised as true: {missing} in {caps}"
        assert props.get("product"), "server-properties should name the product"
        assert conn.publisher_confirms_supported
        assert conn.basic_nack_supported
        assert conn.consumer_cancel_notify_supported
        assert conn.exchange_exchange_bindings_supported
        _roundtrip_pika(conn)


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_py_amqp_login_mechanisms(broker: BrokerEndpoint, mechanism: str) -> None:
    conn = broker.py_amqp(login_method=mechanism)
    try:
        assert conn.connected
        assert conn.server_capabilities.get("connection.blocked") is True
        ch = conn.channel()
        q, _, _ = ch.queue_declare("", exclusive=True)
        ch.basic_publish(amqp.Message(b"via " + mechanism.encode()), exchange="", routing_key=q)
        msg = ch.basic_get(q, no_ack=True)
        assert msg is not None and msg.body == b"via " + mechanism.encode()
    finally:
        conn.close()


def test_wrong_password_pika_gets_access_refused(broker: BrokerEndpoint) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        broker.pika(credentials=pika.PlainCredentials(broker.user, "not-the-password"))
    # authentication_failure_close: a connection.close with 403, not a bare hang-up
    code, text = pika_reply(info.value)
    assert code == 403 and "ACCESS_REFUSED" in text


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_wrong_password_py_amqp_gets_access_refused(broker: BrokerEndpoint,
                                                     mechanism: str) -> None:
    with pytest.raises(amqp.exceptions.AccessRefused) as info:
        broker.py_amqp(password="not-the-password", login_method=mechanism)
    assert info.value.reply_code == 403
    assert "ACCESS_REFUSED" in info.value.reply_text


def test_unknown_user_gets_access_refused(broker: BrokerEndpoint) -> None:
    with pytest.raises(amqp.exceptions.AccessRefused) as info:
        broker.py_amqp(userid=unique("nobody"), password="x", login_method="PLAIN")
    assert info.value.reply_code == 403


def test_unknown_vhost_is_not_allowed(broker: BrokerEndpoint) -> None:
    vhost = unique("vhost")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        broker.pika(virtual_host=vhost)
    code, text = pika_reply(info.value)
    assert code == 530 and "NOT_ALLOWED" in text
    with pytest.raises(amqp.exceptions.NotAllowed) as info2:
        broker.py_amqp(virtual_host=vhost, login_method="PLAIN")
    assert info2.value.reply_code == 530
    assert vhost in info2.value.reply_text


def test_mechanism_not_offered_is_refused(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.send(PROTOCOL_HEADER_0_9_1)
        start = raw.expect(commands.Connection.Start)
        mechanisms = start.mechanisms.split()
        assert "PLAIN" in mechanisms and "AMQPLAIN" in mechanisms
        assert (start.version_major, start.version_minor) == (0, 9)
        raw.send_method(0, commands.Connection.StartOk(mechanism="NO-SUCH-MECH", response="x"))
        # the connection never opens: RabbitMQ just hangs up, a close (403) is also fine
        close = raw.wait_connection_close()
        assert close is None or close.reply_code == 403
        assert raw.read_until_eof() == b""


def test_slash_vhost_opens(broker: BrokerEndpoint) -> None:
    with broker.pika(virtual_host="/") as conn:
        _roundtrip_pika(conn)


# -- tuning ----------------------------------------------------------------------

def test_tune_proposes_sane_limits(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        tune = raw.handshake(broker)
        # 0-9-1 §4.2.1: frame-min-size is 4096; channel-max 0 means "no limit"
        assert tune.frame_max == 0 or tune.frame_max >= 4096
        assert tune.channel_max == 0 or tune.channel_max >= 64
        raw.open_channel(1)
        raw.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        raw.expect(commands.Connection.CloseOk)


def test_channel_max_negotiation(broker: BrokerEndpoint) -> None:
    with broker.pika(channel_max=4) as conn:
        assert conn._impl.params.channel_max == 4
        channels = [conn.channel() for _ in range(4)]
        assert all(ch.is_open for ch in channels)
        with pytest.raises(pika.exceptions.NoFreeChannels):
            conn.channel()


def test_channel_beyond_negotiated_channel_max_closes_connection(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker, channel_max=2)
        raw.open_channel(1)
        raw.open_channel(2)
        raw.send_method(3, commands.Channel.Open())
        close = raw.wait_connection_close()
        assert_closed_with(close, 530, "NOT_ALLOWED")


def test_frame_max_negotiation_and_large_message(broker: BrokerEndpoint) -> None:
    with broker.pika(frame_max=4096) as conn:
        assert conn._impl.params.frame_max == 4096
        body = bytes(range(256)) * 4096  # 1 MiB → ~257 body frames each way
        _roundtrip_pika(conn, body)


def test_broker_splits_content_at_negotiated_frame_max(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker, frame_max=4096)
        raw.open_channel(1)
        q = unique("q.framemax")
        raw.send_method(1, commands.Queue.Declare(queue=q, auto_delete=True))
        raw.expect(commands.Queue.DeclareOk)
        body = bytes(i % 251 for i in range(20000))
        raw.send_method(1, commands.Basic.Publish(exchange="", routing_key=q))
        raw.send_content(1, body, commands.Basic.Properties(content_type="application/octet-stream"))
        raw.send_method(1, commands.Basic.Get(queue=q, no_ack=True))
        frame = raw.read_frame_raw()
        assert frame is not None and frame[0] == FRAME_METHOD
        header = raw.read_frame_raw()
        assert header is not None and header[0] == FRAME_HEADER
        got = b""
        while len(got) < len(body):
            f = raw.read_frame_raw()
            assert f is not None and f[0] == FRAME_BODY
            assert len(f[2]) + FRAME_OVERHEAD <= 4096, f"body frame of {len(f[2])} bytes"
            got += f[2]
        assert got == body


@pytest.mark.parametrize("size", [1 << 20, 5 << 20], ids=["1MiB", "5MiB"])
def test_large_message_roundtrip(broker: BrokerEndpoint, size: int) -> None:
    body = (bytes(range(256)) * (size // 256 + 1))[:size]
    with broker.pika() as conn:
        ch = conn.channel()
        q = ch.queue_declare(unique("q.large"), auto_delete=True).method.queue
        props = pika.BasicProperties(headers={"size": size}, message_id="big")
        ch.basic_publish("", q, body, props)
        for method, p, got in ch.consume(q, auto_ack=True, inactivity_timeout=15):
            assert method is not None, "large message not delivered"
            assert len(got) == size and got == body
            assert p.headers == {"size": size} and p.message_id == "big"
            break
        ch.cancel()


def test_frame_larger_than_frame_max_is_frame_error(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker, frame_max=4096)
        raw.open_channel(1)
        # a basic.publish method frame padded far past the negotiated 4096
        raw.send_frame(FRAME_METHOD, 1, b"\x00\x3c\x00\x28" + b"\x00" * 5000)
        close = raw.wait_connection_close()
        assert_closed_with(close, 501, "FRAME_ERROR")
        assert raw.read_until_eof() == b""


# -- heartbeats -------------------------------------------------------------------

@pytest.mark.timeout(30, func_only=True)
def test_heartbeat_keeps_idle_pika_connection_open(broker: BrokerEndpoint) -> None:
    with broker.pika(heartbeat=2) as conn:
        assert conn._impl.params.heartbeat == 2
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:  # idle, but pika answers heartbeats here
            conn.process_data_events(time_limit=0.5)
        assert conn.is_open
        _roundtrip_pika(conn)


def test_broker_sends_heartbeats_and_drops_silent_peer(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker, heartbeat=1)
        start = time.monotonic()
        beats: list[float] = []
        # we send nothing at all: the broker must beat, then give up on us
        while True:
            try:
                got = raw.read_frame(timeout=15)
            except (ConnectionResetError, TimeoutError):
                got = None
            if got is None:
                break
            if isinstance(got[1], pheartbeat.Heartbeat):
                beats.append(time.monotonic() - start)
            elif isinstance(got[1], commands.Connection.Close):
                break
        closed_after = time.monotonic() - start
        assert len(beats) >= 2, f"heartbeats seen at {beats}"
        # 0-9-1 §4.2.7: close after two or more intervals without traffic
        assert 1.5 <= closed_after <= 10, f"silent peer dropped after {closed_after:.1f}s"


# -- protocol header ------------------------------------------------------------

@pytest.mark.parametrize("greeting", [b"HELLO!!!", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                                      b"AMQP\x00\x00\x09\x07"],
                         ids=["garbage", "http", "unknown-0-9-x"])
def test_bad_protocol_header_answered_with_supported_header(broker: BrokerEndpoint,
                                                            greeting: bytes) -> None:
    with broker.raw() as raw:
        raw.send(greeting)
        assert raw.read_until_eof() == PROTOCOL_HEADER_0_9_1


@pytest.mark.parametrize("header,version,open_ok_args", [
    (b"AMQP\x01\x01\x08\x00", (8, 0), b""),                  # 0-8: channel.open-ok is empty
    (b"AMQP\x01\x01\x00\x09", (0, 9), b"\x00\x00\x00\x00"),  # 0-9: a long string
], ids=["0-8", "0-9"])
def test_older_protocol_versions(broker: BrokerEndpoint, header: bytes, version: tuple[int, int],
                                 open_ok_args: bytes) -> None:
    with broker.raw() as raw:
        raw.handshake(broker, protocol_header=header)
        assert (raw.start.version_major, raw.start.version_minor) == version
        raw.send_method(1, commands.Channel.Open())
        frame = raw.read_frame_raw()
        assert frame is not None and frame[2] == b"\x00\x14\x00\x0b" + open_ok_args
        # queue.declare, basic.publish, basic.get and content frames are laid out alike
        raw.send_method(1, commands.Queue.Declare(queue="", exclusive=True))
        q = raw.expect(commands.Queue.DeclareOk).queue
        raw.send_method(1, commands.Basic.Publish(exchange="", routing_key=q))
        raw.send_content(1, b"old but gold", commands.Basic.Properties(message_id="v"))
        raw.send_method(1, commands.Basic.Get(queue=q, no_ack=True))
        get_ok = raw.expect(commands.Basic.GetOk)
        assert (get_ok.routing_key, get_ok.message_count) == (q, 0)
        header_frame = raw.expect(pheader.ContentHeader)
        assert header_frame.body_size == 12 and header_frame.properties.message_id == "v"
        assert raw.expect(pbody.ContentBody).value == b"old but gold"


def test_clean_close_then_reconnect(broker: BrokerEndpoint) -> None:
    for _ in range(3):
        conn = broker.pika()
        _roundtrip_pika(conn)
        conn.close()
        assert conn.is_closed
