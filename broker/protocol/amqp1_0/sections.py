"""An AMQP 1.0 message as its sections (spec 3.2, "Message Format").

A message is a sequence of described sections::

    header? delivery-annotations? message-annotations?      (the annotations)
    properties? application-properties? body footer?         (body: data+ | amqp-sequence+ | amqp-value)

The *bare message* (properties, application-properties, body) is immutable
end to end (spec 3.2: "the bare message MUST NOT be modified"); the broker
may rewrite the header and annotations.  :class:`MessageSections` finds the
sections of a transfer's payload (assembled from all its transfers) without
decoding their values -- compound sizes let it step over each in O(1) --
keeps every section's encoded bytes, decodes the header and properties only
when first asked, and never decodes the body unless asked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from .composite import Section
from .decoding import DESCRIBED, Buffer, decode, short, skip
from .definitions import (AmqpSequence, AmqpValue, ApplicationProperties, Data, DeliveryAnnotations, Footer,
                          Header, MessageAnnotations, Properties)
from .encoding import encode, enc_fields
from .values import DecodeError, Symbol, ULong

HEADER: Final = Header.CODE
DELIVERY_ANNOTATIONS: Final = DeliveryAnnotations.CODE
MESSAGE_ANNOTATIONS: Final = MessageAnnotations.CODE
PROPERTIES: Final = Properties.CODE
APPLICATION_PROPERTIES: Final = ApplicationProperties.CODE
DATA: Final = Data.CODE
AMQP_SEQUENCE: Final = AmqpSequence.CODE
AMQP_VALUE: Final = AmqpValue.CODE
FOOTER: Final = Footer.CODE

_CLASSES: dict[int, type[Section]] = {cls.CODE: cls for cls in (
    Header, DeliveryAnnotations, MessageAnnotations, Properties, ApplicationProperties, Data, AmqpSequence,
    AmqpValue, Footer)}
_BY_SYMBOL = {Symbol(cls.SYMBOL): code for code, cls in _CLASSES.items()}
# the place of each section in a message; body sections share one
_RANK = {HEADER: 0, DELIVERY_ANNOTATIONS: 1, MESSAGE_ANNOTATIONS: 2, PROPERTIES: 3, APPLICATION_PROPERTIES: 4,
         DATA: 5, AMQP_SEQUENCE: 5, AMQP_VALUE: 5, FOOTER: 6}
_LIST, _MAP, _BINARY = frozenset((0x45, 0xc0, 0xd0)), frozenset((0xc1, 0xd1)), frozenset((0xa0, 0xb0))
_VALUE_CODES: dict[int, frozenset[int] | None] = {
    HEADER: _LIST, DELIVERY_ANNOTATIONS: _MAP, MESSAGE_ANNOTATIONS: _MAP, PROPERTIES: _LIST,
    APPLICATION_PROPERTIES: _MAP, DATA: _BINARY, AMQP_SEQUENCE: _LIST, AMQP_VALUE: None, FOOTER: _MAP}
_KINDS = {code: (_RANK[code], _VALUE_CODES[code]) for code in _RANK}
_BARE = frozenset((PROPERTIES, APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE))

#: "leave this section as it is" in :meth:`MessageSections.annotated`
KEEP: Final[Any] = object()


class SectionSpan:
    """Where one section lies in the payload: ``payload[start:end]`` is its whole encoding
    (descriptor included), ``payload[value:end]`` its value's."""

    __slots__ = ("code", "start", "value", "end")

    def __init__(self, code: int, start: int, value: int, end: int) -> None:
        self.code, self.start, self.value, self.end = code, start, value, end

    def __repr__(self) -> str:
        return f"SectionSpan(0x{self.code:02x}, {self.start}, {self.value}, {self.end})"


def split_sections(payload: Buffer) -> list[SectionSpan]:
    """The sections of a message payload, in order, checked for kind and order but not decoded.

    A DecodeError when a section is not a described value with a section
    descriptor, its value is not of the section's type, a size runs past
    the payload, or the sections are out of order (spec 3.2).
    """
    spans = []
    o, end, rank, body = 0, len(payload), -1, 0
    while o < end:
        if payload[o] != 0x00:
            raise DecodeError(f"message section is not a described value (constructor 0x{payload[o]:02x})", o)
        p = o + 1
        if p + 1 < end and payload[p] == 0x53:
            code = payload[p + 1]
            p += 2
        else:
            descriptor, p = decode(payload, p, end, 1)
            code = _BY_SYMBOL.get(descriptor, -1) if type(descriptor) is Symbol else \
                int(descriptor) if type(descriptor) is ULong else -1
        kind = _KINDS.get(code)
        if kind is None:
            raise DecodeError("not a message section descriptor", o + 1)
        place, allowed = kind
        if p >= end:
            raise short(payload, p, 1, end, "message section value")
        if allowed is not None and payload[p] not in allowed:
            raise DecodeError(f"{_CLASSES[code].NAME} section holds constructor 0x{payload[p]:02x}", p)
        stop = skip(payload, p, end)
        if place < rank or (place == rank and (code != body or code == AMQP_VALUE)):
            raise DecodeError(f"{_CLASSES[code].NAME} section out of order or repeated", o)
        if place == 5:
            body = code
        rank = place
        spans.append(SectionSpan(code, o, p, stop))
        o = stop
    return spans


class MessageSections:
    """A message payload, its sections located, their values decoded on demand.

    The values a broker reads on every message come straight from the header
    and properties (decoded once, on first use); annotations and application
    properties are decoded when asked; the body only by :meth:`body`.
    """

    __slots__ = ("payload", "spans", "_header", "_properties")

    def __init__(self, payload: Buffer) -> None:
        self.payload = bytes(payload)
        self.spans = split_sections(self.payload)
        self._header: Header | None | Any = KEEP
        self._properties: Properties | None | Any = KEEP

    @classmethod
    def build(cls, sections: Iterable[Section]) -> MessageSections:
        """A message made of ``sections`` (in spec order)."""
        return cls(encode_sections(sections))

    def span(self, code: int) -> SectionSpan | None:
        """The first section of kind ``code`` (HEADER, PROPERTIES, ...), if there is one."""
        for span in self.spans:
            if span.code == code:
                return span
        return None

    def section_bytes(self, code: int) -> bytes:
        """The encoding of the first section of kind ``code`` as received, ``b""`` when absent."""
        span = self.span(code)
        return b"" if span is None else self.payload[span.start:span.end]

    def _value(self, code: int) -> Any:
        span = self.span(code)
        if span is None:
            return None
        return decode(self.payload, span.value, span.end, 1)[0]

    # -- header --------------------------------------------------------------------

    @property
    def header(self) -> Header | None:
        if self._header is KEEP:
            span = self.span(HEADER)
            # the value straight to header's decoder: the descriptor was read by split_sections
            self._header = None if span is None else DESCRIBED[HEADER](self.payload, span.value, span.end, 1)[0]
        return self._header  # type: ignore[no-any-return]

    @property
    def durable(self) -> bool:
        h = self.header
        return h is not None and h.durable

    @property
    def priority(self) -> int:
        h = self.header
        return 4 if h is None else h.priority

    @property
    def ttl(self) -> int | None:
        h = self.header
        return None if h is None else h.ttl

    @property
    def first_acquirer(self) -> bool:
        h = self.header
        return h is not None and h.first_acquirer

    @property
    def delivery_count(self) -> int:
        h = self.header
        return 0 if h is None else h.delivery_count

    # -- properties ------------------------------------------------------------------

    @property
    def properties(self) -> Properties | None:
        if self._properties is KEEP:
            span = self.span(PROPERTIES)
            self._properties = None if span is None else \
                DESCRIBED[PROPERTIES](self.payload, span.value, span.end, 1)[0]
        return self._properties  # type: ignore[no-any-return]

    def _property(self, name: str) -> Any:
        p = self.properties
        return None if p is None else getattr(p, name)

    message_id = property(lambda self: self._property("message_id"))
    user_id = property(lambda self: self._property("user_id"))
    to = property(lambda self: self._property("to"))
    subject = property(lambda self: self._property("subject"))
    reply_to = property(lambda self: self._property("reply_to"))
    correlation_id = property(lambda self: self._property("correlation_id"))
    content_type = property(lambda self: self._property("content_type"))
    content_encoding = property(lambda self: self._property("content_encoding"))
    absolute_expiry_time = property(lambda self: self._property("absolute_expiry_time"))
    creation_time = property(lambda self: self._property("creation_time"))
    group_id = property(lambda self: self._property("group_id"))
    group_sequence = property(lambda self: self._property("group_sequence"))
    reply_to_group_id = property(lambda self: self._property("reply_to_group_id"))

    # -- maps ------------------------------------------------------------------------

    @property
    def delivery_annotations(self) -> dict[Any, Any] | None:
        return self._value(DELIVERY_ANNOTATIONS)  # type: ignore[no-any-return]

    @property
    def message_annotations(self) -> dict[Any, Any] | None:
        return self._value(MESSAGE_ANNOTATIONS)  # type: ignore[no-any-return]

    @property
    def application_properties(self) -> dict[Any, Any] | None:
        return self._value(APPLICATION_PROPERTIES)  # type: ignore[no-any-return]

    @property
    def footer(self) -> dict[Any, Any] | None:
        return self._value(FOOTER)  # type: ignore[no-any-return]

    # -- body --------------------------------------------------------------------------

    @property
    def body_kind(self) -> int | None:
        """DATA, AMQP_SEQUENCE or AMQP_VALUE; None for a message without a body."""
        for span in self.spans:
            if _RANK[span.code] == 5:
                return span.code
        return None

    def body(self) -> Any:
        """The body decoded: data sections as a list of bytes, amqp-sequence sections as a
        list of lists, an amqp-value as its value (None without a body)."""
        kind = self.body_kind
        values = [decode(self.payload, s.value, s.end, 1)[0] for s in self.spans if s.code == kind]
        if kind is None:
            return None
        return values[0] if kind == AMQP_VALUE else values

    @property
    def bare_start(self) -> int:
        """Where the bare message starts (its first section; the footer or the end without one)."""
        for span in self.spans:
            if span.code in _BARE or span.code == FOOTER:
                return span.start
        return len(self.payload)

    @property
    def bare_end(self) -> int:
        last = self.spans[-1] if self.spans else None
        return last.start if last is not None and last.code == FOOTER else len(self.payload)

    @property
    def bare(self) -> bytes:
        """The bare message's bytes exactly as received."""
        return self.payload[self.bare_start:self.bare_end]

    def annotated(self, *, header: Header | None = KEEP, delivery_annotations: dict[Any, Any] | None = KEEP,
                  message_annotations: dict[Any, Any] | None = KEEP, footer: dict[Any, Any] | None = KEEP) -> bytes:
        """The payload with the header / annotations / footer replaced (None: removed, KEEP: as
        received); the bare message's bytes are copied untouched."""
        parts = [self._section(HEADER, header, lambda v: encode(v)),
                 self._section(DELIVERY_ANNOTATIONS, delivery_annotations,
                               lambda v: b"\x00\x53\x71" + enc_fields(v)),
                 self._section(MESSAGE_ANNOTATIONS, message_annotations,
                               lambda v: b"\x00\x53\x72" + enc_fields(v)),
                 self.bare,
                 self._section(FOOTER, footer, lambda v: b"\x00\x53\x78" + enc_fields(v))]
        return b"".join(parts)

    def _section(self, code: int, value: Any, encoder: Any) -> bytes:
        if value is KEEP:
            return self.section_bytes(code)
        return b"" if value is None else encoder(value)  # type: ignore[no-any-return]


def encode_sections(sections: Iterable[Section]) -> bytes:
    """The payload of a message made of ``sections`` (given in spec order)."""
    return b"".join([encode(s) for s in sections])
