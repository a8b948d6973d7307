"""An AMQP 1.0 message's sections (``amqp1_0/sections.py``, ``message_arrival.py``, ``message_format.py``).

The input is a transfer's payload.  It is read as the engine reads an
arriving message (``message_from_transfer``: the fast path of the usual
shape, else the generic split), then as everything downstream reads it: the
common view, the conversion for a 0-9-1 consumer, the payload delivered to a
1.0 consumer (also with the broker's annotations, as dead-lettering adds
them), every section through :class:`MessageSections`.  Malformed input is a
``DecodeError`` at arrival.  A message taken at arrival is not decoded beyond
its header, so reading one of its sections may still be a ``DecodeError``;
but the broker's own readers -- the view, the conversion, the delivery --
never fail on it.  The fast path must accept only what the generic path
accepts, and a delivered message's bare message (properties,
application-properties, body) must be the bytes that arrived (spec 3.2).
"""

from __future__ import annotations

from broker.messaging.message import Message
from broker.protocol.amqp0_9_1.properties import FORMAT as FORMAT_0_9_1
from broker.protocol.amqp1_0.definitions import (AmqpSequence, AmqpValue, ApplicationProperties, Data,
                                                 DeliveryAnnotations, Footer, Header, MessageAnnotations, Properties)
from broker.protocol.amqp1_0.message_arrival import split_as_received
from broker.protocol.amqp1_0.message_format import message_from_transfer, transfer_payload
from broker.protocol.amqp1_0.sections import MessageSections, encode_sections
from broker.protocol.amqp1_0.types import DecodeError, Described, Section, Symbol, UInt
from fuzz.contract import ContractViolation, agree


def _read_every_section(sections: MessageSections) -> None:
    """Each section's value: there, or the codec's DecodeError."""
    for read in (lambda: sections.header, lambda: sections.properties, lambda: sections.delivery_annotations,
                 lambda: sections.message_annotations, lambda: sections.application_properties,
                 lambda: sections.footer, sections.body,
                 lambda: sections.annotated(header=Header(delivery_count=1),
                                            message_annotations={Symbol("x-opt-a"): 1})):
        try:
            read()
        except DecodeError:
            pass


def one_input(data: bytes) -> None:
    try:
        message = message_from_transfer(data, exchange="", routing_key="q", arrival=0.0)
    except DecodeError:
        if split_as_received(data) is not None:
            raise ContractViolation("the fast path took a payload the generic path refuses") from None
        return
    try:
        arrived = MessageSections(data)
    except DecodeError as exc:
        raise ContractViolation(f"a message taken at arrival does not split: {exc}") from exc
    _read_every_section(arrived)
    message.properties
    message.native_for(FORMAT_0_9_1)
    dead_lettered = Message.annotated({"x-first-death-queue": "q", "x-death": [{"count": 1}]},
                                      exchange="", routing_key="q", body=message.body,
                                      native=message.received_native(), format=message.format, arrival=0.0)
    for delivery in (message, dead_lettered):
        delivered = MessageSections(transfer_payload(delivery, delivery_count=2, first_acquirer=True))
        _read_every_section(delivered)
        agree("the bare message delivered and as it arrived", delivered.bare, arrived.bare)
        delivery.native_for(FORMAT_0_9_1)


def seeds() -> list[bytes]:
    header = Header(durable=True, priority=7, ttl=UInt(60000), delivery_count=UInt(1))
    properties = Properties(message_id="m", to="/queues/q", subject="s", reply_to="r", correlation_id=UInt(5),
                            content_type=Symbol("text/plain"), user_id=b"guest", group_id="g")
    annotations = MessageAnnotations(value={Symbol("x-opt-routing-key"): "k", Symbol("x-opt-deaths"): [1]})
    application = ApplicationProperties(value={"a": 1, "b": "two", "c": 2.5, "d": None})
    footer = Footer(value={Symbol("sig"): b"\x00"})
    messages: list[list[Section]] = [
        [Data(value=b"body")],
        [header, annotations, properties, application, Data(value=b"x" * 300), footer],
        [header, DeliveryAnnotations(value={Symbol("x-d"): True}), properties, Data(value=b"a"), Data(value=b"b")],
        [properties, AmqpValue(value={"k": [1, Described(Symbol("x:y"), "v")]})],
        [application, AmqpSequence(value=[1, "a"]), AmqpSequence(value=[])],
        [header, AmqpValue(value=None), footer],
    ]
    # a section under its symbolic descriptor
    symbolic = b"\x00\xa3\x11amqp:data:binary\xa0\x02hi"
    return [encode_sections(m) for m in messages] + [symbolic]
