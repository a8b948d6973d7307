"""The fast path of incoming AMQP frames: frame bodies without Frame objects, hot performatives
decoded without the generic dispatch.

Once a connection is open nearly every frame is a transfer, a flow or a
disposition.  :class:`~.framing.FrameReader` hands each frame out as a
:class:`~.framing.Frame` and :meth:`~.framing.Frame.performative` decodes its
body through the generic :func:`~.decoding.decode` (constructor dispatch,
descriptor lookup, a type check).  Here:

- :meth:`BodyReader.bodies` reads the same frames as
  :meth:`FrameReader.feed` (the same checks; a bad frame header is left to
  :meth:`FrameReader.next_frame`, which raises its error) but returns plain
  ``(type, channel, body)`` tuples;
- :func:`performative_of` goes straight to the generated decoder of a
  transfer, flow or disposition whose descriptor is the usual small ulong,
  and falls back to :meth:`Frame.performative` for every other body.

Both give exactly what the generic path gives on the same bytes, malformed
or cut short included (tests/unit/protocol/amqp1_0/test_incoming_frames.py).
"""

from __future__ import annotations

from struct import Struct
from typing import Final, cast

from .composite import Performative
from .decoding import DESCRIBED, Buffer
from .definitions import Disposition, Flow, Transfer
from .framing import FRAME_HEADER_SIZE, TYPE_AMQP, Frame, FrameReader
from .values import DecodeError

__all__ = ["BodyReader", "performative_of"]

_UNPACK_HEADER: Final = Struct(">IBBH").unpack_from
_TRANSFER: Final = Transfer.CODE
#: the descriptor codes decoded directly (the generated decoders, as the codec registered them)
_HOT: Final = {code: DESCRIBED[code] for code in (Transfer.CODE, Flow.CODE, Disposition.CODE)}


class BodyReader(FrameReader):
    """A :class:`FrameReader` that also reads frames as ``(type, channel, body)`` tuples."""

    __slots__ = ()

    def bodies(self, data: Buffer) -> list[tuple[int, int, bytes]]:
        """:meth:`FrameReader.feed` as tuples: every frame now complete (``[]``: need more bytes)."""
        self.append(data)
        buf = self._buffer
        pos = self._pos
        have = len(buf)
        limit = self.max_frame_size
        out: list[tuple[int, int, bytes]] = []
        append = out.append
        try:
            while not self._expect_header and have - pos >= FRAME_HEADER_SIZE:
                size, doff, frame_type, channel = _UNPACK_HEADER(buf, pos)
                if size > limit or size < FRAME_HEADER_SIZE or doff < 2 or doff * 4 > size:
                    self._pos = pos
                    self.next_frame()               # raises the FramingError that names what is wrong
                end = pos + size
                if have < end:
                    break
                append((frame_type, channel, bytes(buf[pos + doff * 4:end])))
                pos = end
        finally:
            self._pos = pos
        if pos:                             # one compaction per read, as feed does
            del buf[:pos]
            self._pos = 0
        return out


def performative_of(frame_type: int, channel: int, body: bytes) -> tuple[Performative, bytes]:
    """What :meth:`Frame.performative` returns for this frame: ``(performative, payload)``."""
    if frame_type == TYPE_AMQP and len(body) > 3 and body[0] == 0x00 and body[1] == 0x53:
        code = body[2]
        decoder = _HOT.get(code)
        if decoder is not None:
            value, o = decoder(body, 3, len(body), 1)
            if o == len(body):
                return cast(Performative, value), b""
            if code == _TRANSFER:
                return cast(Performative, value), body[o:]
            raise DecodeError(f"{value.SYMBOL} frame carries {len(body) - o} bytes after its performative", o)
    return Frame(frame_type, channel, body).performative()
