"""The broker's one internal message: a format's native metadata, annotations and body.

A message is stored once, however many queues hold it: every queue (and every
:class:`~broker.messaging.queue.QueueEntry`) refers to the same object, and
CPython's reference count frees it when the last holder lets go (Broker-J's
``ServerMessage`` reference counting, for free).

The message is protocol-neutral (RabbitMQ's ``mc``): it keeps the metadata
*as received*, in the encoding of the protocol it came in with (its
:mod:`format <broker.messaging.message_format>` and *native* bytes), the
broker's annotations beside it (exchange, routing key, and ``x-death`` & co.
once dead-lettered), and hands out a *common view*
(:class:`MessageProperties`) decoded on demand.  A consumer of the same
protocol gets the native bytes back untouched; any other gets them converted
through the common view.

Memory matters more here than anywhere else in the broker, because a queue may
hold millions of messages: the common view is never cached, and the few values
the broker reads on every message (priority, persistence, expiry) are
extracted once at construction into slots.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace as _dc_replace
from sys import intern
from typing import Any

from broker.errors import PreconditionFailed
from broker.messaging.message_format import DEFAULT_FORMAT, MessageFormat, format_for

__all__ = ["Message", "MessageProperties", "MessageFormat", "message_number"]


@dataclass(slots=True)
class MessageProperties:
    """The common view of a message's metadata, whatever its format; every field optional.

    The vocabulary is that of the AMQP 0-9-1 basic properties (spec 1.8.3),
    the one RabbitMQ's management, Broker-J's message views and the journal's
    ``properties`` column present every message in; each format maps its own
    fields onto it (AMQP 1.0: ``header.durable`` -> ``delivery_mode`` 2,
    ``header.ttl`` -> ``expiration``, ``application-properties`` -> ``headers``).

    ``delivery_mode`` 2 is durable (:attr:`durable`); ``expiration`` is the
    per-message TTL in milliseconds as text; ``timestamp`` is in seconds since
    the epoch; ``headers`` are the application headers / properties.
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

    @property
    def durable(self) -> bool:
        return self.delivery_mode == 2

    def replace(self, **changes: Any) -> MessageProperties:
        """A copy with ``changes`` applied (the original is left alone)."""
        return _dc_replace(self, **changes)


_EMPTY_PROPERTIES = MessageProperties()


def _expiration_seconds(expiration: str) -> float:
    """Parse the per-message TTL (ms as text) the way RabbitMQ does: a non-negative integer."""
    if not (expiration.isascii() and expiration.isdigit()):
        raise PreconditionFailed(
            f"invalid expiration '{expiration}': must be a non-negative integer of milliseconds")
    return int(expiration) / 1000.0


class _Annotated:
    """Metadata with broker annotations: rare (dead-lettered copies), so not a slot of every message."""

    __slots__ = ("metadata", "annotations")

    def __init__(self, metadata: MessageProperties | bytes, annotations: Mapping[str, Any]) -> None:
        self.metadata = metadata
        self.annotations = annotations


class Message:
    """One published message; immutable by convention (nothing in the broker assigns to it).

    Immutability is not enforced with ``__setattr__`` tricks on purpose: doing
    so makes construction four times slower, and a message is built for every
    publish.

    Built either from native bytes and their ``format`` (an engine passes the
    ``properties`` it already decoded to route on, so they are not decoded
    twice), or from a common view (management; dead-lettering, which keeps
    the original's format), which a format encodes when a consumer or the
    journal needs bytes.

    Attributes:
        exchange: name of the exchange it was published to ("" = default).
        routing_key: the routing key it was published with.
        body: the content bytes.
        format: the format the message came in (None: made from a common view
            alone, as management's publishMessage does; encoded in the default
            format when bytes are needed).
        annotations: broker annotations beyond exchange and routing key
            (``x-death``, ``x-first-death-*``, ``x-last-death-*``), or None
            (a property: kept with the metadata, as few messages have any).
        arrival: the broker clock's time (seconds) when it arrived.
        expires_at: ``arrival`` + per-message expiration, or None.
        priority: the priority property, 0 when absent.
        persistent: delivery_mode == 2.
        journal_id: the message's number in its virtual host's journal, once a
            durable queue journaled it (0 until then).
        number: unset until management first looks at the message; see
            :func:`message_number`.
    """

    __slots__ = ("exchange", "routing_key", "body", "format", "_native",
                 "arrival", "expires_at", "priority", "persistent", "journal_id", "number")

    exchange: str
    routing_key: str
    body: bytes
    format: MessageFormat | None
    arrival: float
    expires_at: float | None
    priority: int
    persistent: bool
    journal_id: int
    number: int

    def __init__(self, *, exchange: str, routing_key: str, body: bytes,
                 properties: MessageProperties | None = None,
                 native: bytes | None = None,
                 format: MessageFormat | None = None,
                 arrival: float) -> None:
        # _native: bytes (native metadata of ``format``), a MessageProperties (a view to
        # encode when needed), or either wrapped with annotations (see annotated())
        if native is not None and format is not None:
            if properties is None:
                properties = format.decode(native)
            self._native: MessageProperties | bytes | _Annotated = native
        else:
            if properties is None:
                properties = _EMPTY_PROPERTIES
            self._native = properties
        self.format = format
        # Names and keys repeat across millions of messages; interning makes
        # them share one string object (interned strings are mortal in 3.11).
        self.exchange = intern(exchange) if type(exchange) is str else exchange
        self.routing_key = intern(routing_key) if type(routing_key) is str else routing_key
        self.body = body
        self.arrival = arrival
        expiration = properties.expiration
        self.expires_at = None if expiration is None else arrival + _expiration_seconds(expiration)
        priority = properties.priority
        self.priority = priority if priority is not None and priority > 0 else 0
        self.persistent = properties.delivery_mode == 2
        self.journal_id = 0

    @classmethod
    def annotated(cls, annotations: Mapping[str, Any] | None, **fields: Any) -> Message:
        """A message made of ``fields`` (as the constructor takes them) carrying ``annotations``.

        Not a constructor argument: few messages have annotations, and every
        keyword costs the construction of all the others.
        """
        message = cls(**fields)
        if annotations:
            message._native = _Annotated(message._native, annotations)  # type: ignore[arg-type]
        return message

    @property
    def body_size(self) -> int:
        return len(self.body)

    @property
    def format_tag(self) -> str:
        """The tag of the format the message is kept in (views alone: the default format)."""
        fmt = self.format
        return DEFAULT_FORMAT if fmt is None else fmt.tag

    @property
    def annotations(self) -> Mapping[str, Any] | None:
        native = self._native
        return native.annotations if type(native) is _Annotated else None

    def bare_properties(self) -> MessageProperties:
        """The common view of the native metadata, without the broker's annotations."""
        native = self._native
        if type(native) is _Annotated:
            native = native.metadata
        if type(native) is bytes:
            return self.format.decode(native)  # type: ignore[union-attr]
        return native  # type: ignore[return-value]

    @property
    def properties(self) -> MessageProperties:
        """The common view, decoded afresh; annotations show as headers (as 0-9-1 clients see them)."""
        view = self.bare_properties()
        annotations = self.annotations
        if annotations:
            view = view.replace(headers={**(view.headers or {}), **annotations})
        return view

    @property
    def headers(self) -> dict[str, Any]:
        """The application headers (an empty dict when there are none)."""
        return self.properties.headers or {}

    def received_native(self) -> bytes | None:
        """The native bytes as received (annotations aside); None for a message made from a view."""
        native = self._native
        if type(native) is _Annotated:
            native = native.metadata
        return native if type(native) is bytes else None

    def native_for(self, fmt: MessageFormat) -> bytes:
        """The metadata encoded in ``fmt``: the bytes as received when it is the message's own."""
        native = self._native
        if fmt is self.format:
            if type(native) is bytes:
                return native
            # annotations on bytes as received: a format that can add them to its bytes keeps the rest
            if type(native) is _Annotated and type(native.metadata) is bytes:
                annotate = getattr(fmt, "annotate", None)
                if annotate is not None:
                    return annotate(native.metadata, native.annotations)  # type: ignore[no-any-return]
        return fmt.encode(self.bare_properties(), self.annotations)

    def native(self) -> tuple[str, bytes]:
        """(format tag, native bytes): as received, or encoded in the default format."""
        fmt = self.format
        native = self._native
        if type(native) is bytes:            # then format is set
            return fmt.tag, native  # type: ignore[union-attr]
        if fmt is None:
            fmt = format_for(DEFAULT_FORMAT)
        return fmt.tag, self.native_for(fmt)

    def with_properties(self, props: MessageProperties, *, exchange: str | None = None,
                        routing_key: str | None = None,
                        arrival: float | None = None) -> Message:
        """A new message with the same body, format and annotations, and ``props``.

        ``props`` is a common view without annotations; ``exchange``/
        ``routing_key``/``arrival`` default to this message's.
        """
        return Message.annotated(
            self.annotations, exchange=self.exchange if exchange is None else exchange,
            routing_key=self.routing_key if routing_key is None else routing_key,
            body=self.body, properties=props, format=self.format,
            arrival=self.arrival if arrival is None else arrival)

    def __repr__(self) -> str:
        return (f"Message(exchange={self.exchange!r}, routing_key={self.routing_key!r}, "
                f"format={self.format_tag!r}, body_size={len(self.body)}, priority={self.priority})")


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
