"""Messages as management shows and makes them: info, content, and a message to publish.

Pure functions over :mod:`broker.messaging` objects, used by the Queue and
VirtualHost operations (``getMessageInfo``, ``getMessageContent``,
``publishMessage``).  Field names follow Broker-J's management
(``MessageInfo`` and ``ManageableMessage``).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.errors import ConfigurationError
from broker.messaging.message import Message, MessageProperties, message_number
from broker.messaging.queue import ACQUIRED, QueueEntry
from broker.messaging.records import from_json_value, to_json_value

#: the fields a message to publish may have (Broker-J's ManageableMessage, plus routingKey)
PUBLISHED_FIELDS = ("address", "routingKey", "content", "contentTransferEncoding", "mimeType",
                    "encoding", "headers", "messageId", "correlationId", "replyTo", "persistent",
                    "priority", "expiration", "appId", "type")


@dataclass(frozen=True, slots=True)
class Content:
    """Bytes with their media type: an operation result sent as is, not as JSON."""

    data: bytes
    media_type: str


def wall_time(arrival: float, clock: Callable[[], float]) -> float:
    """A broker-clock reading (monotonic seconds) as seconds since the epoch."""
    return time.time() - (clock() - arrival)


def message_info(entry: QueueEntry, clock: Callable[[], float],
                 include_headers: bool) -> dict[str, Any]:
    """What ``getMessageInfo`` shows of one queued message (times in ms since the epoch)."""
    message = entry.message
    props = message.properties
    info: dict[str, Any] = {
        "id": message_number(message),
        "journalId": message.journal_id or None,
        "size": len(message.body),
        "exchange": message.exchange,
        "routingKey": message.routing_key,
        "contentType": props.content_type,
        "encoding": props.content_encoding,
        "messageId": props.message_id,
        "correlationId": props.correlation_id,
        "replyTo": props.reply_to,
        "arrivalTime": int(wall_time(message.arrival, clock) * 1000),
        "expirationTime": None if message.expires_at is None
        else int(wall_time(message.expires_at, clock) * 1000),
        "persistent": message.persistent,
        "priority": message.priority,
        "deliveryCount": entry.delivery_count,
        "redelivered": entry.redelivered,
        "state": "Acquired" if entry.state == ACQUIRED else "Available",
        "messageFormat": message.format_tag,
    }
    if include_headers:
        info["headers"] = to_json_value(dict(props.headers or {}))
    return info


def message_content(message: Message, limit: int, return_json: bool) -> Content | Any:
    """The body for ``getMessageContent``: raw bytes with the message's type, or parsed JSON."""
    body = message.body if limit < 0 else message.body[:limit]
    if return_json:
        try:
            return json.loads(body)
        except (UnicodeDecodeError, ValueError):
            raise ConfigurationError(f"message {message_number(message)} is not JSON"
                                     " (parameter 'returnJson')") from None
    return Content(body, message.properties.content_type or "application/octet-stream")


def new_message(spec: Mapping[str, Any], clock: Callable[[], float]) -> Message:
    """The message ``publishMessage`` describes; ConfigurationError naming a wrong field."""
    unknown = sorted(set(spec) - set(PUBLISHED_FIELDS))
    if unknown:
        raise ConfigurationError(f"message: unknown field {', '.join(repr(u) for u in unknown)};"
                                 f" known: {', '.join(PUBLISHED_FIELDS)}")
    headers = spec.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise ConfigurationError("message: field 'headers' must be an object")
    priority = _optional_int(spec, "priority", 0, 255)
    expiration = _optional_int(spec, "expiration", 0, None)
    persistent = spec.get("persistent", False)
    if not isinstance(persistent, bool):
        raise ConfigurationError("message: field 'persistent' must be true or false")
    props = MessageProperties(
        content_type=_optional_text(spec, "mimeType"),
        content_encoding=_optional_text(spec, "encoding"),
        headers={str(k): from_json_value(v) for k, v in headers.items()} if headers else None,
        delivery_mode=2 if persistent else 1,
        priority=priority,
        correlation_id=_optional_text(spec, "correlationId"),
        reply_to=_optional_text(spec, "replyTo"),
        expiration=None if expiration is None else str(expiration),
        message_id=_optional_text(spec, "messageId"),
        timestamp=int(time.time()),
        type=_optional_text(spec, "type"),
        app_id=_optional_text(spec, "appId"))
    return Message(exchange=_optional_text(spec, "address") or "",
                   routing_key=_optional_text(spec, "routingKey") or "",
                   body=_body(spec, props), properties=props, arrival=clock())


def _body(spec: Mapping[str, Any], props: MessageProperties) -> bytes:
    content = spec.get("content", "")
    encoding = spec.get("contentTransferEncoding")
    if encoding is not None and encoding != "base64":
        raise ConfigurationError("message: field 'contentTransferEncoding' must be 'base64'"
                                 f" when given; got {encoding!r}")
    if encoding == "base64":
        if not isinstance(content, str):
            raise ConfigurationError("message: field 'content' must be a base64 string")
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError("message: field 'content' is not valid base64") from None
    if isinstance(content, str):
        return content.encode("utf-8")
    if props.content_type is None:
        props.content_type = "application/json"
    return json.dumps(content).encode("utf-8")


def _optional_text(spec: Mapping[str, Any], field: str) -> str | None:
    value = spec.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigurationError(f"message: field '{field}' must be a string; got {value!r}")
    return value


def _optional_int(spec: Mapping[str, Any], field: str, low: int, high: int | None) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigurationError(f"message: field '{field}' must be an integer; got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ConfigurationError(f"message: field '{field}' must be an integer;"
                                 f" got {value!r}") from None
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ConfigurationError(f"message: field '{field}' must be {bound}; got {number}")
    return number
