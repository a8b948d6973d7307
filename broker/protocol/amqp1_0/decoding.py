"""Decoding the AMQP 1.0 type system (spec part 1.6, "Encodings").

Every decoder takes ``(buffer, offset, end, depth)`` -- ``offset`` just past
the constructor byte, ``end`` the limit it must not read beyond (the buffer's
end, or the end its enclosing list, map or array declared) -- and returns
``(value, next_offset)``.  Nothing trusts a length: every size is checked
against ``end`` before it is used, a count against the bytes that could hold
it, nesting against :data:`MAX_DEPTH`.  Reading past the end of the buffer
raises :class:`NeedMore`; anything else malformed a :class:`DecodeError`.

Dispatch is one list index by constructor byte (:data:`BODIES`); fixed-width
values are read with precompiled ``struct`` unpackers; small integers come
from tables.  The ``field_*`` readers serve the generated composite decoders:
they accept only the encodings of the field's declared type (and null) and
return plain Python values.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from struct import Struct
from typing import Any

from .values import (MAX_DEPTH, Array, Byte, Char, Decimal32, Decimal64, Decimal128, DecodeError, Described,
                     Float32, Int, NeedMore, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort)

Buffer = bytes | bytearray | memoryview
Body = Callable[[Buffer, int, int, int], tuple[Any, int]]
DescribedDecoder = Callable[[Buffer, int, int, int], tuple[Any, int]]

#: descriptor (ulong code or symbol) -> decoder of the described value (filled by definitions.py)
DESCRIBED: dict[int | str, DescribedDecoder] = {}

_U16 = Struct(">H").unpack_from
_U32 = Struct(">I").unpack_from
unpack_uint = _U32                  # for the generated decoders' inline reads
_U32X2 = Struct(">II").unpack_from
_U64 = Struct(">Q").unpack_from
_I16 = Struct(">h").unpack_from
_I32 = Struct(">i").unpack_from
_I64 = Struct(">q").unpack_from
_F32 = Struct(">f").unpack_from
_F64 = Struct(">d").unpack_from

#: the most elements an array of a zero-width encoding (null, true, 0, list0 ...) may claim
MAX_ZERO_WIDTH = 255

_UBYTES = [UByte(i) for i in range(256)]
_BYTES = [Byte(i - 256 if i > 127 else i) for i in range(256)]
_SMALL_UINTS = [UInt(i) for i in range(256)]
_SMALL_ULONGS = [ULong(i) for i in range(256)]
_SMALL_INTS = [Int(i - 256 if i > 127 else i) for i in range(256)]
_SMALL_LONGS = [i - 256 if i > 127 else i for i in range(256)]


# -- errors ---------------------------------------------------------------------

def short(b: Buffer, o: int, need: int, end: int, what: str) -> DecodeError:
    """The error for ``need`` bytes of ``what`` at ``o`` that are not there before ``end``."""
    if end >= len(b):
        return NeedMore(f"{what} needs {need} bytes, the buffer ends {len(b) - o} bytes on", o)
    return DecodeError(f"{what} needs {need} bytes, its enclosing compound ends {end - o} bytes on", o)


def wrong_constructor(b: Buffer, o: int, what: str) -> DecodeError:
    return DecodeError(f"{what}: constructor 0x{b[o]:02x} is not an encoding of it", o)


def wrong_value(what: str, expected: str, value: Any, o: int) -> DecodeError:
    return DecodeError(f"{what}: expected {expected}, found {describe(value)}", o)


def list_mismatch(what: str, o: int, end: int) -> DecodeError:
    return DecodeError(f"{what}: its elements end at {o}, its size says {end}", o)


def mandatory(what: str, o: int) -> DecodeError:
    return DecodeError(f"{what} is mandatory but absent or null", o)


def describe(value: Any) -> str:
    """A short name of what a value is (for error messages)."""
    symbol = getattr(value, "SYMBOL", None)
    if isinstance(symbol, str):
        return symbol
    if isinstance(value, Described):
        return f"a value described by {value.descriptor!r}"
    return f"a {type(value).__name__}"


def _bad(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
    raise DecodeError(f"0x{b[o - 1]:02x} is not an AMQP 1.0 constructor", o - 1)


# -- fixed width ------------------------------------------------------------------

def _constant(value: Any) -> Body:
    def body(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
        return value, o
    return body


def _table(table: list[Any], what: str) -> Body:
    def body(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
        if o >= end:
            raise short(b, o, 1, end, what)
        return table[b[o]], o + 1
    return body


def _fixed(unpack: Callable[[Buffer, int], tuple[Any, ...]], width: int, wrap: Callable[[Any], Any] | None,
           what: str) -> Body:
    if wrap is None:
        def plain(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
            if o + width > end:
                raise short(b, o, width, end, what)
            return unpack(b, o)[0], o + width
        return plain

    def wrapped(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
        if o + width > end:
            raise short(b, o, width, end, what)
        return wrap(unpack(b, o)[0]), o + width
    return wrapped


def _boolean(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
    if o >= end:
        raise short(b, o, 1, end, "boolean")
    v = b[o]
    if v > 1:
        raise DecodeError(f"boolean octet must be 0x00 or 0x01, not 0x{v:02x}", o)
    return v == 1, o + 1


def _char(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
    if o + 4 > end:
        raise short(b, o, 4, end, "char")
    v = _U32(b, o)[0]
    if v > 0x10FFFF:
        raise DecodeError(f"char 0x{v:x} is not a Unicode code point", o)
    return Char(chr(v)), o + 4


def _uuid(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
    if o + 16 > end:
        raise short(b, o, 16, end, "uuid")
    return uuid.UUID(bytes=bytes(b[o:o + 16])), o + 16


def _decimal(cls: type[Decimal32] | type[Decimal64] | type[Decimal128]) -> Body:
    width = cls.WIDTH

    def body(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
        if o + width > end:
            raise short(b, o, width, end, cls.TYPE)
        return cls(bytes(b[o:o + width])), o + width
    return body


# -- variable width ---------------------------------------------------------------

def _variable(width: int, what: str, convert: Callable[[Buffer], Any]) -> Body:
    def body(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
        if o + width > end:
            raise short(b, o, width, end, f"{what} size")
        start = o + width
        stop = start + (b[o] if width == 1 else _U32(b, o)[0])
        if stop > end:
            raise short(b, start, stop - start, end, what)
        return convert(b[start:stop]), stop
    return body


def _text(cls: type[str], what: str) -> Callable[[Buffer], Any]:
    def convert(raw: Buffer) -> Any:
        try:
            text = str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"{what} is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
        return text if cls is str else cls(text)
    return convert


# -- compounds --------------------------------------------------------------------

def _compound_header(b: Buffer, o: int, end: int, width: int, what: str,
                     every_element_takes_a_byte: bool = True) -> tuple[int, int, int]:
    """Read the size and count of a list, map or array: (count, first element offset, end)."""
    if o + 2 * width > end:
        raise short(b, o, 2 * width, end, f"{what} size and count")
    if width == 1:
        size, count = b[o], b[o + 1]
    else:
        size, count = _U32X2(b, o)
    stop = o + width + size
    if stop > end:
        raise short(b, o + width, size, end, what)
    if size < width:
        raise DecodeError(f"{what} of {size} bytes cannot hold its {width}-byte count", o)
    first = o + 2 * width
    if count > stop - first and every_element_takes_a_byte:
        raise DecodeError(f"{what} claims {count} elements in {stop - first} bytes", o)
    return count, first, stop


def _elements(b: Buffer, o: int, end: int, count: int, depth: int, what: str) -> list[Any]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"{what} nested deeper than {MAX_DEPTH} levels", o)
    items: list[Any] = []
    append = items.append
    depth += 1
    for _ in range(count):
        if o >= end:
            raise short(b, o, 1, end, f"{what} element")
        v, o = BODIES[b[o]](b, o + 1, end, depth)
        append(v)
    if o != end:
        raise list_mismatch(what, o, end)
    return items


def _list(width: int) -> Body:
    what = "list8" if width == 1 else "list32"

    def body(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
        count, first, stop = _compound_header(b, o, end, width, what)
        return _elements(b, first, stop, count, depth, what), stop
    return body


def _map(width: int) -> Body:
    what = "map8" if width == 1 else "map32"

    def body(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
        count, first, stop = _compound_header(b, o, end, width, what)
        if count & 1:
            raise DecodeError(f"{what} has an odd number ({count}) of keys and values", o)
        flat = _elements(b, first, stop, count, depth, what)
        try:
            return dict(zip(flat[::2], flat[1::2])), stop
        except TypeError:
            raise DecodeError(f"{what} has a key of a type that cannot be a key here (list or map)", o) from None
    return body


def _array(width: int) -> Body:
    what = "array8" if width == 1 else "array32"

    def body(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
        count, p, stop = _compound_header(b, o, end, width, what, False)    # counted below
        if depth >= MAX_DEPTH:
            raise DecodeError(f"{what} nested deeper than {MAX_DEPTH} levels", o)
        if p >= stop:
            raise DecodeError(f"{what} has no element constructor", p)
        descriptor = None
        if b[p] == 0x00:
            descriptor, p = decode(b, p + 1, stop, depth + 1)
            if p >= stop:
                raise DecodeError(f"{what} has a descriptor but no element constructor", p)
        code = b[p]
        element = BODIES[code]
        if element is _bad or code == 0x00:
            raise DecodeError(f"{what} element constructor 0x{code:02x} is not a primitive encoding", p)
        p += 1
        # zero-width elements take no bytes: at most MAX_ZERO_WIDTH of them, whatever the buffer holds
        # beyond the array (bounded by the buffer, one value decoded or not by what followed it)
        if count > (stop - p if WIDTHS[code] else MAX_ZERO_WIDTH):
            raise DecodeError(f"{what} claims {count} elements of 0x{code:02x} in {stop - p} bytes"
                              f"{'' if WIDTHS[code] else f' (at most {MAX_ZERO_WIDTH} take no bytes)'}", o)
        items: list[Any] = []
        append = items.append
        depth += 1
        for _ in range(count):
            v, p = element(b, p, stop, depth)
            append(v)
        if p != stop:
            raise list_mismatch(what, p, stop)
        return Array(TYPE_NAMES[code], items, descriptor), stop
    return body


def _described(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"described value nested deeper than {MAX_DEPTH} levels", o)
    if o + 1 < end and b[o] == 0x53:                     # smallulong: every spec descriptor
        descriptor: Any = _SMALL_ULONGS[b[o + 1]]
        p = o + 2
    else:
        descriptor, p = decode(b, o, end, depth + 1)
    key_type = type(descriptor)
    if key_type is ULong or key_type is Symbol:
        if not DESCRIBED:
            _load_definitions()
        decoder = DESCRIBED.get(descriptor)
        if decoder is not None:
            return decoder(b, p, end, depth + 1)
    if p >= end:
        raise short(b, p, 1, end, "described value")
    value, p = BODIES[b[p]](b, p + 1, end, depth + 1)
    return Described(descriptor, value), p


def _load_definitions() -> None:
    from . import definitions  # noqa: F401  (registers the spec's described types)


def _build_tables() -> tuple[list[Body], list[int], list[str]]:
    bodies: list[Body] = [_bad] * 256
    widths = [1] * 256
    names = [""] * 256

    def put(code: int, name: str, body: Body, width: int = 1) -> None:
        bodies[code], widths[code], names[code] = body, width, name

    put(0x40, "null", _constant(None), 0)
    put(0x41, "boolean", _constant(True), 0)
    put(0x42, "boolean", _constant(False), 0)
    put(0x56, "boolean", _boolean)
    put(0x50, "ubyte", _table(_UBYTES, "ubyte"))
    put(0x60, "ushort", _fixed(_U16, 2, UShort, "ushort"))
    put(0x70, "uint", _fixed(_U32, 4, UInt, "uint"))
    put(0x52, "uint", _table(_SMALL_UINTS, "smalluint"))
    put(0x43, "uint", _constant(_SMALL_UINTS[0]), 0)
    put(0x80, "ulong", _fixed(_U64, 8, ULong, "ulong"))
    put(0x53, "ulong", _table(_SMALL_ULONGS, "smallulong"))
    put(0x44, "ulong", _constant(_SMALL_ULONGS[0]), 0)
    put(0x51, "byte", _table(_BYTES, "byte"))
    put(0x61, "short", _fixed(_I16, 2, Short, "short"))
    put(0x71, "int", _fixed(_I32, 4, Int, "int"))
    put(0x54, "int", _table(_SMALL_INTS, "smallint"))
    put(0x81, "long", _fixed(_I64, 8, None, "long"))
    put(0x55, "long", _table(_SMALL_LONGS, "smalllong"))
    put(0x72, "float", _fixed(_F32, 4, Float32, "float"))
    put(0x82, "double", _fixed(_F64, 8, None, "double"))
    put(0x74, "decimal32", _decimal(Decimal32))
    put(0x84, "decimal64", _decimal(Decimal64))
    put(0x94, "decimal128", _decimal(Decimal128))
    put(0x73, "char", _char)
    put(0x83, "timestamp", _fixed(_I64, 8, Timestamp, "timestamp"))
    put(0x98, "uuid", _uuid)
    put(0xa0, "binary", _variable(1, "vbin8", bytes))
    put(0xb0, "binary", _variable(4, "vbin32", bytes))
    put(0xa1, "string", _variable(1, "str8", _text(str, "str8")))
    put(0xb1, "string", _variable(4, "str32", _text(str, "str32")))
    put(0xa3, "symbol", _variable(1, "sym8", _text(Symbol, "sym8")))
    put(0xb3, "symbol", _variable(4, "sym32", _text(Symbol, "sym32")))
    put(0x45, "list", _constant_list, 0)
    put(0xc0, "list", _list(1))
    put(0xd0, "list", _list(4))
    put(0xc1, "map", _map(1))
    put(0xd1, "map", _map(4))
    put(0xe0, "array", _array(1))
    put(0xf0, "array", _array(4))
    put(0x00, "", _described)
    return bodies, widths, names


def _constant_list(b: Buffer, o: int, end: int, depth: int) -> tuple[Any, int]:
    return [], o                                        # a fresh list each time: lists are mutable


BODIES, WIDTHS, TYPE_NAMES = _build_tables()


# -- the public entry points ------------------------------------------------------

def decode(b: Buffer, offset: int = 0, end: int | None = None, depth: int = 0) -> tuple[Any, int]:
    """Decode one value at ``offset``: ``(value, offset just past it)``.

    ``end`` (default: the buffer's end) bounds the read.  Raises
    :class:`NeedMore` when the buffer ends inside the value, :class:`DecodeError`
    when it is malformed.
    """
    if end is None or end > len(b):
        end = len(b)
    if offset >= end:
        raise short(b, offset, 1, end, "a constructor")
    return BODIES[b[offset]](b, offset + 1, end, depth)


def decode_all(b: Buffer) -> list[Any]:
    """Every value in ``b``, one after the other (a buffer that is a sequence of values)."""
    values, o, end = [], 0, len(b)
    while o < end:
        v, o = BODIES[b[o]](b, o + 1, end, 0)
        values.append(v)
    return values


def skip(b: Buffer, o: int, end: int, depth: int = 0) -> int:
    """The offset past the value at ``o`` without decoding it (sizes are checked, contents not)."""
    if o >= end:
        raise short(b, o, 1, end, "a constructor")
    code = b[o]
    o += 1
    if code == 0x00:
        if depth >= MAX_DEPTH:
            raise DecodeError(f"described value nested deeper than {MAX_DEPTH} levels", o)
        return skip(b, skip(b, o, end, depth + 1), end, depth + 1)
    category = code >> 4
    if BODIES[code] is _bad:
        raise DecodeError(f"0x{code:02x} is not an AMQP 1.0 constructor", o - 1)
    if category <= 0x9:                                    # fixed width: 0, 1, 2, 4, 8, 16 bytes
        width = _FIXED_WIDTHS[category]
        if o + width > end:
            raise short(b, o, width, end, TYPE_NAMES[code])
        return o + width
    width = 1 if category in (0xa, 0xc, 0xe) else 4
    if o + width > end:
        raise short(b, o, width, end, f"{TYPE_NAMES[code]} size")
    stop = o + width + (b[o] if width == 1 else _U32(b, o)[0])
    if stop > end:
        raise short(b, o + width, stop - o - width, end, TYPE_NAMES[code])
    return stop


_FIXED_WIDTHS = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}


def skip_values(b: Buffer, o: int, end: int, count: int, what: str) -> int:
    """Skip ``count`` values (a composite's fields beyond those the spec knows)."""
    for _ in range(count):
        o = skip(b, o, end)
    return o


# -- typed readers for the generated composite decoders --------------------------

def composite_list(b: Buffer, o: int, end: int, what: str) -> tuple[int, int, int]:
    """The list a composite is encoded as: (field count, first field offset, list end)."""
    if o >= end:
        raise short(b, o, 1, end, what)
    code = b[o]
    if code == 0xc0:
        return _compound_header(b, o + 1, end, 1, what)
    if code == 0x45:
        return 0, o + 1, o + 1
    if code == 0xd0:
        return _compound_header(b, o + 1, end, 4, what)
    raise DecodeError(f"{what}: constructor 0x{code:02x} is not a list", o)


def _typed(codes: dict[int, Body], what_type: str) -> Callable[[Buffer, int, int, str], tuple[Any, int]]:
    table: list[Body | None] = [None] * 256
    for code, body in codes.items():
        table[code] = body

    def field(b: Buffer, o: int, end: int, what: str) -> tuple[Any, int]:
        if o >= end:
            raise short(b, o, 1, end, what)
        body = table[b[o]]
        if body is None:
            raise DecodeError(f"{what}: constructor 0x{b[o]:02x} is not a {what_type}", o)
        return body(b, o + 1, end, 0)
    return field


_NULL = _constant(None)
_PLAIN_SMALL = _table(list(range(256)), "small unsigned")


def field_uint(b: Buffer, o: int, end: int, what: str) -> tuple[int | None, int]:
    """A uint field (the hottest: handles, delivery ids, windows): a plain int or None."""
    if o >= end:
        raise short(b, o, 1, end, what)
    code = b[o]
    if code == 0x52:
        if o + 2 > end:
            raise short(b, o + 1, 1, end, what)
        return b[o + 1], o + 2
    if code == 0x43:
        return 0, o + 1
    if code == 0x40:
        return None, o + 1
    if code == 0x70:
        if o + 5 > end:
            raise short(b, o + 1, 4, end, what)
        return _U32(b, o + 1)[0], o + 5
    raise DecodeError(f"{what}: constructor 0x{code:02x} is not a uint", o)


def field_boolean(b: Buffer, o: int, end: int, what: str) -> tuple[bool | None, int]:
    if o >= end:
        raise short(b, o, 1, end, what)
    code = b[o]
    if code == 0x42:
        return False, o + 1
    if code == 0x41:
        return True, o + 1
    if code == 0x40:
        return None, o + 1
    if code == 0x56:
        return _boolean(b, o + 1, end, 0)
    raise DecodeError(f"{what}: constructor 0x{code:02x} is not a boolean", o)


field_ubyte = _typed({0x40: _NULL, 0x50: _PLAIN_SMALL}, "ubyte")
field_ushort = _typed({0x40: _NULL, 0x60: _fixed(_U16, 2, None, "ushort")}, "ushort")
field_ulong = _typed({0x40: _NULL, 0x80: _fixed(_U64, 8, None, "ulong"), 0x53: _PLAIN_SMALL,
                      0x44: _constant(0)}, "ulong")
field_timestamp = _typed({0x40: _NULL, 0x83: _fixed(_I64, 8, None, "timestamp")}, "timestamp")
field_binary = _typed({0x40: _NULL, 0xa0: BODIES[0xa0], 0xb0: BODIES[0xb0]}, "binary")
field_string = _typed({0x40: _NULL, 0xa1: BODIES[0xa1], 0xb1: BODIES[0xb1]}, "string")
field_symbol = _typed({0x40: _NULL, 0xa3: BODIES[0xa3], 0xb3: BODIES[0xb3]}, "symbol")


def _compound_field(codes: tuple[int, ...], what_type: str) -> Callable[[Buffer, int, int, int, str], tuple[Any, int]]:
    def field(b: Buffer, o: int, end: int, depth: int, what: str) -> tuple[Any, int]:
        if o >= end:
            raise short(b, o, 1, end, what)
        code = b[o]
        if code == 0x40:
            return None, o + 1
        if code not in codes:
            raise DecodeError(f"{what}: constructor 0x{code:02x} is not a {what_type}", o)
        return BODIES[code](b, o + 1, end, depth + 1)
    return field


field_map = _compound_field((0xc1, 0xd1), "map")
field_list = _compound_field((0x45, 0xc0, 0xd0), "list")


def field_fields(b: Buffer, o: int, end: int, depth: int, what: str) -> tuple[Any, int]:
    """A map whose keys are symbols by the spec (fields, annotations, filter-set): a string
    key a peer sent instead is read as the symbol, which is what the encoder writes back
    (:func:`.encoding.enc_fields`), so the value is the same after a round trip."""
    value, o = field_map(b, o, end, depth, what)
    if value and any(type(key) is str for key in value):
        value = {Symbol(key) if type(key) is str else key: item for key, item in value.items()}
    return value, o


def field_any(b: Buffer, o: int, end: int, depth: int, what: str) -> tuple[Any, int]:
    if o >= end:
        raise short(b, o, 1, end, what)
    return BODIES[b[o]](b, o + 1, end, depth + 1)


def field_symbols(b: Buffer, o: int, end: int, depth: int, what: str) -> tuple[list[Symbol] | None, int]:
    """A ``multiple="true"`` symbol field: null, one symbol, or an array of symbols (spec 1.4)."""
    if o >= end:
        raise short(b, o, 1, end, what)
    code = b[o]
    if code == 0x40:
        return None, o + 1
    if code == 0xa3 or code == 0xb3:
        value, o = BODIES[code](b, o + 1, end, depth)
        return [value], o
    if code == 0xe0 or code == 0xf0:
        array, o = BODIES[code](b, o + 1, end, depth + 1)
        if array.type != "symbol" or array.descriptor is not None:
            raise DecodeError(f"{what}: an array of {array.type}, not of symbols", o)
        return array.items, o
    raise DecodeError(f"{what}: constructor 0x{code:02x} is not a symbol or an array of them", o)
