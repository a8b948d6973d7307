"""The asyncio protocol that drives engines: flow control, header sniffing, heartbeats."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.codec import frame
from broker.protocol.amqp0_9_1.connection import AmqpConnection
from broker.protocol.detect import AmqpVersion
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry

from ..protocol.harness import Client, FakeHost

SUPPORTED = frozenset({AmqpVersion.V0_8, AmqpVersion.V0_9, AmqpVersion.V0_9_1})


class FakeTransport:
    """Records writes; the test decides when the "socket buffer" is full."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default


def _deliveries(data: bytes) -> int:
    count, o = 0, 0
    while o + 7 <= len(data):
        ftype, _ch, size = struct.unpack_from(">BHI", data, o)
        if ftype == 1 and data[o + 7:o + 11] == b"\x00\x3c\x00\x3c":
            count += 1
        o += 8 + size
    return count


async def _connected(host: FakeHost) -> tuple[AmqpProtocol, FakeTransport, Client]:
    """A protocol whose engine has done the handshake; Client is only used to encode frames."""
    registry = ConnectionRegistry()
    proto = AmqpProtocol(lambda v, h, p: AmqpConnection(host, v, remote_host=h, remote_port=p),
                         SUPPORTED, registry)
    transport = FakeTransport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    encoder = Client(host)
    proto.data_received(b"AMQP\x00\x00\x09\x01")
    proto.data_received(encoder.encode(0, m.ConnectionStartOk(
        client_properties={}, mechanism="PLAIN", response=b"\x00guest\x00guest")))
    await asyncio.sleep(0.05)           # authentication runs in a worker thread
    proto.data_received(encoder.encode(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=0))
                        + encoder.encode(0, m.ConnectionOpen(virtual_host="/"))
                        + encoder.encode(1, m.ChannelOpen()))
    assert registry.connections == {proto}
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


@pytest.mark.timeout(30)
def test_connection_close_closes_the_transport_after_close_ok() -> None:
    async def scenario() -> None:
        host = FakeHost()
        proto, transport, enc = await _connected(host)
        proto.data_received(enc.encode(0, m.ConnectionClose(reply_code=200)))
        assert transport.written.endswith(frame(1, 0, b"\x00\x0a\x00\x33"))   # connection.close-ok
        assert transport.closed

    asyncio.run(scenario())
