"""The WebSocket layer, server side (``transport/websocket.py``: RFC 6455 under AMQP).

The first byte steers: its low bit picks the input -- 0: the client's raw
bytes from the first (the upgrade request itself is fuzzed), 1: a valid
upgrade request offering ``amqp``, then the rest as the client's frames --
and the other seven bits the size of the pieces the bytes arrive in (0: one
piece).  The layer allows messages of at most :data:`MAX_MESSAGE` bytes, so
that inputs can exceed it.

The layer never raises.  Before the request's head is complete it passes
nothing up and says nothing; a refused request gets an HTTP error response
(4xx or 5xx) and closes, with nothing passed up; an accepted one gets
``101 Switching Protocols``, after which the layer's own output is server
frames, unmasked: pongs, then at most one close, which is the last frame and
comes exactly when the layer says it is closed (the client's close answered,
or the layer's own for a fault).  Once closed, nothing passes up and nothing
more is said.  While open, the layer and wsproto's frame decoder hold at
most the message limit plus a frame's header and a control frame.
"""

from __future__ import annotations

import struct
from functools import partial

from broker.transport.websocket import MAX_REQUEST_HEAD, WebSocketLayer, WebSocketSettings
from fuzz.contract import ContractViolation, agree, bounded
from tests.unit.transport.test_websocket_layer import frame as client_frame

MAX_MESSAGE = 1024
SETTINGS = WebSocketSettings(max_message_size=MAX_MESSAGE)
#: a frame's longest header (2 + 8 length + 4 mask) and a control frame's longest payload
FRAMING_SLACK = 14 + 125
UPGRADE = (b"GET /amqp HTTP/1.1\r\nHost: localhost:5673\r\nUpgrade: websocket\r\n"
           b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: amqp\r\n\r\n")
SWITCHING = b"HTTP/1.1 101 "
CLOSE, PONG = 0x8, 0xA


def one_input(data: bytes) -> None:
    if not data:
        return
    piece, stream = data[0] >> 1 or len(data) or 1, data[1:]
    if data[0] & 1:
        stream = UPGRADE + stream
    layer = WebSocketLayer(SETTINGS)
    passed, said = b"", b""
    for at in range(0, len(stream), piece):
        was_closed = layer.closed
        up = layer.receive_data(stream[at:at + piece])
        out = layer.data_to_send()
        if was_closed and (up or out):
            raise ContractViolation(f"a closed layer passed up {up[:40]!r} and said {out[:40]!r}")
        passed, said = passed + up, said + out
        if layer.closed or not said.startswith(SWITCHING):
            bounded("the upgrade request held", layer.buffered_bytes, MAX_REQUEST_HEAD)
        else:
            proto = layer._ws.connection._proto if layer._ws.connection else None  # noqa: SLF001
            held = len(proto._frame_decoder.buffer) if proto else 0             # noqa: SLF001
            bounded("the open layer", layer.buffered_bytes + held, MAX_MESSAGE + FRAMING_SLACK)
    if said.startswith(SWITCHING):
        _check_frames(said[said.index(b"\r\n\r\n") + 4:], layer.closed)
    elif layer.closed:
        if said[:10] not in (b"HTTP/1.1 4", b"HTTP/1.1 5") or passed:
            raise ContractViolation(f"a refused upgrade answered {said[:60]!r}, passed up {passed[:40]!r}")
    else:
        agree("what an incomplete request leads to", (said, passed), (b"", b""))


def _check_frames(out: bytes, closed: bool) -> None:
    """The server's frames after the 101: pongs, then one close exactly when closed."""
    opcodes = []
    at = 0
    while at < len(out):
        if at + 2 > len(out):
            raise ContractViolation(f"a truncated server frame: {out[at:]!r}")
        first, length = out[at], out[at + 1]
        if length & 0x80:
            raise ContractViolation("the server masked a frame")
        at += 2
        if length == 126:
            (length,) = struct.unpack_from("!H", out, at)
            at += 2
        elif length == 127:
            (length,) = struct.unpack_from("!Q", out, at)
            at += 8
        if first & 0x70 or not first & 0x80 or at + length > len(out):
            raise ContractViolation(f"a malformed server frame at offset {at}: {out[at - 2:at + 8]!r}")
        opcodes.append(first & 0x0F)
        at += length
    if any(op not in (CLOSE, PONG) for op in opcodes) or CLOSE in opcodes[:-1]:
        raise ContractViolation(f"the layer's own frames are opcodes {opcodes}")
    agree("a close frame sent exactly when the layer is closed", bool(opcodes) and opcodes[-1] == CLOSE, closed)


#: a client's (masked) frame, built by hand as the layer's unit tests build them
frame = partial(client_frame, mask=b"\x11\x22\x33\x44")


def seeds() -> list[bytes]:
    header = b"AMQP\x00\x01\x00\x00"
    frames = [frame(0x2, header + b"\x00" * 24),
              frame(0x2, header[:3], fin=False) + frame(0x0, header[3:], fin=False) + frame(0x0, b"\x02"),
              frame(0x9, b"ping") + frame(0x2, header),
              frame(0x8, struct.pack("!H", 1000) + b"bye"),
              frame(0x1, "AMQP in text".encode()),
              frame(0x2, b"\x00" * (MAX_MESSAGE + 100)),
              frame(0x2, b"\x00" * 600, fin=False) + frame(0x0, b"\x00" * 600),
              frame(0x2, b"\x00\x01", mask=None)]                                    # unmasked
    return ([bytes([1]) + f for f in frames] + [bytes([1 | 7 << 1]) + frames[1]]
            + [bytes([0]) + UPGRADE, bytes([0]) + UPGRADE.replace(b"amqp", b"mqtt"),
               bytes([0]) + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", bytes([0]) + b"AMQP\x00\x00\x09\x01",
               bytes([0 | 9 << 1]) + UPGRADE + frames[0]])
