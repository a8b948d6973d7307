"""Byte-level tests of the 0-8/0-9/0-9-1 codec (spec 0-9-1 sections 4.2.x, errata field types)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.codec import (decode_shortstr, decode_table, decode_table_entries,
                                             encode_shortstr, encode_table, encode_value, frame)
from broker.protocol.amqp0_9_1.properties import decode_properties, encode_properties

# (python value, encoded field value) — RabbitMQ / 0-9-1 errata type letters
FIELD_VALUES = [
    (True, b"t\x01"),
    (False, b"t\x00"),
    (1, b"I\x00\x00\x00\x01"),
    (-2, b"I\xff\xff\xff\xfe"),
    (1 << 40, b"l\x00\x00\x01\x00\x00\x00\x00\x00"),
    ("héllo", b"S\x00\x00\x00\x06h\xc3\xa9llo"),
    (b"\x00\xff", b"x\x00\x00\x00\x02\x00\xff"),
    (1.5, b"d\x3f\xf8\x00\x00\x00\x00\x00\x00"),
    (None, b"V"),
    ({"a": 1}, b"F\x00\x00\x00\x07\x01aI\x00\x00\x00\x01"),
    ([1, "x"], b"A\x00\x00\x00\x0bI\x00\x00\x00\x01S\x00\x00\x00\x01x"),
    (Decimal("1.25"), b"D\x02\x00\x00\x00\x7d"),
    (dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc), b"T\x00\x00\x00\x00\x5e\x0b\xe1\x00"),
]


@pytest.mark.parametrize("value,encoded", FIELD_VALUES)
def test_field_value_encoding(value: object, encoded: bytes) -> None:
    assert encode_value(value) == encoded
    table = encode_table({"k": value})
    decoded, end = decode_table(table, 0)
    assert end == len(table)
    assert decoded == {"k": value}


@pytest.mark.parametrize("letter,payload,expected", [
    (b"b", b"\xff", -1),          # signed 8
    (b"B", b"\xff", 255),         # unsigned 8
    (b"s", b"\xff\xfe", -2),      # signed 16 (RabbitMQ's 's', not the spec's short string)
    (b"u", b"\xff\xfe", 65534),   # unsigned 16
    (b"i", b"\xff\xff\xff\xff", 4294967295),   # unsigned 32
    (b"f", b"\x3f\xc0\x00\x00", 1.5),
])
def test_decodes_the_other_numeric_types(letter: bytes, payload: bytes, expected: object) -> None:
    body = b"\x01k" + letter + payload
    table = len(body).to_bytes(4, "big") + body
    assert decode_table(table, 0)[0] == {"k": expected}


def test_long_string_that_is_not_utf8_decodes_as_bytes() -> None:
    body = b"\x01kS\x00\x00\x00\x02\xff\xfe"
    assert decode_table(len(body).to_bytes(4, "big") + body, 0)[0] == {"k": b"\xff\xfe"}


@pytest.mark.parametrize("bad", [
    b"\x00\x00\x00\x05\x01kZ\x00\x00",          # unknown type letter
    b"\x00\x00\x00\x09\x01kS\x00\x00\x00\x09x",  # long string runs past the table
    b"\x00\x00\x00\x20\x01k",                    # table size past the buffer
    b"\x00\x00\x00\x03\x05abc",                  # key runs past the end
])
def test_malformed_tables_raise_value_errors(bad: bytes) -> None:
    with pytest.raises((ValueError, IndexError)):
        decode_table(bad, 0)


def test_deeply_nested_tables_are_refused() -> None:
    value: object = 1
    for _ in range(100):
        value = {"n": value}
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_table(encode_table({"n": value}), 0)


def test_shortstr_round_trip_and_limit() -> None:
    assert encode_shortstr("abc") == b"\x03abc"
    assert decode_shortstr(b"\x03abcZ", 0) == ("abc", 4)
    with pytest.raises(ValueError):
        encode_shortstr("x" * 256)


def test_amqplain_entries_without_size_prefix() -> None:
    entries = encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
    assert decode_table_entries(entries) == {"LOGIN": "guest", "PASSWORD": "guest"}


# -- methods ------------------------------------------------------------------

def test_basic_publish_bytes_0_9_1() -> None:
    # spec 0-9-1 1.8.3.7: ticket short, exchange shortstr, routing-key shortstr, mandatory bit, immediate bit
    payload = m.ENCODERS_0_9_1[m.BasicPublish](m.BasicPublish(0, "ex", "rk", True, False))
    assert payload == b"\x00\x3c\x00\x28" b"\x00\x00" b"\x02ex" b"\x02rk" b"\x01"
    assert m.DECODERS_0_9_1[0x3C0028](payload, 4) == m.BasicPublish(0, "ex", "rk", True, False)


def test_bits_pack_into_one_octet() -> None:
    q = m.QueueDeclare(ticket=0, queue="q", passive=False, durable=True, exclusive=False,
                       auto_delete=True, nowait=True, arguments={})
    payload = m.ENCODERS_0_9_1[m.QueueDeclare](q)
    # passive=bit0, durable=bit1, exclusive=bit2, auto-delete=bit3, nowait=bit4
    assert payload == b"\x00\x32\x00\x0a\x00\x00\x01q" + bytes([0b11010]) + b"\x00\x00\x00\x00"
    assert m.DECODERS_0_9_1[0x32000A](payload, 4) == q


def test_connection_close_ids_differ_in_0_8() -> None:
    # 0-8 numbered connection.close 60; 0-9 and 0-9-1 number it 50
    assert m.IDS_0_8[m.ConnectionClose] == (10, 60)
    assert m.IDS_0_9[m.ConnectionClose] == (10, 50)
    assert m.IDS_0_9_1[m.ConnectionClose] == (10, 50)
    close = m.ConnectionClose(reply_code=320, reply_text="bye", class_id=0, method_id=0)
    assert m.ENCODERS_0_8[m.ConnectionClose](close)[:4] == b"\x00\x0a\x00\x3c"


def test_0_8_basic_consume_with_and_without_arguments_table() -> None:
    # stock 0-8 (RabbitMQ's 0-8 JSON) ends after the bits; Qpid's 0-8 adds a filter table
    stock = b"\x00\x3c\x00\x14\x00\x00\x01q\x03tag\x02"
    expected = m.BasicConsume(ticket=0, queue="q", consumer_tag="tag", no_ack=True)
    assert m.DECODERS_0_8[0x3C0014](stock, 4) == expected
    qpid = stock + b"\x00\x00\x00\x00"
    assert m.DECODERS_0_8[0x3C0014](qpid, 4) == expected
    assert m.ENCODERS_0_8[m.BasicConsume](expected) == qpid


def test_truncated_method_arguments_raise() -> None:
    payload = m.ENCODERS_0_9_1[m.QueueDeclare](m.QueueDeclare(queue="orders"))
    with pytest.raises((ValueError, IndexError)):
        m.DECODERS_0_9_1[0x32000A](payload[:-6], 4)


def test_every_method_round_trips_in_every_version() -> None:
    for decoders, encoders, ids in ((m.DECODERS_0_8, m.ENCODERS_0_8, m.IDS_0_8),
                                    (m.DECODERS_0_9, m.ENCODERS_0_9, m.IDS_0_9),
                                    (m.DECODERS_0_9_1, m.ENCODERS_0_9_1, m.IDS_0_9_1)):
        for cls, encoder in encoders.items():
            payload = encoder(cls())
            class_id, method_id = ids[cls]
            assert payload[:4] == bytes([class_id >> 8, class_id & 255, method_id >> 8, method_id & 255])
            assert decoders[class_id << 16 | method_id](payload, 4) == cls()


# -- content header properties ------------------------------------------------

def test_properties_bytes() -> None:
    props = MessageProperties(content_type="text/plain", delivery_mode=2, priority=5,
                              headers={"a": 1}, timestamp=1_600_000_000)
    encoded = encode_properties(props)
    # flags: content-type(15) headers(13) delivery-mode(12) priority(11) timestamp(6)
    assert encoded[:2] == (0x8000 | 0x2000 | 0x1000 | 0x0800 | 0x0040).to_bytes(2, "big")
    assert encoded[2:13] == b"\x0atext/plain"
    assert decode_properties(encoded) == props


def test_empty_properties() -> None:
    assert encode_properties(MessageProperties()) == b"\x00\x00"
    assert decode_properties(b"\x00\x00") == MessageProperties()


def test_properties_with_trailing_garbage_are_refused() -> None:
    with pytest.raises(ValueError):
        decode_properties(b"\x00\x00\x01")


def test_frame_layout() -> None:
    assert frame(1, 5, b"abc") == b"\x01\x00\x05\x00\x00\x00\x03abc\xce"
