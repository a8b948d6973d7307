"""The asyncio protocol that drives engines: flow control, header sniffing, heartbeats."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker import errors
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.codec import frame
from broker.protocol.amqp0_9_1.connection import AmqpConnection
from broker.protocol.detect import AmqpVersion
from broker.transport.handshake import HandshakeLimits
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry

from ..protocol.harness import Client, FakeHost

SUPPORTED = frozenset({AmqpVersion.V0_8, AmqpVersion.V0_9, AmqpVersion.V0_9_1})


class FakeTransport:
    """Records writes; the test decides when the "socket buffer" is full.

    Like asyncio's transports, closing calls the protocol's ``connection_lost``
    on the next turn of the loop (when the transport knows its protocol).
    """

    def __init__(self, peer: str = "127.0.0.1", protocol: AmqpProtocol | None = None) -> None:
        self.written = bytearray()
        self.closed = False
        self.aborted = False
        self.reading = True
        self.peer = peer
        self.protocol = protocol
        self.closed_event = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self._lose()

    def abort(self) -> None:
        self.aborted = True
        self._lose()

    def _lose(self) -> None:
        if not self.closed:
            self.closed = True
            self.closed_event.set()
            if self.protocol is not None:
                asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0                          # everything written went out at once

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.peer, 40000) if name == "peername" else default


def _deliveries(data: bytes) -> int:
    count, o = 0, 0
    while o + 7 <= len(data):
        ftype, _ch, size = struct.unpack_from(">BHI", data, o)
        if ftype == 1 and data[o + 7:o + 11] == b"\x00\x3c\x00\x3c":
            count += 1
        o += 8 + size
    return count


def _accepted(host: FakeHost, registry: ConnectionRegistry,
              peer: str = "127.0.0.1") -> tuple[AmqpProtocol, FakeTransport]:
    proto = AmqpProtocol(lambda v, h, p: AmqpConnection(host, v, remote_host=h, remote_port=p),
                         SUPPORTED, registry)
    transport = FakeTransport(peer, proto)
    proto.connection_made(transport)  # type: ignore[arg-type]
    return proto, transport


async def _authenticated(proto: AmqpProtocol, encoder: Client) -> None:
    """Header and start-ok sent, and the worker thread has verified the password."""
    proto.data_received(b"AMQP\x00\x00\x09\x01")
    proto.data_received(encoder.encode(0, m.ConnectionStartOk(
        client_properties={}, mechanism="PLAIN", response=b"\x00guest\x00guest")))
    engine = proto.engine
    for _ in range(500):                # authentication runs in a worker thread
        if engine.state.name != "AUTHENTICATING":
            break
        await asyncio.sleep(0.01)
    assert engine.state.name == "AWAITING_TUNE_OK"


async def _connected(host: FakeHost, registry: ConnectionRegistry | None = None,
                     ) -> tuple[AmqpProtocol, FakeTransport, Client]:
    """A protocol whose engine has done the handshake; Client is only used to encode frames."""
    registry = ConnectionRegistry() if registry is None else registry
    proto, transport = _accepted(host, registry)
    encoder = Client(host)
    await _authenticated(proto, encoder)
    proto.data_received(encoder.encode(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=0))
                        + encoder.encode(0, m.ConnectionOpen(virtual_host="/"))
                        + encoder.encode(1, m.ChannelOpen()))
    assert proto in registry.connections
    return proto, transport, encoder


@pytest.mark.timeout(30)
def test_a_full_socket_buffer_pauses_deliveries_until_it_drains() -> None:
    async def scenario() -> None:
        host = FakeHost()
        consumer, ctransport, enc = await _connected(host)
        publisher, _ptransport, _ = await _connected(host)
        consumer.data_received(enc.encode(1, m.QueueDeclare(queue="slow"))
                               + enc.encode(1, m.BasicConsume(queue="slow", no_ack=True)))
        consumer.pause_writing()                      # the consumer's socket buffer is full
        before = len(ctransport.written)
        big = b"x" * 60000
        publisher.data_received(b"".join(enc.publish_bytes(1, "", "slow", big) for _ in range(40)))
        await asyncio.sleep(0)                        # the coalesced flush runs
        delivered_while_paused = _deliveries(bytes(ctransport.written[before:]))
        queued = host.namespace.queue("slow").message_count
        # deliveries stop once ~1 MiB is outstanding; the rest stays queued
        assert delivered_while_paused < 40 and queued == 40 - delivered_while_paused
        consumer.resume_writing()                     # drained
        for _ in range(50):
            await asyncio.sleep(0)
            consumer.resume_writing()                 # each write-and-drain round, as the loop would
        assert _deliveries(bytes(ctransport.written[before:])) == 40
        assert host.namespace.queue("slow").message_count == 0

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_unsupported_header_is_answered_and_closed() -> None:
    async def scenario() -> None:
        proto = AmqpProtocol(lambda v, h, p: None, SUPPORTED, ConnectionRegistry())
        transport = FakeTransport()
        proto.connection_made(transport)  # type: ignore[arg-type]
        proto.data_received(b"AMQP\x01\x01\x00")     # 7 bytes: wait for the eighth
        assert not transport.closed and transport.written == b""
        proto.data_received(b"\x0a")                  # 0-10: not served here
        assert transport.written == b"AMQP\x00\x00\x09\x01" and transport.closed

    asyncio.run(scenario())


CLOSE_OK = frame(1, 0, b"\x00\x0a\x00\x33")


@pytest.mark.timeout(30)
def test_after_close_ok_the_socket_is_read_and_dropped_until_the_client_closes() -> None:
    async def scenario() -> None:
        host = FakeHost()
        registry = ConnectionRegistry()
        proto, transport, enc = await _connected(host, registry)
        proto.data_received(enc.encode(0, m.ConnectionClose(reply_code=200))
                            + enc.publish_bytes(1, "", "q", b"queued before the close"))
        assert transport.written.endswith(CLOSE_OK)
        assert not transport.closed and transport.reading
        assert registry.connections == set() and host.opened == []    # the connection is gone
        written = len(transport.written)
        proto.data_received(enc.publish_bytes(1, "", "q", b"still on its way"))
        assert len(transport.written) == written and not transport.closed
        assert proto.eof_received() is False         # the client closed: asyncio closes ours

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_after_close_ok_a_client_that_never_closes_is_closed_after_the_close_timeout() -> None:
    async def scenario() -> None:
        registry = ConnectionRegistry(limits=HandshakeLimits(close_timeout=0.05))
        proto, transport, enc = await _connected(FakeHost(), registry)
        proto.data_received(enc.encode(0, m.ConnectionClose(reply_code=200)))
        assert not transport.closed
        await asyncio.wait_for(transport.closed_event.wait(), 5)
        assert transport.written.endswith(CLOSE_OK)

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_close_ok_to_our_close_closes_the_socket_at_once() -> None:
    async def scenario() -> None:
        proto, transport, enc = await _connected(FakeHost())
        proto.close(errors.ConnectionForced("shutdown"))
        assert not transport.closed                  # awaiting close-ok
        proto.data_received(enc.encode(0, m.ConnectionCloseOk()))
        assert transport.closed

    asyncio.run(scenario())


def _stage(stage: str) -> Callable[[AmqpProtocol, Client], Awaitable[None]]:
    async def to(proto: AmqpProtocol, enc: Client) -> None:
        if stage == "nothing":
            return
        if stage == "part of the header":
            proto.data_received(b"AMQ")
            return
        if stage == "the header":
            proto.data_received(b"AMQP\x00\x00\x09\x01")
            return
        await _authenticated(proto, enc)
        if stage == "tune-ok":
            proto.data_received(enc.encode(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072,
                                                                   heartbeat=0)))
    return to


@pytest.mark.timeout(30)
@pytest.mark.parametrize("stage,awaited", [
    ("nothing", "no protocol header"), ("part of the header", "no protocol header"),
    ("the header", "awaiting connection.start-ok"), ("start-ok", "awaiting connection.tune-ok"),
    ("tune-ok", "awaiting connection.open")])
def test_a_connection_not_opened_in_time_is_closed(stage: str, awaited: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        host = FakeHost()
        # long enough for the worker thread to verify the password on a busy machine
        registry = ConnectionRegistry(limits=HandshakeLimits(open_timeout=2.0))
        proto, transport = _accepted(host, registry)
        await _stage(stage)(proto, Client(host))
        assert registry.opening.by_address == {"127.0.0.1": 1}
        with caplog.at_level(logging.INFO, logger="broker.transport.handshake"):
            await asyncio.wait_for(transport.closed_event.wait(), 5)
        assert transport.aborted
        await asyncio.sleep(0)                       # connection_lost runs
        assert registry.opening.by_address == {} and registry.opening.timed_out == 1
        assert registry.connections == set() and host.opened == []
        assert [r.getMessage() for r in caplog.records] == [
            f"closing connection from 127.0.0.1: not opened within 2 s ({awaited})"]

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_time_the_event_loop_was_stalled_does_not_count_against_the_client() -> None:
    async def scenario() -> None:
        host = FakeHost()
        registry = ConnectionRegistry(limits=HandshakeLimits(open_timeout=0.2))
        proto, transport = _accepted(host, registry)
        time.sleep(1.0)                  # the loop is stuck: the client's header waits unread
        for _ in range(3):               # the late timer runs before the input would be read
            await asyncio.sleep(0)
        assert not transport.closed
        proto.data_received(b"AMQP\x00\x00\x09\x01")        # ...and then the input is read
        await asyncio.wait_for(transport.closed_event.wait(), 5)  # nothing more: closed after all
        assert transport.aborted and registry.opening.timed_out == 1

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_an_opened_connection_outlives_the_open_timeout() -> None:
    async def scenario() -> None:
        registry = ConnectionRegistry(limits=HandshakeLimits(open_timeout=1.0))
        proto, transport, enc = await _connected(FakeHost(), registry)
        assert registry.opening.by_address == {}
        await asyncio.sleep(1.5)                     # past the open timeout: nothing may happen
        assert not transport.closed and proto in registry.connections

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_opening_connections_are_capped_per_address_and_opened_ones_do_not_count() -> None:
    async def scenario() -> None:
        host = FakeHost()
        registry = ConnectionRegistry(limits=HandshakeLimits(max_opening_per_address=2))
        opened, _t, _e = await _connected(host, registry)    # opened: not counted
        first, first_transport = _accepted(host, registry)
        _second, second_transport = _accepted(host, registry)
        _third, third_transport = _accepted(host, registry)
        assert third_transport.aborted and third_transport.written == b""
        assert not first_transport.closed and not second_transport.closed
        _other, other_transport = _accepted(host, registry, peer="10.0.0.7")   # another address
        assert not other_transport.closed
        assert registry.opening.refused == 1
        assert registry.opening.by_address == {"127.0.0.1": 2, "10.0.0.7": 1}
        first_transport.close()                      # one opening connection goes away...
        await asyncio.sleep(0)
        _fourth, fourth_transport = _accepted(host, registry)
        assert not fourth_transport.closed           # ...so the next one is let in
        assert registry.opening.refused == 1

    asyncio.run(scenario())
