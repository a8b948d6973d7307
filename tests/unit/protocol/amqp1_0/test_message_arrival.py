"""The arrival fast path (message_arrival.py) keeps a message as the generic path does, byte for byte,
and steps aside for every other shape and for malformed or cut-short payloads."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from broker.messaging.message import Message
from broker.protocol.amqp1_0 import message_format
from broker.protocol.amqp1_0.message_arrival import light_properties, split_as_received
from broker.protocol.amqp1_0.message_format import message_from_transfer
from broker.protocol.amqp1_0.sections import encode_sections
from broker.protocol.amqp1_0.types import (AmqpSequence, AmqpValue, ApplicationProperties, Data, DecodeError,
                                           DeliveryAnnotations, Footer, Header, MessageAnnotations, Properties,
                                           Symbol)

HEADERS = [None, Header(), Header(durable=True), Header(durable=True, priority=7, ttl=60_000),
           Header(first_acquirer=True, delivery_count=3), Header(priority=0, ttl=0)]
MAS = [None, MessageAnnotations({Symbol("x-opt-a"): 1})]
PROPS = [None, Properties(message_id="m-1", subject="s", to="q")]
APPS = [None, ApplicationProperties({"k": "v"})]
FOOTERS = [None, Footer({Symbol("x-hash"): b"\x01"})]
BODIES = [b"", b"x", b"y" * 255, b"z" * 256, b"w" * 70_000]


def payload_of(header: Any, ma: Any, props: Any, app: Any, body: bytes, footer: Any, vbin32: bool) -> bytes:
    head = encode_sections([s for s in (header, ma, props, app) if s is not None])
    data = (b"\x00\x53\x75\xb0" + len(body).to_bytes(4, "big") + body) if vbin32 else encode_sections([Data(body)])
    return head + data + (encode_sections([footer]) if footer is not None else b"")


def fields(message: Message) -> tuple[Any, ...]:
    return (message.exchange, message.routing_key, message.body, message.received_native(), message.format,
            message.arrival, message.expires_at, message.priority, message.persistent, message.properties)


def arrive(payload: bytes) -> Any:
    try:
        return fields(message_from_transfer(payload, exchange="ex", routing_key="rk", arrival=5.0))
    except DecodeError as exc:
        return (type(exc), str(exc))


def arrive_generic(monkeypatch: pytest.MonkeyPatch, payload: bytes) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(message_format, "split_as_received", lambda payload: None)
        return arrive(payload)


@settings(max_examples=300, deadline=None)
@given(header=st.sampled_from(HEADERS), ma=st.sampled_from(MAS), props=st.sampled_from(PROPS),
       app=st.sampled_from(APPS), body=st.sampled_from(BODIES), footer=st.sampled_from(FOOTERS),
       vbin32=st.booleans())
def test_the_usual_shape_is_kept_as_the_generic_path_keeps_it(header: Any, ma: Any, props: Any, app: Any,
                                                                body: bytes, footer: Any, vbin32: bool) -> None:
    payload = payload_of(header, ma, props, app, body, footer, vbin32)
    assert split_as_received(payload) is not None
    with pytest.MonkeyPatch.context() as patch:
        assert arrive(payload) == arrive_generic(patch, payload)


OTHER_SHAPES = {
    "two data sections": encode_sections([Header(durable=True), Data(b"a"), Data(b"b")]),
    "amqp-value": encode_sections([Header(), AmqpValue({"a": 1})]),
    "amqp-sequence": encode_sections([AmqpSequence([1, 2])]),
    "delivery annotations": encode_sections([DeliveryAnnotations({Symbol("x-opt-d"): 1}), Data(b"a")]),
    "symbolic descriptor": b"\x00\xa3\x10amqp:header:list\x45" + encode_sections([Data(b"a")]),
}
MALFORMED = {
    "empty": b"",
    "no body": encode_sections([Header(), Properties(message_id="m")]),
    "header twice": encode_sections([Header(), Header(), Data(b"a")]),
    "properties before annotations": encode_sections([Properties(), MessageAnnotations({}), Data(b"a")]),
    "data not binary": b"\x00\x53\x75\xa1\x01a",
    "data runs past the payload": b"\x00\x53\x75\xa0\x09abc",
    "data32 runs past the payload": b"\x00\x53\x75\xb0\x00\x00\x01\x00abc",
    "bytes after the body": encode_sections([Data(b"a")]) + b"\x45",
    "a section after the footer": encode_sections([Data(b"a"), Footer({}), Footer({})]),
    "header not a list": b"\x00\x53\x70\xa1\x01x" + encode_sections([Data(b"a")]),
    "header field of the wrong type": b"\x00\x53\x70\xc0\x03\x01\xa1\x00" + encode_sections([Data(b"a")]),
    "footer not a map": encode_sections([Data(b"a")]) + b"\x00\x53\x78\x45",
    "not a section": b"\x45" + encode_sections([Data(b"a")]),
}


@pytest.mark.parametrize("payload", list(OTHER_SHAPES.values()) + list(MALFORMED.values()),
                         ids=list(OTHER_SHAPES) + list(MALFORMED))
def test_other_shapes_and_malformed_payloads_go_the_generic_way(monkeypatch: pytest.MonkeyPatch,
                                                                 payload: bytes) -> None:
    assert split_as_received(payload) is None
    assert arrive(payload) == arrive_generic(monkeypatch, payload)


def test_a_payload_cut_at_every_offset_arrives_as_on_the_generic_path(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = payload_of(HEADERS[3], MAS[1], PROPS[1], APPS[1], b"body" * 10, FOOTERS[1], False)
    for cut in range(len(payload) + 1):
        assert arrive(payload[:cut]) == arrive_generic(monkeypatch, payload[:cut]), cut


def test_light_properties_are_shared_by_header_and_read_only_in_use() -> None:
    section = encode_sections([Header(durable=True, priority=6, ttl=1500)])
    light = light_properties(section, Header(durable=True, priority=6, ttl=1500))
    assert light is light_properties(section, Header(durable=True, priority=6, ttl=1500))
    assert (light.delivery_mode, light.priority, light.expiration) == (2, 6, "1500")
    message = message_from_transfer(section + encode_sections([Data(b"a")]), exchange="", routing_key="q",
                                    arrival=1.0)
    assert message.bare_properties() is not light            # a message keeps none of it
    assert (message.persistent, message.priority, message.expires_at) == (True, 6, 2.5)


def test_a_payload_after_one_with_the_same_metadata_is_split_as_the_generic_path_splits_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sections before the body of the last full split are taken as found when the next payload
    begins with them: whatever follows them, the message is the generic path's (or both refuse)."""
    first = payload_of(Header(durable=True), None, None, None, b"a" * 10, None, False)
    prefix = first[:first.index(b"\x00\x53\x75")]
    followers = [
        first, payload_of(Header(durable=True), None, None, None, b"b" * 300, None, True),
        payload_of(Header(durable=True), None, None, None, b"c", FOOTERS[1], False),
        payload_of(Header(durable=True), None, PROPS[1], None, b"d", None, False),   # more sections
        prefix, prefix + b"\x00\x53\x75", prefix + b"\x00\x53\x75\xa0", prefix + b"\x00\x53\x75\xa0\x05ab",
        prefix + b"\x00\x53\x75\xa1\x01a", prefix + b"\x00\x53\x75\xa0\x01a\x00\x53\x78",
        payload_of(Header(durable=True), None, None, None, b"e", None, False) + b"\x40",
    ]
    for payload in followers:
        split_as_received(first)                   # the prefix the next payload is checked against
        assert arrive(payload) == arrive_generic(monkeypatch, payload), payload
    split_as_received(first)
    one, two = (message_from_transfer(first, exchange="", routing_key="q", arrival=0.0) for _ in range(2))
    assert one.received_native() is two.received_native()    # the same metadata, one object
