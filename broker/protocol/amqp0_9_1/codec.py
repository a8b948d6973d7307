"""Wire codec for AMQP 0-8/0-9/0-9-1: strings, field tables and frames.

Field tables use the type letters of the 0-9-1 errata as RabbitMQ and every
mainstream client implement them (``t b B s u I i l f d D S A T F V x``),
not the original 0-9-1 table (which disagreed with all implementations on
``s``/``U``/``L``).  Decoders take ``(buffer, offset)`` and return
``(value, new_offset)``; they raise ``ValueError``/``IndexError``/
``struct.error`` on malformed input, which the engine maps to 502
SYNTAX_ERROR or 501 FRAME_ERROR.
"""

from __future__ import annotations

import datetime as _dt
from decimal import Decimal
from struct import Struct, error as StructError, pack, unpack_from
from typing import Any

# Spec section 4.2.3 ("General Frame Format") and the constants in 1.8.
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_MIN_SIZE = 4096
FRAME_HEADER_SIZE = 7           # type, channel, size
FRAME_OVERHEAD = 8              # header + frame-end octet

FRAME_HEADER_STRUCT = Struct(">BHI")
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_U8 = Struct(">B")
_U16 = Struct(">H")
_U32 = Struct(">I")
_U64 = Struct(">Q")


def decode_shortstr(b: bytes, o: int) -> tuple[str, int]:
    n = b[o]
    end = o + 1 + n
    if end > len(b):
        raise ValueError("short string runs past the end of the frame")
    return bytes(b[o + 1:end]).decode("utf-8"), end


def decode_longstr(b: bytes, o: int) -> tuple[bytes, int]:
    n = unpack_from(">I", b, o)[0]
    end = o + 4 + n
    if end > len(b):
        raise ValueError("long string runs past the end of the frame")
    return bytes(b[o + 4:end]), end


def encode_shortstr(s: str | bytes) -> bytes:
    data = s.encode("utf-8") if isinstance(s, str) else s
    if len(data) > 255:
        raise ValueError(f"short string of {len(data)} bytes exceeds 255")
    return bytes((len(data),)) + data


def encode_longstr(data: bytes | str) -> bytes:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return _U32.pack(len(data)) + data


# -- field values -------------------------------------------------------------

def _decode_value(b: bytes, o: int, depth: int) -> tuple[Any, int]:
    kind = b[o]
    o += 1
    if kind == 0x53:   # 'S' long string: text when it is UTF-8, else bytes
        raw, o = decode_longstr(b, o)
        try:
            return raw.decode("utf-8"), o
        except UnicodeDecodeError:
            return raw, o
    if kind == 0x49:   # 'I' signed 32
        return unpack_from(">i", b, o)[0], o + 4
    if kind == 0x46:   # 'F' table
        return _decode_table(b, o, depth + 1)
    if kind == 0x74:   # 't' boolean
        return b[o] != 0, o + 1
    if kind == 0x6C:   # 'l' signed 64
        return unpack_from(">q", b, o)[0], o + 8
    if kind == 0x41:   # 'A' array
        return _decode_array(b, o, depth + 1)
    if kind == 0x54:   # 'T' timestamp (seconds)
        return _decode_timestamp(b, o), o + 8
    if kind == 0x62:   # 'b' signed 8
        return unpack_from(">b", b, o)[0], o + 1
    if kind == 0x42:   # 'B' unsigned 8
        return b[o], o + 1
    if kind == 0x73:   # 's' signed 16
        return unpack_from(">h", b, o)[0], o + 2
    if kind == 0x75:   # 'u' unsigned 16
        return unpack_from(">H", b, o)[0], o + 2
    if kind == 0x69:   # 'i' unsigned 32
        return unpack_from(">I", b, o)[0], o + 4
    if kind == 0x66:   # 'f' float
        return unpack_from(">f", b, o)[0], o + 4
    if kind == 0x64:   # 'd' double
        return unpack_from(">d", b, o)[0], o + 8
    if kind == 0x44:   # 'D' decimal: scale octet, signed 32 value
        scale = b[o]
        value = unpack_from(">i", b, o + 1)[0]
        return Decimal(value).scaleb(-scale), o + 5
    if kind == 0x56:   # 'V' void
        return None, o
    if kind == 0x78:   # 'x' byte array
        return decode_longstr(b, o)
    raise ValueError(f"unknown field value type {chr(kind)!r}")


MAX_NESTING = 64


def _decode_timestamp(b: bytes, o: int) -> _dt.datetime:
    # 64-bit POSIX seconds; Python's datetime ends at year 9999, so larger ones
    # are malformed here (a ValueError, like every other malformed value).
    secs = unpack_from(">Q", b, o)[0]
    try:
        return _dt.datetime.fromtimestamp(secs, _dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"timestamp {secs} is out of range (after year 9999)") from None


def _decode_table(b: bytes, o: int, depth: int) -> tuple[dict[str, Any], int]:
    if depth > MAX_NESTING:
        raise ValueError("field tables nested too deeply")
    size = unpack_from(">I", b, o)[0]
    o += 4
    end = o + size
    if end > len(b):
        raise ValueError("field table runs past the end of the frame")
    table: dict[str, Any] = {}
    while o < end:
        key, o = decode_shortstr(b, o)
        table[key], o = _decode_value(b, o, depth)
    if o != end:
        raise ValueError("field table entries overrun the table's declared size")
    return table, o


def _decode_array(b: bytes, o: int, depth: int) -> tuple[list[Any], int]:
    if depth > MAX_NESTING:
        raise ValueError("field arrays nested too deeply")
    size = unpack_from(">I", b, o)[0]
    o += 4
    end = o + size
    if end > len(b):
        raise ValueError("field array runs past the end of the frame")
    items: list[Any] = []
    while o < end:
        value, o = _decode_value(b, o, depth)
        items.append(value)
    if o != end:
        raise ValueError("field array entries overrun the array's declared size")
    return items, o


def decode_table(b: bytes, o: int) -> tuple[dict[str, Any], int]:
    return _decode_table(b, o, 0)


def decode_table_entries(data: bytes) -> dict[str, Any]:
    """Decode table entries without the 4-byte size (AMQPLAIN responses)."""
    return decode_table(_U32.pack(len(data)) + data, 0)[0]


def encode_value(value: Any) -> bytes:
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return b"I" + pack(">i", value)
        if -(1 << 63) <= value < (1 << 63):
            return b"l" + pack(">q", value)
        raise ValueError(f"integer {value} does not fit a field value")
    if isinstance(value, str):
        return b"S" + encode_longstr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"x" + encode_longstr(bytes(value))
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, (list, tuple)):
        body = b"".join(encode_value(v) for v in value)
        return b"A" + _U32.pack(len(body)) + body
    if isinstance(value, float):
        return b"d" + pack(">d", value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return b"T" + _U64.pack(int(value.timestamp()))
    if isinstance(value, Decimal):
        sign, digits, exponent = value.as_tuple()
        scale = -int(exponent) if isinstance(exponent, int) and exponent < 0 else 0
        unscaled = int(value.scaleb(scale))
        return b"D" + bytes((scale,)) + pack(">i", unscaled)
    if value is None:
        return b"V"
    raise ValueError(f"cannot encode {type(value).__name__} as a field value")


def encode_table(table: dict[str, Any] | None) -> bytes:
    if not table:
        return b"\x00\x00\x00\x00"
    body = b"".join(encode_shortstr(k) + encode_value(v) for k, v in table.items())
    return _U32.pack(len(body)) + body


def malformed_reason(exc: Exception) -> str:
    """What was wrong with undecodable input, in words: the codec's own texts
    already are; those of ``struct`` and of indexing speak of Python buffers."""
    if isinstance(exc, UnicodeDecodeError):
        return f"a string is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    if isinstance(exc, (IndexError, StructError)):
        return "the frame ends inside a field"
    return str(exc)


# -- frames -------------------------------------------------------------------

def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return FRAME_HEADER_STRUCT.pack(frame_type, channel, len(payload)) + payload + FRAME_END_BYTE


def method_frame(channel: int, payload: bytes) -> bytes:
    return FRAME_HEADER_STRUCT.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE
