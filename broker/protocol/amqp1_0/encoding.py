"""Encoding the AMQP 1.0 type system (spec part 1.6), always in the smallest form.

:func:`encode` picks the encoder by the value's exact Python type (one dict
lookup; the value model is in :mod:`.values`).  The ``enc_*`` functions
encode a value as one declared AMQP type whatever its Python type (the
generated composite encoders use them: a field's spec type decides), and map
``None`` to null.  Smallest form: ``uint0``/``smalluint``, ``ulong0``/
``smallulong``, ``smallint``/``smalllong``, ``true``/``false``, ``list0``,
the 8-bit size forms when the content fits, trailing null fields of a
composite left out (spec 1.3: "a composite ... MAY omit trailing nulls").
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from struct import Struct, error as StructError
from typing import Any

from .values import (Array, Byte, Char, Decimal32, Decimal64, Decimal128, Described, EncodeError, Float32, Int,
                     Short, Symbol, Timestamp, UByte, UInt, ULong, UShort)

NULL = b"\x40"
TRUE = b"\x41"
FALSE = b"\x42"

_U8 = Struct(">B").pack
_U16 = Struct(">H").pack
_U32 = Struct(">I").pack
_U32X2 = Struct(">II").pack
_U64 = Struct(">Q").pack
_I8 = Struct(">b").pack
_I16 = Struct(">h").pack
_I32 = Struct(">i").pack
_I64 = Struct(">q").pack
_F32 = Struct(">f").pack
_F64 = Struct(">d").pack

_SMALL_UINT = [b"\x43"] + [b"\x52" + bytes((i,)) for i in range(1, 256)]
_SMALL_ULONG = [b"\x44"] + [b"\x53" + bytes((i,)) for i in range(1, 256)]

Encoder = Callable[[Any], bytes]
#: exact Python type -> encoder (composite classes are added by definitions.py)
ENCODERS: dict[type, Encoder] = {}


def _range(v: Any, low: int, high: int, name: str) -> EncodeError:
    return EncodeError(f"{v!r} is out of the range of {name} ({low}..{high})")


# -- scalars: each takes the declared type's value, or None for null ---------------

def enc_boolean(v: Any) -> bytes:
    return NULL if v is None else TRUE if v else FALSE


def enc_ubyte(v: Any) -> bytes:
    if v is None:
        return NULL
    if 0 <= v <= 0xFF:
        return b"\x50" + _U8(v)
    raise _range(v, 0, 0xFF, "ubyte")


def enc_ushort(v: Any) -> bytes:
    if v is None:
        return NULL
    if 0 <= v <= 0xFFFF:
        return b"\x60" + _U16(v)
    raise _range(v, 0, 0xFFFF, "ushort")


def enc_uint(v: Any) -> bytes:
    if v is None:
        return NULL
    if 0 <= v < 256:
        return _SMALL_UINT[v]
    if 0 <= v <= 0xFFFFFFFF:
        return b"\x70" + _U32(v)
    raise _range(v, 0, 0xFFFFFFFF, "uint")


def enc_ulong(v: Any) -> bytes:
    if v is None:
        return NULL
    if 0 <= v < 256:
        return _SMALL_ULONG[v]
    if 0 <= v <= 0xFFFFFFFFFFFFFFFF:
        return b"\x80" + _U64(v)
    raise _range(v, 0, 0xFFFFFFFFFFFFFFFF, "ulong")


def enc_byte(v: Any) -> bytes:
    if -128 <= v <= 127:
        return b"\x51" + _I8(v)
    raise _range(v, -128, 127, "byte")


def enc_short(v: Any) -> bytes:
    if -0x8000 <= v <= 0x7FFF:
        return b"\x61" + _I16(v)
    raise _range(v, -0x8000, 0x7FFF, "short")


def enc_int(v: Any) -> bytes:
    if -128 <= v <= 127:
        return b"\x54" + _I8(v)
    if -0x80000000 <= v <= 0x7FFFFFFF:
        return b"\x71" + _I32(v)
    raise _range(v, -0x80000000, 0x7FFFFFFF, "int")


def enc_long(v: Any) -> bytes:
    if -128 <= v <= 127:
        return b"\x55" + _I8(v)
    if -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
        return b"\x81" + _I64(v)
    raise _range(v, -0x8000000000000000, 0x7FFFFFFFFFFFFFFF, "long")


def enc_float(v: Any) -> bytes:
    try:
        return b"\x72" + _F32(v)
    except (OverflowError, StructError):
        raise EncodeError(f"{v!r} does not fit an IEEE 754 single") from None


def enc_double(v: Any) -> bytes:
    return b"\x82" + _F64(v)


def enc_char(v: Any) -> bytes:
    if len(v) != 1:
        raise EncodeError(f"a char is one code point, not {len(v)}")
    return b"\x73" + _U32(ord(v))


def enc_timestamp(v: Any) -> bytes:
    if v is None:
        return NULL
    if -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
        return b"\x83" + _I64(v)
    raise _range(v, -0x8000000000000000, 0x7FFFFFFFFFFFFFFF, "timestamp")


def enc_uuid(v: uuid.UUID) -> bytes:
    return b"\x98" + v.bytes


def _decimal(code: bytes) -> Encoder:
    def encoder(v: Any) -> bytes:
        return code + bytes(v)
    return encoder


def _sized(small: int, large: int, data: bytes) -> bytes:
    n = len(data)
    if n < 256:
        return bytes((small, n)) + data
    if n <= 0xFFFFFFFF:
        return bytes((large,)) + _U32(n) + data
    raise EncodeError(f"a value of {n} bytes exceeds the 4 GiB limit of a 32-bit size")


def enc_binary(v: Any) -> bytes:
    if v is None:
        return NULL
    return _sized(0xa0, 0xb0, v if type(v) is bytes else bytes(v))


def _utf8(v: str, what: str) -> bytes:
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(f"{what} {v!r} cannot be UTF-8 encoded: {exc.reason}") from None


def enc_string(v: Any) -> bytes:
    if v is None:
        return NULL
    return _sized(0xa1, 0xb1, _utf8(v, "string"))


def enc_symbol(v: Any) -> bytes:
    if v is None:
        return NULL
    return _sized(0xa3, 0xb3, _utf8(v, "symbol"))


# -- compounds ----------------------------------------------------------------------

def _compound(small: int, large: int, count: int, body: bytes) -> bytes:
    """A list, map or array from its count and encoded elements (8-bit form when it fits)."""
    size = len(body) + 1
    if size < 256 and count < 256:
        return bytes((small, size, count)) + body
    if size + 3 > 0xFFFFFFFF:
        raise EncodeError(f"a compound of {size} bytes exceeds the 4 GiB limit of a 32-bit size")
    return bytes((large,)) + _U32X2(size + 3, count) + body


def enc_list(v: Any) -> bytes:
    if v is None:
        return NULL
    if not v:
        return b"\x45"
    return _compound(0xc0, 0xd0, len(v), b"".join([encode(x) for x in v]))


def enc_map(v: Mapping[Any, Any] | None) -> bytes:
    if v is None:
        return NULL
    parts = []
    for key, value in v.items():
        parts.append(encode(key))
        parts.append(encode(value))
    return _compound(0xc1, 0xd1, len(parts), b"".join(parts))


def enc_fields(v: Mapping[Any, Any] | None) -> bytes:
    """A map whose keys are symbols by the spec (fields, annotations, filter-set): ``str`` keys
    become symbols; other keys (``ULong`` annotation keys, ``Symbol``) keep their type."""
    if v is None:
        return NULL
    parts = []
    for key, value in v.items():
        parts.append(enc_symbol(key) if type(key) is str else encode(key))
        parts.append(encode(value))
    return _compound(0xc1, 0xd1, len(parts), b"".join(parts))


def enc_symbols(v: Iterable[str] | None) -> bytes:
    """A ``multiple="true"`` symbol field: an array of symbols (null when None)."""
    if v is None:
        return NULL
    return _array_bytes("symbol", list(v), None)


def enc_described(v: Described) -> bytes:
    return b"\x00" + encode(v.descriptor) + encode(v.value)


def composite_bytes(prefix: bytes, fields: list[bytes]) -> bytes:
    """A composite: its descriptor ``prefix`` and its encoded fields as a list, trailing nulls left out."""
    n = len(fields)
    while n and fields[n - 1] == NULL:
        n -= 1
    if n == 0:
        return prefix + b"\x45"
    body = b"".join(fields if n == len(fields) else fields[:n])
    size = len(body) + 1
    if size < 256:
        return prefix + bytes((0xc0, size, n)) + body
    return prefix + b"\xd0" + _U32X2(size + 3, n) + body


# -- arrays: one constructor for all elements ----------------------------------------

def _fixed_elements(small: tuple[int, Callable[..., bytes], int, int] | None,
                    wide: tuple[int, Callable[..., bytes]]) -> Callable[[Sequence[Any]], tuple[int, bytes]]:
    def elements(items: Sequence[Any]) -> tuple[int, bytes]:
        try:
            if small is not None and all(small[2] <= x <= small[3] for x in items):
                pack = small[1]
                return small[0], b"".join([pack(x) for x in items])
            code, pack = wide
            return code, b"".join([pack(x) for x in items])
        except (StructError, OverflowError, TypeError) as exc:
            raise EncodeError(f"an array element does not fit its type: {exc}") from None
    return elements


def _variable_elements(small: int, large: int, convert: Callable[[Any], bytes]) -> Callable[[Sequence[Any]], tuple[int, bytes]]:
    def elements(items: Sequence[Any]) -> tuple[int, bytes]:
        data = [convert(x) for x in items]
        if all(len(d) < 256 for d in data):
            return small, b"".join([bytes((len(d),)) + d for d in data])
        return large, b"".join([_U32(len(d)) + d for d in data])
    return elements


def _compound_elements(code: int, strip: Callable[[Any], bytes]) -> Callable[[Sequence[Any]], tuple[int, bytes]]:
    return lambda items: (code, b"".join([strip(x) for x in items]))


def _wide_list(v: Any) -> bytes:
    body = b"".join([encode(x) for x in v])
    return _U32X2(len(body) + 4, len(v)) + body


def _wide_map(v: Any) -> bytes:
    body = b"".join([encode(k) + encode(x) for k, x in v.items()])
    return _U32X2(len(body) + 4, 2 * len(v)) + body


def _wide_array(v: Array) -> bytes:
    body = _array_body(v.type, list(v.items), v.descriptor)
    return _U32X2(len(body) + 4, len(v.items)) + body


_ELEMENTS: dict[str, Callable[[Sequence[Any]], tuple[int, bytes]]] = {
    "null": lambda items: (0x40, b""),
    "boolean": lambda items: (0x56, bytes([1 if x else 0 for x in items])),
    "ubyte": _fixed_elements(None, (0x50, _U8)),
    "ushort": _fixed_elements(None, (0x60, _U16)),
    "uint": _fixed_elements((0x52, _U8, 0, 255), (0x70, _U32)),
    "ulong": _fixed_elements((0x53, _U8, 0, 255), (0x80, _U64)),
    "byte": _fixed_elements(None, (0x51, _I8)),
    "short": _fixed_elements(None, (0x61, _I16)),
    "int": _fixed_elements((0x54, _I8, -128, 127), (0x71, _I32)),
    "long": _fixed_elements((0x55, _I8, -128, 127), (0x81, _I64)),
    "float": _fixed_elements(None, (0x72, _F32)),
    "double": _fixed_elements(None, (0x82, _F64)),
    "timestamp": _fixed_elements(None, (0x83, _I64)),
    "char": _fixed_elements(None, (0x73, lambda c: _U32(ord(c)))),
    "decimal32": lambda items: (0x74, b"".join([bytes(Decimal32(x)) for x in items])),
    "decimal64": lambda items: (0x84, b"".join([bytes(Decimal64(x)) for x in items])),
    "decimal128": lambda items: (0x94, b"".join([bytes(Decimal128(x)) for x in items])),
    "uuid": lambda items: (0x98, b"".join([x.bytes for x in items])),
    "binary": _variable_elements(0xa0, 0xb0, bytes),
    "string": _variable_elements(0xa1, 0xb1, lambda s: _utf8(s, "string")),
    "symbol": _variable_elements(0xa3, 0xb3, lambda s: _utf8(s, "symbol")),
    "list": _compound_elements(0xd0, _wide_list),
    "map": _compound_elements(0xd1, _wide_map),
    "array": _compound_elements(0xf0, _wide_array),
}


def _array_body(type_name: str, items: list[Any], descriptor: Any) -> bytes:
    """Constructor (described when there is a descriptor) and elements of an array."""
    elements = _ELEMENTS.get(type_name)
    if elements is None:
        raise EncodeError(f"no array of {type_name!r}: not an AMQP primitive type")
    code, body = elements(items)
    head = bytes((code,)) if descriptor is None else b"\x00" + encode(descriptor) + bytes((code,))
    return head + body


def _array_bytes(type_name: str, items: list[Any], descriptor: Any) -> bytes:
    return _compound(0xe0, 0xf0, len(items), _array_body(type_name, items, descriptor))


def enc_array(v: Array) -> bytes:
    return _array_bytes(v.type, list(v.items), v.descriptor)


# -- by Python type -----------------------------------------------------------------

ENCODERS.update({
    type(None): lambda v: NULL,
    bool: enc_boolean,
    int: enc_long,
    float: enc_double,
    str: enc_string,
    bytes: enc_binary,
    bytearray: enc_binary,
    memoryview: enc_binary,
    Symbol: enc_symbol,
    Char: enc_char,
    UByte: enc_ubyte,
    UShort: enc_ushort,
    UInt: enc_uint,
    ULong: enc_ulong,
    Byte: enc_byte,
    Short: enc_short,
    Int: enc_int,
    Timestamp: enc_timestamp,
    Float32: enc_float,
    Decimal32: _decimal(b"\x74"),
    Decimal64: _decimal(b"\x84"),
    Decimal128: _decimal(b"\x94"),
    uuid.UUID: enc_uuid,
    list: enc_list,
    tuple: enc_list,
    dict: enc_map,
    Described: enc_described,
    Array: enc_array,
})


def encode(value: Any) -> bytes:
    """The smallest encoding of ``value`` (see :mod:`.values` for which Python type is which AMQP type)."""
    encoder = ENCODERS.get(type(value))
    if encoder is None:
        encoder = _encoder_for_subclass(type(value))
    return encoder(value)


def _encoder_for_subclass(cls: type) -> Encoder:
    """The encoder of the nearest base that has one (an ``IntEnum`` encodes as its ``int``), cached."""
    for base in cls.__mro__[1:-1]:
        encoder = ENCODERS.get(base)
        if encoder is not None:
            ENCODERS[cls] = encoder
            return encoder
    if issubclass(cls, Mapping):
        return enc_map
    raise EncodeError(f"no AMQP 1.0 encoding for a {cls.__name__}")
