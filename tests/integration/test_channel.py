"""Channel class (0-9-1 §1.5): many channels, flow, and the rule that a channel
exception closes that channel only (§1.5.2.5), plus the connection exceptions for
frames on the wrong channel or in the wrong place (§4.2.3, §4.2.6)."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from pamqp import commands

from tests.waiting import wait_until

from .support import (FRAME_BODY, PROTOCOL_HEADER_0_9_1, BrokerEndpoint, assert_closed_with,
                      unique)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True)]


def test_open_and_close_many_channels(broker: BrokerEndpoint) -> None:
    with broker.pika() as conn:
        channels = [conn.channel() for _ in range(200)]
        numbers = {ch.channel_number for ch in channels}
        assert len(numbers) == 200
        q = conn.channel().queue_declare("", exclusive=True).method.queue
        for i, ch in enumerate(channels):
            ch.basic_publish("", q, str(i).encode())
        for ch in channels[::2]:
            ch.close()
        assert all(ch.is_closed for ch in channels[::2])
        assert all(ch.is_open for ch in channels[1::2])
        # closed channel numbers are reusable
        again = [conn.channel() for _ in range(100)]
        assert all(ch.is_open for ch in again)
        ch = again[0]
        wait_until(lambda: ch.queue_declare(q, passive=True).method.message_count == 200,
                   what="200 messages from 200 channels")
        bodies = []
        for _ in range(200):
            method, _, body = ch.basic_get(q, auto_ack=True)
            bodies.append(body)
        # channels are independent: no order across them, but every message arrives once
        assert sorted(bodies, key=int) == [str(i).encode() for i in range(200)]


def test_channel_flow_active(broker: BrokerEndpoint) -> None:
    # RabbitMQ implements only flow(active=true); the reply echoes the state.
    with broker.pika() as conn:
        ch = conn.channel()
        assert ch.flow(True) is True
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"after flow")
        assert ch.basic_get(q, auto_ack=True)[2] == b"after flow"


def test_channel_error_closes_only_that_channel(broker: BrokerEndpoint) -> None:
    with broker.pika() as conn:
        good = conn.channel()
        q = good.queue_declare("", exclusive=True).method.queue
        bad = conn.channel()
        missing = unique("q.missing")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            bad.queue_declare(missing, passive=True)
        assert info.value.reply_code == 404
        assert "NOT_FOUND" in info.value.reply_text and missing in info.value.reply_text
        assert bad.is_closed and good.is_open and conn.is_open
        good.basic_publish("", q, b"still fine")
        assert good.basic_get(q, auto_ack=True)[2] == b"still fine"
        third = conn.channel()
        assert third.queue_declare(q, passive=True).method.message_count == 0


def test_channel_error_does_not_disturb_other_connections(broker: BrokerEndpoint) -> None:
    with broker.pika() as c1, broker.pika() as c2:
        ch2 = c2.channel()
        q = ch2.queue_declare("", exclusive=True).method.queue
        ch1 = c1.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch1.exchange_declare(unique("x.missing"), passive=True)
        ch2.basic_publish("", q, b"x")
        assert ch2.basic_get(q, auto_ack=True)[2] == b"x"
        assert c1.is_open


def test_method_on_unopened_channel_is_channel_error(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.send_method(5, commands.Queue.Declare(queue=unique("q")))
        close = raw.wait_connection_close()
        assert_closed_with(close, 504, "CHANNEL_ERROR")


def test_second_channel_open_is_channel_error(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(1, commands.Channel.Open())
        close = raw.wait_connection_close()
        assert_closed_with(close, 504)


def test_channel_open_before_connection_open_is_unexpected_frame(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.send(PROTOCOL_HEADER_0_9_1)
        raw.expect(commands.Connection.Start)
        raw.send_method(0, commands.Connection.StartOk(
            mechanism="PLAIN", response=f"\0{broker.user}\0{broker.password}"))
        tune = raw.expect(commands.Connection.Tune)
        raw.send_method(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                      frame_max=tune.frame_max, heartbeat=0))
        raw.send_method(1, commands.Channel.Open())  # connection.open skipped
        close = raw.wait_connection_close()
        assert_closed_with(close, 505)


def test_second_connection_open_is_channel_error(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.send_method(0, commands.Connection.Open(virtual_host=broker.vhost))
        close = raw.wait_connection_close()
        assert_closed_with(close, 504)


def test_content_frame_without_publish_is_unexpected_frame(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_frame(FRAME_BODY, 1, b"stray body")
        close = raw.wait_connection_close()
        assert_closed_with(close, 505, "UNEXPECTED_FRAME")


def test_method_instead_of_content_header_is_unexpected_frame(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(1, commands.Basic.Publish(exchange="", routing_key=unique("q")))
        raw.send_method(1, commands.Queue.Declare(queue=""))
        close = raw.wait_connection_close()
        assert_closed_with(close, 505)


def test_bad_frame_end_is_frame_error(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        # a 4-byte channel.close-ok-ish payload whose frame-end octet is 0x00, not 0xCE
        raw.send(b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x0b\x00")
        close = raw.wait_connection_close()
        assert_closed_with(close, 501)


def test_channel_close_by_client_then_reuse(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(1, commands.Channel.Close(reply_code=200, reply_text="done",
                                                  class_id=0, method_id=0))
        raw.expect(commands.Channel.CloseOk)
        raw.open_channel(1)
        raw.send_method(1, commands.Queue.Declare(queue="", exclusive=True))
        ok = raw.expect(commands.Queue.DeclareOk)
        assert ok.queue
