"""The byte-stream layer chain under the engine, and protocol header detection as its top layer.

A length-prefixed test layer stands for what TLS and WebSocket will be: it
slots in under detection through the port's registry, and neither the
detection nor the engine changes.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.detect import HEADER_FOR, AmqpVersion, HeaderDetector
from broker.transport.layers import LayerChain
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry

from ..protocol.harness import _DECODERS, Client, FakeHost
from .test_tcp_protocol import SUPPORTED, FakeTransport, _accepted

HEADER_0_9_1 = b"AMQP\x00\x00\x09\x01"
_LENGTH = struct.Struct(">I")


class LengthPrefixed:
    """A test layer: every chunk is a 4-byte big-endian length and that many bytes."""

    def __init__(self) -> None:
        self._buffer = b""
        self.closed = False

    def receive_data(self, data: bytes) -> bytes:
        self._buffer += data
        out, o = [], 0
        while len(self._buffer) - o >= 4:
            size = _LENGTH.unpack_from(self._buffer, o)[0]
            if len(self._buffer) - o - 4 < size:
                break
            out.append(self._buffer[o + 4:o + 4 + size])
            o += 4 + size
        self._buffer = self._buffer[o:]
        return b"".join(out)

    def send_data(self, data: bytes) -> bytes:
        return _LENGTH.pack(len(data)) + data

    def data_to_send(self) -> bytes:
        return b""

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)


def wrap(data: bytes) -> bytes:
    return _LENGTH.pack(len(data)) + data


def unwrap(data: bytes) -> bytes:
    layer = LengthPrefixed()
    plain = layer.receive_data(data)
    assert layer.buffered_bytes == 0, "a partial chunk was written"
    return plain


def methods(data: bytes) -> list[Any]:
    out, o = [], 0
    while o < len(data):
        ftype, _channel, size = struct.unpack_from(">BHI", data, o)
        payload = data[o + 7:o + 7 + size]
        if ftype == 1:
            out.append(_DECODERS[AmqpVersion.V0_9_1][struct.unpack_from(">I", payload)[0]](payload, 4))
        o += 8 + size
    return out


# -- header detection, byte by byte ------------------------------------------------------

@pytest.mark.parametrize("split", range(1, 12))
def test_detection_selects_the_version_at_any_split_and_passes_the_rest_up(split: int) -> None:
    stream = HEADER_0_9_1 + b"\x01\x00\x00"
    detector = HeaderDetector(SUPPORTED)
    up = detector.receive_data(stream[:split]) + detector.receive_data(stream[split:])
    assert detector.version is AmqpVersion.V0_9_1 and not detector.closed
    assert up == b"\x01\x00\x00"
    assert detector.receive_data(b"more") == b"more"        # afterwards a pass-through
    assert detector.data_to_send() == b"" and detector.buffered_bytes == 0


@pytest.mark.parametrize("header", [
    HEADER_FOR[AmqpVersion.V1_0],          # known, not implemented
    HEADER_FOR[AmqpVersion.V1_0_SASL],
    HEADER_FOR[AmqpVersion.V0_10],
    b"GET / HTTP/1.1\r\n",
])
def test_detection_answers_an_unimplemented_header_with_the_preferred_one(header: bytes) -> None:
    detector = HeaderDetector(SUPPORTED, HEADER_FOR[AmqpVersion.V0_9_1])
    assert detector.receive_data(header[:5]) == b"" and not detector.closed
    assert detector.buffered_bytes == 5
    assert detector.receive_data(header[5:]) == b""
    assert detector.version is None and detector.closed and detector.header == header[:8]
    assert detector.data_to_send() == HEADER_0_9_1
    assert detector.data_to_send() == b""                     # said once
    assert detector.receive_data(b"AMQP\x00\x00\x09\x01") == b""  # nothing more is read


# -- the chain ---------------------------------------------------------------------------

def test_a_chain_decodes_bottom_up_and_encodes_top_down() -> None:
    detector = HeaderDetector(SUPPORTED)
    chain = LayerChain([LengthPrefixed(), detector])
    stream = wrap(HEADER_0_9_1[:3]) + wrap(HEADER_0_9_1[3:] + b"frame") + wrap(b"s")
    received = b"".join(chain.receive(stream[i:i + 1]) for i in range(len(stream)))
    assert detector.version is AmqpVersion.V0_9_1 and received == b"frames"
    assert chain.send(b"answer") == wrap(b"answer")
    assert chain.send(b"") == b""


def test_a_layers_own_output_is_encoded_by_the_layers_below_it() -> None:
    chain = LayerChain([LengthPrefixed(), HeaderDetector(SUPPORTED, HEADER_0_9_1)])
    chain.receive(wrap(HEADER_FOR[AmqpVersion.V1_0]))
    assert chain.closed
    assert chain.send(b"") == wrap(HEADER_0_9_1)


# -- a layer slotted under detection, with the real engine above --------------------------

def _layered(host: FakeHost) -> tuple[AmqpProtocol, FakeTransport]:
    return _accepted(host, ConnectionRegistry(layers=lambda: [LengthPrefixed()]))


@pytest.mark.timeout(30)
def test_an_engine_serves_through_a_layer_it_knows_nothing_about() -> None:
    async def scenario() -> None:
        host = FakeHost()
        proto, transport = _layered(host)
        enc = Client(host)
        start_ok = enc.encode(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                                     response=b"\x00guest\x00guest"))
        stream = wrap(HEADER_0_9_1) + wrap(start_ok[:10]) + wrap(start_ok[10:])
        for i in range(len(stream)):                      # one byte at a time
            proto.data_received(stream[i:i + 1])
        assert isinstance(methods(unwrap(bytes(transport.written)))[0], m.ConnectionStart)
        for _ in range(500):                              # authentication runs in a worker thread
            if b"\x00\x0a\x00\x1e" in unwrap(bytes(transport.written)):     # connection.tune
                break
            await asyncio.sleep(0.01)
        proto.data_received(wrap(enc.encode(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072,
                                                                  heartbeat=0))
                                 + enc.encode(0, m.ConnectionOpen(virtual_host="/"))
                                 + enc.encode(1, m.ChannelOpen())))
        answered = [type(x) for x in methods(unwrap(bytes(transport.written)))]
        assert answered == [m.ConnectionStart, m.ConnectionTune, m.ConnectionOpenOk, m.ChannelOpenOk]
        assert host.opened == [proto.engine]
        before = len(transport.written)
        proto.data_received(wrap(enc.encode(0, m.ConnectionClose(reply_code=200))))
        assert methods(unwrap(bytes(transport.written[before:]))) == [m.ConnectionCloseOk()]

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_a_refused_header_is_answered_through_the_layer() -> None:
    async def scenario() -> None:
        proto, transport = _layered(FakeHost())
        proto.data_received(wrap(HEADER_FOR[AmqpVersion.V1_0]))
        assert bytes(transport.written) == wrap(HEADER_0_9_1) and transport.closed
        assert proto.engine is None

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_plain_tcp_bypasses_the_chain_once_the_header_is_read() -> None:
    async def scenario() -> None:
        proto, transport = _accepted(FakeHost(), ConnectionRegistry())
        proto.data_received(HEADER_0_9_1[:4])
        assert proto.buffered_bytes == 4                  # detection holds the partial header
        proto.data_received(HEADER_0_9_1[4:])
        assert proto._chain is None and proto.engine is not None
        assert isinstance(methods(bytes(transport.written))[0], m.ConnectionStart)

    asyncio.run(scenario())
