"""What the engine tells its transport about opening and closing (spec 0-9-1 4.2.2, 4.2.4)."""

from __future__ import annotations

from broker.protocol.amqp0_9_1 import methods as m

from .harness import Client, FakeHost


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
