"""The type system codec against byte tables: every constructor of spec part 1.6.

Several encodings of one value are legal, so a table row is checked by
decoding (the value and its AMQP type must match), then encoding what was
decoded and decoding that again (spec: "compare decoded values").  A second
table pins the smallest encoding the encoder must choose.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from broker.protocol.amqp1_0.definitions import ENCODINGS
from broker.protocol.amqp1_0.types import (Accepted, Array, Byte, Char, Decimal32, Decimal64, Decimal128, Described,
                                           EncodeError, Float32, Header, Int, Open, Rejected, Short, Source, Symbol,
                                           Timestamp, Transfer, UByte, UInt, ULong, UShort, decode, decode_all,
                                           encode)
from broker.protocol.amqp1_0.types import Error as AmqpError

from .strategies import same

U = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")

# (hex of one encoded value, the value decoded) -- section 1.6 of the spec, code by code
DECODE_TABLE: list[tuple[str, Any]] = [
    ("40", None),
    ("41", True),
    ("42", False),
    ("56 01", True),
    ("56 00", False),
    ("50 ff", UByte(255)),
    ("60 ff fe", UShort(0xFFFE)),
    ("70 00 01 00 00", UInt(65536)),
    ("52 07", UInt(7)),
    ("43", UInt(0)),
    ("80 00 00 00 01 00 00 00 00", ULong(2 ** 32)),
    ("53 ff", ULong(255)),
    ("44", ULong(0)),
    ("51 ff", Byte(-1)),
    ("61 80 00", Short(-32768)),
    ("71 80 00 00 00", Int(-2 ** 31)),
    ("54 80", Int(-128)),
    ("81 ff ff ff ff ff ff ff fe", -2),
    ("55 7f", 127),
    ("72 3f c0 00 00", Float32(1.5)),
    ("82 3f f8 00 00 00 00 00 00", 1.5),
    ("74 22 50 00 01", Decimal32(bytes.fromhex("22500001"))),
    ("84 31 00 00 00 00 00 00 07", Decimal64(bytes.fromhex("3100000000000007"))),
    ("94" + " 30" * 2 + " 00" * 13 + " 2a", Decimal128(bytes.fromhex("3030" + "00" * 13 + "2a"))),
    ("73 00 01 f6 00", Char("\U0001f600")),
    ("83 00 00 01 8b cf e5 68 00", Timestamp(0x18BCFE56800)),
    ("98 " + U.bytes.hex(), U),
    ("a0 03 01 02 03", b"\x01\x02\x03"),
    ("b0 00 00 00 03 01 02 03", b"\x01\x02\x03"),
    ("a1 05 68 65 6c 6c 6f", "hello"),
    ("b1 00 00 00 02 c3 a9", "\u00e9"),
    ("a3 03 66 6f 6f", Symbol("foo")),
    ("b3 00 00 00 03 66 6f 6f", Symbol("foo")),
    ("45", []),
    ("c0 03 02 41 42", [True, False]),
    ("d0 00 00 00 06 00 00 00 02 41 42", [True, False]),
    ("c1 05 02 a1 01 61 41", {"a": True}),
    ("d1 00 00 00 08 00 00 00 02 a3 01 61 43", {Symbol("a"): UInt(0)}),
    ("e0 04 02 52 01 02", Array("uint", [UInt(1), UInt(2)])),
    ("f0 00 00 00 0d 00 00 00 02 70 00 00 00 01 00 00 01 00", Array("uint", [UInt(1), UInt(256)])),
    ("e0 07 02 a3 01 61 02 62 63", Array("symbol", [Symbol("a"), Symbol("bc")])),
    ("e0 05 03 56 01 00 01", Array("boolean", [True, False, True])),
    ("00 a3 03 66 6f 6f a1 01 78", Described(Symbol("foo"), "x")),
    ("00 80 00 00 45 67 00 00 00 01 40", Described(ULong(0x4567_0000_0001), None)),
    ("00 53 14 c0 02 01 43", Transfer(handle=0)),
    ("00 a3 12 " + b"amqp:transfer:list".hex() + " c0 02 01 43", Transfer(handle=0)),
    ("00 53 24 45", Accepted()),
    ("00 53 24 c0 01 00", Accepted()),
    ("00 53 24 d0 00 00 00 04 00 00 00 00", Accepted()),
    # an array of described values: one descriptor, one constructor, the underlying values
    ("e0 0a 02 00 a3 01 78 a1 01 61 01 62", Array("string", ["a", "b"], Symbol("x"))),
    # an array of lists, and of arrays
    ("e0 0b 01 d0 00 00 00 05 00 00 00 01 41", Array("list", [[True]])),
    ("e0 0c 01 f0 00 00 00 06 00 00 00 01 52 09", Array("array", [Array("uint", [UInt(9)])])),
    ("e0 02 00 a3", Array("symbol", [])),
    ("e0 02 03 40", Array("null", [None] * 3)),
]


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


@pytest.mark.parametrize("wire, value", DECODE_TABLE, ids=[row[0][:20] for row in DECODE_TABLE])
def test_decoding_each_encoding_gives_the_value_and_its_type(wire: str, value: Any) -> None:
    data = _hex(wire)
    decoded, end = decode(data)
    assert end == len(data)
    assert same(decoded, value), f"{decoded!r} != {value!r}"
    again, _ = decode(encode(decoded))
    assert same(again, value)


def test_the_table_covers_every_constructor_of_the_spec() -> None:
    seen = {_hex(wire)[0] for wire, _ in DECODE_TABLE}
    seen |= {_hex(wire)[1] for wire, _ in DECODE_TABLE if wire.startswith("00")}
    assert set(ENCODINGS) <= seen, sorted(hex(c) for c in set(ENCODINGS) - seen)
    assert 0x00 in seen          # described


# (value, the smallest encoding, exactly)
ENCODE_TABLE: list[tuple[Any, str]] = [
    (None, "40"),
    (True, "41"),
    (False, "42"),
    (UByte(7), "50 07"),
    (UShort(7), "60 00 07"),
    (UInt(0), "43"),
    (UInt(255), "52 ff"),
    (UInt(256), "70 00 00 01 00"),
    (ULong(0), "44"),
    (ULong(1), "53 01"),
    (ULong(256), "80 00 00 00 00 00 00 01 00"),
    (Byte(-2), "51 fe"),
    (Short(2), "61 00 02"),
    (Int(-1), "54 ff"),
    (Int(128), "71 00 00 00 80"),
    (0, "55 00"),
    (-129, "81 ff ff ff ff ff ff ff 7f"),
    (Float32(-2.0), "72 c0 00 00 00"),
    (0.5, "82 3f e0 00 00 00 00 00 00"),
    (Char("A"), "73 00 00 00 41"),
    (Timestamp(1), "83 00 00 00 00 00 00 00 01"),
    (b"", "a0 00"),
    (b"x" * 256, "b0 00 00 01 00" + " 78" * 256),
    ("", "a1 00"),
    ("\u00e9", "a1 02 c3 a9"),
    (Symbol("ab"), "a3 02 61 62"),
    ([], "45"),
    ([None], "c0 02 01 40"),
    ((UInt(1),), "c0 03 01 52 01"),
    ({}, "c1 01 00"),
    ([None] * 254, "c0 ff fe" + " 40" * 254),
    (Array("symbol", []), "e0 02 00 a3"),
    (Array("uint", [UInt(1), UInt(300)]), "e0 0a 02 70 00 00 00 01 00 00 01 2c"),
    (Array("int", [Int(-1)]), "e0 03 01 54 ff"),
    (Array("boolean", [True, False]), "e0 04 02 56 01 00"),
    (Described(Symbol("x"), 1), "00 a3 01 78 55 01"),
    (Transfer(handle=0), "00 53 14 c0 02 01 43"),
    (Transfer(handle=1, delivery_id=2, delivery_tag=b"t", message_format=0, settled=True, more=False),
     "00 53 14 c0 0a 05 52 01 52 02 a0 01 74 43 41"),
    (Accepted(), "00 53 24 45"),
    (Rejected(error=AmqpError(condition="amqp:decode-error")),
     "00 53 25 c0 1a 01 00 53 1d c0 14 01 a3 11" + b"amqp:decode-error".hex()),
    (Header(durable=True), "00 53 70 c0 02 01 41"),
    (Header(priority=4, delivery_count=0), "00 53 70 45"),             # defaults are left out
    (Source(address="q", expiry_policy=Symbol("session-end")), "00 53 28 c0 04 01 a1 01 71"),
]


@pytest.mark.parametrize("value, wire", ENCODE_TABLE, ids=[repr(row[0])[:30] for row in ENCODE_TABLE])
def test_encoding_chooses_the_smallest_form(value: Any, wire: str) -> None:
    assert encode(value).hex() == _hex(wire).hex()


def test_lists_past_255_bytes_use_list32() -> None:
    value = [None] * 255                               # 255 bytes of elements + the count: 256
    data = encode(value)
    assert data[:9] == bytes.fromhex("d0 00 00 01 03 00 00 00 ff".replace(" ", ""))
    assert decode(data)[0] == value


def test_composites_keep_fields_by_type_whatever_the_python_type() -> None:
    # handle is a uint even though the engine passes a plain int; a symbol field a plain str
    t = Transfer(handle=70000, delivery_tag=bytearray(b"ab"))
    assert encode(t) == _hex("00 53 14 c0 0b 03 70 00 01 11 70 40 a0 02 61 62")
    o = Open(container_id="c", offered_capabilities=["ANONYMOUS-RELAY"], properties={"product": "x"})
    decoded = decode(encode(o))[0]
    assert decoded == o
    assert type(decoded.offered_capabilities[0]) is Symbol
    assert [type(k) for k in decoded.properties] == [Symbol]         # fields keys are symbols


def test_defaults_fill_missing_trailing_fields_and_mandatory_ones_have_none() -> None:
    o = decode(_hex("00 53 10 c0 03 01 a1 00"))[0]
    assert o == Open(container_id="", max_frame_size=0xFFFFFFFF, channel_max=0xFFFF)
    with pytest.raises(TypeError):
        Open()  # type: ignore[call-arg]


def test_out_of_range_values_are_refused_on_encode() -> None:
    for bad in (UInt(-1), UInt(2 ** 32), UByte(256), Int(2 ** 31), 2 ** 63, Float32(1e300), Char("ab")):
        with pytest.raises(EncodeError):
            encode(bad)
    with pytest.raises(EncodeError):
        encode(Transfer(handle=2 ** 32))
    with pytest.raises(EncodeError):
        encode(object())


def test_decode_all_reads_a_sequence_of_values() -> None:
    assert decode_all(_hex("41 52 05 a1 01 78")) == [True, 5, "x"]


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_any_buffer_decodes_to_the_same_immutable_values(wrap: Any) -> None:
    value = [1, "x", Symbol("s"), b"b", {"k": [UInt(3)]}, Array("symbol", ["a"]),
             Transfer(handle=1, delivery_tag=b"t"), U]
    decoded, _ = decode(wrap(encode(value)))
    assert same(decoded, [1, "x", Symbol("s"), b"b", {"k": [UInt(3)]}, Array("symbol", [Symbol("a")]),
                          Transfer(handle=1, delivery_tag=b"t"), U])
    assert type(decoded[3]) is bytes and type(decoded[6].delivery_tag) is bytes
