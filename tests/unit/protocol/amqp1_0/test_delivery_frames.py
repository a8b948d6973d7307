"""The delivery fast paths (delivery_frames.py) write what the generic codec writes, byte for byte,
and step aside (None) wherever they do not apply."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from broker.messaging.message import Message, MessageProperties
from broker.protocol.amqp1_0 import message_format
from broker.protocol.amqp1_0.definitions import Accepted, Disposition
from broker.protocol.amqp1_0.delivery_frames import (TAG, accepted_frame, payload_as_received, payload_parts,
                                                     transfer_frame)
from broker.protocol.amqp1_0.framing import encode_frame, transfer_frames
from broker.protocol.amqp1_0.message_format import (FORMAT, message_from_transfer, transfer_payload,
                                                    transfer_payload_parts)
from broker.protocol.amqp1_0.sections import encode_sections
from broker.protocol.amqp1_0.types import (AmqpValue, ApplicationProperties, Data, DeliveryAnnotations, Footer,
                                           DecodeError, Header, MessageAnnotations, Properties, Symbol, Transfer)

# -- the transfer frame -----------------------------------------------------------------------------


def generic_frames(channel: int, handle: int, delivery_id: int, settled: bool, payload: bytes,
                   max_frame_size: int, tag: bytes | None = None) -> list[bytes]:
    transfer = Transfer(handle=handle, delivery_id=delivery_id,
                        delivery_tag=TAG(delivery_id) if tag is None else tag, message_format=0, settled=settled)
    return transfer_frames(channel, transfer, payload, max_frame_size)


@settings(max_examples=300, deadline=None)
@given(channel=st.integers(0, 0xFFFF), handle=st.integers(0, 0xFFFFFFFF), delivery_id=st.integers(0, 0xFFFFFFFF),
       tag=st.binary(max_size=32), settled=st.booleans(), payload=st.binary(max_size=600),
       max_frame_size=st.integers(512, 1200))
def test_the_transfer_frame_is_the_generic_one_or_none(channel: int, handle: int, delivery_id: int, tag: bytes,
                                                         settled: bool, payload: bytes, max_frame_size: int) -> None:
    fast = transfer_frame(channel, handle, delivery_id, tag, settled, payload, max_frame_size)
    generic = generic_frames(channel, handle, delivery_id, settled, payload, max_frame_size, tag)
    if fast is None:
        assert len(generic) > 1                  # it needs continuation frames: the generic path splits
    else:
        assert [fast] == generic
    cut = len(payload) // 3                      # the payload in parts: joined with the frame, the same bytes
    parts = (payload[:cut], b"", payload[cut:2 * cut], payload[2 * cut:])
    assert transfer_frame(channel, handle, delivery_id, tag, settled, parts, max_frame_size) == fast


@pytest.mark.parametrize("delivery_id", [0, 1, 255, 256, 0xFFFFFFFF])
def test_the_transfer_frame_at_the_edges_of_the_uint_encodings(delivery_id: int) -> None:
    payload = b"\x00\x53\x75\xa0\x01x"
    assert [transfer_frame(3, delivery_id, delivery_id, TAG(delivery_id), False, payload, 512)] == \
        generic_frames(3, delivery_id, delivery_id, False, payload, 512)


def test_a_payload_that_fills_the_frame_exactly_still_fits() -> None:
    head = len(transfer_frame(0, 0, 0, TAG(0), False, b"", 512) or b"")
    payload = b"p" * (512 - head)
    frame = transfer_frame(0, 0, 0, TAG(0), False, payload, 512)
    assert frame is not None and len(frame) == 512 and [frame] == generic_frames(0, 0, 0, False, payload, 512)
    assert transfer_frame(0, 0, 0, TAG(0), False, payload + b"p", 512) is None


def test_a_tag_longer_than_the_spec_allows_takes_the_generic_path() -> None:
    assert transfer_frame(0, 0, 0, b"t" * 33, False, b"", 512) is None


# -- the payload of a message kept as received -------------------------------------------------------


def generic_payload(monkeypatch: pytest.MonkeyPatch, message: Message, delivery_count: int,
                    first_acquirer: bool) -> bytes:
    with monkeypatch.context() as patch:
        patch.setattr(message_format, "payload_parts", lambda *args: None)
        return transfer_payload(message, delivery_count=delivery_count, first_acquirer=first_acquirer)


def received(payload: bytes) -> Message:
    return message_from_transfer(payload, exchange="", routing_key="q", arrival=1.0)


HEADERS = [None, Header(), Header(durable=True), Header(durable=True, priority=7, ttl=60_000),
           Header(first_acquirer=True, delivery_count=3), Header(priority=4, ttl=0)]
MAS = [None, MessageAnnotations({Symbol("x-opt-a"): 1, Symbol("x-opt-b"): "two"})]
PROPS = [None, Properties(message_id="m-1", subject="s", content_type=Symbol("text/plain"))]
APPS = [None, ApplicationProperties({"k": "v", "n": 2})]
FOOTERS = [None, Footer({Symbol("x-hash"): b"\x01\x02"})]
BODIES = [b"", b"x", b"y" * 255, b"z" * 256, b"w" * 70_000]


def _payload(header: Any, da: bool, ma: Any, props: Any, app: Any, body: bytes, footer: Any,
             vbin32: bool = False) -> bytes:
    sections = [s for s in (header, DeliveryAnnotations({Symbol("x-opt-d"): 1}) if da else None, ma, props, app)
                if s is not None]
    data = (b"\x00\x53\x75\xb0" + len(body).to_bytes(4, "big") + body) if vbin32 else encode_sections([Data(body)])
    return encode_sections(sections) + data + (encode_sections([footer]) if footer is not None else b"")


@settings(max_examples=300, deadline=None)
@given(header=st.sampled_from(HEADERS), da=st.booleans(), ma=st.sampled_from(MAS), props=st.sampled_from(PROPS),
       app=st.sampled_from(APPS), body=st.sampled_from(BODIES), footer=st.sampled_from(FOOTERS),
       vbin32=st.booleans(), delivery_count=st.sampled_from([0, 1, 2, 255, 256, 70_000]),
       first_acquirer=st.booleans())
def test_a_delivery_payload_is_the_generic_one(header: Any, da: bool, ma: Any, props: Any, app: Any, body: bytes,
                                                 footer: Any, vbin32: bool, delivery_count: int,
                                                 first_acquirer: bool) -> None:
    message = received(_payload(header, da, ma, props, app, body, footer, vbin32))
    fast = payload_as_received(message.received_native() or b"", message.body, delivery_count, first_acquirer)
    with pytest.MonkeyPatch.context() as patch:
        assert fast is not None
        assert fast == generic_payload(patch, message, delivery_count, first_acquirer)
        assert transfer_payload(message, delivery_count=delivery_count, first_acquirer=first_acquirer) == fast
        parts = transfer_payload_parts(message, delivery_count=delivery_count, first_acquirer=first_acquirer)
        assert parts == payload_parts(message.received_native() or b"", message.body, delivery_count,
                                      first_acquirer)
        assert b"".join(parts) == fast


def test_other_layouts_take_the_generic_path() -> None:
    value = received(encode_sections([Header(durable=True), AmqpValue({"a": 1})]))
    datas = received(encode_sections([Data(b"a"), Data(b"b")]))
    for message in (value, datas):
        assert payload_as_received(message.received_native() or b"", message.body, 0, True) is None


def test_a_message_with_broker_annotations_takes_the_generic_path(monkeypatch: pytest.MonkeyPatch) -> None:
    message = received(_payload(Header(durable=True), False, MAS[1], PROPS[1], None, b"body", None))
    annotated = Message.annotated({"x-first-death-reason": "rejected"}, exchange="", routing_key="q",
                                  body=message.body, native=message.received_native(), format=FORMAT, arrival=1.0)
    calls: list[Any] = []
    monkeypatch.setattr(message_format, "payload_parts", lambda *args: calls.append(args))
    payload = transfer_payload(annotated, delivery_count=1, first_acquirer=False)
    assert calls == [] and b"x-first-death-reason" in payload


MALFORMED = {
    "empty": b"",
    "unknown layout": b"\x99",
    "cut in the header": b"\xa0\x00\x53\x70\xc0\x05\x02",
    "header not a list": b"\xa0\x00\x53\x70\xa1\x01x",
    "header twice": b"\xa0\x00\x53\x70\x45\x00\x53\x70\x45",
    "annotations after properties": b"\xa0\x00\x53\x73\x45\x00\x53\x72\xc1\x01\x00",
    "a body section in the metadata": b"\xa0\x00\x53\x75\xa0\x01x",
    "delivery annotations": b"\xa0\x00\x53\x71\xc1\x01\x00",
    "annotations not a map": b"\xa0\x00\x53\x72\x45",
    "symbolic descriptor": b"\xa0\x00\xa3\x10amqp:header:list\x45",
    "not a described value": b"\xa0\x45",
    "a section cut short": b"\xa0\x00\x53\x73\xc0\x09\x01",
    "a descriptor cut short": b"\xa0\x00\x53",
    "header field of the wrong type": b"\xa0\x00\x53\x70\xc0\x03\x01\xa1\x00",
}


def kept(native: bytes, body: bytes = b"body") -> Message:
    """A message holding ``native`` as its metadata, unchecked (as a journal row could hold it)."""
    return Message(exchange="", routing_key="q", body=body, properties=MessageProperties(), native=native,
                   format=FORMAT, arrival=1.0)


def fast_or_generic(monkeypatch: pytest.MonkeyPatch, native: bytes, body: bytes, delivery_count: int,
                    first_acquirer: bool) -> tuple[bytes | None, bytes | None]:
    fast = payload_as_received(native, body, delivery_count, first_acquirer)
    try:
        generic: bytes | None = generic_payload(monkeypatch, kept(native, body), delivery_count, first_acquirer)
    except (DecodeError, IndexError):
        generic = None
    return fast, generic


@pytest.mark.parametrize("native", list(MALFORMED.values()), ids=list(MALFORMED))
def test_metadata_it_does_not_recognise_is_left_to_the_generic_path(monkeypatch: pytest.MonkeyPatch,
                                                                      native: bytes) -> None:
    fast, _generic = fast_or_generic(monkeypatch, native, b"body", 0, True)
    assert fast is None


def test_metadata_cut_at_every_offset_gives_the_generic_payload_or_none(monkeypatch: pytest.MonkeyPatch) -> None:
    message = received(_payload(HEADERS[3], False, MAS[1], PROPS[1], APPS[1], b"body", FOOTERS[1]))
    native = message.received_native() or b""
    whole, generic = fast_or_generic(monkeypatch, native, b"body", 1, False)
    assert whole is not None and whole == generic
    for cut in range(len(native)):
        fast, generic = fast_or_generic(monkeypatch, native[:cut], b"body", 1, False)
        # a cut between sections leaves well-formed metadata: then both agree; inside one the fast
        # path steps aside and the generic one refuses it
        if fast is not None:
            assert fast == generic
        assert generic is not None or fast is None


@pytest.mark.parametrize("channel", [0, 3, 0xFFFF])
@pytest.mark.parametrize(("first", "last"), [(0, None), (0, 5), (5, 255), (255, 256), (300, 70_000),
                                             (0xFFFFFFFF, None), (0xFFFFFFF0, 0xFFFFFFFF)])
def test_the_accepted_frame_is_the_generic_disposition(channel: int, first: int, last: int | None) -> None:
    assert accepted_frame(channel, first, last) == encode_frame(
        Disposition(role=True, first=first, last=last, settled=True, state=Accepted()), channel)
