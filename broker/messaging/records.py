"""JSON-able forms of declaration arguments, for durable object records.

Arguments may hold AMQP values JSON lacks (byte strings, timestamps,
decimals).  Those become one-key tagged objects (``{"$bytes": "<base64>"}``,
``{"$timestamp": <epoch seconds>}``, ``{"$decimal": "1.50"}``) so a record
survives a JSON round trip unchanged.
"""

from __future__ import annotations

import base64
import datetime
from decimal import Decimal
from typing import Any

__all__ = ["to_json_value", "from_json_value"]

_UTC = datetime.timezone.utc


def to_json_value(value: Any) -> Any:
    """``value`` with every non-JSON type replaced by its tagged form."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=_UTC)
        return {"$timestamp": moment.timestamp()}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, dict):
        return {str(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    return str(value)


def from_json_value(value: Any) -> Any:
    """The inverse of :func:`to_json_value`."""
    if isinstance(value, dict):
        if len(value) == 1:
            ((tag, inner),) = value.items()
            if tag == "$bytes":
                return base64.b64decode(inner)
            if tag == "$timestamp":
                return datetime.datetime.fromtimestamp(inner, _UTC)
            if tag == "$decimal":
                return Decimal(inner)
        return {key: from_json_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json_value(item) for item in value]
    return value
