"""An engine's ``input_slice``: the transport hands a larger read over in slices of that size and
writes the engine's output after each (the AMQP 1.0 engine asks for it, see its connection)."""

from __future__ import annotations

import asyncio
import enum
from typing import Any

import pytest

from broker.protocol.amqp1_0.connection import AmqpConnection10
from broker.protocol.detect import AmqpVersion
from broker.protocol.engine import Finished
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry

from .test_tcp_protocol import FakeTransport

HEADER = b"AMQP\x00\x00\x09\x01"


class _State(enum.Enum):
    OPEN = "open"


class RecordingEngine:
    """Answers every chunk of input with one line naming its size; ``finish_after`` chunks, it ends."""

    state = _State.OPEN
    buffered_bytes = 0

    def __init__(self, input_slice: int | None, finish_after: int = 0) -> None:
        if input_slice is not None:
            self.input_slice = input_slice
        self.finish_after = finish_after
        self.chunks: list[bytes] = []
        self.out = b""
        self.on_output: Any = lambda: None
        self.on_event: Any = lambda event: None

    def start(self) -> None:
        pass

    def receive_data(self, data: bytes) -> None:
        self.chunks.append(data)
        self.out += b"got %d;" % len(data)
        if len(self.chunks) == self.finish_after:
            self.on_event(Finished())

    def data_to_send(self) -> bytes:
        out, self.out = self.out, b""
        return out

    def output_drained(self) -> None:
        pass

    def connection_lost(self) -> None:
        pass


class RecordingTransport(FakeTransport):
    def __init__(self, protocol: AmqpProtocol) -> None:
        super().__init__(protocol=protocol)
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        super().write(data)
        self.writes.append(data)


def _run(engine: RecordingEngine, *reads: bytes) -> RecordingTransport:
    async def scenario() -> RecordingTransport:
        proto = AmqpProtocol(lambda v, h, p: engine, frozenset({AmqpVersion.V0_9_1}),  # type: ignore[arg-type,return-value]
                             ConnectionRegistry())
        transport = RecordingTransport(proto)
        proto.connection_made(transport)  # type: ignore[arg-type]
        proto.data_received(HEADER)
        for data in reads:
            proto.data_received(data)
        return transport
    return asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_a_read_larger_than_the_slice_is_handled_in_slices_each_answered_at_once() -> None:
    engine = RecordingEngine(input_slice=4)
    transport = _run(engine, b"0123456789", b"abcd", b"xy")
    assert engine.chunks == [b"0123", b"4567", b"89", b"abcd", b"xy"]
    assert transport.writes == [b"got 4;", b"got 4;", b"got 2;", b"got 4;", b"got 2;"]


@pytest.mark.timeout(30)
def test_an_engine_without_a_slice_gets_each_read_whole() -> None:
    engine = RecordingEngine(input_slice=None)
    transport = _run(engine, b"0123456789")
    assert engine.chunks == [b"0123456789"] and transport.writes == [b"got 10;"]


@pytest.mark.timeout(30)
def test_the_slices_stop_once_the_engine_has_finished() -> None:
    engine = RecordingEngine(input_slice=4, finish_after=2)
    transport = _run(engine, b"0123456789")
    assert engine.chunks == [b"0123", b"4567"]
    assert transport.writes == [b"got 4;", b"got 4;"] and transport.closed


def test_the_amqp_1_0_engine_asks_for_slices_smaller_than_a_socket_read() -> None:
    assert 4096 <= AmqpConnection10.input_slice < 256 * 1024
