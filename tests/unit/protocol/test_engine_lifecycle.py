"""What the engine tells its transport about opening and closing (spec 0-9-1 4.2.2, 4.2.4)."""

from __future__ import annotations

from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.engine import PauseReading, ResumeReading

from .harness import Client, FakeHost, run_authentication


def test_opened_only_once_open_ok_is_sent() -> None:
    c = Client(FakeHost())
    c.expect(m.ConnectionStart)
    c.send(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                  response=b"\x00guest\x00guest", locale="en_US"))
    c.expect(m.ConnectionTune)
    c.send(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=0))
    assert not c.server.opened
    c.send(0, m.ConnectionOpen(virtual_host="/"))
    c.expect(m.ConnectionOpenOk)
    assert c.server.opened


def test_client_close_answered_with_close_ok_awaits_the_client_closing_the_socket() -> None:
    c = Client(FakeHost())
    c.handshake()
    c.open_channel(1)
    # amqplib: a channel's queued publishes can follow the connection's close on the wire
    c.raw(c.encode(0, m.ConnectionClose(reply_code=200)) + c.publish_bytes(1, "", "q", b"late"))
    assert c.take() == [(0, m.ConnectionCloseOk())]
    assert c.server.closed and c.server.awaits_peer_close


def test_close_crossing_ours_is_answered_and_awaits_the_client() -> None:
    c = Client(FakeHost())
    c.handshake()
    c.send(3, m.QueueDeclare(queue="q"))            # channel 3 is not open: 504, hard
    c.expect(m.ConnectionClose, 0)
    c.send(0, m.ConnectionClose(reply_code=200))     # the client closed at the same time
    c.expect(m.ConnectionCloseOk, 0)
    assert c.server.closed and c.server.awaits_peer_close


def test_close_ok_to_our_close_ends_the_connection_at_once() -> None:
    # RabbitMQ terminates as soon as the client's close-ok arrives: nothing follows it
    c = Client(FakeHost())
    c.handshake()
    c.send(3, m.QueueDeclare(queue="q"))
    c.expect(m.ConnectionClose, 0)
    c.send(0, m.ConnectionCloseOk())
    assert c.server.closed and not c.server.awaits_peer_close


def _start_ok_plain(c: Client) -> bytes:
    c.expect(m.ConnectionStart)
    return c.encode(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                           response=b"\x00guest\x00guest", locale="en_US"))


def test_nothing_is_read_while_a_login_is_checked() -> None:
    # the check runs in a worker thread: the transport must not read (and the engine hold)
    # whatever an unauthenticated peer sends meanwhile
    c = Client(FakeHost())
    events: list[object] = []
    c.server.on_event = events.append
    pipelined = c.encode(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=0))
    c.server.receive_data(_start_ok_plain(c) + pipelined)
    assert c.server.reading_paused and events[-1] == PauseReading()
    run_authentication(c.server)
    assert not c.server.reading_paused and events[-1] == ResumeReading()
    c.expect(m.ConnectionTune)                    # and the pipelined tune-ok was read after it
    c.send(0, m.ConnectionOpen(virtual_host="/"))
    c.expect(m.ConnectionOpenOk)


def test_more_than_a_frame_sent_before_the_login_is_answered_closes_with_a_frame_error() -> None:
    c = Client(FakeHost(frame_max=4096))         # before tune, a frame is the broker's frame_max
    c.raw(_start_ok_plain(c) + b"\x01\x00\x00" + b"B" * 5000)     # the check answers after
    [(channel, close)] = c.take()                 # a close, and no connection.tune
    assert channel == 0 and isinstance(close, m.ConnectionClose) and close.reply_code == 501
    assert "before the login was answered" in close.reply_text
    assert c.server.closed and c.server.buffered_bytes == 0
