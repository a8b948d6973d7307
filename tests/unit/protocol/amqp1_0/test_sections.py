"""Messages as sections (spec 3.2): located without decoding, read cheaply, re-annotated around the bare message."""

from __future__ import annotations

import uuid

import pytest

from broker.protocol.amqp1_0.sections import (AMQP_SEQUENCE, AMQP_VALUE, APPLICATION_PROPERTIES, DATA, FOOTER,
                                              HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, KEEP, MessageSections,
                                              encode_sections, split_sections)
from broker.protocol.amqp1_0.types import (AmqpSequence, AmqpValue, ApplicationProperties, Data, DecodeError,
                                           DeliveryAnnotations, Footer, Header, MessageAnnotations, Properties,
                                           Symbol, Transfer, ULong, encode)

MESSAGE_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def _full() -> list:
    return [
        Header(durable=True, priority=7, ttl=60000, first_acquirer=True, delivery_count=2),
        DeliveryAnnotations({"x-hop": 1}),
        MessageAnnotations({"x-opt-jms-dest": 0, ULong(12): "numeric key"}),
        Properties(message_id=MESSAGE_ID, user_id=b"guest", to="/queues/q", subject="s", reply_to="r",
                   correlation_id=ULong(42), content_type="text/plain", content_encoding="utf-8",
                   absolute_expiry_time=1_700_000_060_000, creation_time=1_700_000_000_000, group_id="g",
                   group_sequence=3, reply_to_group_id="rg"),
        ApplicationProperties({"colour": "red", "weight": 5}),
        Data(b"first"),
        Data(b"second"),
        Footer({"x-sum": b"\x01"}),
    ]


def test_sections_are_located_in_order_with_their_bytes() -> None:
    sections = _full()
    payload = encode_sections(sections)
    spans = split_sections(payload)
    assert [s.code for s in spans] == [0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x75, 0x78]
    assert [payload[s.start:s.end] for s in spans] == [encode(s) for s in sections]
    assert spans[-1].end == len(payload)


def test_the_broker_reads_what_it_needs() -> None:
    m = MessageSections(encode_sections(_full()))
    assert (m.durable, m.priority, m.ttl, m.first_acquirer, m.delivery_count) == (True, 7, 60000, True, 2)
    assert m.message_id == MESSAGE_ID and type(m.correlation_id) is ULong and m.correlation_id == 42
    assert (m.to, m.subject, m.reply_to, m.content_type, m.content_encoding) == (
        "/queues/q", "s", "r", "text/plain", "utf-8")
    assert (m.user_id, m.absolute_expiry_time, m.creation_time) == (b"guest", 1_700_000_060_000, 1_700_000_000_000)
    assert (m.group_id, m.group_sequence, m.reply_to_group_id) == ("g", 3, "rg")
    assert m.application_properties == {"colour": "red", "weight": 5}
    assert m.message_annotations == {Symbol("x-opt-jms-dest"): 0, ULong(12): "numeric key"}
    assert m.delivery_annotations == {"x-hop": 1}
    assert m.footer == {"x-sum": b"\x01"}
    assert m.body_kind == DATA and m.body() == [b"first", b"second"]
    assert m.section_bytes(APPLICATION_PROPERTIES) == encode(ApplicationProperties({"colour": "red", "weight": 5}))


def test_a_message_without_header_or_properties_has_the_spec_defaults() -> None:
    m = MessageSections(encode(AmqpValue("hi")))
    assert (m.durable, m.priority, m.ttl, m.first_acquirer, m.delivery_count) == (False, 4, None, False, 0)
    assert m.message_id is None and m.application_properties is None and m.header is None
    assert m.body_kind == AMQP_VALUE and m.body() == "hi"
    assert MessageSections(b"").body() is None
    seq = MessageSections(encode_sections([AmqpSequence([1, 2]), AmqpSequence(["x"])]))
    assert seq.body_kind == AMQP_SEQUENCE and seq.body() == [[1, 2], ["x"]]


def test_the_body_is_not_decoded_to_read_the_rest() -> None:
    # an amqp-value whose string is not UTF-8: only body() looks inside it
    payload = encode(Header(durable=True)) + encode(Properties(subject="s")) + b"\x00\x53\x77\xa1\x01\xff"
    m = MessageSections(payload)
    assert m.durable and m.subject == "s"
    with pytest.raises(DecodeError, match="UTF-8"):
        m.body()


def test_re_annotating_keeps_the_bare_message_bytes() -> None:
    sections = _full()
    original = MessageSections(encode_sections(sections))
    bare = original.bare
    assert bare == encode_sections(sections[3:7])
    rewritten = MessageSections(original.annotated(
        header=Header(durable=True, delivery_count=3), delivery_annotations=None,
        message_annotations={"x-opt-jms-dest": 0, "x-death": [1]}))
    assert rewritten.bare == bare
    assert rewritten.delivery_count == 3 and rewritten.priority == 4
    assert rewritten.delivery_annotations is None
    assert rewritten.message_annotations == {"x-opt-jms-dest": 0, "x-death": [1]}
    assert rewritten.footer == {"x-sum": b"\x01"}                              # KEEP by default
    assert original.annotated() == original.payload
    assert original.annotated(header=KEEP, footer=None) == original.payload[:original.bare_end]


def test_a_payload_assembled_from_transfers_splits_the_same() -> None:
    from broker.protocol.amqp1_0.framing import FrameReader, transfer_frames
    payload = encode_sections(_full()[:5] + [Data(bytes(2000))])
    transfer = Transfer(handle=0, delivery_id=0, delivery_tag=b"t")
    frames = FrameReader(512).feed(b"".join(transfer_frames(0, transfer, payload, 512)))
    assert len(frames) > 4
    assembled = b"".join(f.performative()[1] for f in frames)
    m = MessageSections(assembled)
    assert m.application_properties == {"colour": "red", "weight": 5} and m.body() == [bytes(2000)]


@pytest.mark.parametrize("payload, words", [
    (encode(Properties()) + encode(Header()), "out of order"),
    (encode(Header()) + encode(Header()), "out of order or repeated"),
    (encode(AmqpValue(1)) + encode(AmqpValue(2)), "repeated"),
    (encode(Data(b"")) + encode(AmqpSequence([])), "out of order"),
    (encode(Footer({})) + encode(Data(b"")), "out of order"),
    (encode(Transfer(handle=0)), "not a message section"),
    (b"\x00\xa3\x05hello\x40", "not a message section"),
    (b"\x40", "not a described value"),
    (b"\x00\x53\x75\xa1\x00", "data section holds constructor 0xa1"),
    (b"\x00\x53\x74\xc0\x01\x00", "application-properties section holds"),
    (b"\x00\x53\x70\xc1\x01\x00", "header section holds"),
])
def test_malformed_messages_are_decode_errors(payload: bytes, words: str) -> None:
    with pytest.raises(DecodeError, match=words):
        split_sections(payload)


def test_truncated_messages_are_decode_errors() -> None:
    payload = encode_sections(_full())
    for cut in range(1, len(payload)):
        try:
            spans = split_sections(payload[:cut])
        except DecodeError:
            continue
        assert spans and spans[-1].end == cut          # cut at a section boundary


def test_sections_by_symbolic_descriptor_are_recognised() -> None:
    payload = b"\x00\xa3\x10amqp:header:list\xc0\x02\x01\x41" + encode(Data(b"x"))
    m = MessageSections(payload)
    assert [s.code for s in m.spans] == [HEADER, DATA] and m.durable


def test_building_from_sections() -> None:
    m = MessageSections.build([Properties(message_id="m1"), Data(b"x")])
    assert m.message_id == "m1" and m.span(PROPERTIES) is not None and m.span(MESSAGE_ANNOTATIONS) is None
    assert m.span(FOOTER) is None and m.bare == m.payload
