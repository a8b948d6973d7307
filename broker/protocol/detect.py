"""Protocol detection from the 8-byte AMQP protocol header.

Every AMQP version starts with ``"AMQP"`` and four octets (0-9-1 spec 4.2.2;
1.0 spec 2.2).  An unsupported header is answered with the header of the
version the broker prefers, and the connection is closed: that is how the
specs tell a client which version to retry with.

:class:`HeaderDetector` is the byte-stream layer that does it on a
connection: the top of a transport's layer chain, right below the engine
(:mod:`broker.transport.layers`).
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
AMQP_1_0_HEADERS = (AmqpVersion.V1_0, AmqpVersion.V1_0_SASL, AmqpVersion.V1_0_TLS)


@dataclass(frozen=True, slots=True)
class Detected:
    """Outcome of reading a header: a version to serve, or bytes to answer before closing."""

    version: AmqpVersion | None
    reply: bytes = b""


def detect(header: bytes, supported: frozenset[AmqpVersion], preferred: bytes = b"") -> Detected:
    """Decide what to do with the first 8 bytes of a connection.

    ``supported`` is what the port enables.  A header for an enabled version
    selects it; an AMQP 1.0 header the port does not serve (TLS, where it has
    none) gets the 1.0 SASL header back when the port serves 1.0; anything else
    (garbage, a disabled, unimplemented or unknown version) gets ``preferred``
    back -- by default the header of 0-9-1, or of the newest 0-9-1 family
    member the port enables.
    """
    if len(header) < HEADER_SIZE:
        raise ValueError("need 8 bytes to detect the protocol")
    version = HEADERS.get(bytes(header[:HEADER_SIZE]))
    if version is not None and version in supported:
        return Detected(version)
    if version in AMQP_1_0_HEADERS and AmqpVersion.V1_0_SASL in supported:
        # a 1.0 header the port does not serve (the TLS header on a port without TLS):
        # the 1.0 header it does serve (AMQP 1.0 part 2, 2.2; part 5, 5.2.1)
        return Detected(None, HEADER_FOR[AmqpVersion.V1_0_SASL])
    if preferred:
        return Detected(None, preferred)
    preferred = PREFERRED_HEADER
    if AmqpVersion.V0_9_1 not in supported:
        for candidate in (AmqpVersion.V0_9, AmqpVersion.V0_8):
            if candidate in supported:
                preferred = HEADER_FOR[candidate]
                break
    return Detected(None, preferred)


class HeaderDetector:
    """The layer that reads the protocol header; afterwards bytes pass through untouched.

    Until 8 bytes have come, :meth:`receive_data` passes nothing up.  Then
    either :attr:`version` names the engine to start and the bytes after the
    header go up, or the header is refused: :meth:`data_to_send` gives the
    header to answer with and :attr:`closed` is set.
    """

    def __init__(self, supported: frozenset[AmqpVersion], preferred: bytes = b"") -> None:
        self.supported = supported
        self.preferred = preferred
        self.version: AmqpVersion | None = None
        self.header = b""              # the header as received (for a log line when refused)
        self.closed = False
        self._buffer = b""
        self._reply = b""

    def receive_data(self, data: bytes) -> bytes:
        if self.version is not None:
            return data
        if self.closed:
            return b""
        self._buffer += data
        if len(self._buffer) < HEADER_SIZE:
            return b""
        self.header, rest, self._buffer = self._buffer[:HEADER_SIZE], self._buffer[HEADER_SIZE:], b""
        detected = detect(self.header, self.supported, self.preferred)
        if detected.version is None:
            self._reply = detected.reply
            self.closed = True
            return b""
        self.version = detected.version
        return rest

    def send_data(self, data: bytes) -> bytes:
        return data

    def data_to_send(self) -> bytes:
        reply, self._reply = self._reply, b""
        return reply

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)
