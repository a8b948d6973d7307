"""The incoming fast path (incoming_frames.py) reads and decodes what the generic path does, on the
same bytes: whole, split at every offset, cut short, and malformed."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from broker.protocol.amqp1_0.framing import EMPTY_FRAME, TYPE_AMQP, TYPE_SASL, Frame, FrameReader, encode_frame
from broker.protocol.amqp1_0.incoming_frames import BodyReader, performative_of, usual_transfer_fields
from broker.protocol.amqp1_0.types import (Accepted, Attach, Begin, DecodeError, Disposition, Flow, Modified,
                                           Rejected, Released, SaslOutcome, Symbol, Transfer)

from .strategies import same

uint = st.integers(0, 0xFFFFFFFF)
maybe_uint = st.none() | uint
states = st.sampled_from([None, Accepted(), Released(), Rejected(), Modified(delivery_failed=True)])

transfers = st.builds(Transfer, handle=uint, delivery_id=maybe_uint, delivery_tag=st.none() | st.binary(max_size=32),
                      message_format=maybe_uint, settled=st.none() | st.booleans(), more=st.booleans(),
                      rcv_settle_mode=st.none() | st.integers(0, 1), state=states, resume=st.booleans(),
                      aborted=st.booleans(), batchable=st.booleans())
flows = st.builds(Flow, next_incoming_id=maybe_uint, incoming_window=uint, next_outgoing_id=uint,
                  outgoing_window=uint, handle=maybe_uint, delivery_count=maybe_uint, link_credit=maybe_uint,
                  available=maybe_uint, drain=st.booleans(), echo=st.booleans(),
                  properties=st.none() | st.just({Symbol("k"): "v"}))
dispositions = st.builds(Disposition, role=st.booleans(), first=uint, last=maybe_uint, settled=st.booleans(),
                         state=states, batchable=st.booleans())
others = st.sampled_from([Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10),
                          Attach(name="l", handle=0, role=False)])


def generic(frame_type: int, channel: int, body: bytes) -> Any:
    """Frame.performative's answer, or the exception it raised (type and text)."""
    try:
        return Frame(frame_type, channel, body).performative()
    except DecodeError as exc:
        return (type(exc), str(exc))


def fast(frame_type: int, channel: int, body: bytes) -> Any:
    try:
        return performative_of(frame_type, channel, body)
    except DecodeError as exc:
        return (type(exc), str(exc))


def agree(frame_type: int, body: bytes) -> None:
    expected, got = generic(frame_type, 1, body), fast(frame_type, 1, body)
    assert same(got, expected) or got == expected, (body.hex(), got, expected)


@settings(max_examples=400, deadline=None)
@given(performative=transfers | flows | dispositions | others, payload=st.binary(max_size=40))
def test_a_performative_decodes_as_the_generic_path_does(performative: Any, payload: bytes) -> None:
    body = encode_frame(performative, 0, payload if type(performative) is Transfer else b"")[8:]
    agree(TYPE_AMQP, body)
    agree(TYPE_AMQP, body + payload)           # bytes after a flow or disposition: the same error
    agree(TYPE_SASL, body)


@settings(max_examples=100, deadline=None)
@given(performative=transfers | flows | dispositions)
def test_a_body_cut_short_or_flipped_anywhere_fails_as_the_generic_path_does(performative: Any) -> None:
    body = encode_frame(performative)[8:]
    for cut in range(len(body)):
        agree(TYPE_AMQP, body[:cut])
    for i in range(len(body)):
        for flip in (0x00, 0x40, 0xff):
            agree(TYPE_AMQP, body[:i] + bytes((flip,)) + body[i + 1:])


MALFORMED = {
    "descriptor only": b"\x00\x53\x14",
    "not a list": b"\x00\x53\x14\xa1\x01x",
    "no handle": b"\x00\x53\x14\x45",
    "list runs past the body": b"\x00\x53\x14\xc0\x10\x02\x43\x43",
    "count larger than the list": b"\x00\x53\x13\xc0\x02\x09\x43",
    "a flow without its windows": b"\x00\x53\x13\xc0\x02\x01\x43",
    "disposition role not a boolean": b"\x00\x53\x15\xc0\x03\x02\x52\x01",
    "bytes after a disposition": b"\x00\x53\x15\xc0\x03\x02\x41\x43\x00",
    "a sasl frame's body": encode_frame(SaslOutcome(code=0))[8:],
    "not described": b"\x45",
    "unknown descriptor": b"\x00\x53\x99\x45",
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_bodies_fail_alike(body: bytes) -> None:
    agree(TYPE_AMQP, body)
    failed = fast(TYPE_AMQP, 0, body)[0]
    assert isinstance(failed, type) and issubclass(failed, DecodeError)


# -- frames ---------------------------------------------------------------------------------------

def _stream() -> bytes:
    parts = [encode_frame(Transfer(handle=0, delivery_id=i, delivery_tag=struct.pack(">I", i), message_format=0,
                                   settled=False), 1, b"\x00\x53\x75\xa0\x03abc") for i in range(3)]
    parts.insert(1, EMPTY_FRAME)
    parts.append(encode_frame(Flow(incoming_window=5, next_outgoing_id=1, outgoing_window=5, handle=0,
                                   delivery_count=3, link_credit=100), 2))
    parts.append(b"\x00\x00\x00\x0c\x03\x00\x00\x07" + b"\xee\xee\xee\xee")   # doff 3: an extended header
    return b"".join(parts)


def _as_tuples(frames: list[Frame]) -> list[tuple[int, int, bytes]]:
    return [(f.type, f.channel, f.body) for f in frames]


def test_the_body_reader_reads_what_the_frame_reader_reads_at_every_split() -> None:
    data = _stream()
    expected = _as_tuples(FrameReader().feed(data))
    assert len(expected) == 6 and expected[1] == (TYPE_AMQP, 0, b"") and expected[-1] == (TYPE_AMQP, 7, b"")
    assert BodyReader().bodies(data) == expected
    for cut in range(len(data) + 1):
        reader = BodyReader()
        assert reader.bodies(data[:cut]) + reader.bodies(data[cut:]) == expected, cut
        assert reader.buffered_bytes == 0
    reader = BodyReader()
    assert [f for i in range(len(data)) for f in reader.bodies(data[i:i + 1])] == expected


BAD_HEADERS = [b"\x00\x00\x02\x01\x02\x00\x00\x00",     # larger than max-frame-size
               b"\x00\x00\x00\x04\x02\x00\x00\x00",     # smaller than a frame header
               b"\x00\x00\x00\x10\x01\x00\x00\x00",     # doff 1
               b"\x00\x00\x00\x10\x05\x00\x00\x00"]     # doff beyond the frame


@pytest.mark.parametrize("header", BAD_HEADERS)
def test_a_bad_frame_header_is_the_same_framing_error_after_good_frames(header: bytes) -> None:
    good = encode_frame(Flow(incoming_window=5, next_outgoing_id=1, outgoing_window=5))
    errors = []
    for reader in (FrameReader(512), BodyReader(512)):
        with pytest.raises(DecodeError) as caught:
            reader.feed(good + header) if type(reader) is FrameReader else reader.bodies(good + header)  # type: ignore[attr-defined]
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1]


def test_the_sasl_phase_still_reads_frame_by_frame() -> None:
    reader = BodyReader()
    reader.append(encode_frame(SaslOutcome(code=0), frame_type=TYPE_SASL) + b"AMQP\x00\x01\x00\x00")
    frame = reader.next_frame()
    assert frame is not None and frame.type == TYPE_SASL
    reader.expect_header()
    assert reader.bodies(b"") == [] and reader.next_header() == b"AMQP\x00\x01\x00\x00"


USUAL_TRANSFERS = [Transfer(handle=0, delivery_id=0, delivery_tag=b"", message_format=0, settled=False),
                   Transfer(handle=3, delivery_id=255, delivery_tag=b"1", message_format=0, settled=True),
                   Transfer(handle=0x10000, delivery_id=0xFFFFFFFF, delivery_tag=b"t" * 32, message_format=0x80013700,
                            settled=False, more=True),
                   Transfer(handle=1, delivery_id=7, delivery_tag=b"\x00\x00\x00\x07"),
                   Transfer(handle=1, delivery_id=7, delivery_tag=b"ab", message_format=0)]


@pytest.mark.parametrize("transfer", USUAL_TRANSFERS)
def test_the_usual_transfers_take_the_fast_path_and_decode_alike(transfer: Transfer) -> None:
    from broker.protocol.amqp1_0.incoming_frames import _usual_transfer

    body = encode_frame(transfer, 0, b"\x00\x53\x75\xa0\x01x")[8:]
    fast_path = _usual_transfer(body)
    assert fast_path is not None and same(fast_path, generic(TYPE_AMQP, 0, body))
    for cut in range(len(body)):
        agree(TYPE_AMQP, body[:cut])
    for i in range(3, len(body) - 6):                  # every octet of the performative altered
        for flip in (0x00, 0x40, 0x41, 0x52, 0x70, 0xa0, 0xff):
            agree(TYPE_AMQP, body[:i] + bytes((flip,)) + body[i + 1:])


def as_list32(body: bytes) -> bytes:
    """A performative body encoded as a list8 re-encoded as the list32 rhea writes."""
    assert body[3] == 0xc0, body.hex()
    size, count = body[4], body[5]
    return body[:3] + b"\xd0" + struct.pack(">II", size + 3, count) + body[6:]


@settings(max_examples=200, deadline=None)
@given(transfer=transfers, payload=st.binary(max_size=40))
def test_a_transfer_in_a_list32_decodes_as_the_generic_path_does(transfer: Transfer, payload: bytes) -> None:
    body = encode_frame(transfer, 0, payload)[8:]
    if body[3] != 0xc0:
        return
    wide = as_list32(body)
    agree(TYPE_AMQP, wide)
    for cut in range(len(wide) - len(payload)):
        agree(TYPE_AMQP, wide[:cut])
    for i in range(4, 12):                     # the size and the count, wrong
        for flip in (0x00, 0x40, 0xff):
            agree(TYPE_AMQP, wide[:i] + bytes((flip,)) + wide[i + 1:])


def test_the_transfer_rhea_writes_takes_the_fast_path() -> None:
    # rhea 3's transfer of delivery 300, tag "300", unsettled, then a payload (its bytes, as sent)
    body = bytes.fromhex("005314d000000012000000064370" "0000012ca003333030434242") + b"PAYLOAD"
    assert usual_transfer_fields(body) == (0, 300, b"300", 0, False, False, len(body) - 7)
    agree(TYPE_AMQP, body)
