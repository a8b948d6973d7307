"""Interim stand-in for ``message_format.py`` (h-convert's): a 1.0 payload <-> the broker's Message.

Only what the engine needs until the ``amqp-1.0`` MessageFormat and its
conversions land: a message that came over 1.0 keeps its bare message (the
sections after the header and annotations) as its body, marked by the
header :data:`BARE_MARKER`, and goes back out as a fresh ``header`` section
in front of those bytes; a message of any other format goes out as a header
and one ``data`` section holding its body.  The engine imports the real
module when it exists (see :mod:`.links`).
"""

from __future__ import annotations

from broker.messaging.message import Message, MessageProperties

from .definitions import Data, Header
from .encoding import encode
from .sections import MessageSections

__all__ = ["message_from_transfer", "transfer_payload"]

#: application header marking a body that is an AMQP 1.0 bare message
BARE_MARKER = "x-amqp-1.0-bare-message"


def message_from_transfer(payload: bytes, *, exchange: str, routing_key: str, arrival: float) -> Message:
    sections = MessageSections(payload)
    ttl = sections.ttl
    properties = MessageProperties(delivery_mode=2 if sections.durable else 1,
                                   priority=sections.priority,
                                   expiration=str(ttl) if ttl is not None else None,
                                   headers={BARE_MARKER: True})
    return Message(exchange=exchange, routing_key=routing_key, body=bytes(payload[sections.bare_start:]),
                   properties=properties, arrival=arrival)


def transfer_payload(message: Message, *, delivery_count: int, first_acquirer: bool) -> bytes:
    view = message.bare_properties()
    ttl = int(view.expiration) if view.expiration and view.expiration.isdigit() else None
    header = encode(Header(durable=message.persistent, priority=view.priority if view.priority is not None else 4,
                           ttl=ttl, first_acquirer=first_acquirer, delivery_count=delivery_count))
    if view.headers and view.headers.get(BARE_MARKER):
        return header + message.body
    return header + encode(Data(value=message.body))
