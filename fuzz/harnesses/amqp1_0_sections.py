"""An AMQP 1.0 message's sections (``amqp1_0/sections.py``, ``message_arrival.py``, ``message_format.py``).

The input is a transfer's payload.  It is read as the engine reads an
arriving message (``message_from_transfer``: the fast path of the usual
shape, else the generic split), then as everything downstream reads it: the
common view, the conversion for a 0-9-1 consumer, the payload delivered to a
1.0 consumer, every section through :class:`MessageSections`.  Malformed
input is a ``DecodeError`` at arrival; once a message is accepted nothing
downstream may fail on it.  The fast path must accept only what the generic
path accepts, and a delivered message's bare message (properties,
application-properties, body) must be the bytes that arrived (spec 3.2).
"""

from __future__ import annotations

from broker.protocol.amqp0_9_1.properties import FORMAT as FORMAT_0_9_1
from broker.protocol.amqp1_0.definitions import (AmqpSequence, AmqpValue, ApplicationProperties, Data,
                                                 DeliveryAnnotations, Footer, Header, MessageAnnotations, Properties)
from broker.protocol.amqp1_0.message_arrival import split_as_received
from broker.protocol.amqp1_0.message_format import message_from_transfer, transfer_payload
from broker.protocol.amqp1_0.sections import MessageSections, encode_sections
from broker.protocol.amqp1_0.types import DecodeError, Described, Symbol, UInt
from fuzz.contract import ContractViolation, agree


def _read_everything(sections: MessageSections) -> None:
    for name in ("header", "properties", "delivery_annotations", "message_annotations", "application_properties",
                 "footer", "durable", "priority", "ttl", "delivery_count", "message_id", "to", "bare"):
        getattr(sections, name)
    sections.body()
    sections.annotated(header=Header(delivery_count=1), message_annotations={Symbol("x-opt-a"): 1})


def one_input(data: bytes) -> None:
    try:
        message = message_from_transfer(data, exchange="", routing_key="q", arrival=0.0)
    except DecodeError:
        if split_as_received(data) is not None:
            raise ContractViolation("the fast path took a payload the generic path refuses") from None
        return
    try:
        arrived = MessageSections(data)
        _read_everything(arrived)
    except DecodeError as exc:
        raise ContractViolation(f"a message taken at arrival fails when read: {exc}") from exc
    message.properties
    message.native_for(FORMAT_0_9_1)
    delivered = MessageSections(transfer_payload(message, delivery_count=2, first_acquirer=True))
    _read_everything(delivered)
    agree("the bare message delivered and as it arrived", delivered.bare, arrived.bare)


def seeds() -> list[bytes]:
    header = Header(durable=True, priority=7, ttl=UInt(60000), delivery_count=UInt(1))
    properties = Properties(message_id="m", to="/queues/q", subject="s", reply_to="r", correlation_id=UInt(5),
                            content_type=Symbol("text/plain"), user_id=b"guest", group_id="g")
    annotations = MessageAnnotations(value={Symbol("x-opt-routing-key"): "k", Symbol("x-opt-deaths"): [1]})
    application = ApplicationProperties(value={"a": 1, "b": "two", "c": 2.5, "d": None})
    footer = Footer(value={Symbol("sig"): b"\x00"})
    messages = [
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
