"""The AMQP 1.0 type system (spec part 1): the one module the rest of the broker imports.

* the value model (:mod:`.values`): which Python type is which AMQP type;
* :func:`decode` ``(buffer, offset=0, end=None) -> (value, next_offset)``
  and :func:`decode_all`, :func:`skip` (:mod:`.decoding`);
* :func:`encode` ``(value) -> bytes`` and the per-type ``enc_*`` encoders
  (:mod:`.encoding`);
* the composite and described types of the spec with their constants
  (:mod:`.definitions`, generated), their bases (:mod:`.composite`) and
  ``Composite.decode_from(buffer, offset=0, end=None)`` /
  ``composite.encode()``.
"""

from __future__ import annotations

from .composite import Composite, DeliveryState, LifetimePolicy, Outcome, Performative, SaslFrame, Section
from .decoding import Buffer, decode, decode_all, skip
from . import definitions
from .definitions import *  # noqa: F401,F403  (every generated class and constant)
from .encoding import (enc_binary, enc_boolean, enc_fields, enc_map, enc_string, enc_symbol, enc_symbols,
                       enc_timestamp, enc_ubyte, enc_uint, enc_ulong, enc_ushort, encode)
from .values import (MAX_DEPTH, Array, Byte, Char, Decimal32, Decimal64, Decimal128, DecodeError, Described,
                     EncodeError, Float32, Int, NeedMore, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort)

__all__ = [
    "Array", "Buffer", "Byte", "Char", "Composite", "Decimal32", "Decimal64", "Decimal128",
    "DecodeError", "DeliveryState", "Described", "EncodeError", "Float32", "Int", "LifetimePolicy", "MAX_DEPTH",
    "NeedMore", "Outcome", "Performative", "SaslFrame", "Section", "Short", "Symbol", "Timestamp", "UByte",
    "UInt", "ULong", "UShort", "decode", "decode_all", "enc_binary", "enc_boolean", "enc_fields", "enc_map",
    "enc_string", "enc_symbol", "enc_symbols", "enc_timestamp", "enc_ubyte", "enc_uint", "enc_ulong",
    "enc_ushort", "encode", "skip",
]
__all__ += definitions.__all__
