"""Converting between AMQP 1.0 and 0-9-1: properties, headers, ids, values and bodies.

Every 1.0 message here is built with python-qpid-proton (an independent
implementation) or with the codec's section classes; every 0-9-1 message's
properties go through the 0-9-1 wire codec, so both directions are compared
after decoding what a client would decode.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from decimal import Decimal
from typing import Any

import proton
import pytest

from broker.messaging.message import Message, MessageProperties
from broker.protocol.amqp0_9_1.properties import FORMAT as FORMAT_0_9_1, decode_properties, encode_properties
from broker.protocol.amqp1_0.convert import AMQP_SECTIONS_TYPE, UNMAPPED_PROPERTIES
from broker.protocol.amqp1_0.message_format import message_from_transfer, transfer_payload
from broker.protocol.amqp1_0.sections import MessageSections, encode_sections
from broker.protocol.amqp1_0.types import (AmqpSequence, AmqpValue, ApplicationProperties, Array, Byte, Char, Data,
                                           Decimal64, Described, Float32, Header, Int, MessageAnnotations,
                                           Properties, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort)

UTC = datetime.timezone.utc


def received(payload: bytes | bytearray) -> Message:
    return message_from_transfer(bytes(payload), exchange="ex", routing_key="rk", arrival=100.0)


def to_0_9_1(message: Message) -> tuple[MessageProperties, bytes]:
    """What a 0-9-1 consumer gets: the basic properties decoded from the wire bytes, and the body."""
    return decode_properties(message.native_for(FORMAT_0_9_1)), message.body


def from_0_9_1(body: bytes, **props: Any) -> Message:
    view = MessageProperties(**props)
    return Message(exchange="ex", routing_key="rk", body=body, native=encode_properties(view),
                   format=FORMAT_0_9_1, arrival=100.0)


def in_proton(payload: bytes) -> proton.Message:
    m = proton.Message()
    m.decode(payload)
    return m


def delivered(message: Message) -> proton.Message:
    return in_proton(transfer_payload(message, delivery_count=0, first_acquirer=False))


# -- 1.0 -> 0-9-1 ---------------------------------------------------------------------------------

#: proton always sends a header: not durable (delivery mode 1), the default priority
PROTON_HEADER = {"delivery_mode": 1, "priority": 4}
PROTON_TO_0_9_1 = [
    # (proton.Message keyword arguments, the 0-9-1 properties expected besides PROTON_HEADER's)
    ({"durable": True}, {"delivery_mode": 2}),
    ({"durable": False, "priority": 9}, {"priority": 9}),
    ({"ttl": 1.5}, {"expiration": "1500"}),
    ({"id": "order-1"}, {"message_id": "order-1"}),
    ({"id": 42}, {"message_id": "42"}),
    ({"id": uuid.UUID(int=7)}, {"message_id": "urn:uuid:00000000-0000-0000-0000-000000000007"}),
    ({"id": b"\x00\xff"}, {"headers": {"x-message-id": b"\x00\xff"}}),
    ({"id": "m" * 300}, {"headers": {"x-message-id": "m" * 300}}),
    ({"correlation_id": "c-1"}, {"correlation_id": "c-1"}),
    ({"correlation_id": uuid.UUID(int=1)}, {"correlation_id": "urn:uuid:00000000-0000-0000-0000-000000000001"}),
    ({"correlation_id": b"raw"}, {"headers": {"x-correlation-id": b"raw"}}),
    ({"user_id": b"guest"}, {"user_id": "guest"}),
    ({"user_id": b"\xff\xfe"}, {}),
    ({"reply_to": "replies"}, {"reply_to": "replies"}),
    ({"content_type": "text/plain", "content_encoding": "gzip"},
     {"content_type": "text/plain", "content_encoding": "gzip"}),
    ({"subject": "created"}, {"type": "created"}),
    ({"group_id": "g1", "group_sequence": 3}, {"app_id": "g1"}),
    ({"creation_time": 1700000000.999}, {"timestamp": 1700000000}),
    ({"address": "somewhere", "reply_to_group_id": "rg", "expiry_time": 1800000000.0}, {}),
    ({"properties": {"a": 1, "b": "text", "c": True, "d": 2.5, "e": None, "f": b"\x01"}},
     {"headers": {"a": 1, "b": "text", "c": True, "d": 2.5, "e": None, "f": b"\x01"}}),
    ({"annotations": {"x-opt-partition": "p1", "x-tenant": 7, "not-x": "dropped"}},
     {"headers": {"x-opt-partition": "p1", "x-tenant": 7}}),
]


@pytest.mark.parametrize(("fields", "expected"), PROTON_TO_0_9_1)
def test_a_proton_message_converts_to_the_0_9_1_properties_expected(fields: dict[str, Any],
                                                                    expected: dict[str, Any]) -> None:
    payload = proton.Message(body=b"payload", inferred=True, **fields).encode()
    props, body = to_0_9_1(received(payload))
    assert body == b"payload"
    assert props == MessageProperties(**{**PROTON_HEADER, **expected})


def test_a_message_without_a_header_is_transient_with_no_priority() -> None:
    props, _ = to_0_9_1(received(encode_sections([Data(b"x")])))
    assert props == MessageProperties()


def test_1_0_properties_with_no_0_9_1_counterpart_are_named() -> None:
    assert set(UNMAPPED_PROPERTIES) == {"to", "absolute-expiry-time", "group-sequence", "reply-to-group-id"}


APPLICATION_VALUES = [
    # (1.0 value in application-properties, the 0-9-1 header value)
    (UByte(200), 200), (UShort(60000), 60000), (UInt(4_000_000_000), 4_000_000_000),
    (ULong(2 ** 63 - 1), 2 ** 63 - 1), (Byte(-5), -5), (Short(-300), -300), (Int(-70000), -70000),
    (-(2 ** 40), -(2 ** 40)), (Float32(0.5), 0.5), (1.25, 1.25), (Char("é"), "é"), (Symbol("sym"), "sym"),
    ("text", "text"), (b"\x00bin", b"\x00bin"), (True, True), (None, None),
    (Timestamp(1_700_000_000_123), datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
    (uuid.UUID(int=5), "00000000-0000-0000-0000-000000000005"),
]


@pytest.mark.parametrize(("value", "expected"), APPLICATION_VALUES)
def test_application_property_values_map_to_0_9_1_header_values(value: Any, expected: Any) -> None:
    payload = encode_sections([ApplicationProperties({"k": value}), Data(b"")])
    props, _ = to_0_9_1(received(payload))
    assert props.headers == {"k": expected}
    assert type(props.headers["k"]) is type(expected)


@pytest.mark.parametrize("value", [ULong(2 ** 64 - 1), Decimal64(b"\x00" * 8), Described(Symbol("d"), 1)],
                         ids=["ulong-beyond-long", "decimal64", "described"])
def test_values_with_no_0_9_1_type_are_left_out(value: Any) -> None:
    payload = encode_sections([ApplicationProperties({"k": value, "kept": 1}), Data(b"")])
    props, _ = to_0_9_1(received(payload))
    assert props.headers == {"kept": 1}


def test_keys_longer_than_a_short_string_are_left_out() -> None:
    payload = encode_sections([ApplicationProperties({"k" * 256: 1, "ok": 2}), Data(b"")])
    assert to_0_9_1(received(payload))[0].headers == {"ok": 2}


def test_message_annotations_lists_maps_and_arrays_become_0_9_1_arrays_and_tables() -> None:
    annotations = {"x-list": [1, "a"], "x-map": {"k": Symbol("v")}, "x-array": Array("uint", [UInt(1), UInt(2)])}
    payload = encode_sections([MessageAnnotations(annotations), Data(b"")])
    assert to_0_9_1(received(payload))[0].headers == {"x-list": [1, "a"], "x-map": {"k": "v"}, "x-array": [1, 2]}


def test_x_cc_and_x_opt_deaths_become_cc_and_x_death() -> None:
    deaths = [{Symbol("queue"): "q1", Symbol("reason"): Symbol("expired"), Symbol("count"): ULong(2),
               Symbol("first-time"): Timestamp(1_700_000_000_000), Symbol("last-time"): Timestamp(1_700_000_500_000),
               Symbol("exchange"): "dlx", Symbol("routing-keys"): Array("string", ["rk"]), Symbol("ttl"): UInt(50)}]
    payload = encode_sections([MessageAnnotations({"x-cc": Array("string", ["a", "b"]), "x-opt-deaths": deaths}),
                               Data(b"")])
    headers = to_0_9_1(received(payload))[0].headers
    assert headers == {"CC": ["a", "b"], "x-death": [{
        "queue": "q1", "reason": "expired", "count": 2, "time": datetime.datetime.fromtimestamp(1_700_000_000, UTC),
        "exchange": "dlx", "routing-keys": ["rk"], "original-expiration": "50"}]}


# -- bodies, 1.0 -> 0-9-1 ---------------------------------------------------------------------------

@pytest.mark.parametrize(("sections", "body"), [
    ([Data(b"one")], b"one"),
    ([Data(b"")], b""),
    ([Data(b"ab"), Data(b"cd"), Data(b"")], b"abcd"),
])
def test_data_sections_reach_a_0_9_1_consumer_as_their_bytes(sections: list[Any], body: bytes) -> None:
    props, got = to_0_9_1(received(encode_sections([Properties(content_type=Symbol("text/plain")), *sections])))
    assert got == body and props.content_type == "text/plain"


@pytest.mark.parametrize("sections", [
    [AmqpValue("a string")], [AmqpValue(None)], [AmqpValue({"k": [1, 2]})],
    [AmqpSequence([1, "two"]), AmqpSequence([3.0])],
], ids=["value-string", "value-null", "value-map", "sequences"])
def test_amqp_value_and_sequence_bodies_reach_0_9_1_encoded_with_rabbitmqs_content_type(sections: list[Any]) -> None:
    encoded = encode_sections(sections)
    props, body = to_0_9_1(received(encode_sections([Properties(content_type=Symbol("text/plain")), *sections])))
    assert body == encoded
    assert props.content_type == AMQP_SECTIONS_TYPE
    assert MessageSections(body).body() == MessageSections(encoded).body()


# -- 0-9-1 -> 1.0 ---------------------------------------------------------------------------------

PROPERTIES_TO_PROTON = [
    # (0-9-1 properties, {proton.Message attribute: value expected})
    ({"delivery_mode": 2}, {"durable": True, "priority": 4}),
    ({"delivery_mode": 1, "priority": 0}, {"durable": False, "priority": 0}),
    ({"expiration": "2500"}, {"ttl": 2.5}),
    ({"expiration": "9999999999999"}, {"ttl": 4294967.295}),
    ({"message_id": "m-1"}, {"id": "m-1"}),
    ({"message_id": "urn:uuid:00000000-0000-0000-0000-000000000009"}, {"id": uuid.UUID(int=9)}),
    ({"message_id": "urn:uuid:not-a-uuid"}, {"id": "urn:uuid:not-a-uuid"}),
    ({"correlation_id": "c-2"}, {"correlation_id": "c-2"}),
    ({"user_id": "guest"}, {"user_id": b"guest"}),
    ({"reply_to": "amq.rabbitmq.reply-to"}, {"reply_to": "amq.rabbitmq.reply-to"}),
    ({"content_type": "application/json", "content_encoding": "utf-8"},
     {"content_type": "application/json", "content_encoding": "utf-8"}),
    ({"type": "order.created"}, {"subject": "order.created"}),
    ({"app_id": "billing"}, {"group_id": "billing"}),
    ({"timestamp": 1_700_000_000}, {"creation_time": 1_700_000_000.0}),
    ({"cluster_id": "c"}, {"id": None, "subject": None}),
    ({"headers": {"s": "text", "i": 5, "big": 2 ** 40, "f": 1.5, "b": True, "v": None, "raw": b"\xff",
                  "when": datetime.datetime(2024, 1, 2, tzinfo=UTC)}},
     {"properties": {"s": "text", "i": 5, "big": 2 ** 40, "f": 1.5, "b": True, "v": None, "raw": b"\xff",
                     "when": 1_704_153_600_000}}),
    ({"headers": {"x-custom": {"nested": [1]}, "x-n": 3}},
     {"annotations": {"x-custom": {"nested": [1]}, "x-n": 3}, "properties": None}),
    ({"headers": {"CC": ["k1", "k2"]}}, {"annotations": {"x-cc": ["k1", "k2"]}}),
    ({"headers": {"table": {"a": 1}, "list": [1], "dec": Decimal("1.5"), "kept": "yes"}},
     {"properties": {"kept": "yes"}}),
    ({"headers": {"x-message-id": b"\x01\x02"}}, {"id": b"\x01\x02", "properties": None, "annotations": None}),
]


@pytest.mark.parametrize(("props", "expected"), PROPERTIES_TO_PROTON)
def test_a_0_9_1_message_converted_to_1_0_decodes_in_proton_as_expected(props: dict[str, Any],
                                                                          expected: dict[str, Any]) -> None:
    got = delivered(from_0_9_1(b"body", **props))
    assert bytes(got.body) == b"body" and got.inferred      # a data section
    for name, value in expected.items():
        actual = getattr(got, name)
        if name == "annotations" and actual is not None:
            actual = {str(k): v for k, v in actual.items()}
        assert actual == value, name


def test_an_empty_0_9_1_message_becomes_a_1_0_message_with_an_empty_data_section() -> None:
    payload = transfer_payload(from_0_9_1(b""), delivery_count=0, first_acquirer=False)
    assert payload == encode_sections([Data(b"")])


def test_a_0_9_1_body_of_1_0_sections_becomes_those_sections() -> None:
    sections = encode_sections([AmqpValue({"k": 1})])
    payload = transfer_payload(from_0_9_1(sections, content_type=AMQP_SECTIONS_TYPE), delivery_count=0,
                               first_acquirer=False)
    got = in_proton(payload)
    assert got.body == {"k": 1} and MessageSections(payload).content_type is None
    assert payload.endswith(sections)


def test_a_0_9_1_body_that_only_claims_to_be_1_0_sections_stays_data() -> None:
    message = from_0_9_1(b"\x00Sw\xa1", content_type=AMQP_SECTIONS_TYPE)      # cut short
    got = delivered(message)
    assert bytes(got.body) == b"\x00Sw\xa1" and got.content_type == AMQP_SECTIONS_TYPE


# -- round trips ------------------------------------------------------------------------------------

ROUND_TRIP_0_9_1 = [
    {"delivery_mode": 2, "priority": 3, "expiration": "60000"},
    {"delivery_mode": 1, "priority": 4, "message_id": "id-1", "correlation_id": "urn:uuid:" + str(uuid.UUID(int=3))},
    {"content_type": "text/plain", "content_encoding": "gzip", "reply_to": "r", "type": "t", "user_id": "u",
     "app_id": "a", "timestamp": 1_600_000_000},
    {"headers": {"s": "x", "i": -1, "b": False, "raw": b"\x00", "x-list": [1, "a", {"k": True}],
                 "x-table": {"n": None}, "CC": ["c"],
                 "when": datetime.datetime(2020, 5, 6, 7, 8, 9, tzinfo=UTC)}},
]


@pytest.mark.parametrize("props", ROUND_TRIP_0_9_1)
def test_0_9_1_to_1_0_and_back_keeps_every_mappable_property(props: dict[str, Any]) -> None:
    original = from_0_9_1(b"content", **props)
    back = received(transfer_payload(original, delivery_count=0, first_acquirer=False))
    got, body = to_0_9_1(back)
    assert body == b"content"
    assert got == decode_properties(encode_properties(MessageProperties(**props)))


ROUND_TRIP_1_0 = [
    {"durable": True, "priority": 8, "ttl": 30.0},
    {"id": uuid.UUID(int=11), "correlation_id": b"\x00corr"},
    {"id": "x" * 400},
    {"user_id": b"me", "reply_to": "r", "subject": "s", "content_type": "text/plain", "content_encoding": "br",
     "creation_time": 1_650_000_000.0, "group_id": "g"},
    {"properties": {"n": 1, "s": "t", "bin": b"\x02", "flag": True}, "annotations": {"x-opt-a": "b", "x-k": [1, 2]}},
]


@pytest.mark.parametrize("fields", ROUND_TRIP_1_0)
def test_1_0_to_0_9_1_and_back_keeps_every_mappable_field(fields: dict[str, Any]) -> None:
    original = proton.Message(body=b"content", inferred=True, **fields)
    props, body = to_0_9_1(received(original.encode()))
    back = delivered(from_0_9_1(body, **{f.name: getattr(props, f.name) for f in dataclasses.fields(props) if getattr(props, f.name) is not None}))
    for name in fields:
        got, want = getattr(back, name), getattr(original, name)
        if name == "annotations":
            got, want = {str(k): v for k, v in got.items()}, {str(k): v for k, v in want.items()}
        assert got == want, name
    assert bytes(back.body) == b"content"


def test_a_ulong_message_id_comes_back_from_0_9_1_as_its_text() -> None:
    props, body = to_0_9_1(received(proton.Message(body=b"", inferred=True, id=77).encode()))
    assert delivered(from_0_9_1(body, message_id=props.message_id)).id == "77"


def test_amqp_value_bodies_survive_1_0_to_0_9_1_and_back() -> None:
    original = proton.Message(body={"k": [1, 2, "three"]}, properties={"p": 1})
    props, body = to_0_9_1(received(original.encode()))
    back = delivered(from_0_9_1(body, **{f.name: getattr(props, f.name) for f in dataclasses.fields(props) if getattr(props, f.name) is not None}))
    assert back.body == {"k": [1, 2, "three"]} and back.properties == {"p": 1}
