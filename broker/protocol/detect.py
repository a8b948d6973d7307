"""Protocol detection from the 8-byte AMQP protocol header.

Every AMQP version starts with ``"AMQP"`` and four octets (0-9-1 spec 4.2.2;
1.0 spec 2.2).  An unsupported header is answered with the header of the
version the broker prefers, and the connection is closed: that is how the
specs tell a client which version to retry with.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

HEADER_SIZE = 8


class AmqpVersion(enum.Enum):
    V0_8 = "0-8"
    V0_9 = "0-9"
    V0_9_1 = "0-9-1"
    V0_10 = "0-10"
    V1_0 = "1.0"
    V1_0_SASL = "1.0-sasl"
    V1_0_TLS = "1.0-tls"


HEADERS: dict[bytes, AmqpVersion] = {
    b"AMQP\x01\x01\x08\x00": AmqpVersion.V0_8,
    b"AMQP\x01\x01\x00\x09": AmqpVersion.V0_9,
    b"AMQP\x00\x00\x09\x01": AmqpVersion.V0_9_1,
    b"AMQP\x01\x01\x00\x0a": AmqpVersion.V0_10,
    b"AMQP\x00\x01\x00\x00": AmqpVersion.V1_0,
    b"AMQP\x03\x01\x00\x00": AmqpVersion.V1_0_SASL,
    b"AMQP\x02\x01\x00\x00": AmqpVersion.V1_0_TLS,
}
HEADER_FOR = {version: header for header, version in HEADERS.items()}
PREFERRED_HEADER = HEADER_FOR[AmqpVersion.V0_9_1]


@dataclass(frozen=True, slots=True)
class Detected:
    """Outcome of reading a header: a version to serve, or bytes to answer before closing."""

    version: AmqpVersion | None
    reply: bytes = b""


def detect(header: bytes, supported: frozenset[AmqpVersion]) -> Detected:
    """Decide what to do with the first 8 bytes of a connection.

    ``supported`` is what the port enables.  A header for an enabled version
    selects it; anything else (garbage, a disabled or unknown version) gets
    the preferred supported header back.
    """
    if len(header) < HEADER_SIZE:
        raise ValueError("need 8 bytes to detect the protocol")
    version = HEADERS.get(bytes(header[:HEADER_SIZE]))
    if version is not None and version in supported:
        return Detected(version)
    preferred = PREFERRED_HEADER
    if AmqpVersion.V0_9_1 not in supported:
        for candidate in (AmqpVersion.V0_9, AmqpVersion.V0_8):
            if candidate in supported:
                preferred = HEADER_FOR[candidate]
                break
    return Detected(None, preferred)
