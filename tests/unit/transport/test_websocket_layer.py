"""The WebSocket layer (RFC 6455 server side, AMQP WebSocket Binding), byte by byte.

Client frames are built here by hand (RFC 6455 section 5.2) and the
server's are parsed by hand, so the tests do not check wsproto against
itself.  The handshake's example key and accept token are RFC 6455
section 1.3's.
"""

from __future__ import annotations

import asyncio
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import ConfigurationError
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.detect import HEADER_FOR, AmqpVersion, HeaderDetector
from broker.transport.layers import LayerChain
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry
from broker.transport.websocket import (MAX_SENT_MESSAGE, Refusal, WebSocketLayer,
                                        WebSocketSettings, choose_subprotocol, websocket_layers)

from ..protocol.harness import Client, FakeHost
from .test_layers import methods
from .test_tcp_protocol import SUPPORTED, FakeTransport, _accepted

KEY = b"dGhlIHNhbXBsZSBub25jZQ=="
ACCEPT = b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
HEADER_0_9_1 = HEADER_FOR[AmqpVersion.V0_9_1]
TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


def upgrade(protocols: str | None = "amqp", *, method: bytes = b"GET", version: bytes = b"13",
            key: bytes | None = KEY, upgrade_header: bytes = b"websocket") -> bytes:
    lines = [method + b" /amqp HTTP/1.1", b"Host: broker.example:5673",
             b"Upgrade: " + upgrade_header, b"Connection: Upgrade",
             b"Sec-WebSocket-Version: " + version]
    if key is not None:
        lines.append(b"Sec-WebSocket-Key: " + key)
    if protocols is not None:
        lines.append(b"Sec-WebSocket-Protocol: " + protocols.encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


def frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bytes | None = b"\x0f\xf0\x5a\xa5"
          ) -> bytes:
    """A client frame: masked, as RFC 6455 5.1 requires (``mask=None``: an illegal unmasked one)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    flag = 0x80 if mask is not None else 0
    n = len(payload)
    if n < 126:
        head += bytes([flag | n])
    elif n < 1 << 16:
        head += bytes([flag | 126]) + struct.pack(">H", n)
    else:
        head += bytes([flag | 127]) + struct.pack(">Q", n)
    if mask is None:
        return head + payload
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def server_frames(data: bytes) -> list[tuple[int, bool, bytes]]:
    """(opcode, fin, payload) of every frame the server sent (unmasked, RFC 6455 5.1)."""
    out, o = [], 0
    while o < len(data):
        b0, b1 = data[o], data[o + 1]
        assert not b1 & 0x80, "a server frame must not be masked"
        n, o = b1 & 0x7F, o + 2
        if n == 126:
            n, o = struct.unpack_from(">H", data, o)[0], o + 2
        elif n == 127:
            n, o = struct.unpack_from(">Q", data, o)[0], o + 8
        out.append((b0 & 0x0F, bool(b0 & 0x80), data[o:o + n]))
        o += n
    assert o == len(data), "a partial frame was written"
    return out


def close_code(payload: bytes) -> int:
    return int(struct.unpack(">H", payload[:2])[0])


def open_layer(settings: WebSocketSettings = WebSocketSettings()) -> WebSocketLayer:
    layer = WebSocketLayer(settings)
    assert layer.receive_data(upgrade()) == b""
    assert layer.data_to_send().startswith(b"HTTP/1.1 101 ")
    return layer


# -- the upgrade -----------------------------------------------------------------------------

def test_the_upgrade_is_answered_with_101_the_accept_token_and_the_amqp_subprotocol() -> None:
    layer = WebSocketLayer()
    assert layer.receive_data(upgrade("amqp")) == b""
    response = layer.data_to_send()
    head, _, rest = response.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 101 Switching Protocols" and rest == b""
    fields = {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines[1:])}
    assert fields[b"upgrade"].lower() == b"websocket"
    assert fields[b"connection"].lower() == b"upgrade"
    assert fields[b"sec-websocket-accept"] == ACCEPT
    assert fields[b"sec-websocket-protocol"] == b"amqp"
    assert layer.subprotocol == "amqp" and not layer.closed
    assert layer.data_to_send() == b""


@pytest.mark.parametrize("offered, chosen", [
    (["amqp"], "amqp"),
    (["AMQPWSB10", "amqp"], "amqp"),           # the binding's name wins over the draft's
    (["binary", "AMQPWSB10"], "AMQPWSB10"),    # rhea's examples offer these two
])
def test_the_binding_subprotocol_is_chosen(offered: list[str], chosen: str) -> None:
    assert choose_subprotocol(offered) == chosen
    layer = WebSocketLayer()
    layer.receive_data(upgrade(", ".join(offered)))
    assert b"Sec-WebSocket-Protocol: " + chosen.encode() in layer.data_to_send()


@pytest.mark.parametrize("offered", [["mqtt"], ["v12.stomp", "v11.stomp"], []])
def test_an_upgrade_offering_no_amqp_subprotocol_is_refused_with_400(offered: list[str]) -> None:
    refusal = choose_subprotocol(offered)
    assert isinstance(refusal, Refusal) and refusal.status == 400
    layer = WebSocketLayer()
    assert layer.receive_data(upgrade(", ".join(offered) if offered else None)) == b""
    response = layer.data_to_send()
    assert response.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"Connection: close" in response
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"Content-Length: %d" % len(body) in head
    assert b"offer 'amqp'" in body
    assert layer.closed and layer.close_reason.startswith("HTTP 400")


def test_an_upgrade_offering_none_is_accepted_without_one_when_not_required() -> None:
    layer = WebSocketLayer(WebSocketSettings(subprotocol_required=False))
    layer.receive_data(upgrade(None))
    response = layer.data_to_send()
    assert response.startswith(b"HTTP/1.1 101 ") and b"Sec-WebSocket-Protocol" not in response
    assert layer.subprotocol is None and not layer.closed
    # one that offers only others is still refused
    assert isinstance(choose_subprotocol(["mqtt"], required=False), Refusal)


@pytest.mark.parametrize("request_bytes, status", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400),                           # a page, not an upgrade
    (upgrade(method=b"POST"), 400),
    (upgrade(upgrade_header=b"h2c"), 400),
    (upgrade(key=None), 400),
    (upgrade(version=b"8"), 426),                                          # RFC 6455 4.4
    (b"AMQP\x00\x00\x09\x01\r\n\r\n", 400),                                # not HTTP at all
])
def test_a_bad_upgrade_request_gets_an_http_error_and_the_socket_closes(request_bytes: bytes,
                                                                       status: int) -> None:
    layer = WebSocketLayer()
    assert layer.receive_data(request_bytes) == b""
    response = layer.data_to_send()
    assert response.startswith(b"HTTP/1.1 %d " % status), response
    assert layer.closed
    if status == 426:
        assert b"Sec-WebSocket-Version: 13" in response
    assert layer.receive_data(frame(BINARY, b"x")) == b""      # nothing more is read


def test_an_endless_request_head_is_refused_with_431() -> None:
    layer = WebSocketLayer()
    layer.receive_data(b"GET / HTTP/1.1\r\n")
    for _ in range(20):
        layer.receive_data(b"X-Padding: " + b"a" * 1000 + b"\r\n")
        if layer.closed:
            break
    assert layer.closed and layer.data_to_send().startswith(b"HTTP/1.1 431 ")


def test_buffered_bytes_counts_a_partial_request_and_unsent_output() -> None:
    layer = WebSocketLayer()
    request = upgrade()
    layer.receive_data(request[:30])
    assert layer.buffered_bytes == 30
    layer.receive_data(request[30:])
    pending = layer.buffered_bytes
    assert pending > 100                           # the 101 response, not yet taken
    assert len(layer.data_to_send()) == pending and layer.buffered_bytes == 0


# -- binary messages carry the byte stream -----------------------------------------------------

STREAM_PARTS = [HEADER_0_9_1[:3], HEADER_0_9_1[3:] + b"frame-one|", b"frame-two|frame-th", b"ree|"]


def _client_stream() -> bytes:
    """The header across two messages, a frame across two, two frames in one, a ping and a
    message fragmented into a continuation in the middle."""
    return (upgrade() + frame(BINARY, STREAM_PARTS[0]) + frame(BINARY, STREAM_PARTS[1])
            + frame(PING, b"are you there") + frame(BINARY, STREAM_PARTS[2], fin=False)
            + frame(CONTINUATION, STREAM_PARTS[3]))


@pytest.mark.parametrize("split", range(1, len(_client_stream())))
def test_the_stream_arrives_whole_whatever_the_split(split: int) -> None:
    stream = _client_stream()
    layer = WebSocketLayer()
    up = layer.receive_data(stream[:split])
    out = layer.data_to_send()
    up += layer.receive_data(stream[split:])
    out += layer.data_to_send()
    assert up == b"".join(STREAM_PARTS)
    head, _, frames = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ")
    assert server_frames(frames) == [(PONG, True, b"are you there")]
    assert not layer.closed and layer.buffered_bytes == 0


def test_frames_sent_right_behind_the_request_are_not_lost() -> None:
    layer = WebSocketLayer()
    assert layer.receive_data(upgrade() + frame(BINARY, HEADER_0_9_1)) == HEADER_0_9_1


def test_output_goes_down_as_binary_messages_split_at_the_send_bound() -> None:
    layer = open_layer()
    assert server_frames(layer.send_data(b"abc")) == [(BINARY, True, b"abc")]
    big = os.urandom(MAX_SENT_MESSAGE * 2 + 5)
    frames = server_frames(layer.send_data(big))
    assert [len(p) for _, _, p in frames] == [MAX_SENT_MESSAGE, MAX_SENT_MESSAGE, 5]
    assert all(op == BINARY and fin for op, fin, _ in frames)
    assert b"".join(p for _, _, p in frames) == big


def test_nothing_is_sent_before_the_upgrade_nor_after_the_close() -> None:
    layer = WebSocketLayer()
    assert layer.send_data(b"early") == b""
    layer.receive_data(upgrade())
    layer.data_to_send()
    layer.end_stream()
    assert layer.send_data(b"late") == b""


# -- faults and closing ----------------------------------------------------------------------

def test_an_unmasked_client_frame_is_a_protocol_error_1002() -> None:
    layer = open_layer()
    assert layer.receive_data(frame(BINARY, b"AMQP", mask=None)) == b""
    [(opcode, _, payload)] = server_frames(layer.data_to_send())
    assert opcode == CLOSE and close_code(payload) == 1002 and layer.closed


def test_a_text_message_is_closed_with_1003() -> None:
    layer = open_layer()
    assert layer.receive_data(frame(BINARY, b"AMQP") + frame(TEXT, b"hello")) == b"AMQP"
    [(opcode, _, payload)] = server_frames(layer.data_to_send())
    assert opcode == CLOSE and close_code(payload) == 1003 and layer.closed
    assert "1003" in layer.close_reason


def test_a_message_over_the_size_bound_is_closed_with_1009() -> None:
    layer = open_layer(WebSocketSettings(max_message_size=10))
    # exactly the bound, in two fragments: accepted; the bound counts per message
    assert layer.receive_data(frame(BINARY, b"12345", fin=False)
                              + frame(CONTINUATION, b"67890")) == b"1234567890"
    assert layer.receive_data(frame(BINARY, b"1234567890")) == b"1234567890"
    assert layer.data_to_send() == b""
    layer.receive_data(frame(BINARY, b"123456", fin=False) + frame(CONTINUATION, b"78901"))
    [(opcode, _, payload)] = server_frames(layer.data_to_send())
    assert opcode == CLOSE and close_code(payload) == 1009 and layer.closed


def test_a_close_from_the_client_is_answered_and_ends_the_stream() -> None:
    layer = open_layer()
    layer.receive_data(frame(CLOSE, struct.pack(">H", 1000) + b"bye"))
    [(opcode, _, payload)] = server_frames(layer.data_to_send())
    assert opcode == CLOSE and close_code(payload) == 1000
    assert layer.closed and layer.close_reason == "closed by the client (1000)"
    assert layer.receive_data(frame(BINARY, b"after")) == b""


def test_the_end_of_the_stream_above_sends_a_normal_close() -> None:
    layer = open_layer()
    [(opcode, _, payload)] = server_frames(layer.end_stream())
    assert opcode == CLOSE and close_code(payload) == 1000 and layer.closed
    assert layer.end_stream() == b"" and layer.data_to_send() == b""     # once


def test_settings_come_from_the_context_variables() -> None:
    values = {"deltamq.websocket_max_message_size": "4096",
              "deltamq.websocket_subprotocol_required": "false"}

    def resolve(text: str) -> str:
        return values[text[2:-1]]
    assert WebSocketSettings.resolved(resolve) == WebSocketSettings(4096, False)
    values["deltamq.websocket_max_message_size"] = "0"
    with pytest.raises(ConfigurationError, match="websocket_max_message_size"):
        WebSocketSettings.resolved(resolve)
    values["deltamq.websocket_max_message_size"] = "10"
    values["deltamq.websocket_subprotocol_required"] = "maybe"
    with pytest.raises(ConfigurationError, match="subprotocol_required"):
        WebSocketSettings.resolved(resolve)


# -- in the chain, with header detection and the real engine above -------------------------------

def test_a_refused_header_goes_back_in_a_binary_message_and_the_chains_end_closes() -> None:
    detector = HeaderDetector(SUPPORTED, HEADER_0_9_1)
    chain = LayerChain([WebSocketLayer(), detector])
    chain.receive(upgrade() + frame(BINARY, HEADER_FOR[AmqpVersion.V0_10]))
    assert chain.closed
    out = chain.send(b"") + chain.end()
    frames = server_frames(out.partition(b"\r\n\r\n")[2])
    assert frames[0] == (BINARY, True, HEADER_0_9_1)
    assert frames[1][0] == CLOSE and close_code(frames[1][2]) == 1000
    assert chain.end() == b""                                        # said once


def _over_websocket(host: FakeHost) -> tuple[AmqpProtocol, FakeTransport]:
    return _accepted(host, ConnectionRegistry(layers=websocket_layers(WebSocketSettings())))


def _binary_payload(data: bytes) -> bytes:
    frames = server_frames(data)
    assert all(op == BINARY for op, _, _ in frames), frames
    return b"".join(p for _, _, p in frames)


@pytest.mark.timeout(30)
def test_an_engine_serves_a_client_over_websocket_and_its_close_ends_the_websocket() -> None:
    async def scenario() -> None:
        host = FakeHost()
        proto, transport = _over_websocket(host)
        enc = Client(host)
        start_ok = enc.encode(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                                     response=b"\x00guest\x00guest"))
        stream = (upgrade() + frame(BINARY, HEADER_0_9_1[:5]) + frame(BINARY, HEADER_0_9_1[5:])
                  + frame(BINARY, start_ok[:9]) + frame(BINARY, start_ok[9:]))
        for i in range(len(stream)):                      # one byte at a time
            proto.data_received(stream[i:i + 1])
        head, _, frames = bytes(transport.written).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 ")
        for _ in range(500):                              # authentication runs in a thread
            if b"\x00\x0a\x00\x1e" in _binary_payload(frames):            # connection.tune
                break
            await asyncio.sleep(0.01)
            frames = bytes(transport.written).partition(b"\r\n\r\n")[2]
        proto.data_received(frame(BINARY, enc.encode(0, m.ConnectionTuneOk(
            channel_max=10, frame_max=131072, heartbeat=0)) + enc.encode(
            0, m.ConnectionOpen(virtual_host="/")) + enc.encode(1, m.ChannelOpen())))
        frames = bytes(transport.written).partition(b"\r\n\r\n")[2]
        assert [type(x) for x in methods(_binary_payload(frames))] == \
            [m.ConnectionStart, m.ConnectionTune, m.ConnectionOpenOk, m.ChannelOpenOk]
        # the client closes AMQP: close-ok, then the WebSocket's close, then the socket closes
        before = len(transport.written)
        proto.data_received(frame(BINARY, enc.encode(0, m.ConnectionClose(reply_code=200))))
        *data, (opcode, _, payload) = server_frames(bytes(transport.written[before:]))
        assert methods(b"".join(p for _, _, p in data)) == [m.ConnectionCloseOk()]
        assert opcode == CLOSE and close_code(payload) == 1000 and transport.closed

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_a_connection_the_broker_closes_ends_with_a_websocket_close() -> None:
    async def scenario() -> None:
        from broker import errors

        proto, transport = _over_websocket(FakeHost())
        proto.data_received(upgrade() + frame(BINARY, HEADER_0_9_1))
        assert proto.engine is not None
        before = len(transport.written)
        proto.close(errors.ConnectionForced("shutdown"))   # before the handshake finished
        frames = server_frames(bytes(transport.written[before:]))
        assert frames[-1][0] == CLOSE and close_code(frames[-1][2]) == 1000
        assert transport.closed

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_a_refused_upgrade_closes_the_socket_after_the_http_answer() -> None:
    async def scenario() -> None:
        proto, transport = _over_websocket(FakeHost())
        proto.data_received(upgrade("mqtt"))
        assert bytes(transport.written).startswith(b"HTTP/1.1 400 ") and transport.closed
        assert proto.engine is None

    asyncio.run(scenario())


# -- whatever a client sends, the layer answers or closes; it never raises -------------------------

@given(st.binary(max_size=600))
@settings(max_examples=300, deadline=None)
def test_garbage_after_the_upgrade_closes_or_passes_up_but_never_raises(garbage: bytes) -> None:
    layer = open_layer(WebSocketSettings(max_message_size=256))
    for o in range(0, len(garbage), 7):
        layer.receive_data(garbage[o:o + 7])
    out = layer.data_to_send()
    if layer.closed and out:
        assert server_frames(out)[-1][0] == CLOSE


@given(st.lists(st.tuples(st.sampled_from([TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION, 0x3]),
                          st.binary(max_size=140), st.booleans()), max_size=8))
@settings(max_examples=300, deadline=None)
def test_any_frame_sequence_is_answered_by_the_rfc_or_closed(
        frames: list[tuple[int, bytes, bool]]) -> None:
    layer = open_layer(WebSocketSettings(max_message_size=256))
    for opcode, payload, fin in frames:
        layer.receive_data(frame(opcode, payload, fin=fin))
        out = layer.data_to_send()
        sent = server_frames(out) if out else []
        assert all(op in (PONG, CLOSE) for op, _, _ in sent)
        if layer.closed:
            break
    assert layer.send_data(b"x") == (b"" if layer.closed else b"\x82\x01x")


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_a_garbage_request_is_refused_over_http_or_awaited(garbage: bytes) -> None:
    layer = WebSocketLayer()
    layer.receive_data(garbage + b"\r\n\r\n")
    assert layer.closed and layer.data_to_send().startswith(b"HTTP/1.1 4")
