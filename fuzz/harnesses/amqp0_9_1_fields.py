"""0-9-1 field tables and basic properties (``amqp0_9_1/codec.py``, ``amqp0_9_1/properties.py``).

The first byte picks the decoder (modulo 3): 0 a field table with its size,
1 table entries without it (AMQPLAIN's form, ``decode_table_entries``), 2 the
content header's property flags and values.  The codec refuses malformed
input with ``ValueError`` (``UnicodeDecodeError`` among them), ``IndexError``
or ``struct.error``, which the engine answers with 502 SYNTAX_ERROR in the
words of ``malformed_reason``.  What decodes must survive a round trip:
encoded again it decodes to the same values.
"""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1.codec import (decode_table, decode_table_entries, encode_table, encode_value,
                                             malformed_reason)
from broker.protocol.amqp0_9_1.properties import decode_properties, encode_properties
from fuzz.contract import ContractViolation, agree
from tests.unit.protocol.amqp1_0.strategies import same

MALFORMED = (ValueError, IndexError, struct.error)
TABLE, ENTRIES, PROPERTIES = 0, 1, 2


def one_input(data: bytes) -> None:
    if not data:
        return
    kind, rest = data[0] % 3, data[1:]
    try:
        if kind == PROPERTIES:
            properties = decode_properties(rest)
        elif kind == TABLE:
            table = decode_table(rest, 0)[0]
        else:
            table = decode_table_entries(rest)
    except MALFORMED as exc:
        if not malformed_reason(exc):
            raise ContractViolation(f"{exc!r} says nothing of what was wrong") from exc
        return
    if kind == PROPERTIES:
        agree("basic properties round trip", properties, decode_properties(encode_properties(properties)), same)
    else:
        agree("field table round trip", table, decode_table(encode_table(table), 0)[0], same)


def seeds() -> list[bytes]:
    table = {"s": "text", "i": -5, "l": 1 << 40, "t": True, "d": 2.5, "x": b"\x00\xff", "v": None,
             "a": [1, "two", {"three": 3.0}], "f": {"nested": {"deeper": []}}, "dec": Decimal("9.95"),
             "ts": datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc)}
    # the other letters the encoder never writes: b B s u i f (0-9-1 errata)
    other = b"".join(bytes((len(k),)) + k + v for k, v in (
        (b"b", b"b\xff"), (b"B", b"B\xff"), (b"s", b"s\xff\xfe"), (b"u", b"u\xff\xfe"),
        (b"i", b"i\xff\xff\xff\xfe"), (b"f", b"f\x3f\x80\x00\x00"), (b"S", b"S\x00\x00\x00\x01\xff")))
    props = MessageProperties(content_type="text/plain", content_encoding="gzip", headers={"h": [1, "x"]},
                              delivery_mode=2, priority=9, correlation_id="c", reply_to="r", expiration="60000",
                              message_id="m", timestamp=1_700_000_000, type="t", user_id="guest", app_id="a",
                              cluster_id="cl")
    entries = encode_table(table)[4:]
    return [bytes((TABLE,)) + encode_table(table), bytes((TABLE,)) + struct.pack(">I", len(other)) + other,
            bytes((ENTRIES,)) + entries, bytes((ENTRIES,)) + b"\x05LOGINS\x00\x00\x00\x05guest",
            bytes((PROPERTIES,)) + encode_properties(props), bytes((PROPERTIES,)) + b"\x00\x00",
            bytes((PROPERTIES,)) + b"\x00\x01\x00\x00", bytes((TABLE,)) + encode_value([[[]]])[1:]]
