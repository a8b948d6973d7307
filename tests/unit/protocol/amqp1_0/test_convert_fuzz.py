"""Properties of the conversion over generated input: no crash but DecodeError, and round trips."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import example, given, settings, strategies as st

from broker.messaging.message import Message, MessageProperties
from broker.protocol.amqp0_9_1.properties import FORMAT as FORMAT_0_9_1, decode_properties, encode_properties
from broker.protocol.amqp1_0.message_format import message_from_transfer, transfer_payload
from broker.protocol.amqp1_0.sections import encode_sections
from broker.protocol.amqp1_0.types import (AmqpValue, ApplicationProperties, Data, DecodeError, Header,
                                           MessageAnnotations, Properties)

from .strategies import values

UTC = datetime.timezone.utc
VALID = encode_sections([Header(durable=True), MessageAnnotations({"x-a": [1, {"k": "v"}]}),
                         Properties(message_id="m", subject="s"), ApplicationProperties({"p": 1}),
                         AmqpValue({"b": [1, 2]})])


def _take(payload: bytes) -> None:
    """Take a payload as the engine would and read everything a consumer of either protocol reads."""
    try:
        message = message_from_transfer(payload, exchange="", routing_key="q", arrival=0.0)
        message.properties
        message.native_for(FORMAT_0_9_1)
        transfer_payload(message, delivery_count=1, first_acquirer=True)
    except DecodeError:
        pass


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_a_message_or_a_decode_error(payload: bytes) -> None:
    _take(payload)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(VALID) - 1), st.integers(0, 255), st.integers(0, len(VALID)))
def test_a_corrupted_or_cut_payload_is_a_message_or_a_decode_error(at: int, octet: int, cut: int) -> None:
    corrupted = VALID[:at] + bytes((octet,)) + VALID[at + 1:]
    _take(corrupted[:cut] if cut else corrupted)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=20).filter(lambda k: not k.startswith("x-")), values(10), max_size=5),
       st.dictionaries(st.text(max_size=20).map(lambda k: "x-" + k), values(10), max_size=5))
def test_any_1_0_maps_convert_to_encodable_0_9_1_headers(application: dict[str, Any],
                                                         annotations: dict[str, Any]) -> None:
    payload = encode_sections([MessageAnnotations(annotations), ApplicationProperties(application), Data(b"")])
    message = message_from_transfer(payload, exchange="", routing_key="q", arrival=0.0)
    props = decode_properties(message.native_for(FORMAT_0_9_1))
    assert set(props.headers or {}) <= {k for k in (*application, *annotations) if len(k.encode()) <= 255} \
        | {"x-death", "CC"}


simple = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 63 - 1), st.text(max_size=30),
                   st.binary(max_size=30), st.floats(allow_nan=False),
                   st.integers(0, 253_402_300_799).map(lambda s: datetime.datetime.fromtimestamp(s, UTC)))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=30).filter(lambda k: k != "CC"), simple, max_size=8))
@example({"x-message-id": None}).via("found: a header that cannot be an id was dropped")
@example({"x-correlation-id": 7}).via("found: a header that cannot be an id was dropped")
def test_simple_0_9_1_headers_survive_1_0_and_back(headers: dict[str, Any]) -> None:
    native = encode_properties(MessageProperties(headers=headers or None))
    original = Message(exchange="", routing_key="q", body=b"b", native=native, format=FORMAT_0_9_1, arrival=0.0)
    back = message_from_transfer(transfer_payload(original, delivery_count=0, first_acquirer=False),
                                 exchange="", routing_key="q", arrival=0.0)
    assert decode_properties(back.native_for(FORMAT_0_9_1)) == decode_properties(native)
