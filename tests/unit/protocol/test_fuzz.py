"""Property-based fuzzing of the 0-9-1 engine's decoder: random and mutated frames.

Whatever arrives, the engine must not raise, must not hang, must not buffer
without bound, and must answer protocol violations with connection.close or
channel.close rather than dying.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.connection import State

from .harness import Client, FakeHost

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _opened() -> Client:
    c = Client(FakeHost())
    c.handshake()
    c.open_channel(1)
    return c


def _valid_session(c: Client) -> bytes:
    data = c.encode(1, m.QueueDeclare(queue="fuzz"))
    data += c.encode(1, m.QueueBind(queue="fuzz", exchange="amq.topic", routing_key="a.#"))
    data += c.publish_bytes(1, "amq.topic", "a.b", b"payload" * 10,
                            MessageProperties(headers={"x": [1, "two", {"three": 3.0}]}, priority=3))
    data += c.encode(1, m.BasicConsume(queue="fuzz", consumer_tag="t"))
    data += c.encode(1, m.BasicAck(delivery_tag=1))
    return data


def _check_survived(c: Client) -> None:
    # the engine answered (or not) without raising; its buffers are bounded
    assert len(c.server._rest) <= c.server.frame_max + 8
    c.take()
    assert c.server.state in State


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes_after_handshake(data: bytes) -> None:
    c = _opened()
    c.raw(data)
    _check_survived(c)


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_before_handshake(data: bytes) -> None:
    c = Client(FakeHost())
    c.raw(data)
    _check_survived(c)


@FUZZ
@given(st.data())
def test_mutated_valid_frames(data: st.DataObject) -> None:
    c = _opened()
    session = bytearray(_valid_session(c))
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(session) - 1))
        session[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(session)))
    c.raw(bytes(session[:cut]))
    c.raw(bytes(session[cut:]))
    _check_survived(c)


@FUZZ
@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.binary(max_size=64))
def test_any_method_id_with_any_arguments(class_id: int, method_id: int, args: bytes) -> None:
    c = _opened()
    payload = struct.pack(">HH", class_id, method_id) + args
    c.raw(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    _check_survived(c)


def test_huge_announced_frame_is_refused_before_buffering() -> None:
    c = _opened()
    c.raw(struct.pack(">BHI", 3, 1, 0x7FFFFFFF))
    c.raw(b"\x00" * 65536)
    assert len(c.server._rest) == 0
    assert c.server.state in (State.CLOSING, State.CLOSED)
