"""Protocol header detection (``protocol/detect.py``: the layer under every engine).

The first byte is the set of versions the port enables (one bit per
:class:`AmqpVersion`, in its order), the second the size of the pieces the
bytes arrive in (0: one piece), the rest what a client sends first.  The
detector never raises and holds at most a header's 8 bytes; it serves the
version the header names when enabled, and otherwise answers with a header
of an enabled version (the preferred one) and closes; after a served header
every byte passes up untouched.
"""

from __future__ import annotations

from broker.protocol.detect import HEADER_SIZE, HEADERS, AmqpVersion, HeaderDetector
from fuzz.contract import ContractViolation, agree, bounded

VERSIONS = tuple(AmqpVersion)


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    supported = frozenset(v for i, v in enumerate(VERSIONS) if data[0] >> i & 1)
    piece, stream = data[1] or len(data) or 1, data[2:]
    detector = HeaderDetector(supported)
    passed, reply = b"", b""
    for at in range(0, len(stream), piece):
        passed += detector.receive_data(stream[at:at + piece])
        reply += detector.data_to_send()
        bounded("the detector's buffer", detector.buffered_bytes, HEADER_SIZE - 1)
    header = stream[:HEADER_SIZE]
    if len(header) < HEADER_SIZE:
        agree("what a short header leads to", (detector.version, detector.closed, passed, reply),
              (None, False, b"", b""))
        return
    wanted = HEADERS.get(header)
    if wanted is not None and wanted in supported:
        agree("the version served", detector.version, wanted)
        agree("what passes up after the header", passed, stream[HEADER_SIZE:])
        return
    agree("the state after a refused header", (detector.version, detector.closed, passed), (None, True, b""))
    if HEADERS.get(reply) is None:
        raise ContractViolation(f"refused {header!r} with {reply!r}, which is no protocol header")


def seeds() -> list[bytes]:
    every = (1 << len(VERSIONS)) - 1
    return [bytes((every, 0)) + header + b"\x01\x00\x00" for header in HEADERS] \
        + [bytes((0b1, 3)) + b"AMQP\x00\x00\x09\x01", bytes((0, 0)) + b"GET / HTTP/1.1\r\n"]
