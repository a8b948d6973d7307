"""Method frames of one connection into method objects, with the errors the spec names.

A payload shorter than its class and method ids is a frame error (501), an
unknown method 540 NOT_IMPLEMENTED, malformed arguments 502 SYNTAX_ERROR.

A publisher repeats the same few ``basic.publish`` frames (exchange, routing
key, flags) for every message: their payloads are kept decoded, per
connection and at most :data:`PUBLISH_CACHE_SIZE` of them, and the method
object serves every frame with those bytes (methods are frozen).
"""

from __future__ import annotations

import struct

from broker import errors
from broker.protocol.detect import AmqpVersion

from . import methods as m
from .codec import malformed_reason
from .versions import VERSION_TABLES, method_ids_table

__all__ = ["MethodDecoder", "PUBLISH_CACHE_SIZE"]

_METHOD_ID = struct.Struct(">I")
_BASIC_PUBLISH = (60 << 16) | 40         # class and method id of basic.publish, as one key
#: basic.publish payloads a connection keeps decoded (all forgotten when full)
PUBLISH_CACHE_SIZE = 64


class MethodDecoder:
    """Decodes the method frames of one connection (its AMQP version's methods)."""

    __slots__ = ("version", "_decoders", "_publishes")

    def __init__(self, version: AmqpVersion) -> None:
        self.version = version
        self._decoders = VERSION_TABLES[version][0]
        self._publishes: dict[bytes, m.Method] = {}     # basic.publish payload -> method

    def decode(self, payload: bytes) -> m.Method:
        if len(payload) < 4:
            raise errors.FrameError("method frame shorter than its class and method ids")
        key = _METHOD_ID.unpack_from(payload, 0)[0]
        if key == _BASIC_PUBLISH:
            method = self._publishes.get(payload)
            if method is not None:
                return method
        decoder = self._decoders.get(key)
        if decoder is None:
            raise errors.NotImplemented_(
                f"unknown method class {key >> 16} method {key & 0xFFFF} in AMQP {self.version.value}")
        try:
            method = decoder(payload, 4)
        except (ValueError, IndexError, struct.error) as exc:
            raise errors.SyntaxError_(
                f"malformed arguments for method {self._method_name(key)}: {malformed_reason(exc)}") from None
        if key == _BASIC_PUBLISH:
            publishes = self._publishes
            if len(publishes) >= PUBLISH_CACHE_SIZE:
                publishes.clear()
            publishes[payload] = method
        return method

    def _method_name(self, key: int) -> str:
        ids = method_ids_table(self.version)
        for cls, (class_id, method_id) in ids.items():
            if (class_id << 16) | method_id == key:
                return f"'{cls.NAME}' ({class_id}/{method_id})"
        return f"{key >> 16}/{key & 0xFFFF}"
