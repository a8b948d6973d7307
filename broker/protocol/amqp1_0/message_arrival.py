"""The fast path of a message's arrival: the payload of the usual shape split without SectionSpans.

Nearly every 1.0 message is ``header? message-annotations? properties?
application-properties? data footer?`` -- one data section, no delivery
annotations.  :func:`~.message_format.message_from_transfer` keeps such a
message as its *native* metadata (the layout octet, then every section but the
body as received) and its *body* (the data section's content).
:func:`split_as_received` finds both with one pass of checks over the payload
and decodes the header through a cache of the header sections seen; for any
other shape (several data sections, amqp-value or amqp-sequence bodies,
delivery annotations, symbolic descriptors, anything malformed) it returns
None and the generic path decides -- and says what is wrong.  The result is
the generic path's on the same bytes (tests/unit/protocol/amqp1_0/test_message_arrival.py).
"""

from __future__ import annotations

from struct import Struct
from typing import Final

from broker.messaging.message import MessageProperties

from .decoding import skip
from .delivery_frames import USUAL_METADATA, next_section, received_header, remembered
from .definitions import Header
from .sections import FOOTER
from .values import DecodeError

__all__ = ["split_as_received", "light_properties"]

_U32: Final = Struct(">I").unpack_from
_MAPS: Final = frozenset((0xc1, 0xd1))
_HEADER_CODE: Final = Header.CODE
_DATA_SECTION: Final = b"\x00\x53\x75"
_FOOTER: Final = b"\x00\x53\x78"
#: the sections that may come before the body, and the constructors their values may have
_BEFORE_BODY: Final = {code: allowed for code, allowed in USUAL_METADATA.items() if code != FOOTER}

_NO_HEADER: Final = MessageProperties()
#: header section -> the properties a Message reads its persistence, priority and expiry from
_LIGHT: dict[bytes, MessageProperties] = {}


def light_properties(section: bytes, header: Header | None) -> MessageProperties:
    """The properties :class:`~broker.messaging.message.Message` reads (delivery mode, priority,
    expiration) of a header, cached by its section's bytes.

    A Message made from native bytes reads these and keeps nothing of them, so
    one instance serves every message with that header: nobody may change it.
    """
    if header is None:
        return _NO_HEADER
    light = _LIGHT.get(section)
    if light is None:
        light = remembered(_LIGHT, section, MessageProperties(
            delivery_mode=2 if header.durable else 1, priority=header.priority,
            expiration=None if header.ttl is None else str(header.ttl)))
    return light


#: the metadata before the body of the last payload split in full: (those bytes, the light
#: properties of its header, native bytes by layout octet for a payload without a footer)
_Prefix = tuple[bytes, MessageProperties, dict[int, bytes]]
_LAST: list[_Prefix] = [(b"\x01", _NO_HEADER, {})]    # matches no payload (a section starts with 0x00)


def split_as_received(payload: bytes) -> tuple[bytes, bytes, MessageProperties] | None:
    """``(native, body, light properties)`` of a payload of the usual shape, else None (the light
    properties: :func:`light_properties` of its header).

    Messages from one publisher usually carry the same sections before the
    body: a payload that begins with the bytes the last full split found
    there, then a data section, is split from there on (the same checks
    passed on the same bytes), and messages without a footer share one
    native object.
    """
    end = len(payload)
    last = _LAST[0]
    prefix = last[0]
    o = len(prefix)
    if payload.startswith(prefix) and o + 4 <= end and payload.startswith(_DATA_SECTION, o):
        light, natives = last[1], last[2]
    else:
        found = _metadata_end(payload, end)
        if found is None:
            return None
        o, section, header = found
        light = light_properties(section, header)
        natives = {}
        _LAST[0] = (payload[:o], light, natives)
    try:
        data = o
        constructor = payload[o + 3]
        if constructor == 0xa0:
            if o + 5 > end:
                return None
            value, stop = o + 5, o + 5 + payload[o + 4]
        elif constructor == 0xb0:
            if o + 8 > end:
                return None
            value = o + 8
            stop = value + _U32(payload, o + 4)[0]
        else:
            return None
        if stop > end:
            return None
        if stop < end and (not payload.startswith(_FOOTER, stop) or stop + 4 > end
                           or payload[stop + 3] not in _MAPS or skip(payload, stop + 3, end) != end):
            return None
    except DecodeError:
        return None
    if stop == end:
        native = natives.get(constructor)
        if native is None:
            native = natives[constructor] = bytes((constructor,)) + payload[:data]
    else:
        native = bytes((constructor,)) + payload[:data] + payload[stop:]
    return native, payload[value:stop], light


def _metadata_end(payload: bytes, end: int) -> tuple[int, bytes, Header | None] | None:
    """(where the data section starts, the header section, its value) of a payload whose sections
    before the body are the usual ones, in order, each well formed; None for anything else."""
    o = 0
    header = None
    section = b""
    last = 0
    try:
        while True:
            if o + 4 <= end and payload.startswith(_DATA_SECTION, o):
                return o, section, header
            code = next_section(payload, o, end, _BEFORE_BODY, last)
            if code < 0:
                return None
            last = code
            start, o = o, skip(payload, o + 3, end)
            if code == _HEADER_CODE:
                section = payload[start:o]
                header = received_header(section)
    except DecodeError:
        return None
