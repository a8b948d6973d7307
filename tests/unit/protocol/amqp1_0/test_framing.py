"""Frames (spec 2.3): the reader fed at every split, sizes checked before buffering, transfers split."""

from __future__ import annotations

import struct

import pytest

from broker.protocol.amqp1_0.framing import (AMQP_HEADER, EMPTY_FRAME, SASL_HEADER, TLS_HEADER, TYPE_AMQP,
                                             TYPE_SASL, Frame, FrameReader, FramingError, encode_frame,
                                             encode_transfer, transfer_frames)
from broker.protocol.amqp1_0.types import (Accepted, Attach, Begin, Close, DecodeError, Disposition, Open,
                                           SaslInit, SaslMechanisms, SaslOutcome, Source, Target, Transfer)
from broker.protocol.detect import AmqpVersion, HEADERS


def test_protocol_headers_are_the_ones_detection_knows() -> None:
    # spec 2.2 and 5.3.1: "AMQP" then protocol id 0 (AMQP), 2 (TLS), 3 (SASL), then 1.0.0
    assert AMQP_HEADER == b"AMQP\x00\x01\x00\x00"
    assert SASL_HEADER == b"AMQP\x03\x01\x00\x00"
    assert TLS_HEADER == b"AMQP\x02\x01\x00\x00"
    assert HEADERS[AMQP_HEADER] is AmqpVersion.V1_0 and HEADERS[SASL_HEADER] is AmqpVersion.V1_0_SASL


def test_the_empty_frame_is_a_bare_header() -> None:
    # spec 2.3.1: size 8, doff 2, type 0, channel 0 -- an empty frame keeps an idle connection alive
    assert EMPTY_FRAME == bytes.fromhex("0000000802000000")
    frames = FrameReader().feed(EMPTY_FRAME)
    assert frames == [Frame(TYPE_AMQP, 0, b"")] and frames[0].empty
    assert encode_frame(None, channel=3) == bytes.fromhex("0000000802000003")


def _stream() -> tuple[bytes, list[Frame]]:
    open_ = Open(container_id="broker", max_frame_size=65536, channel_max=7, idle_time_out=30000,
                 properties={"product": "DeltaMQ"})
    attach = Attach(name="link", handle=0, role=True, source=Source(address="q", durable=2),
                    target=Target(address="t"), initial_delivery_count=None)
    transfer = Transfer(handle=0, delivery_id=0, delivery_tag=b"\x00", message_format=0, settled=False)
    payload = b"\x00\x53\x75\xa0\x05hello"
    parts = [encode_frame(open_), EMPTY_FRAME, encode_frame(Begin(next_outgoing_id=0, incoming_window=2048,
                                                                  outgoing_window=2048), channel=1),
             encode_frame(attach, channel=1), encode_frame(transfer, channel=1, payload=payload),
             encode_frame(Disposition(role=True, first=0, settled=True, state=Accepted()), channel=1),
             encode_frame(Close())]
    frames = [Frame(TYPE_AMQP, 0, encode_frame(open_)[8:]), Frame(TYPE_AMQP, 0, b""),
              Frame(TYPE_AMQP, 1, parts[2][8:]), Frame(TYPE_AMQP, 1, parts[3][8:]),
              Frame(TYPE_AMQP, 1, parts[4][8:]), Frame(TYPE_AMQP, 1, parts[5][8:]),
              Frame(TYPE_AMQP, 0, parts[6][8:])]
    return b"".join(parts), frames


def test_the_reader_returns_the_same_frames_however_the_bytes_are_split() -> None:
    data, expected = _stream()
    assert FrameReader().feed(data) == expected
    for cut in range(len(data) + 1):
        reader = FrameReader()
        assert reader.feed(data[:cut]) + reader.feed(data[cut:]) == expected, cut
        assert reader.buffered_bytes == 0
    reader = FrameReader()
    assert [f for i in range(len(data)) for f in reader.feed(data[i:i + 1])] == expected


def test_frames_decode_to_their_performatives_and_payload() -> None:
    data, frames = _stream()
    decoded = [f.performative() for f in frames if not f.empty]
    assert [type(p).__name__ for p, _ in decoded] == ["Open", "Begin", "Attach", "Transfer", "Disposition",
                                                      "Close"]
    transfer, payload = decoded[3]
    assert transfer == Transfer(handle=0, delivery_id=0, delivery_tag=b"\x00", message_format=0, settled=False)
    assert payload == b"\x00\x53\x75\xa0\x05hello"
    assert all(p == b"" for _, p in decoded[:3] + decoded[4:])
    assert decoded[0][0] == Open(container_id="broker", max_frame_size=65536, channel_max=7,
                                 idle_time_out=30000, properties={"product": "DeltaMQ"})


def test_an_oversized_frame_is_refused_from_its_header_alone() -> None:
    # spec 2.7.1 / Broker-J: check the size against max-frame-size before buffering the body
    reader = FrameReader(max_frame_size=512)
    with pytest.raises(FramingError, match="513 bytes exceeds the max-frame-size of 512"):
        reader.feed(struct.pack(">IBBH", 513, 2, 0, 0))
    assert FramingError.condition == "amqp:connection:framing-error"
    reader = FrameReader(max_frame_size=512)
    assert reader.feed(struct.pack(">IBBH", 512, 2, 0, 0)) == []                 # exactly the limit: wait


@pytest.mark.parametrize("header, words", [
    (struct.pack(">IBBH", 7, 2, 0, 0), "smaller than a frame header"),
    (struct.pack(">IBBH", 16, 1, 0, 0), "data offset 1"),
    (struct.pack(">IBBH", 16, 5, 0, 0), "data offset 5"),
])
def test_impossible_frame_headers_are_framing_errors(header: bytes, words: str) -> None:
    with pytest.raises(FramingError, match=words):
        FrameReader().feed(header)


def test_the_extended_header_is_skipped() -> None:
    body = Close().encode()
    data = struct.pack(">IBBH", 12 + len(body), 3, 0, 5) + b"\xee\xee\xee\xee" + body
    assert FrameReader().feed(data) == [Frame(TYPE_AMQP, 5, body)]


def test_sasl_then_the_amqp_header_in_one_stream() -> None:
    # spec 5.3.1: after sasl-outcome the client sends the AMQP header; a client may pipeline it
    init = encode_frame(SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00p"), frame_type=TYPE_SASL)
    open_ = encode_frame(Open(container_id="c"))
    data = init + AMQP_HEADER + open_
    for cut in range(len(data) + 1):
        reader = FrameReader(max_frame_size=512)
        reader.append(data[:cut])
        got: list[object] = []
        for chunk in (b"", data[cut:]):
            reader.append(chunk)
            while True:
                if not got:
                    frame = reader.next_frame()
                    if frame is None:
                        break
                    got.append(frame.sasl_frame())
                    reader.expect_header()
                elif len(got) == 1:
                    header = reader.next_header()
                    if header is None:
                        break
                    got.append(header)
                else:
                    frames = reader.feed(b"")
                    if not frames:
                        break
                    got += [f.performative()[0] for f in frames]
        assert got == [SaslInit(mechanism="PLAIN", initial_response=b"\x00u\x00p"), AMQP_HEADER,
                       Open(container_id="c")], cut


def test_sasl_and_amqp_frames_are_kept_apart() -> None:
    mechanisms = Frame(TYPE_SASL, 0, SaslMechanisms(sasl_server_mechanisms=["PLAIN", "ANONYMOUS"]).encode())
    assert mechanisms.sasl_frame() == SaslMechanisms(sasl_server_mechanisms=["PLAIN", "ANONYMOUS"])
    with pytest.raises(DecodeError, match="where an AMQP frame"):
        mechanisms.performative()
    with pytest.raises(DecodeError, match="where a SASL frame"):
        Frame(TYPE_AMQP, 0, SaslOutcome(code=0).encode()).sasl_frame()
    with pytest.raises(DecodeError, match="expected a performative, found amqp:sasl-outcome:list"):
        Frame(TYPE_AMQP, 0, SaslOutcome(code=0).encode()).performative()
    with pytest.raises(DecodeError, match="bytes after its performative"):
        Frame(TYPE_AMQP, 0, Close().encode() + b"\x40").performative()


@pytest.mark.parametrize("size", [0, 1, 100, 481, 482, 483, 1000, 4000])
def test_a_large_delivery_is_split_into_transfers_within_max_frame_size(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    transfer = Transfer(handle=3, delivery_id=9, delivery_tag=b"tag", message_format=0, settled=False)
    frames = transfer_frames(2, transfer, payload, 512)
    assert b"".join(frames) == encode_transfer(2, transfer, payload, 512)
    assert all(len(f) <= 512 for f in frames)
    decoded = [f.performative() for f in FrameReader(512).feed(b"".join(frames))]
    assert b"".join(p for _, p in decoded) == payload
    assert [t.more for t, _ in decoded] == [True] * (len(frames) - 1) + [False]
    assert decoded[0][0].delivery_tag == b"tag"                              # type: ignore[attr-defined]
    assert {(t.handle, t.delivery_id) for t, _ in decoded} == {(3, 9)}       # type: ignore[attr-defined]
    if len(frames) > 1:
        assert all(len(f) == 512 for f in frames[:-1])                      # full frames but the last


def test_the_limit_rises_once_open_has_negotiated_it() -> None:
    # spec 2.4.1: 512 octets until the open exchange; then the announced max-frame-size
    big = encode_frame(Transfer(handle=0, delivery_id=0, delivery_tag=b"t"), payload=bytes(1000))
    reader = FrameReader(512)
    assert reader.feed(encode_frame(Open(container_id="c", max_frame_size=4096)))[0].performative()[0] == \
        Open(container_id="c", max_frame_size=4096)
    reader.max_frame_size = 4096
    frame = reader.feed(big)[0]
    assert frame.performative()[1] == bytes(1000)
    with pytest.raises(FramingError):
        FrameReader(512).feed(big)
