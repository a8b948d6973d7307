"""The amqp-1.0 message format: what is kept as received, what a delivery rewrites, malformed payloads."""

from __future__ import annotations

import datetime
import tomllib
from pathlib import Path
from typing import Any

import proton
import pytest

from broker.messaging.dead_letter import dead_lettered
from broker.messaging.message import Message, MessageProperties
from broker.messaging.message_format import BUILTIN_FORMATS, format_for
from broker.protocol.amqp0_9_1.delivery import content_frames
from broker.protocol.amqp0_9_1.properties import FORMAT as FORMAT_0_9_1, decode_properties
from broker.protocol.amqp1_0.convert import AMQP_SECTIONS_TYPE
from broker.protocol.amqp1_0.message_format import (AMQP_1_0, FORMAT, message_from_transfer,
                                                    transfer_payload)
from broker.protocol.amqp1_0.sections import MessageSections, encode_sections
from broker.protocol.amqp1_0.types import (AmqpSequence, AmqpValue, ApplicationProperties, Data,
                                           DeliveryAnnotations, DecodeError, Footer, Header, MessageAnnotations,
                                           Properties, Symbol, Timestamp, UInt, ULong)

ROOT = Path(__file__).resolve().parents[4]


def received(payload: bytes) -> Message:
    return message_from_transfer(payload, exchange="ex", routing_key="rk", arrival=10.0)


def again(message: Message, delivery_count: int = 0, first_acquirer: bool = False) -> bytes:
    return transfer_payload(message, delivery_count=delivery_count, first_acquirer=first_acquirer)


PROPS = Properties(message_id="m1", subject="s", content_type=Symbol("text/plain"))
APP = ApplicationProperties({"k": "v"})


def test_the_format_is_found_by_its_tag_everywhere() -> None:
    assert AMQP_1_0 == "amqp-1.0" and format_for("amqp-1.0") is FORMAT
    assert BUILTIN_FORMATS["amqp-1.0"] == "broker.protocol.amqp1_0.message_format:FORMAT"
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert declared["project"]["entry-points"]["deltamq.message_formats"]["amqp-1.0"] == \
        "broker.protocol.amqp1_0.message_format:FORMAT"


# -- kept as received -------------------------------------------------------------------------------

def _vbin32_data(content: bytes) -> bytes:
    return b"\x00\x53\x75\xb0" + len(content).to_bytes(4, "big") + content


KEPT = {
    "data": encode_sections([Header(durable=True), PROPS, APP, Data(b"payload")]),
    "data-vbin32-short": encode_sections([PROPS]) + _vbin32_data(b"tiny"),
    "data-large": encode_sections([Data(b"x" * 70_000)]),
    "datas": encode_sections([PROPS, Data(b"ab"), Data(b""), Data(b"c" * 300)]),
    "value": encode_sections([Header(priority=9), MessageAnnotations({"x-opt-a": 1}), AmqpValue({"m": [1, 2]})]),
    "sequences": encode_sections([APP, AmqpSequence([1, 2]), AmqpSequence(["three"])]),
    "footer": encode_sections([PROPS, Data(b"signed"), Footer({"x-sig": b"\x01"})]),
    "symbolic-descriptor": b"\x00\xa3\x10amqp:data:binary\xa0\x02hi",
}


@pytest.mark.parametrize("payload", KEPT.values(), ids=KEPT.keys())
def test_a_message_is_delivered_to_1_0_exactly_as_received(payload: bytes) -> None:
    message = received(payload)
    assert message.format is FORMAT
    delivered = again(message)
    if payload.startswith(b"\x00\xa3"):      # a data section with a symbolic descriptor: the same section
        assert MessageSections(delivered).body() == MessageSections(payload).body()
    else:
        assert delivered == payload
    tag, native = message.native()
    assert tag == "amqp-1.0"
    assert again(Message(exchange="ex", routing_key="rk", body=message.body, native=native, format=format_for(tag),
                         arrival=0.0)) == delivered       # what the journal keeps is enough


@pytest.mark.parametrize(("name", "body"), [
    ("data", b"payload"), ("datas", b"ab" + b"c" * 300), ("footer", b"signed"),
    ("value", encode_sections([AmqpValue({"m": [1, 2]})])),
    ("sequences", encode_sections([AmqpSequence([1, 2]), AmqpSequence(["three"])])),
])
def test_the_body_is_the_application_data_or_the_encoded_sections(name: str, body: bytes) -> None:
    assert received(KEPT[name]).body == body


def test_the_native_metadata_holds_no_body_bytes() -> None:
    message = received(encode_sections([PROPS, Data(b"B" * 1000)]))
    assert b"B" * 1000 not in message.native()[1]


def test_delivery_annotations_are_dropped_on_arrival() -> None:
    payload = encode_sections([DeliveryAnnotations({"x-hop": 1}), PROPS, Data(b"d")])
    assert again(received(payload)) == encode_sections([PROPS, Data(b"d")])


def test_the_header_alone_is_read_on_arrival_for_durability_priority_and_ttl() -> None:
    message = received(encode_sections([Header(durable=True, priority=7, ttl=2500), Data(b"")]))
    assert message.persistent and message.priority == 7 and message.expires_at == pytest.approx(12.5)
    transient = received(encode_sections([Data(b"")]))
    assert not transient.persistent and transient.priority == 0 and transient.expires_at is None


# -- what a delivery rewrites ---------------------------------------------------------------------------

def test_a_delivery_sets_delivery_count_and_first_acquirer_and_keeps_the_rest_of_the_header() -> None:
    message = received(encode_sections([Header(durable=True, priority=2, ttl=100), PROPS, Data(b"d")]))
    sections = MessageSections(again(message, delivery_count=3, first_acquirer=True))
    assert sections.header == Header(durable=True, priority=2, ttl=100, first_acquirer=True, delivery_count=3)
    assert sections.bare == encode_sections([PROPS, Data(b"d")])


def test_a_message_without_a_header_gets_one_only_when_there_is_something_to_say() -> None:
    message = received(encode_sections([Data(b"d")]))
    assert again(message) == encode_sections([Data(b"d")])
    assert MessageSections(again(message, delivery_count=1)).header == Header(delivery_count=1)
    assert MessageSections(again(message, first_acquirer=True)).header == Header(first_acquirer=True)


def test_broker_annotations_join_the_message_annotations() -> None:
    message = received(encode_sections([MessageAnnotations({"x-opt-keep": "k"}), PROPS, Data(b"d")]))
    annotated = Message.annotated({"x-replay-of": 7}, exchange="ex", routing_key="rk", body=message.body,
                                  native=message.native()[1], format=FORMAT, arrival=0.0)
    sections = MessageSections(again(annotated))
    assert sections.message_annotations == {"x-opt-keep": "k", "x-replay-of": 7}
    assert sections.bare == encode_sections([PROPS, Data(b"d")])


def _dead(message: Message) -> Message:
    return dead_lettered(message, queue="q1", reason="rejected", wall_time=1_700_000_000.0, exchange="dlx",
                         routing_key=None, arrival=20.0)


def test_a_dead_lettered_1_0_message_carries_x_opt_deaths_to_1_0_consumers() -> None:
    message = received(encode_sections([Header(durable=True, ttl=500), MessageAnnotations({"x-opt-a": "b"}),
                                        Properties(message_id="m1"), APP, Data(b"body")]))
    dead = _dead(message)
    got = proton.Message()
    got.decode(again(dead, delivery_count=1))
    annotations = {str(k): v for k, v in got.annotations.items()}
    deaths = annotations.pop("x-opt-deaths")
    assert [{str(k): v for k, v in death.items()} for death in deaths] == [{
        "queue": "q1", "reason": "rejected", "count": 1, "first-time": 1_700_000_000_000,
        "last-time": 1_700_000_000_000, "exchange": "ex", "routing-keys": ["rk"], "ttl": 500}]
    assert annotations == {"x-opt-a": "b", "x-first-death-reason": "rejected", "x-first-death-queue": "q1",
                           "x-first-death-exchange": "ex", "x-last-death-reason": "rejected",
                           "x-last-death-queue": "q1", "x-last-death-exchange": "ex"}
    assert bytes(got.body) == b"body" and got.id == "m1" and got.properties == {"k": "v"}
    assert got.durable and got.delivery_count == 1 and not got.ttl      # the copy does not expire again


def test_a_dead_lettered_1_0_message_carries_x_death_to_0_9_1_consumers_and_dies_again() -> None:
    dead = _dead(received(encode_sections([Properties(message_id="m1"), Data(b"body")])))
    props = decode_properties(dead.native_for(FORMAT_0_9_1))
    assert props.headers is not None and props.headers["x-death"][0]["count"] == 1
    assert props.headers["x-first-death-queue"] == "q1" and dead.body == b"body"
    twice = _dead(Message(exchange="dlx", routing_key="rk", body=dead.body, native=dead.native()[1],
                          format=FORMAT, arrival=30.0))      # as recovered from the journal
    assert twice.properties.headers is not None and twice.properties.headers["x-death"][0]["count"] == 2


def test_a_dead_lettered_amqp_value_message_keeps_its_body() -> None:
    dead = _dead(received(encode_sections([AmqpValue([1, "two"])])))
    assert MessageSections(again(dead)).body() == [1, "two"]


def test_a_view_that_claims_1_0_sections_without_them_is_delivered_as_data() -> None:
    message = Message(exchange="", routing_key="q", body=b"not sections",
                      properties=MessageProperties(content_type=AMQP_SECTIONS_TYPE), format=FORMAT, arrival=0.0)
    assert MessageSections(again(message)).body() == [b"not sections"]


# -- the 0-9-1 delivery path ------------------------------------------------------------------------------

def test_the_0_9_1_delivery_path_sends_a_1_0_message_converted() -> None:
    message = received(encode_sections([Header(durable=True), Properties(subject="t", message_id=ULong(5)),
                                        ApplicationProperties({"h": UInt(1)}), Data(b"hello")]))
    out: list[bytes] = []
    content_frames(out, 1, message, 131072)
    frames = b"".join(out)
    header_size = int.from_bytes(frames[3:7], "big")
    props = decode_properties(frames[7 + 12:7 + header_size])
    assert props == MessageProperties(delivery_mode=2, priority=4, type="t", message_id="5", headers={"h": 1})
    assert frames.endswith(b"hello\xce")


def test_a_0_9_1_message_reaches_the_0_9_1_path_with_its_native_bytes() -> None:
    native = b"\x10\x00\x01"        # flags: delivery_mode; then 1
    message = Message(exchange="", routing_key="q", body=b"x", native=native, format=FORMAT_0_9_1, arrival=0.0)
    assert message.native_for(FORMAT_0_9_1) is native


# -- the common view ---------------------------------------------------------------------------------------

VIEWS = [
    MessageProperties(),
    MessageProperties(delivery_mode=2, priority=1, expiration="10", message_id="m", correlation_id="c",
                      content_type="a/b", content_encoding="e", reply_to="r", timestamp=5, type="t", user_id="u",
                      app_id="a"),
    MessageProperties(headers={"s": "x", "x-death": [{"count": 1, "reason": "expired", "queue": "q",
                                                       "time": datetime.datetime(2024, 1, 1,
                                                                                 tzinfo=datetime.timezone.utc),
                                                       "exchange": "e", "routing-keys": ["k"]}]}),
    MessageProperties(content_type=AMQP_SECTIONS_TYPE, headers={"x-n": [1, {"k": None}]}),
]


@pytest.mark.parametrize("view", VIEWS)
def test_metadata_made_from_a_view_decodes_to_that_view(view: MessageProperties) -> None:
    assert FORMAT.decode(FORMAT.encode(view)) == view


def test_annotations_given_to_encode_decode_as_headers() -> None:
    view = FORMAT.decode(FORMAT.encode(MessageProperties(headers={"a": 1}), {"x-first-death-queue": "q"}))
    assert view.headers == {"a": 1, "x-first-death-queue": "q"}


def test_the_view_is_decoded_from_the_metadata_without_the_body() -> None:
    payload = encode_sections([Header(durable=True, ttl=7), Properties(creation_time=Timestamp(4_000)),
                               ApplicationProperties({"a": 1}), AmqpValue("v")])
    view = FORMAT.decode(received(payload).native()[1])
    assert view == MessageProperties(delivery_mode=2, priority=4, expiration="7", timestamp=4,
                                     content_type=AMQP_SECTIONS_TYPE, headers={"a": 1})


# -- malformed ---------------------------------------------------------------------------------------------

MALFORMED: dict[str, bytes] = {
    "empty": b"",
    "no body": encode_sections([Header(), PROPS]),
    "not a section": b"\x45",
    "unknown descriptor": b"\x00\x53\x99\x45",
    "out of order": encode_sections([PROPS, Header(), Data(b"")]),
    "two amqp-values": encode_sections([AmqpValue(1), AmqpValue(2)]),
    "data then amqp-value": encode_sections([Data(b""), AmqpValue(2)]),
    "data holding a string": b"\x00\x53\x75\xa1\x01a",
    "cut short": encode_sections([Data(b"abcdef")])[:-2],
    "size past the end": b"\x00\x53\x75\xb0\xff\xff\xff\xff",
    "header holding a map": b"\x00\x53\x70\xc1\x01\x00" + encode_sections([Data(b"")]),
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_payload_raises_decode_error(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        received(payload)


@pytest.mark.parametrize("native", [b"", b"\x42", b"\x75\x00\x00", b"\x75\x00\x00\x00\x09",
                                    b"\xa0" + encode_sections([Data(b"")]), b"\xa0\x00\x53"],
                         ids=["empty", "unknown-layout", "count-cut", "records-past-end", "body-in-metadata",
                              "cut-section"])
def test_malformed_native_metadata_raises_decode_error(native: bytes) -> None:
    with pytest.raises(DecodeError):
        FORMAT.decode(native)
    with pytest.raises(ValueError):         # what journal readers catch
        FORMAT.decode(native)


def test_a_malformed_section_is_left_out_of_the_view_not_raised_to_its_readers() -> None:
    # taken without decoding it, the application-properties section fails only when the common
    # view is needed: raising then failed every reader (a 0-9-1 consumer's delivery, a selector)
    malformed = b"\x00\x53\x74\xc1\x03\x02\xa1\x01"
    message = received(encode_sections([Properties(subject="s")]) + malformed + encode_sections([Data(b"")]))
    assert message.properties.type == "s" and not message.properties.headers
    with pytest.raises(DecodeError):
        MessageSections(message.native()[1][1:]).application_properties
    assert message.native_for(FORMAT_0_9_1)


def test_received_native_is_the_bytes_as_received_with_or_without_annotations() -> None:
    native = received(encode_sections([PROPS, Data(b"d")])).native()[1]
    plain = Message(exchange="", routing_key="q", body=b"d", native=native, format=FORMAT, arrival=0.0)
    annotated = Message.annotated({"x-replay-of": 1}, exchange="", routing_key="q", body=b"d", native=native,
                                  format=FORMAT, arrival=0.0)
    viewed = Message(exchange="", routing_key="q", body=b"d", properties=MessageProperties(), format=FORMAT,
                     arrival=0.0)
    assert plain.received_native() is native and annotated.received_native() is native
    assert viewed.received_native() is None


def test_an_annotated_1_0_message_is_journaled_with_every_section_kept_and_its_annotations() -> None:
    payload = encode_sections([Header(durable=True), Properties(to="addr", message_id=ULong(9), group_sequence=3),
                               Data(b"a"), Data(b"b"), Footer({"x-sig": b"s"})])
    native = received(payload).native()[1]
    replayed = Message.annotated({"x-replay-of": 4}, exchange="", routing_key="q", body=b"ab", native=native,
                                 format=FORMAT, arrival=0.0)
    tag, journaled = replayed.native()
    assert tag == "amqp-1.0" and FORMAT.decode(journaled).headers == {"x-replay-of": 4}
    recovered = Message(exchange="", routing_key="q", body=b"ab", native=journaled, format=FORMAT, arrival=0.0)
    sections = MessageSections(again(recovered))
    assert sections.to == "addr" and sections.message_id == 9 and sections.group_sequence == 3
    assert sections.footer == {"x-sig": b"s"} and sections.body() == [b"a", b"b"]
    assert sections.message_annotations == {"x-replay-of": 4}
