"""AMQP 1.0 idle time-out through the transport: beats at half the client's idle-time-out,
and a client silent for twice the broker's offer closed with a ``close`` that says why."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.protocol.amqp1_0.connection import AmqpConnection10
from broker.protocol.amqp1_0.definitions import Close, Open, SaslInit, SaslOutcome
from broker.protocol.amqp1_0.framing import (AMQP_HEADER, EMPTY_FRAME, SASL_HEADER, TYPE_AMQP, TYPE_SASL, Frame,
                                             encode_frame)
from broker.protocol.detect import AmqpVersion
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry

from ..protocol.amqp1_0.engine_client import Host10
from .test_tcp_protocol import FakeTransport

SUPPORTED = frozenset({AmqpVersion.V1_0_SASL})


def _frames(data: bytes) -> list[tuple[int, object]]:
    """(type, performative or None for an empty frame) of what the broker wrote after its headers."""
    out, o = [], 0
    while o + 8 <= len(data):
        if data[o:o + 4] == b"AMQP":
            o += 8
            continue
        size, doff, ftype = struct.unpack_from(">IBB", data, o)
        body = data[o + doff * 4:o + size]
        frame = Frame(ftype, 0, body)
        value = None if not body else frame.performative()[0] if ftype == TYPE_AMQP else frame.sasl_frame()
        out.append((ftype, value))
        o += size
    return out


async def _opened(host: Host10, idle_time_out: int | None) -> tuple[AmqpProtocol, FakeTransport]:
    proto = AmqpProtocol(lambda v, h, p: AmqpConnection10(host, v, remote_host=h, remote_port=p),
                         SUPPORTED, ConnectionRegistry())
    transport = FakeTransport("127.0.0.1", proto)
    proto.connection_made(transport)  # type: ignore[arg-type]
    proto.data_received(SASL_HEADER + encode_frame(
        SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"), frame_type=TYPE_SASL))
    for _ in range(500):                          # the password is checked in a worker thread
        if any(isinstance(p, SaslOutcome) for _t, p in _frames(bytes(transport.written))):
            break
        await asyncio.sleep(0.01)
    proto.data_received(AMQP_HEADER + encode_frame(Open(container_id="c", idle_time_out=idle_time_out)))
    assert any(isinstance(p, Open) for _t, p in _frames(bytes(transport.written)))
    return proto, transport


@pytest.mark.timeout(30)
def test_a_client_that_keeps_sending_stays_and_a_silent_one_is_closed_after_twice_the_offer() -> None:
    async def scenario() -> None:
        host = Host10()
        host.idle_timeout = 1                     # the broker offers 1000 ms: silence > 2 s expires
        proto, transport = await _opened(host, None)
        loop = asyncio.get_running_loop()
        started = loop.time()
        while loop.time() - started < 3.0:        # an empty frame every 0.4 s: alive
            proto.data_received(EMPTY_FRAME)
            silent = loop.time()
            await asyncio.sleep(0.4)
        assert not transport.closed
        await asyncio.wait_for(transport.closed_event.wait(), 5)
        waited = loop.time() - silent
        assert 2.0 <= waited < 3.0
        assert transport.aborted
        last = _frames(bytes(transport.written))[-1][1]
        assert isinstance(last, Close)
        assert last.error is not None and last.error.condition == "amqp:resource-limit-exceeded"

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_the_broker_beats_at_half_the_clients_idle_time_out_and_never_expires_it_by_default() -> None:
    async def scenario() -> None:
        proto, transport = await _opened(Host10(), 1000)     # the broker offers none
        sent = len(transport.written)
        await asyncio.sleep(2.6)                  # silent client; nothing to send but beats
        assert not transport.closed
        beats = [p for _t, p in _frames(bytes(transport.written[sent:]))]
        assert beats and all(p is None for p in beats)
        assert 4 <= len(beats) <= 6               # one per 0.5 s of the broker's silence
        proto.connection_lost(None)

    asyncio.run(scenario())
