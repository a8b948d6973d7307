"""AMQP 1.0 frames (spec 2.3): protocol headers, frame headers, an incremental reader, writers.

A frame is ``size`` (4 octets, the whole frame), ``doff`` (data offset in
4-octet words, at least 2), ``type`` (0x00 AMQP, 0x01 SASL) and two
type-specific octets (the channel, for AMQP frames), then the extended
header (ignored, spec 2.3.1) and the body.  An empty body is an empty frame:
the heartbeat of idle time-out (spec 2.4.5).  The body of an AMQP frame is a
performative followed, for a transfer, by payload bytes (spec 2.3.2).

:class:`FrameReader` is sans-IO: bytes are fed in, complete frames come out,
and a frame whose header announces more than ``max_frame_size`` is refused
(:class:`FramingError`) before its body is buffered.  After a SASL exchange
the peer sends the AMQP protocol header inside the same byte stream (spec
5.3.1); the reader hands it out with :meth:`FrameReader.next_header`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from struct import Struct
from typing import ClassVar, cast

from broker.protocol.detect import HEADER_FOR, HEADER_SIZE, AmqpVersion

from .composite import Composite, Performative, SaslFrame
from .decoding import Buffer
from .definitions import MIN_MAX_FRAME_SIZE, Transfer
from .encoding import encode
from .values import DecodeError

#: "AMQP" 0 1.0.0 and "AMQP" 3 1.0.0 (spec 2.2, 5.3.1); "AMQP" 2 1.0.0 starts TLS (spec 5.2.1)
AMQP_HEADER = HEADER_FOR[AmqpVersion.V1_0]
SASL_HEADER = HEADER_FOR[AmqpVersion.V1_0_SASL]
TLS_HEADER = HEADER_FOR[AmqpVersion.V1_0_TLS]
PROTOCOL_HEADER_SIZE = HEADER_SIZE

TYPE_AMQP = 0x00
TYPE_SASL = 0x01
FRAME_HEADER_SIZE = 8
#: the largest frame a peer may send before open's max-frame-size is known (spec 2.7.1)
DEFAULT_MAX_FRAME_SIZE = 0xFFFFFFFF

_HEADER = Struct(">IBBH")
#: an empty AMQP frame on channel 0: the heartbeat (spec 2.4.5)
EMPTY_FRAME = _HEADER.pack(FRAME_HEADER_SIZE, 2, TYPE_AMQP, 0)

__all__ = ["AMQP_HEADER", "SASL_HEADER", "TLS_HEADER", "TYPE_AMQP", "TYPE_SASL", "EMPTY_FRAME",
           "MIN_MAX_FRAME_SIZE", "Frame", "FrameReader", "FramingError", "encode_frame", "encode_transfer",
           "transfer_frames"]


class FramingError(DecodeError):
    """A frame header that cannot be honoured: too large, too small, a bad data offset.

    Closes the connection with ``amqp:connection:framing-error`` (spec 2.8.16).
    """

    condition: ClassVar[str] = "amqp:connection:framing-error"


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame as read: ``type`` (TYPE_AMQP / TYPE_SASL), ``channel``, ``body`` (extended header
    dropped; empty for an empty frame)."""

    type: int
    channel: int
    body: bytes

    @property
    def empty(self) -> bool:
        """An empty frame: a heartbeat, nothing to decode."""
        return not self.body

    def performative(self) -> tuple[Performative, bytes]:
        """Decode an AMQP frame's body: ``(performative, payload)``; the payload is ``b""`` except
        for a transfer.  A SASL frame, or a body that is not a performative, is a DecodeError."""
        if self.type != TYPE_AMQP:
            raise DecodeError(f"frame of type 0x{self.type:02x} where an AMQP frame (0x00) belongs", 0)
        value, payload = _body(self.body, Performative)
        return cast(Performative, value), payload

    def sasl_frame(self) -> SaslFrame:
        """Decode a SASL frame's body (no payload may follow it)."""
        if self.type != TYPE_SASL:
            raise DecodeError(f"frame of type 0x{self.type:02x} where a SASL frame (0x01) belongs", 0)
        value, payload = _body(self.body, SaslFrame)
        if payload:
            raise DecodeError(f"{value.SYMBOL} frame carries {len(payload)} bytes after its body", 0)
        return cast(SaslFrame, value)


def _body(body: bytes, kind: type[Composite]) -> tuple[Composite, bytes]:
    value, o = kind.decode_from(body)
    if o == len(body):
        return value, b""
    if type(value) is not Transfer:
        raise DecodeError(f"{value.SYMBOL} frame carries {len(body) - o} bytes after its performative", o)
    return value, body[o:]


class FrameReader:
    """Incremental frame reader: :meth:`feed` bytes, get the complete frames back.

    ``max_frame_size`` is the limit this side announced (``open.max-frame-size``;
    512 octets until the open exchange is done, spec 2.4.1): a larger frame is
    a :class:`FramingError` as soon as its 8-byte header has arrived, before
    anything of its body is kept.
    """

    __slots__ = ("max_frame_size", "_buffer", "_pos", "_expect_header")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._pos = 0                       # frames before this offset are taken, not yet compacted
        self._expect_header = False

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._pos

    def append(self, data: Buffer) -> None:
        """Add received bytes without taking frames out (see :meth:`next_frame`)."""
        if self._pos:
            del self._buffer[:self._pos]
            self._pos = 0
        self._buffer += data

    def feed(self, data: Buffer) -> list[Frame]:
        """Add received bytes and return every frame now complete (``[]``: need more bytes).

        For the AMQP phase of a connection.  During SASL take frames one at a
        time with :meth:`append` and :meth:`next_frame`: a client may send the
        AMQP header right behind its last SASL frame, and the reader must be
        told (:meth:`expect_header`) before it reaches those bytes.
        """
        self.append(data)
        frames: list[Frame] = []
        while True:
            frame = self.next_frame()
            if frame is None:
                break
            frames.append(frame)
        if self._pos:                       # one compaction per feed, not one per frame
            del self._buffer[:self._pos]
            self._pos = 0
        return frames

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None when more bytes are needed (or a header is expected)."""
        buf, pos = self._buffer, self._pos
        if self._expect_header or len(buf) - pos < FRAME_HEADER_SIZE:
            return None
        size, doff, frame_type, channel = _HEADER.unpack_from(buf, pos)
        if size > self.max_frame_size:
            raise FramingError(f"frame of {size} bytes exceeds the max-frame-size of {self.max_frame_size}", pos)
        if size < FRAME_HEADER_SIZE:
            raise FramingError(f"frame size {size} is smaller than a frame header", pos)
        if doff < 2 or doff * 4 > size:
            raise FramingError(f"data offset {doff} is outside the frame of {size} bytes", pos + 4)
        end = pos + size
        if len(buf) < end:
            return None
        self._pos = end
        return Frame(frame_type, channel, bytes(buf[pos + doff * 4:end]))

    def expect_header(self) -> None:
        """The next 8 bytes are a protocol header (the AMQP header after a SASL outcome)."""
        self._expect_header = True

    def next_header(self) -> bytes | None:
        """The expected protocol header once its 8 bytes are in, else None."""
        pos = self._pos
        if not self._expect_header or len(self._buffer) - pos < PROTOCOL_HEADER_SIZE:
            return None
        self._pos = pos + PROTOCOL_HEADER_SIZE
        self._expect_header = False
        return bytes(self._buffer[pos:self._pos])


def encode_frame(body: Composite | None, channel: int = 0, payload: Buffer = b"",
                 frame_type: int = TYPE_AMQP) -> bytes:
    """A whole frame: header, ``body`` encoded (None: an empty frame), ``payload`` after it."""
    if body is None:
        return _HEADER.pack(FRAME_HEADER_SIZE, 2, frame_type, channel)
    encoded = encode(body)
    return _HEADER.pack(FRAME_HEADER_SIZE + len(encoded) + len(payload), 2, frame_type, channel) + encoded \
        + payload


def encode_transfer(channel: int, transfer: Transfer, payload: Buffer, max_frame_size: int) -> bytes:
    """A delivery as transfer frames of at most ``max_frame_size`` bytes, ready to write.

    The first frame carries ``transfer`` as given; if the payload does not
    fit, continuation frames repeat the handle and delivery-id with
    ``more=True`` on all but the last (spec 2.6.14).
    """
    return b"".join(transfer_frames(channel, transfer, payload, max_frame_size))


def transfer_frames(channel: int, transfer: Transfer, payload: Buffer, max_frame_size: int) -> list[bytes]:
    """:func:`encode_transfer` as a list of frames (to interleave other sessions' frames between them)."""
    first = encode(transfer)
    room = max_frame_size - FRAME_HEADER_SIZE - len(first)
    total = len(payload)
    if total <= room:
        return [_HEADER.pack(FRAME_HEADER_SIZE + len(first) + total, 2, TYPE_AMQP, channel) + first
                + bytes(payload)]
    if room <= 0:
        raise ValueError(f"max-frame-size {max_frame_size} leaves no room for payload after the transfer")
    view = memoryview(payload)
    more = encode(_with_more(transfer, True))
    frames = [_HEADER.pack(max_frame_size, 2, TYPE_AMQP, channel) + more + view[:max_frame_size
                                                                                   - FRAME_HEADER_SIZE - len(more)]]
    sent = max_frame_size - FRAME_HEADER_SIZE - len(more)
    middle = encode(Transfer(handle=transfer.handle, delivery_id=transfer.delivery_id, more=True))
    last = encode(Transfer(handle=transfer.handle, delivery_id=transfer.delivery_id, more=transfer.more))
    while sent < total:
        room = max_frame_size - FRAME_HEADER_SIZE - len(middle)
        if total - sent <= max_frame_size - FRAME_HEADER_SIZE - len(last):
            chunk, head = view[sent:], last
        else:                                           # leave the last frame something to carry
            chunk, head = view[sent:sent + min(room, total - sent - 1)], middle
        frames.append(_HEADER.pack(FRAME_HEADER_SIZE + len(head) + len(chunk), 2, TYPE_AMQP, channel) + head
                      + chunk)
        sent += len(chunk)
    return frames


def _with_more(transfer: Transfer, more: bool) -> Transfer:
    return transfer if transfer.more == more else replace(transfer, more=more)
