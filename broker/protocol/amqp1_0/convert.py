"""Converting message metadata between AMQP 1.0 and the common (AMQP 0-9-1) view.

The mapping follows RabbitMQ 4's (https://www.rabbitmq.com/docs/conversions)
where it has one; ``docs/amqp-1-0-conversion.md`` is the table.  In short:

* header: ``durable`` <-> ``delivery_mode`` 2 / 1, ``priority`` <-> ``priority``,
  ``ttl`` <-> ``expiration`` (milliseconds as text);
* properties: ``message-id`` / ``correlation-id`` <-> their 0-9-1 namesakes
  (a uuid as ``urn:uuid:...``, a ulong as its decimal text, a binary or an
  over-long string in the ``x-message-id`` / ``x-correlation-id`` header),
  ``user-id`` <-> ``user_id``, ``reply-to``, ``content-type``,
  ``content-encoding``, ``subject`` <-> ``type``, ``group-id`` <-> ``app_id``,
  ``creation-time`` (ms) <-> ``timestamp`` (s);
* application-properties <-> headers not starting ``x-`` (simple values);
  message annotations starting ``x-`` <-> headers starting ``x-``
  (``x-opt-deaths`` <-> ``x-death``, ``x-cc`` <-> ``CC``);
* an amqp-value or amqp-sequence body travels to 0-9-1 as its AMQP encoding
  with the content type ``message/vnd.rabbitmq.amqp``, and back.

Whatever has no place on the other side is left out (never an error): the
values are listed in the docs page and :data:`UNMAPPED_PROPERTIES`.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from broker.messaging.message import MessageProperties

from .definitions import Header, Properties
from .sections import AMQP_SEQUENCE, AMQP_VALUE, DATA, split_sections
from .values import Array, DecodeError, Symbol, Timestamp, ULong, _Decimal

__all__ = ["AMQP_SECTIONS_TYPE", "UNMAPPED_PROPERTIES", "view_from_sections", "header_from_view",
           "properties_from_view", "maps_from_view", "to_0_9_1_value", "to_1_0_value", "is_sections_body"]

#: the 0-9-1 content type of a body that holds AMQP 1.0 body sections (RabbitMQ's)
AMQP_SECTIONS_TYPE: Final = "message/vnd.rabbitmq.amqp"
#: 1.0 properties no 0-9-1 property holds: left out when converting to 0-9-1
UNMAPPED_PROPERTIES: Final = ("to", "absolute-expiry-time", "group-sequence", "reply-to-group-id")

MESSAGE_ID_HEADER: Final = "x-message-id"
CORRELATION_ID_HEADER: Final = "x-correlation-id"
DEATHS_ANNOTATION: Final = "x-opt-deaths"
CC_ANNOTATION: Final = "x-cc"
_URN: Final = "urn:uuid:"
_UTC = _dt.timezone.utc
_LONG_MAX = (1 << 63) - 1
_UINT_MAX = (1 << 32) - 1
_LAST_SECOND = 253_402_300_799          # 9999-12-31T23:59:59Z
#: "no 0-9-1 value for this": dropped by the callers
_DROP: Final[Any] = object()


def _shortstr(value: Any) -> str | None:
    """``value`` when it fits a 0-9-1 short string (text of at most 255 UTF-8 bytes)."""
    if not isinstance(value, str) or len(value.encode("utf-8")) > 255:
        return None
    return str(value)


def _seconds(milliseconds: int) -> int | None:
    """A 1.0 timestamp as 0-9-1 seconds: None before the epoch (0-9-1 timestamps are unsigned) or
    past the year 9999 (Python's datetime, in which 0-9-1 header timestamps are decoded)."""
    seconds = int(milliseconds) // 1000
    return seconds if 0 <= seconds <= _LAST_SECOND else None


# -- values -------------------------------------------------------------------------------------

def to_0_9_1_value(value: Any) -> Any:
    """A 1.0 value as a 0-9-1 field value, or ``_DROP`` when it has none.

    Integers of every width become integers (a ulong beyond the signed 64-bit
    range has no 0-9-1 type), symbols and chars text, a timestamp a UTC
    datetime (seconds: 0-9-1 timestamps have no milliseconds), a uuid its
    text, binaries bytes; decimals and described values are dropped; lists,
    arrays and maps convert element by element, leaving out what drops.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, bytes):
        return _DROP if isinstance(value, _Decimal) else bytes(value)
    if isinstance(value, Timestamp):
        seconds = _seconds(value)
        return _DROP if seconds is None else _dt.datetime.fromtimestamp(seconds, _UTC)
    if isinstance(value, int):
        return int(value) if -_LONG_MAX - 1 <= value <= _LONG_MAX else _DROP
    if isinstance(value, str):
        return str(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (list, tuple, Array)):
        items = value.items if isinstance(value, Array) else value
        if isinstance(value, Array) and value.descriptor is not None:
            return _DROP
        converted = [to_0_9_1_value(item) for item in items]
        return [item for item in converted if item is not _DROP]
    if isinstance(value, dict):
        table = {}
        for key, item in value.items():
            name = _shortstr(key)
            converted = to_0_9_1_value(item)
            if name is not None and converted is not _DROP:
                table[name] = converted
        return table
    return _DROP            # Decimal32/64/128, Described, anything else


def to_1_0_value(value: Any, *, simple: bool = False) -> Any:
    """A 0-9-1 field value as a 1.0 value (``_DROP`` when it has none).

    With ``simple`` (application-properties, spec 3.2.5: no lists or maps)
    a table or an array is dropped.  A decimal has no exact 1.0 counterpart
    here (the codec keeps IEEE 754 decimals as raw bytes): dropped.
    """
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, _dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=_UTC)
        return Timestamp(int(moment.timestamp()) * 1000)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if simple or isinstance(value, Decimal):
        return _DROP
    if isinstance(value, (list, tuple)):
        return [item for item in (to_1_0_value(v) for v in value) if item is not _DROP]
    if isinstance(value, dict):
        return {str(k): item for k, v in value.items() if (item := to_1_0_value(v)) is not _DROP}
    return _DROP


# -- 1.0 -> common view ----------------------------------------------------------------------------

def _id_to_0_9_1(value: Any, header: str, headers: dict[str, Any]) -> str | None:
    """A message-id / correlation-id as 0-9-1 text; a binary or long string goes to ``header``."""
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        return _URN + str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    text = _shortstr(value)
    if text is not None:
        return text
    if isinstance(value, (str, bytes)):
        headers[header] = value if isinstance(value, bytes) else str(value)
    return None


def _deaths_to_0_9_1(value: Any) -> list[dict[str, Any]] | Any:
    """RabbitMQ 4's ``x-opt-deaths`` (a list of maps) as the 0-9-1 ``x-death`` header."""
    items = value.items if isinstance(value, Array) else value
    if not isinstance(items, (list, tuple)):
        return _DROP
    deaths = []
    for death in items:
        if not isinstance(death, dict):
            continue
        table: dict[str, Any] = {}
        for key, name in (("count", "count"), ("reason", "reason"), ("queue", "queue"), ("first-time", "time"),
                          ("exchange", "exchange"), ("routing-keys", "routing-keys")):
            if key in death and (item := to_0_9_1_value(death[key])) is not _DROP:
                table[name] = item
        if death.get("ttl") is not None:
            table["original-expiration"] = str(int(death["ttl"]))
        deaths.append(table)
    return deaths


def annotations_to_headers(annotations: Mapping[Any, Any] | None, headers: dict[str, Any]) -> None:
    """Message annotations whose keys start ``x-`` into 0-9-1 ``headers``."""
    for key, value in (annotations or {}).items():
        if not isinstance(key, str) or not key.startswith("x-") or _shortstr(key) is None:
            continue
        if key == DEATHS_ANNOTATION and isinstance(value, (list, tuple, Array)):
            converted, key = _deaths_to_0_9_1(value), "x-death"
        else:
            converted = to_0_9_1_value(value)
            if key == CC_ANNOTATION:
                key = "CC"
        if converted is not _DROP:
            headers[str(key)] = converted


def view_from_sections(header: Header | None, properties: Properties | None,
                       application_properties: Mapping[Any, Any] | None,
                       message_annotations: Mapping[Any, Any] | None, *, sections_body: bool) -> MessageProperties:
    """The common view of a 1.0 message's sections.

    ``sections_body``: the body is an amqp-value or amqp-sequence, which a
    0-9-1 consumer receives AMQP-encoded with :data:`AMQP_SECTIONS_TYPE`
    as its content type (the 1.0 content-type describes data sections only).
    """
    headers: dict[str, Any] = {}
    annotations_to_headers(message_annotations, headers)
    for key, value in (application_properties or {}).items():
        name = _shortstr(key)
        converted = to_0_9_1_value(value)
        if name is not None and converted is not _DROP:
            headers[name] = converted
    view = MessageProperties()
    if header is not None:
        view.delivery_mode = 2 if header.durable else 1
        view.priority = header.priority
        if header.ttl is not None:
            view.expiration = str(header.ttl)
    p = properties
    if p is not None:
        view.message_id = _id_to_0_9_1(p.message_id, MESSAGE_ID_HEADER, headers)
        view.correlation_id = _id_to_0_9_1(p.correlation_id, CORRELATION_ID_HEADER, headers)
        if p.user_id is not None:
            try:
                view.user_id = _shortstr(bytes(p.user_id).decode("utf-8"))
            except UnicodeDecodeError:
                view.user_id = None          # not text: no 0-9-1 user_id can hold it
        view.reply_to = _shortstr(p.reply_to)
        view.content_type = _shortstr(p.content_type)
        view.content_encoding = _shortstr(p.content_encoding)
        view.type = _shortstr(p.subject)
        view.app_id = _shortstr(p.group_id)
        if p.creation_time is not None:
            view.timestamp = _seconds(p.creation_time)
    if sections_body:
        view.content_type = AMQP_SECTIONS_TYPE
    view.headers = headers or None
    return view


# -- common view -> 1.0 ----------------------------------------------------------------------------

def header_from_view(view: MessageProperties, *, delivery_count: int = 0,
                     first_acquirer: bool = False) -> Header | None:
    """The header section of ``view``; None when every field would be its default."""
    ttl = view.expiration
    fields: dict[str, Any] = {}
    if view.delivery_mode == 2:
        fields["durable"] = True
    if view.priority is not None:
        fields["priority"] = view.priority
    if ttl is not None and ttl.isascii() and ttl.isdigit():
        fields["ttl"] = min(int(ttl), _UINT_MAX)     # a 1.0 ttl is a uint: about 49 days at most
    if delivery_count:
        fields["delivery_count"] = delivery_count
    if first_acquirer:
        fields["first_acquirer"] = True
    return Header(**fields) if fields else None


def _id_to_1_0(text: str | None, header: str, headers: dict[str, Any]) -> Any:
    if text is None:
        fallback = headers.get(header)
        if isinstance(fallback, (str, bytes)):      # an id kept there: it becomes the id again
            del headers[header]
            return fallback
        return None                                 # (any other value stays a header)
    if text.startswith(_URN):
        try:
            return uuid.UUID(text[len(_URN):])
        except ValueError:
            pass
    return text


def properties_from_view(view: MessageProperties, headers: dict[str, Any], *,
                         sections_body: bool) -> Properties | None:
    """The properties section of ``view``; takes ``x-message-id`` / ``x-correlation-id`` out of
    ``headers`` (where a 1.0 id that 0-9-1 cannot hold was kept).  None when empty."""
    content_type = None if sections_body else view.content_type
    fields = {
        "message_id": _id_to_1_0(view.message_id, MESSAGE_ID_HEADER, headers),
        "user_id": None if view.user_id is None else view.user_id.encode("utf-8"),
        "subject": view.type,
        "reply_to": view.reply_to,
        "correlation_id": _id_to_1_0(view.correlation_id, CORRELATION_ID_HEADER, headers),
        "content_type": None if content_type is None else Symbol(content_type),
        "content_encoding": None if view.content_encoding is None else Symbol(view.content_encoding),
        "creation_time": None if view.timestamp is None else Timestamp(int(view.timestamp) * 1000),
        "group_id": view.app_id,
    }
    present = {name: value for name, value in fields.items() if value is not None}
    return Properties(**present) if present else None


def _deaths_to_1_0(deaths: Any) -> list[dict[Symbol, Any]] | Any:
    """The 0-9-1 ``x-death`` header as RabbitMQ 4's ``x-opt-deaths``: a list of maps."""
    if not isinstance(deaths, (list, tuple)):
        return _DROP
    converted = []
    for death in deaths:
        if not isinstance(death, dict):
            continue
        entry: dict[Symbol, Any] = {}
        for name, key in (("queue", "queue"), ("reason", "reason"), ("count", "count"), ("time", "first-time"),
                          ("time", "last-time"), ("exchange", "exchange"), ("routing-keys", "routing-keys")):
            if name in death and (value := to_1_0_value(death[name])) is not _DROP:
                entry[Symbol(key)] = Symbol(value) if key == "reason" and isinstance(value, str) else \
                    ULong(value) if key == "count" and isinstance(value, int) and value >= 0 else value
        expiration = death.get("original-expiration")
        if isinstance(expiration, str) and expiration.isdigit():
            entry[Symbol("ttl")] = int(expiration)
        converted.append(entry)
    return converted


def maps_from_view(headers: Mapping[str, Any] | None,
                   annotations: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(application-properties, message-annotations) of 0-9-1 ``headers`` and broker ``annotations``.

    Headers starting ``x-`` and the broker's annotations become message
    annotations (any value); ``CC`` becomes ``x-cc``; ``x-death`` becomes
    ``x-opt-deaths``; the other headers become application properties when
    their value is simple, and are dropped when it is a table or an array.
    """
    properties: dict[str, Any] = {}
    message_annotations: dict[str, Any] = {}
    for source in (headers or {}, annotations or {}):
        for key, value in source.items():
            if key == "x-death" and isinstance(value, (list, tuple)):
                key, converted = DEATHS_ANNOTATION, _deaths_to_1_0(value)
            elif key == "CC" and isinstance(value, (list, tuple)):
                key, converted = CC_ANNOTATION, to_1_0_value(value)
            elif key.startswith("x-"):
                converted = to_1_0_value(value)
            else:
                converted = to_1_0_value(value, simple=True)
                if converted is not _DROP:
                    properties[key] = converted
                continue
            if converted is not _DROP:
                message_annotations[key] = converted
    return properties, message_annotations


def is_sections_body(body: bytes) -> int | None:
    """The kind (DATA / AMQP_SEQUENCE / AMQP_VALUE) of a body that is nothing but 1.0 body sections
    (RabbitMQ's encoding for :data:`AMQP_SECTIONS_TYPE`), None when it is not one."""
    try:
        spans = split_sections(body)
    except DecodeError:
        return None
    if not spans or any(span.code not in (DATA, AMQP_VALUE, AMQP_SEQUENCE) for span in spans):
        return None
    return spans[0].code

