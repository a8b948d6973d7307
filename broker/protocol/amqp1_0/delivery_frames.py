"""Fast paths of a delivery to a 1.0 consumer: its transfer frame and its payload.

Every message a consumer receives costs one transfer frame and one payload;
the generic codec builds a :class:`~.definitions.Transfer` and encodes it
field by field, and :func:`~.message_format.transfer_payload` splits the
message's metadata into sections and re-encodes its header.  These functions
write the same bytes directly, for the cases that are nearly all of them:

- :func:`transfer_frame` -- a delivery that fits one frame, with the fields
  :class:`~.links.SendingLink` sets (handle, delivery-id, a delivery-tag of at most
  32 octets, message-format 0, settled);
- :func:`payload_as_received` -- a 1.0 message kept as received with its body
  in one data section and no broker annotations: the metadata sections are
  copied, the header is rewritten (``delivery-count``, ``first-acquirer``)
  through a small cache of the rewrites seen.

Each returns None where it does not apply (a larger message, another layout,
metadata it does not recognise), and the caller takes the generic path.  The
output is byte for byte what the generic path writes: the tests compare them
(tests/unit/protocol/amqp1_0/test_delivery_frames.py).
"""

from __future__ import annotations

import dataclasses
from struct import Struct
from typing import Final, TypeVar

from .decoding import decode, skip
from .definitions import Header
from .encoding import FALSE, TRUE, enc_uint, encode
from .values import DecodeError

__all__ = ["transfer_frame", "accepted_frame", "payload_as_received", "payload_parts", "received_header", "remembered",
           "next_section", "USUAL_METADATA", "TAG", "first_payload_head"]

_FRAME_HEADER: Final = Struct(">IBBH").pack
_U32_PACK: Final = Struct(">I").pack
#: enc_uint of 0..255
_SMALL_UINTS: Final = [enc_uint(i) for i in range(256)]
#: a delivery id as 8 octets (the tests' delivery tag)
TAG: Final = Struct(">Q").pack
_TRANSFER: Final = b"\x00\x53\x14\xc0"       # descriptor of transfer, then a list8
_VBIN8_CODE: Final = 0xa0
_FORMAT_0: Final = b"\x43"                   # message-format 0 as uint0
#: everything but handle, id and tag: frame header, descriptor, list8 size and count,
#: the tag's constructor and length, message-format, settled
_FIXED: Final = 8 + len(_TRANSFER) + 2 + 2 + 1 + 1
#: the spec's limit on a delivery tag (2.8.7): its vbin8 keeps the list8 small
_TAG_MAX: Final = 32


def transfer_frame(channel: int, handle: int, delivery_id: int, tag: bytes, settled: bool,
                   payload: bytes | tuple[bytes, ...], max_frame_size: int) -> bytes | None:
    """The one transfer frame of a delivery (``more`` false), or None when it needs more frames
    (or the tag is longer than the spec allows).  ``payload``: its bytes, or its parts (as
    :func:`payload_parts` gives them), joined here with the frame in one copy.

    The same bytes as ``transfer_frames(channel, Transfer(handle=handle,
    delivery_id=delivery_id, delivery_tag=tag, message_format=0,
    settled=settled), payload, max_frame_size)[0]``.
    """
    parts: tuple[bytes, ...] = (payload,) if isinstance(payload, bytes) else payload
    h = _SMALL_UINTS[handle] if handle < 256 else enc_uint(handle)
    d = _SMALL_UINTS[delivery_id] if delivery_id < 256 else b"\x70" + _U32_PACK(delivery_id)
    t = len(tag)
    size = _FIXED + len(h) + len(d) + t + sum(map(len, parts))
    if size > max_frame_size or t > _TAG_MAX:
        return None
    return b"".join((_FRAME_HEADER(size, 2, 0, channel), _TRANSFER,
                     bytes((len(h) + len(d) + 2 + t + 3, 5)), h, d, bytes((_VBIN8_CODE, t)), tag,
                     _FORMAT_0, TRUE if settled else FALSE, *parts))


_ACCEPTED_TAIL: Final = b"\x41\x00\x53\x24\x45"       # settled true, state accepted (list0)
_DISPOSITION: Final = b"\x00\x53\x15\xc0"              # descriptor of disposition, then a list8


def accepted_frame(channel: int, first: int, last: int | None) -> bytes:
    """The broker's ``disposition`` settling deliveries ``first``..``last`` it received (role
    receiver) as accepted: the bytes of ``encode_frame(Disposition(role=True, first=first,
    last=last, settled=True, state=Accepted()), channel)``, written directly."""
    f = enc_uint(first)
    la = enc_uint(last)
    size = len(f) + len(la) + 7
    return b"".join((_FRAME_HEADER(size + 13, 2, 0, channel), _DISPOSITION, bytes((size, 5)), TRUE, f, la,
                     _ACCEPTED_TAIL))


# -- the payload of a message kept as received ------------------------------------------------

_VBIN8: Final = 0xa0
_VBIN32: Final = 0xb0
_HEADER_CODE: Final = Header.CODE
_LISTS: Final = frozenset((0x45, 0xc0, 0xd0))
_MAPS: Final = frozenset((0xc1, 0xd1))
#: the metadata sections of the usual message, in their order (spec 3.2), and the constructors
#: their values may have: header, message-annotations, properties, application-properties, footer
USUAL_METADATA: Final = {_HEADER_CODE: _LISTS, 0x72: _MAPS, 0x73: _LISTS, 0x74: _MAPS, 0x78: _MAPS}
_FOOTER: Final = 0x78


def next_section(buf: bytes, o: int, end: int, allowed: dict[int, frozenset[int]], last: int) -> int:
    """The descriptor code of the section at ``o`` in ``buf`` (within ``end``) if it is one of
    ``allowed`` (code -> the constructors its value may have), described by a small ulong and
    coming after the section of code ``last`` in the spec's order; -1 for anything else."""
    if o + 4 > end or buf[o] != 0x00 or buf[o + 1] != 0x53:
        return -1                                       # a symbolic descriptor, or not a section
    code = buf[o + 2]
    constructors = allowed.get(code)
    if constructors is None or code <= last or buf[o + 3] not in constructors:
        return -1
    return code
_DATA_HEADER: Final = b"\x00\x53\x75"
_U32: Final = Struct(">I").pack

_K = TypeVar("_K")
_V = TypeVar("_V")
#: entries a cache of metadata bytes holds before it starts afresh
CACHE_MAX: Final = 4096


def remembered(cache: dict[_K, _V], key: _K, value: _V) -> _V:
    """``value``, kept in ``cache`` under ``key``; a cache that has grown to :data:`CACHE_MAX`
    entries is emptied first (one publisher's messages share a few metadata shapes: a cache
    that fills up is seeing shapes that do not repeat)."""
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


#: header section as received -> its value (a frozen Header: shared safely)
_HEADERS: dict[bytes, Header] = {}


def received_header(section: bytes) -> Header:
    """The value of a header section (``section``: descriptor included, as split_sections found
    it), from a cache of the header sections seen; the codec's DecodeError when malformed."""
    value = _HEADERS.get(section)
    if value is None:
        value = decode(section)[0]
        if type(value) is not Header:
            raise DecodeError("a header section that is not a header", 0)
        remembered(_HEADERS, section, value)
    return value


#: (header section as received, delivery-count, first-acquirer) -> the header section to send
_REHEADERS: dict[tuple[bytes, int, bool], bytes] = {}


def _rewritten_header(header: bytes, delivery_count: int, first_acquirer: bool) -> bytes:
    key = (header, delivery_count, first_acquirer)
    out = _REHEADERS.get(key)
    if out is None:
        if header:
            value = received_header(header)
            out = encode(dataclasses.replace(value, delivery_count=delivery_count, first_acquirer=first_acquirer))
        elif delivery_count or first_acquirer:
            out = encode(Header(delivery_count=delivery_count, first_acquirer=first_acquirer))
        else:
            out = b""
        remembered(_REHEADERS, key, out)
    return out


class _Layout:
    """Where the parts of a payload are in native metadata: its header section as received (``b""``:
    none), the sections between header and body, the footer, and the header a first delivery gets."""

    __slots__ = ("header", "middle", "footer", "first_header", "vbin8", "first_heads")

    def __init__(self, native: bytes, header: bytes, start: int, footer: int) -> None:
        self.header = header
        self.middle = native[start:footer]
        self.footer = native[footer:]
        self.vbin8 = native[0] == _VBIN8
        self.first_header = _rewritten_header(header, 0, True)      # (DecodeError: none at all)
        #: body size -> (a first delivery's payload before the body, the footer): first_payload_head
        self.first_heads: dict[int, tuple[bytes, bytes]] = {}


#: native metadata -> its layout, or None where :func:`payload_as_received` does not apply
_LAYOUTS: dict[bytes, _Layout | None] = {}


def _layout(native: bytes) -> _Layout | None:
    """Where the header, the sections after it and the footer are in ``native``; None unless it is
    the layout octet of one data section's body followed by the known metadata sections in order."""
    layout = native[0]
    if layout != _VBIN8 and layout != _VBIN32:
        return None
    end = len(native)
    o = 1
    header = b""
    start, footer, last = 1, end, 0
    try:
        while o < end:
            code = next_section(native, o, end, USUAL_METADATA, last)
            if code < 0:
                return None
            last = code
            if code == _FOOTER:
                footer = o
            o = skip(native, o + 3, end)
            if code == _HEADER_CODE:
                header, start = native[1:o], o
        return _Layout(native, header, start, footer)
    except DecodeError:
        return None                                     # the generic path says what is wrong


#: the start of a data section of each vbin8 size: descriptor, constructor, size
_DATA8: Final = [_DATA_HEADER + bytes((_VBIN8, size)) for size in range(256)]


def payload_parts(native: bytes, body: bytes, delivery_count: int,
                  first_acquirer: bool) -> tuple[bytes, bytes, bytes, bytes, bytes] | None:
    """:func:`payload_as_received` in the parts it is made of, to be joined once with the transfer
    frame (:func:`transfer_frame`): header, the sections after it, the data section's start, the
    body, the footer; None where that is None."""
    if not native:
        return None
    try:
        layout = _LAYOUTS[native]
    except KeyError:
        layout = remembered(_LAYOUTS, native, _layout(native))
    if layout is None:
        return None
    if delivery_count == 0 and first_acquirer:
        header = layout.first_header
    else:
        header = _rewritten_header(layout.header, delivery_count, first_acquirer)   # (it decoded before)
    size = len(body)
    data = _DATA8[size] if size <= 255 and layout.vbin8 else _DATA_HEADER + b"\xb0" + _U32(size)
    return header, layout.middle, data, body, layout.footer


#: body sizes a layout keeps the first delivery's payload head for (one publisher: a few)
_FIRST_HEADS_MAX: Final = 64


def first_payload_head(native: bytes, size: int) -> tuple[bytes, bytes] | None:
    """What :func:`payload_parts` gives a first delivery (delivery-count 0, first-acquirer) of a
    body of ``size`` octets, as two parts: everything before the body in one, and the footer;
    None where that is None."""
    try:
        layout = _LAYOUTS[native]
    except KeyError:
        if not native:
            return None
        layout = remembered(_LAYOUTS, native, _layout(native))
    if layout is None:
        return None
    head = layout.first_heads.get(size)
    if head is None:
        data = _DATA8[size] if size <= 255 and layout.vbin8 else _DATA_HEADER + b"\xb0" + _U32(size)
        head = (layout.first_header + layout.middle + data, layout.footer)
        heads = layout.first_heads
        if len(heads) >= _FIRST_HEADS_MAX:
            heads.clear()
        heads[size] = head
    return head


def payload_as_received(native: bytes, body: bytes, delivery_count: int, first_acquirer: bool) -> bytes | None:
    """The transfer payload of a 1.0 message kept as (``native``, ``body``), without broker
    annotations, whose body is one data section; None for anything else.

    ``native`` is the layout octet and the metadata sections as received
    (:mod:`.message_format`): header, message-annotations, properties,
    application-properties, footer, each optional, in that order.  The payload
    is the header with ``delivery_count`` and ``first_acquirer`` set, the
    sections up to the footer as they are, the body as a data section, the
    footer.  Where the sections are in ``native`` comes from a bounded cache:
    messages from one publisher usually share their metadata bytes.
    """
    parts = payload_parts(native, body, delivery_count, first_acquirer)
    return None if parts is None else b"".join(parts)
