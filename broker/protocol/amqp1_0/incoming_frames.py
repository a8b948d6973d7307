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
from typing import Final

from .composite import Performative, new, slot_setters
from .decoding import DESCRIBED, Buffer
from .definitions import Disposition, Flow, Transfer
from .framing import FRAME_HEADER_SIZE, TYPE_AMQP, Frame, FrameReader
from .values import DecodeError

__all__ = ["BodyReader", "performative_of", "usual_transfer_fields", "TransferFields"]

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
        #: the buffer as bytes, copied once a frame is complete: each body one slice of it
        whole = b""
        try:
            while not self._expect_header and have - pos >= FRAME_HEADER_SIZE:
                size, doff, frame_type, channel = _UNPACK_HEADER(buf, pos)
                if size > limit or size < FRAME_HEADER_SIZE or doff < 2 or doff * 4 > size:
                    self._pos = pos
                    self.next_frame()               # raises the FramingError that names what is wrong
                end = pos + size
                if have < end:
                    break
                if not whole:
                    whole = bytes(buf)
                append((frame_type, channel, whole[pos + doff * 4:end]))
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
        if code == _TRANSFER:
            usual = _usual_transfer(body)
            if usual is not None:
                return usual
        decoder = _HOT.get(code)
        if decoder is not None:
            value: Performative
            value, o = decoder(body, 3, len(body), 1)
            if o == len(body):
                return value, b""
            if code == _TRANSFER:
                return value, body[o:]
            raise DecodeError(f"{value.SYMBOL} frame carries {len(body) - o} bytes after its performative", o)
    return Frame(frame_type, channel, body).performative()


_U32: Final = Struct(">I").unpack_from
_SET: Final = slot_setters(Transfer)


def _uint(body: bytes, o: int, e: int) -> tuple[int | None, int]:
    """A uint field in one of its usual encodings, within ``e``; (None, -1) for anything else."""
    if o >= e:
        return None, -1
    c = body[o]
    if c == 0x52:
        return (body[o + 1], o + 2) if o + 2 <= e else (None, -1)
    if c == 0x43:
        return 0, o + 1
    if c == 0x70:
        return (_U32(body, o + 1)[0], o + 5) if o + 5 <= e else (None, -1)
    return None, -1


def _boolean(body: bytes, o: int, e: int) -> int:
    """1 / 0 for true / false encoded in one octet at ``o`` within ``e``; -1 for anything else."""
    if o < e:
        c = body[o]
        if c == 0x41:
            return 1
        if c == 0x42:
            return 0
    return -1


#: a usual transfer's fields: handle, delivery-id, delivery-tag, message-format, settled, more,
#: and where its payload starts in the frame body
TransferFields = tuple[int, int, bytes, "int | None", "bool | None", bool, int]


def usual_transfer_fields(body: bytes) -> TransferFields | None:
    """The fields of a transfer frame body as clients usually encode it, read without the generic
    field readers: a list8 or list32 of handle, delivery-id, delivery-tag (vbin8), then message-format,
    settled and more or fewer of them, each in its usual encoding; None for anything else (the
    generated decoder then reads it, or says what is wrong)."""
    end = len(body)
    if end < 7 or body[0] != 0x00 or body[1] != 0x53 or body[2] != _TRANSFER:
        return None
    if body[3] == 0xc0:                               # list8 (proton, Qpid JMS, the broker's own codec)
        e = 5 + body[4]
        count = body[5]
        o = 6
    elif body[3] == 0xd0 and end >= 12:               # list32 (rhea)
        e = 8 + _U32(body, 4)[0]
        count = _U32(body, 8)[0]
        o = 12
    else:
        return None
    if e > end or count < 3 or count > 6 or e - o < count:
        return None
    handle, o = _uint(body, o, e)
    if handle is None:
        return None
    delivery_id, o = _uint(body, o, e)
    if delivery_id is None or o + 2 > e or body[o] != 0xa0:
        return None
    tag_end = o + 2 + body[o + 1]
    if tag_end > e:
        return None
    tag = body[o + 2:tag_end]
    o = tag_end
    message_format: int | None = None
    if count > 3:
        message_format, o = _uint(body, o, e)
        if o < 0:
            return None
    settled: bool | None = None
    if count > 4:
        flag = _boolean(body, o, e)
        if flag < 0:
            return None
        settled = flag == 1
        o += 1
    more = False
    if count > 5:
        flag = _boolean(body, o, e)
        if flag < 0:
            return None
        more = flag == 1
        o += 1
    if o != e:
        return None
    return handle, delivery_id, tag, message_format, settled, more, e


def _usual_transfer(body: bytes) -> tuple[Performative, bytes] | None:
    """The Transfer of :func:`usual_transfer_fields`, and its payload; None where that is None."""
    fields = usual_transfer_fields(body)
    if fields is None:
        return None
    handle, delivery_id, tag, message_format, settled, more, e = fields
    m = new(Transfer)
    s = _SET
    s[0](m, handle)
    s[1](m, delivery_id)
    s[2](m, tag)
    s[3](m, message_format)
    s[4](m, settled)
    s[5](m, more)
    s[6](m, None)
    s[7](m, None)
    s[8](m, False)
    s[9](m, False)
    s[10](m, False)
    return m, body[e:]
