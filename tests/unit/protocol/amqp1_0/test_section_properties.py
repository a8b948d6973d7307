"""Property tests of messages and the composites around them: sections round-trip and arrive with
their bare message untouched, a payload cut anywhere is a DecodeError or a shorter message, and
the connection and SASL composites round-trip."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol.amqp1_0.message_format import message_from_transfer, transfer_payload
from broker.protocol.amqp1_0.sections import MessageSections, encode_sections
from broker.protocol.amqp1_0.types import (AmqpSequence, AmqpValue, ApplicationProperties, Begin, Close, Composite,
                                           Data, DecodeError, Detach, Footer, Header, MessageAnnotations, Open,
                                           Properties, SaslInit, Symbol, ULong, decode, encode)
from broker.protocol.amqp1_0.types import Error as AmqpError

from .strategies import HASHABLE, SCALARS, same, symbols, values

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

uint = st.integers(0, 0xFFFFFFFF)
text = SCALARS["string"]
ids = st.none() | SCALARS["ulong"] | st.uuids() | st.binary(max_size=20) | text
headers = st.builds(Header, durable=st.booleans(), priority=st.integers(0, 255), ttl=st.none() | uint,
                    first_acquirer=st.booleans(), delivery_count=uint)
properties = st.builds(Properties, message_id=ids, user_id=st.none() | st.binary(max_size=10), to=st.none() | text,
                       subject=st.none() | text, reply_to=st.none() | text, correlation_id=ids,
                       content_type=st.none() | symbols, content_encoding=st.none() | symbols,
                       absolute_expiry_time=st.none() | st.integers(-(1 << 63), (1 << 63) - 1),
                       creation_time=st.none() | st.integers(0, 1 << 50), group_id=st.none() | text,
                       group_sequence=st.none() | uint, reply_to_group_id=st.none() | text)
annotation_maps = st.dictionaries(symbols.map(lambda s: Symbol("x-opt-" + s)), values(8), max_size=4)
bodies = (st.lists(st.binary(max_size=300).map(lambda b: Data(value=b)), min_size=1, max_size=3)
          | st.lists(st.lists(values(5), max_size=3).map(lambda v: AmqpSequence(value=v)), min_size=1, max_size=2)
          | values(10).map(lambda v: [AmqpValue(value=v)]))


@st.composite
def messages(draw: st.DrawFn) -> list[Any]:
    sections: list[Any] = []
    if draw(st.booleans()):
        sections.append(draw(headers))
    if draw(st.booleans()):
        sections.append(MessageAnnotations(value=draw(annotation_maps)))
    if draw(st.booleans()):
        sections.append(draw(properties))
    if draw(st.booleans()):
        sections.append(ApplicationProperties(value=draw(st.dictionaries(text, HASHABLE, max_size=5))))
    sections += draw(bodies)
    if draw(st.booleans()):
        sections.append(Footer(value=draw(st.dictionaries(symbols, HASHABLE, max_size=2))))
    return sections


@PROPERTY
@given(messages())
def test_message_sections_round_trip_and_arrive_with_the_bare_message_untouched(sections: list[Any]) -> None:
    payload = encode_sections(sections)
    found = MessageSections(payload)
    assert [span.code for span in found.spans] == [type(s).CODE for s in sections]
    by_kind = {type(s): s for s in sections}
    assert same(found.header, by_kind.get(Header))
    assert same(found.properties, by_kind.get(Properties))
    body = [s for s in sections if isinstance(s, (Data, AmqpSequence, AmqpValue))]
    assert same(found.body(), body[0].value if isinstance(body[0], AmqpValue) else [s.value for s in body])
    message = message_from_transfer(payload, exchange="", routing_key="q", arrival=0.0)
    delivered = MessageSections(transfer_payload(message, delivery_count=3, first_acquirer=False))
    assert delivered.bare == found.bare
    assert delivered.delivery_count == 3


@PROPERTY
@given(messages(), st.data())
def test_a_payload_cut_anywhere_is_a_decode_error_or_a_shorter_message(sections: list[Any],
                                                                       data: st.DataObject) -> None:
    payload = encode_sections(sections)
    cut = data.draw(st.integers(0, len(payload) - 1))
    whole = MessageSections(payload).spans
    try:
        found = MessageSections(payload[:cut])
    except DecodeError:
        assert cut not in {0} | {span.end for span in whole}     # whole sections make a message
        return
    assert [span.code for span in found.spans] == [span.code for span in whole if span.end <= cut]


errors = st.none() | st.builds(AmqpError, condition=symbols, description=st.none() | text,
                               info=st.none() | st.dictionaries(symbols, HASHABLE, max_size=3))
composites = st.one_of(
    st.builds(Open, container_id=text, hostname=st.none() | text, max_frame_size=uint,
              channel_max=st.integers(0, 0xFFFF), idle_time_out=st.none() | uint,
              offered_capabilities=st.none() | st.lists(symbols, min_size=1, max_size=3),
              properties=st.none() | st.dictionaries(symbols, values(5), max_size=3)),
    st.builds(Begin, remote_channel=st.none() | st.integers(0, 0xFFFF), next_outgoing_id=uint,
              incoming_window=uint, outgoing_window=uint, handle_max=uint),
    st.builds(Detach, handle=uint, closed=st.booleans(), error=errors),
    st.builds(Close, error=errors),
    st.builds(SaslInit, mechanism=symbols, initial_response=st.none() | st.binary(max_size=50),
              hostname=st.none() | text),
)


@PROPERTY
@given(composites)
def test_connection_and_sasl_composites_round_trip(composite: Composite) -> None:
    decoded, end = decode(encode(composite))
    assert same(decoded, composite), (decoded, composite)
    assert end == len(encode(composite))


def test_a_descriptor_as_a_long_ulong_is_the_same_section() -> None:
    data = encode(Data(value=b"x"))
    longhand = b"\x00\x80" + ULong(0x75).to_bytes(8, "big") + data[3:]
    assert same(decode(longhand)[0], Data(value=b"x"))
    assert MessageSections(longhand).body() == [b"x"]
