"""The broker's one internal message: immutable metadata plus body bytes.

A message is stored once, however many queues hold it: every queue (and every
:class:`~broker.messaging.queue.QueueEntry`) refers to the same object, and
CPython's reference count frees it when the last holder lets go (Broker-J's
``ServerMessage`` reference counting, for free).

Memory matters more here than anywhere else in the broker, because a queue may
hold millions of messages.  A protocol engine therefore hands over the
properties both decoded (to route on) and in wire form plus the codec that made
them; the message keeps only the wire bytes and re-decodes on demand.  The few
values the broker reads on every message (priority, persistence, expiry) are
extracted once at construction into slots.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace as _dc_replace
from sys import intern
from typing import Any, Protocol

from broker.errors import PreconditionFailed

__all__ = ["Message", "MessageProperties", "PropertiesCodec", "message_number"]


@dataclass(slots=True)
class MessageProperties:
    """The basic-class content properties of AMQP 0-9-1 (spec 1.8.3), all optional.

    Field order follows the spec's property flags.  ``expiration`` is the
    per-message TTL in milliseconds, as text (that is how 0-9-1 carries it);
    ``timestamp`` is in seconds.
    """

    content_type: str | None = None
    content_encoding: str | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None

    def replace(self, **changes: Any) -> MessageProperties:
        """A copy with ``changes`` applied (the original is left alone)."""
        return _dc_replace(self, **changes)


class PropertiesCodec(Protocol):
    """Turns properties into a protocol's wire form and back (supplied by an engine)."""

    def decode(self, data: bytes) -> MessageProperties: ...

    def encode(self, props: MessageProperties) -> bytes: ...


_EMPTY_PROPERTIES = MessageProperties()


def _expiration_seconds(expiration: str) -> float:
    """Parse the per-message TTL (ms as text) the way RabbitMQ does: a non-negative integer."""
    if not (expiration.isascii() and expiration.isdigit()):
        raise PreconditionFailed(
            f"invalid expiration '{expiration}': must be a non-negative integer of milliseconds")
    return int(expiration) / 1000.0


class Message:
    """One published message; immutable by convention (nothing in the broker assigns to it).

    Immutability is not enforced with ``__setattr__`` tricks on purpose: doing
    so makes construction four times slower, and a message is built for every
    publish.

    Attributes:
        exchange: name of the exchange it was published to ("" = default).
        routing_key: the routing key it was published with.
        body: the content bytes.
        arrival: the broker clock's time (seconds) when it arrived.
        expires_at: ``arrival`` + per-message expiration, or None.
        priority: the priority property, 0 when absent.
        persistent: delivery_mode == 2.
        journal_id: the message's number in its virtual host's journal, once a
            durable queue journaled it (0 until then).
        number: unset until management first looks at the message; see
            :func:`message_number`.
    """

    __slots__ = ("exchange", "routing_key", "body", "_properties", "_codec",
                 "arrival", "expires_at", "priority", "persistent", "journal_id", "number")

    exchange: str
    routing_key: str
    body: bytes
    arrival: float
    expires_at: float | None
    priority: int
    persistent: bool
    journal_id: int
    number: int

    def __init__(self, *, exchange: str, routing_key: str, body: bytes,
                 properties: MessageProperties | None,
                 encoded_properties: bytes | None = None,
                 codec: PropertiesCodec | None = None,
                 arrival: float) -> None:
        if properties is None:
            if encoded_properties is None or codec is None:
                properties = _EMPTY_PROPERTIES
            else:
                properties = codec.decode(encoded_properties)
        # Names and keys repeat across millions of messages; interning makes
        # them share one string object (interned strings are mortal in 3.11).
        self.exchange = intern(exchange) if type(exchange) is str else exchange
        self.routing_key = intern(routing_key) if type(routing_key) is str else routing_key
        self.body = body
        if encoded_properties is not None and codec is not None:
            self._properties: MessageProperties | bytes = encoded_properties
            self._codec: PropertiesCodec | None = codec
        else:
            self._properties = properties
            self._codec = None
        self.arrival = arrival
        expiration = properties.expiration
        self.expires_at = None if expiration is None else arrival + _expiration_seconds(expiration)
        priority = properties.priority
        self.priority = priority if priority is not None and priority > 0 else 0
        self.persistent = properties.delivery_mode == 2
        self.journal_id = 0

    @property
    def body_size(self) -> int:
        return len(self.body)

    @property
    def properties(self) -> MessageProperties:
        """The decoded properties (decoded afresh from wire form when kept encoded)."""
        codec = self._codec
        if codec is None:
            return self._properties  # type: ignore[return-value]
        return codec.decode(self._properties)  # type: ignore[arg-type]

    @property
    def headers(self) -> dict[str, Any]:
        """The application headers (an empty dict when there are none)."""
        return self.properties.headers or {}

    def encoded_properties_for(self, codec: PropertiesCodec) -> bytes:
        """Wire-form properties for ``codec``; the kept bytes when it is the same codec object."""
        if codec is self._codec:
            return self._properties  # type: ignore[return-value]
        return codec.encode(self.properties)

    def with_properties(self, props: MessageProperties, *, exchange: str | None = None,
                        routing_key: str | None = None,
                        arrival: float | None = None) -> Message:
        """A new message with the same body and ``props`` (dead-lettering rewrites headers).

        ``exchange``/``routing_key``/``arrival`` default to this message's.
        """
        return Message(exchange=self.exchange if exchange is None else exchange,
                       routing_key=self.routing_key if routing_key is None else routing_key,
                       body=self.body, properties=props,
                       arrival=self.arrival if arrival is None else arrival)

    def __repr__(self) -> str:
        return (f"Message(exchange={self.exchange!r}, routing_key={self.routing_key!r}, "
                f"body_size={len(self.body)}, priority={self.priority})")


_numbers = itertools.count(1)


def message_number(message: Message) -> int:
    """The number management knows ``message`` by, given the first time it is asked for.

    Numbers are never reused within a process, so a number taken from a
    listing can never select another message later.  They cost nothing on
    the publish path: most messages are never looked at.
    """
    try:
        return message.number
    except AttributeError:
        number = message.number = next(_numbers)
        return number
