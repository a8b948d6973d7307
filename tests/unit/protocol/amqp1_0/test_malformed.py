"""Malformed input is a DecodeError that names what was wrong and where; never another exception.

A read past the end of the *buffer* is :class:`NeedMore` (more bytes may
complete the value); a read past the size an enclosing compound declared,
a count that cannot fit, a bad constructor are malformed, whatever follows.
"""

from __future__ import annotations

import struct

import pytest

from broker.protocol.amqp1_0.types import (MAX_DEPTH, Accepted, DecodeError, Detach, NeedMore, Open, Performative,
                                           Transfer, decode, encode)


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


MALFORMED = [
    # (hex, a word the message must contain, offset it must name)
    ("ff", "not an AMQP 1.0 constructor", 0),
    ("0f", "not an AMQP 1.0 constructor", 0),
    ("56 02", "boolean octet", 1),
    ("a1 01 ff", "not valid UTF-8", -1),
    ("73 00 11 00 00", "not a Unicode code point", 1),
    # a string running past the end of its list while the buffer goes on
    ("c0 03 01 a1 05 68 68 68 68 68", "enclosing compound", 5),
    ("c0 02 05 40", "claims 5 elements", 1),              # a count that cannot fit
    ("c0 03 01 40 40", "elements end at", 4),             # elements end before the size says
    ("c0 00 00", "cannot hold", 1),                       # a size smaller than its count
    ("c1 02 01 40", "odd number", 1),
    ("c1 03 02 45 40", "cannot be a key", 1),             # a list as a map key
    ("e0 04 05 52 01 02", "claims 5 elements", 1),
    ("e0 01 00", "no element constructor", 3),
    ("e0 02 01 ff", "not a primitive encoding", 3),
    ("e0 05 01 00 53 01 00", "element constructor 0x00", 6),
    ("00 53 14 45", "transfer.handle is mandatory", -1),
    ("00 53 14 c0 03 01 a1 00", "transfer.handle: constructor 0xa1 is not a uint", 6),
    ("00 53 16 c0 05 03 43 41 a1 00", "detach.error: expected error, found a str", -1),
    ("00 53 10 41", "open: constructor 0x41 is not a list", 3),
    ("00 53 75 a1 00", "data: constructor 0xa1 is not a binary", 3),
    ("00 53 75 40", "data section: null", -1),
]


@pytest.mark.parametrize("wire, words, offset", MALFORMED, ids=[row[1] for row in MALFORMED])
def test_malformed_values_are_decode_errors_naming_the_fault(wire: str, words: str, offset: int) -> None:
    data = _hex(wire)
    with pytest.raises(DecodeError) as caught:
        decode(data)
    assert not isinstance(caught.value, NeedMore)
    assert words in str(caught.value)
    if offset >= 0:
        assert caught.value.offset == offset
        assert f"at offset {offset}" in str(caught.value)


def test_extra_trailing_fields_of_a_composite_are_skipped() -> None:
    # spec 1.3: a newer version of a composite may have more fields than this one knows
    assert decode(_hex("00 53 24 c0 03 02 41 42"))[0] == Accepted()


@pytest.mark.parametrize("value", [Open(container_id="abc", hostname="h" * 300, properties={"a": [1, 2]}),
                                   Transfer(handle=1, delivery_id=2, delivery_tag=b"tag", state=Accepted()),
                                   [1, "two", {"three": [None, 3.0]}]])
def test_every_truncation_needs_more_and_never_decodes(value: object) -> None:
    data = encode(value)
    for cut in range(len(data)):
        with pytest.raises(NeedMore):
            decode(data[:cut])


def test_a_size_past_the_buffer_is_need_more_not_a_huge_allocation() -> None:
    with pytest.raises(NeedMore):
        decode(b"\xb0\xff\xff\xff\xff")
    with pytest.raises(NeedMore):
        decode(b"\xd0\xff\xff\xff\xff\x00\x00\x00\x01")


def test_zero_width_array_elements_cannot_claim_more_than_the_buffer() -> None:
    # 2**32-1 nulls in 6 bytes would be legal by the letter of the spec; refused, not allocated
    with pytest.raises(DecodeError, match="claims"):
        decode(b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40")


def test_nesting_is_bounded() -> None:
    lists = b"\x45"
    for _ in range(MAX_DEPTH + 5):
        lists = b"\xd0" + struct.pack(">II", len(lists) + 4, 1) + lists
    with pytest.raises(DecodeError, match="deeper"):
        decode(lists)
    with pytest.raises(DecodeError, match="deeper"):
        decode(b"\x00" * 500 + b"\x40")                 # descriptors described by descriptors ...
    maps = b"\x40"
    for _ in range(MAX_DEPTH + 5):
        maps = b"\xd1" + struct.pack(">II", len(maps) + 5, 2) + b"\x40" + maps
    with pytest.raises(DecodeError, match="deeper"):
        decode(maps)
    shallow = b"\x45"
    for _ in range(MAX_DEPTH - 1):
        shallow = b"\xd0" + struct.pack(">II", len(shallow) + 4, 1) + shallow
    decode(shallow)                                       # one level less is fine


def test_the_wrong_descriptor_is_named() -> None:
    data = encode(Open(container_id="c"))
    with pytest.raises(DecodeError, match="expected amqp:transfer:list, found amqp:open:list"):
        Transfer.decode_from(data)
    with pytest.raises(DecodeError, match="expected a performative, found amqp:accepted:list"):
        Performative.decode_from(encode(Accepted()))
    assert Performative.decode_from(data)[0] == Open(container_id="c")
    with pytest.raises(DecodeError, match="found a str"):
        Detach.decode_from(encode("x"))


def test_a_decode_error_is_a_value_error_and_a_broker_frame_error() -> None:
    from broker.errors import FrameError
    with pytest.raises(ValueError):
        decode(b"\xff")
    with pytest.raises(FrameError):
        decode(b"\xff")
    assert DecodeError.condition == "amqp:decode-error"


def test_decoding_respects_an_explicit_end() -> None:
    data = encode("hello") + b"trailing"
    assert decode(data, 0, 7) == ("hello", 7)
    with pytest.raises(DecodeError) as caught:
        decode(data, 0, 5)
    assert not isinstance(caught.value, NeedMore)
