"""The ``amqp-1.0`` message format: a 1.0 message kept as received, and its deliveries.

What is native metadata and what is body
----------------------------------------

A 1.0 delivery's payload is a sequence of sections (spec 3.2).  The broker
keeps it split in two, without decoding or re-encoding any value:

* the **body** (:attr:`Message.body`, the journal's ``body`` column) is what
  an application calls the payload: the content of the data section(s)
  (several data sections: their contents one after the other), or, for an
  amqp-value or amqp-sequence body, those sections' encoding as received;
* the **native metadata** (the journal's ``native`` column) is one *layout*
  octet that says which of these the body is, followed by the message's
  other sections' bytes as received: header, message-annotations,
  properties, application-properties, footer.  For several data sections the
  layout also records each section's constructor and length, so that the
  payload is rebuilt byte for byte.  Delivery annotations are for the
  broker alone (spec 3.2.2): they are dropped on arrival.

A delivery to a 1.0 consumer (:func:`transfer_payload`) copies the
properties, application-properties, body and footer as they arrived and
rewrites only the header (``delivery-count``, ``first-acquirer``) and the
message annotations (the broker's annotations: ``x-opt-deaths``,
``x-first-death-*``, ...).  A 0-9-1 consumer gets the common view encoded as
basic properties and the body unchanged (``message.native_for`` does it):
the body already is what RabbitMQ hands 0-9-1 consumers of 1.0 messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from struct import Struct
from typing import Any, Final

from broker.messaging.message import Message, MessageProperties
from broker.messaging.message_format import AMQP_1_0, register

from .convert import (AMQP_SECTIONS_TYPE, header_from_view, is_sections_body, maps_from_view,
                      properties_from_view, view_from_sections)
from .definitions import ApplicationProperties, Header, MessageAnnotations
from .delivery_frames import payload_parts, received_header
from .encoding import encode
from .message_arrival import light_properties, split_as_received
from .sections import (AMQP_SEQUENCE, AMQP_VALUE, APPLICATION_PROPERTIES, DATA, DELIVERY_ANNOTATIONS, FOOTER,
                       HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, MessageSections, split_sections)
from .values import DecodeError

__all__ = ["AMQP_1_0", "FORMAT", "AmqpMessageFormat", "message_from_transfer", "transfer_payload",
           "transfer_payload_parts"]


# layout octets: what the body holds
_VBIN8: Final = 0xa0          # the content of one data section, encoded vbin8
_VBIN32: Final = 0xb0         # the content of one data section, encoded vbin32
_DATAS: Final = DATA          # the contents of several data sections (records follow)
_SEQUENCES: Final = AMQP_SEQUENCE   # amqp-sequence sections as received
_VALUE: Final = AMQP_VALUE    # an amqp-value section as received
_RECORD = Struct(">BI")       # a data section's constructor and content length
_COUNT = Struct(">I")
_DATA_HEADER = b"\x00\x53\x75"
_U32 = Struct(">I")


def _layout_end(native: bytes) -> int:
    """Where the sections start in ``native`` (after the layout); DecodeError when malformed."""
    if not native:
        raise DecodeError("amqp-1.0 metadata is empty (no layout octet)", 0)
    layout = native[0]
    if layout in (_VBIN8, _VBIN32, _SEQUENCES, _VALUE):
        return 1
    if layout == _DATAS:
        if len(native) < 5:
            raise DecodeError("amqp-1.0 metadata: data section count cut short", 1)
        end = 5 + _RECORD.size * _COUNT.unpack_from(native, 1)[0]
        if end > len(native):
            raise DecodeError("amqp-1.0 metadata: data section records run past its end", 5)
        return end
    raise DecodeError(f"amqp-1.0 metadata: unknown body layout 0x{layout:02x}", 0)


def _metadata(native: bytes) -> tuple[int, MessageSections]:
    """(layout octet, the metadata sections) of native bytes."""
    start = _layout_end(native)
    sections = MessageSections(native[start:])
    for span in sections.spans:
        if span.code in (DATA, AMQP_SEQUENCE, AMQP_VALUE, DELIVERY_ANNOTATIONS):
            raise DecodeError("amqp-1.0 metadata holds a body or delivery-annotations section", start + span.start)
    return native[0], sections


class AmqpMessageFormat:
    """The :class:`~broker.messaging.message_format.MessageFormat` of AMQP 1.0 (see the module)."""

    __slots__ = ()

    tag = AMQP_1_0

    def decode(self, native: bytes) -> MessageProperties:
        layout, sections = _metadata(native)
        return view_from_sections(sections.header, _decoded(lambda: sections.properties),
                                  _decoded(lambda: sections.application_properties),
                                  _decoded(lambda: sections.message_annotations),
                                  sections_body=layout in (_SEQUENCES, _VALUE))

    def encode(self, view: MessageProperties, annotations: Mapping[str, Any] | None = None) -> bytes:
        """Metadata made from a common view (a dead-lettered or management-made copy): the body is
        one data section's content unless the view's content type says it holds 1.0 sections."""
        sections_body = view.content_type == AMQP_SECTIONS_TYPE
        layout = bytes((_VALUE if sections_body else _VBIN32,))
        return layout + _metadata_sections(view, annotations, sections_body)

    def annotate(self, native: bytes, annotations: Mapping[str, Any]) -> bytes:
        """``native`` with the broker's ``annotations`` merged into its message annotations;
        every other section as received."""
        start = _layout_end(native)
        _, sections = _metadata(native)
        return b"".join((native[:start], sections.section_bytes(HEADER), _merged_annotations(sections, annotations),
                         sections.section_bytes(PROPERTIES), sections.section_bytes(APPLICATION_PROPERTIES),
                         sections.section_bytes(FOOTER)))

    def __repr__(self) -> str:
        return f"<message format {self.tag}>"


#: registered when imported; found by tag elsewhere (message_format.BUILTIN_FORMATS, the entry point)
FORMAT = register(AmqpMessageFormat())


def _metadata_sections(view: MessageProperties, annotations: Mapping[str, Any] | None, sections_body: bool,
                       delivery_count: int = 0, first_acquirer: bool = False) -> bytes:
    """Header, message-annotations, properties and application-properties made from a common view."""
    headers = dict(view.headers or {})
    header = header_from_view(view, delivery_count=delivery_count, first_acquirer=first_acquirer)
    properties = properties_from_view(view, headers, sections_body=sections_body)
    application, message_annotations = maps_from_view(headers, annotations)
    return b"".join((b"" if header is None else encode(header),
                     encode(MessageAnnotations(message_annotations)) if message_annotations else b"",
                     b"" if properties is None else encode(properties),
                     encode(ApplicationProperties(application)) if application else b""))


def _merged_annotations(sections: MessageSections, annotations: Mapping[str, Any] | None) -> bytes:
    """The message-annotations section with the broker's ``annotations`` merged in."""
    if not annotations:
        return sections.section_bytes(MESSAGE_ANNOTATIONS)
    merged = {**(_decoded(lambda: sections.message_annotations) or {}), **maps_from_view(None, annotations)[1]}
    return encode(MessageAnnotations(merged))


def _decoded(read: Callable[[], Any]) -> Any:
    """A section's value; None when it does not decode.

    A message is taken without decoding its annotations and properties (most
    are relayed as received: a 1.0 consumer gets the bytes that arrived); one
    that does not decode shows when the common view is first needed -- a
    consumer of another protocol, a selector, management -- and the view goes
    without it, rather than failing every reader the message reaches.
    """
    try:
        return read()
    except DecodeError:
        return None


def _data_section(content: bytes, constructor: int = _VBIN32) -> bytes:
    size = len(content)
    if constructor == _VBIN8 and size <= 255:
        return b"".join((_DATA_HEADER, b"\xa0", bytes((size,)), content))
    return b"".join((_DATA_HEADER, b"\xb0", _U32.pack(size), content))


def _body_sections(native: bytes, body: bytes) -> bytes:
    """The body sections of a message kept as (native, body)."""
    layout = native[0]
    if layout == _VBIN8 or layout == _VBIN32:
        return _data_section(body, layout)
    if layout == _DATAS:
        count = _COUNT.unpack_from(native, 1)[0]
        records = [_RECORD.unpack_from(native, 5 + i * _RECORD.size) for i in range(count)]
        if sum(size for _, size in records) == len(body):
            parts, o = [], 0
            for constructor, size in records:
                parts.append(_data_section(body[o:o + size], constructor))
                o += size
            return b"".join(parts)
        return _data_section(body)
    # amqp-value / amqp-sequence as received; a body that is not sections (made from a view whose
    # content type claimed it) travels as the data it is
    return body if is_sections_body(body) is not None else _data_section(body)


def _data_content(payload: bytes, value: int, end: int) -> bytes:
    return payload[value + (2 if payload[value] == _VBIN8 else 5):end]


def message_from_transfer(payload: bytes, *, exchange: str, routing_key: str, arrival: float) -> Message:
    """The broker's message for the payload of a complete 1.0 delivery (all its transfers).

    Finds the sections without decoding them (the header alone is decoded,
    for durability, priority and ttl) and keeps them as received (see the
    module).  Raises the codec's DecodeError when a section is malformed, out
    of order, or the message has no body (spec 3.2: a body is one or more
    data, one or more amqp-sequence, or one amqp-value section).
    """
    if type(payload) is not bytes:
        payload = bytes(payload)
    usual = split_as_received(payload)
    if usual is not None:
        return Message(exchange=exchange, routing_key=routing_key, body=usual[1],
                       properties=usual[2], native=usual[0], format=FORMAT,
                       arrival=arrival)
    spans = split_sections(payload)
    metadata: list[bytes] = []
    body_spans = []
    header: Header | None = None
    header_section = b""
    for span in spans:
        code = span.code
        if code == DATA or code == AMQP_SEQUENCE or code == AMQP_VALUE:
            body_spans.append(span)
        elif code != DELIVERY_ANNOTATIONS:
            metadata.append(payload[span.start:span.end])
            if code == HEADER:
                header_section = metadata[-1]
                header = received_header(header_section)
    if not body_spans:
        raise DecodeError("message has no body section (data, amqp-sequence or amqp-value)", len(payload))
    kind = body_spans[0].code
    if kind != DATA:
        layout = bytes((kind,))
        body = payload[body_spans[0].start:body_spans[-1].end]
    elif len(body_spans) == 1:
        span = body_spans[0]
        layout = bytes((payload[span.value],))
        body = _data_content(payload, span.value, span.end)
    else:
        contents = [_data_content(payload, s.value, s.end) for s in body_spans]
        layout = b"".join([bytes((_DATAS,)), _COUNT.pack(len(contents))]
                          + [_RECORD.pack(payload[s.value], len(c)) for s, c in zip(body_spans, contents)])
        body = b"".join(contents)
    return Message(exchange=exchange, routing_key=routing_key, body=body,
                   properties=light_properties(header_section, header), native=layout + b"".join(metadata),
                   format=FORMAT, arrival=arrival)


def transfer_payload(message: Message, *, delivery_count: int, first_acquirer: bool) -> bytes:
    """The payload of the transfer(s) delivering ``message`` (of any format) to a 1.0 consumer.

    A 1.0 message: its sections as received, with the header's
    ``delivery-count`` and ``first-acquirer`` set and the broker's
    annotations merged into its message annotations.  Any other format is
    converted from its common view (docs/amqp-1-0-conversion.md).
    """
    parts = transfer_payload_parts(message, delivery_count=delivery_count, first_acquirer=first_acquirer)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def transfer_payload_parts(message: Message, *, delivery_count: int, first_acquirer: bool) -> tuple[bytes, ...]:
    """:func:`transfer_payload` in parts: a message kept as received with its body in one data
    section (:func:`.delivery_frames.payload_parts`) is joined only with its transfer frame."""
    annotations = message.annotations
    if message.format is FORMAT:
        native = message.received_native() or FORMAT.encode(message.bare_properties())
        if annotations is None:
            fast = payload_parts(native, message.body, delivery_count, first_acquirer)
            if fast is not None:
                return fast
        _, sections = _metadata(native)
        header = sections.header
        if header is not None:
            header = dataclasses.replace(header, delivery_count=delivery_count, first_acquirer=first_acquirer)
        elif delivery_count or first_acquirer:
            header = Header(delivery_count=delivery_count, first_acquirer=first_acquirer)
        return (b"" if header is None else encode(header), _merged_annotations(sections, annotations),
                sections.section_bytes(PROPERTIES), sections.section_bytes(APPLICATION_PROPERTIES),
                _body_sections(native, message.body), sections.section_bytes(FOOTER))
    view = message.bare_properties()
    body = message.body
    sections_body = view.content_type == AMQP_SECTIONS_TYPE and is_sections_body(body) is not None
    return (_metadata_sections(view, annotations, sections_body, delivery_count, first_acquirer),
            body if sections_body else _data_section(body, _VBIN8))
