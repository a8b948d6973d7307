"""Hypothesis strategies for AMQP 1.0 values, and comparing values type by type.

``UInt(1) == 1 == True`` in Python: a round trip that turned a uint into a
long would still compare equal, so the tests compare with :func:`same`,
which also demands the same (AMQP) type at every level.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from hypothesis import strategies as st

from broker.protocol.amqp1_0.types import (Array, Byte, Char, Decimal32, Decimal64, Decimal128, Described,
                                           Float32, Int, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type, recursively (floats bit for bit, so NaN is itself)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        fmt = ">f" if type(a) is Float32 else ">d"
        return struct.pack(fmt, a) == struct.pack(fmt, b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(same(k1, k2) and same(v1, v2)
                                        for (k1, v1), (k2, v2) in zip(a.items(), b.items()))
    if isinstance(a, Array):
        return a.type == b.type and same(a.descriptor, b.descriptor) and same(list(a.items), list(b.items))
    if isinstance(a, Described):
        return same(a.descriptor, b.descriptor) and same(a.value, b.value)
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return bool(a == b)


def _ints(cls: type, low: int, high: int) -> st.SearchStrategy[Any]:
    return st.integers(low, high).map(cls)


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
symbols = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=20).map(Symbol)

#: one strategy per AMQP primitive type name, for scalars and array elements
SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "ubyte": _ints(UByte, 0, 0xFF),
    "ushort": _ints(UShort, 0, 0xFFFF),
    "uint": _ints(UInt, 0, 0xFFFFFFFF),
    "ulong": _ints(ULong, 0, 0xFFFFFFFFFFFFFFFF),
    "byte": _ints(Byte, -128, 127),
    "short": _ints(Short, -0x8000, 0x7FFF),
    "int": _ints(Int, -0x80000000, 0x7FFFFFFF),
    "long": st.integers(-0x8000000000000000, 0x7FFFFFFFFFFFFFFF),
    "float": st.floats(width=32).map(Float32),
    "double": st.floats(),
    "decimal32": st.binary(min_size=4, max_size=4).map(Decimal32),
    "decimal64": st.binary(min_size=8, max_size=8).map(Decimal64),
    "decimal128": st.binary(min_size=16, max_size=16).map(Decimal128),
    "char": st.characters(blacklist_categories=("Cs",)).map(Char),
    "timestamp": _ints(Timestamp, -0x8000000000000000, 0x7FFFFFFFFFFFFFFF),
    "uuid": st.uuids(),
    "binary": st.binary(max_size=300),
    "string": text | st.text(max_size=300, alphabet="ab"),
    "symbol": symbols,
}
HASHABLE = st.one_of(st.none(), *SCALARS.values())


def arrays() -> st.SearchStrategy[Array]:
    def of(type_name: str) -> st.SearchStrategy[Array]:
        return st.lists(SCALARS[type_name], max_size=8).map(lambda items: Array(type_name, items))
    simple = st.sampled_from(sorted(SCALARS)).flatmap(of)
    described = st.lists(SCALARS["string"], max_size=4).map(
        lambda items: Array("string", items, Symbol("org.example:thing")))
    return simple | described


def values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """Any AMQP value: scalars, lists, maps, arrays (also of lists) and described values."""
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.lists(children, max_size=6),
            st.dictionaries(HASHABLE, children, max_size=5),
            st.lists(st.lists(children, max_size=3), max_size=3).map(lambda items: Array("list", items)),
            st.builds(Described, st.sampled_from([Symbol("org.example:x"), ULong(0x0000_4567_0000_0001)]),
                      children),
        )
    return st.recursive(HASHABLE | arrays(), extend, max_leaves=max_leaves)

