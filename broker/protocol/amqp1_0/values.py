"""The Python value model of the AMQP 1.0 type system (spec part 1, "Types").

Python has one ``int``, one ``str``, one ``bytes``; AMQP has a dozen
integer types, strings and symbols, binaries and decimals.  Where the
natural Python value is ambiguous, a thin subclass names the AMQP type, so a
decoded value encodes back to the type it came in as, and a value the broker
builds says what it is on the wire:

==============================  =========================================
Python value                    AMQP type
==============================  =========================================
``None``                        null
``bool``                        boolean
``int``                         long (``smalllong`` when it fits a byte)
``UByte UShort UInt ULong``     ubyte ushort uint ulong
``Byte Short Int``              byte short int
``float`` / ``Float32``         double / float
``Decimal32/64/128``            decimal32/64/128 (the IEEE 754 bytes, raw)
``Char``                        char (one code point)
``Timestamp``                   timestamp (ms since the Unix epoch)
``uuid.UUID``                   uuid
``bytes`` (bytearray, ...)      binary
``str`` / ``Symbol``            string / symbol
``list`` (tuple)                list
``dict``                        map
``Array``                       array (one element type, maybe described)
``Described``                   a described value whose descriptor the
                                broker does not know (filters, ...)
``Composite`` subclasses        the spec's composite types (definitions.py)
==============================  =========================================

The subclasses compare and hash like their base (``UInt(1) == 1``,
``Symbol("a") == "a"``): code that only reads values needs no conversions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from broker.errors import FrameError

#: compound values nested deeper than this are refused (a decoder's stack is finite)
MAX_DEPTH = 64


class DecodeError(FrameError, ValueError):
    """Malformed AMQP 1.0 input; ``offset`` is where in the buffer it was found.

    The engine answers it with ``condition`` (spec 2.8.15, ``amqp:decode-error``).
    A ``ValueError`` too, as :class:`~broker.messaging.message_format.MessageFormat`
    decoders are expected to raise.
    """

    condition: ClassVar[str] = "amqp:decode-error"

    def __init__(self, text: str, offset: int = -1) -> None:
        super().__init__(text if offset < 0 else f"{text} (at offset {offset})")
        self.offset = offset


class NeedMore(DecodeError):
    """The buffer ends before the value does: more bytes may complete it.

    Raised only where a read runs past the end of the *buffer*; running past
    the size an enclosing list, map or array declared is a plain
    :class:`DecodeError`.  Inside a complete frame it is malformed input all
    the same (and a ``DecodeError``, so one ``except`` covers both).
    """


class EncodeError(ValueError):
    """A value that has no AMQP 1.0 encoding (out of range, unknown type)."""


class Symbol(str):
    """An AMQP symbol: a name from a constrained domain (ASCII by the spec)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


class Char(str):
    """An AMQP char: a single Unicode code point (UTF-32BE on the wire)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Char({str.__repr__(self)})"


class _Sized(int):
    __slots__ = ()
    TYPE: ClassVar[str] = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int.__repr__(self)})"


class UByte(_Sized):
    __slots__ = ()
    TYPE = "ubyte"


class UShort(_Sized):
    __slots__ = ()
    TYPE = "ushort"


class UInt(_Sized):
    __slots__ = ()
    TYPE = "uint"


class ULong(_Sized):
    __slots__ = ()
    TYPE = "ulong"


class Byte(_Sized):
    __slots__ = ()
    TYPE = "byte"


class Short(_Sized):
    __slots__ = ()
    TYPE = "short"


class Int(_Sized):
    __slots__ = ()
    TYPE = "int"


class Timestamp(_Sized):
    """Milliseconds since the Unix epoch (signed 64-bit)."""

    __slots__ = ()
    TYPE = "timestamp"


class Float32(float):
    """An IEEE 754 single precision value (AMQP float; Python's float is AMQP double)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Float32({float.__repr__(self)})"


class _Decimal(bytes):
    """IEEE 754 decimal floating point, kept as its raw big-endian bytes (never computed on)."""

    WIDTH: ClassVar[int] = 0
    TYPE: ClassVar[str] = ""

    def __new__(cls, raw: bytes) -> _Decimal:
        if len(raw) != cls.WIDTH:
            raise EncodeError(f"{cls.TYPE} takes {cls.WIDTH} bytes, not {len(raw)}")
        return super().__new__(cls, raw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({bytes.__repr__(self)})"


class Decimal32(_Decimal):
    WIDTH, TYPE = 4, "decimal32"


class Decimal64(_Decimal):
    WIDTH, TYPE = 8, "decimal64"


class Decimal128(_Decimal):
    WIDTH, TYPE = 16, "decimal128"


@dataclass(frozen=True, slots=True)
class Described:
    """A described value the broker has no class for: its descriptor (a ``ULong`` or a
    ``Symbol`` in practice) and the underlying value."""

    descriptor: Any
    value: Any


@dataclass(frozen=True, slots=True)
class Array:
    """An AMQP array: ``items`` all of AMQP type ``type`` (a primitive type's name:
    "symbol", "uint", "list", "array", ...).

    With a ``descriptor`` every element is a described value with that
    descriptor and ``items`` hold the underlying (undescribed) values.
    """

    type: str
    items: tuple[Any, ...] | list[Any]
    descriptor: Any = None

    def __len__(self) -> int:
        return len(self.items)
