"""Content header of class ``basic``: the 14 message properties.

Spec 0-9-1 section 4.2.6.1 ("The Content Header"): class-id, weight,
body-size, then property flags (bit 15 = first property) and the present
properties in order.  A flags word with bit 0 set continues in another
word; no basic property lives there, but a peer may still send one.
"""

from __future__ import annotations

from collections.abc import Mapping
from struct import Struct
from typing import Any

from broker.messaging.message import MessageProperties
from broker.messaging.message_format import AMQP_0_9_1, register

from .codec import decode_shortstr, decode_table, encode_shortstr, encode_table

_HEADER = Struct(">HHQ")        # class-id, weight, body-size
_U8 = Struct(">B")
_U16 = Struct(">H")
_U64 = Struct(">Q")

# (attribute, wire type) in flag order, most significant bit first.
BASIC_PROPERTIES: tuple[tuple[str, str], ...] = (
    ("content_type", "shortstr"),
    ("content_encoding", "shortstr"),
    ("headers", "table"),
    ("delivery_mode", "octet"),
    ("priority", "octet"),
    ("correlation_id", "shortstr"),
    ("reply_to", "shortstr"),
    ("expiration", "shortstr"),
    ("message_id", "shortstr"),
    ("timestamp", "timestamp"),
    ("type", "shortstr"),
    ("user_id", "shortstr"),
    ("app_id", "shortstr"),
    ("cluster_id", "shortstr"),
)
_FLAGS = tuple((name, ty, 1 << (15 - i)) for i, (name, ty) in enumerate(BASIC_PROPERTIES))


def decode_properties(b: bytes, o: int = 0) -> MessageProperties:
    """Decode property flags and values starting at ``o``."""
    flags = _U16.unpack_from(b, o)[0]
    o += 2
    word = flags
    while word & 1:                     # continuation words carry no basic property
        word = _U16.unpack_from(b, o)[0]
        o += 2
    values: dict[str, Any] = {}
    if flags & 0xFFFE:
        for name, ty, bit in _FLAGS:
            if not flags & bit:
                continue
            if ty == "shortstr":
                values[name], o = decode_shortstr(b, o)
            elif ty == "octet":
                values[name] = b[o]
                o += 1
            elif ty == "table":
                values[name], o = decode_table(b, o)
            else:
                values[name] = _U64.unpack_from(b, o)[0]
                o += 8
    if o != len(b):
        raise ValueError("content header has bytes after its last property")
    return MessageProperties(**values)


def encode_properties(props: MessageProperties) -> bytes:
    flags = 0
    parts: list[bytes] = []
    for name, ty, bit in _FLAGS:
        value = getattr(props, name)
        if value is None:
            continue
        flags |= bit
        if ty == "shortstr":
            parts.append(encode_shortstr(str(value)))
        elif ty == "octet":
            parts.append(_U8.pack(value))
        elif ty == "table":
            parts.append(encode_table(value))
        else:
            parts.append(_U64.pack(int(value)))
    return _U16.pack(flags) + b"".join(parts)


class BasicPropertiesFormat:
    """The :class:`~broker.messaging.message_format.MessageFormat` of 0-8/0-9/0-9-1.

    Native bytes are the content header's property flags and values (after
    class-id, weight and body size).  The common view *is* the basic
    properties, so both directions are the wire codec; the broker's
    annotations become application headers, where RabbitMQ puts them for
    0-9-1 clients.
    """

    __slots__ = ()

    tag = AMQP_0_9_1

    def decode(self, native: bytes) -> MessageProperties:
        return decode_properties(native, 0)

    def encode(self, view: MessageProperties,
               annotations: Mapping[str, Any] | None = None) -> bytes:
        if annotations:
            view = view.replace(headers={**(view.headers or {}), **annotations})
        return encode_properties(view)

    def __repr__(self) -> str:
        return f"<message format {self.tag}>"


#: registered when the engine is imported; found by tag elsewhere (message_format.BUILTIN_FORMATS)
FORMAT = register(BasicPropertiesFormat())
EMPTY_PROPERTIES = b"\x00\x00"


def parse_content_header(payload: bytes) -> tuple[int, int, bytes]:
    """Split a header frame's payload into (class-id, body-size, property bytes)."""
    class_id, _weight, body_size = _HEADER.unpack_from(payload, 0)
    return class_id, body_size, payload[12:]


def content_header_payload(body_size: int, encoded_properties: bytes) -> bytes:
    return _HEADER.pack(60, 0, body_size) + encoded_properties


__all__ = [
    "BASIC_PROPERTIES", "BasicPropertiesFormat", "EMPTY_PROPERTIES", "FORMAT",
    "content_header_payload", "decode_properties", "encode_properties",
    "parse_content_header",
]
