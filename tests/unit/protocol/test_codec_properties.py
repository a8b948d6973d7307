"""Property tests of the 0-9-1 codec and engine input: field tables, basic properties and methods
round-trip; a table or content header cut short is the codec's error; a byte stream split
anywhere is read as the whole stream is."""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.codec import decode_table, encode_table, malformed_reason
from broker.protocol.amqp0_9_1.properties import decode_properties, encode_properties
from broker.protocol.detect import AmqpVersion

from .amqp1_0.strategies import same
from .harness import Client, FakeHost

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MALFORMED = (ValueError, IndexError, struct.error)

shortstr = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)
#: the values the encoder writes, each decoding to its own Python type again
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), st.floats(), st.text(max_size=30),
    st.binary(max_size=30).filter(lambda b: _not_utf8(b)),
    st.builds(lambda v, s: Decimal(v).scaleb(-s), st.integers(-(1 << 31), (1 << 31) - 1), st.integers(0, 20)),
    st.datetimes(min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(9999, 1, 1),
                 timezones=st.just(datetime.timezone.utc)).map(lambda d: d.replace(microsecond=0)),
)
field_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                            | st.dictionaries(shortstr, inner, max_size=4), max_leaves=20)
tables = st.dictionaries(shortstr, field_values, max_size=8)
properties = st.builds(
    MessageProperties, content_type=st.none() | shortstr, content_encoding=st.none() | shortstr,
    headers=st.none() | tables, delivery_mode=st.none() | st.integers(0, 255), priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | shortstr, reply_to=st.none() | shortstr, expiration=st.none() | shortstr,
    message_id=st.none() | shortstr, timestamp=st.none() | st.integers(0, (1 << 64) - 1), type=st.none() | shortstr,
    user_id=st.none() | shortstr, app_id=st.none() | shortstr, cluster_id=st.none() | shortstr)


def _not_utf8(data: bytes) -> bool:
    """Bytes that decode as bytes again: a 'x' value; UTF-8 long strings come back as text."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@PROPERTY
@given(tables)
def test_field_tables_round_trip_with_their_types(table: dict[str, Any]) -> None:
    encoded = encode_table(table)
    decoded, end = decode_table(encoded, 0)
    assert end == len(encoded)
    assert same(decoded, table), (decoded, table)


@PROPERTY
@given(tables.filter(bool), st.data())
def test_a_field_table_cut_short_is_the_codec_s_error(table: dict[str, Any], data: st.DataObject) -> None:
    encoded = encode_table(table)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MALFORMED) as caught:
        decode_table(encoded[:cut], 0)
    assert malformed_reason(caught.value)


@PROPERTY
@given(properties)
def test_basic_properties_round_trip(props: MessageProperties) -> None:
    assert same(decode_properties(encode_properties(props)), props)


@PROPERTY
@given(properties.filter(lambda p: p != MessageProperties()), st.data())
def test_basic_properties_cut_short_are_the_codec_s_error(props: MessageProperties, data: st.DataObject) -> None:
    encoded = encode_properties(props)
    with pytest.raises(MALFORMED):
        decode_properties(encoded[:data.draw(st.integers(0, len(encoded) - 1))])


@PROPERTY
@given(st.sampled_from([AmqpVersion.V0_8, AmqpVersion.V0_9, AmqpVersion.V0_9_1]),
       st.builds(m.QueueDeclare, queue=shortstr, passive=st.booleans(), durable=st.booleans(),
                 exclusive=st.booleans(), auto_delete=st.booleans(), nowait=st.booleans(), arguments=tables)
       | st.builds(m.BasicPublish, exchange=shortstr, routing_key=shortstr, mandatory=st.booleans(),
                   immediate=st.booleans())
       | st.builds(m.BasicConsume, queue=shortstr, consumer_tag=shortstr, no_local=st.booleans(),
                   no_ack=st.booleans(), exclusive=st.booleans(), nowait=st.booleans(), arguments=tables)
       | st.builds(m.ConnectionStartOk, client_properties=tables, mechanism=shortstr,
                   response=st.binary(max_size=40), locale=shortstr))
def test_methods_round_trip_in_every_version(version: AmqpVersion, method: m.Method) -> None:
    decoders, encoders, ids = {AmqpVersion.V0_8: (m.DECODERS_0_8, m.ENCODERS_0_8, m.IDS_0_8),
                               AmqpVersion.V0_9: (m.DECODERS_0_9, m.ENCODERS_0_9, m.IDS_0_9),
                               AmqpVersion.V0_9_1: (m.DECODERS_0_9_1, m.ENCODERS_0_9_1, m.IDS_0_9_1)}[version]
    class_id, method_id = ids[type(method)]
    decoded = decoders[class_id << 16 | method_id](encoders[type(method)](method), 4)
    assert same(decoded, method), (decoded, method)


def _session(client: Client) -> bytes:
    """Methods answered as they are read (a consumer's deliveries wait for the end of a read)."""
    e = client.encode
    return (e(1, m.QueueDeclare(queue="q", arguments={"x-max-length": 10}))
            + e(1, m.QueueBind(queue="q", exchange="amq.topic", routing_key="a.*"))
            + client.publish_bytes(1, "amq.topic", "a.b", b"x" * 5000, MessageProperties(headers={"h": [1]}),
                                   frame_max=4096)
            + client.publish_bytes(1, "amq.topic", "a.c", b"", MessageProperties(priority=1))
            + e(1, m.BasicGet(queue="q", no_ack=True)) + e(1, m.BasicGet(queue="q", no_ack=True))
            + e(1, m.BasicGet(queue="q")) + e(1, m.QueuePurge(queue="q"))
            + e(1, m.ChannelClose(reply_code=200)) + e(0, m.ConnectionClose(reply_code=200)))


def _run(pieces: list[bytes]) -> list[tuple[int, Any]]:
    client = Client(FakeHost(frame_max=4096))
    client.handshake()
    client.open_channel(1)
    for piece in pieces:
        client.raw(piece)
    return client.take()


def test_a_stream_split_at_every_offset_is_read_as_the_whole() -> None:
    whole = _session(Client(FakeHost()))
    expected = _run([whole])
    assert [type(sent) for _, sent in expected][-2:] == [m.ChannelCloseOk, m.ConnectionCloseOk]
    for cut in range(len(whole) + 1):
        assert _run([whole[:cut], whole[cut:]]) == expected, cut
