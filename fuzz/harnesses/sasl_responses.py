"""SASL responses: PLAIN and AMQPLAIN (``security/sasl.py``).

The first byte picks the mechanism (even: PLAIN, odd: AMQPLAIN), the rest is
the client's response.  A malformed response is ``AuthenticationFailed``,
never another exception.  What AMQPLAIN accepts is a field table's entries,
so the 0-9-1 codec must read it too, to the same user and password.
"""

from __future__ import annotations

import struct

from broker.errors import AuthenticationFailed
from broker.protocol.amqp0_9_1.codec import decode_table_entries, encode_longstr, encode_shortstr
from broker.security.sasl import credentials
from fuzz.contract import ContractViolation, agree

MECHANISMS = ("PLAIN", "AMQPLAIN")


def one_input(data: bytes) -> None:
    if not data:
        return
    mechanism, response = MECHANISMS[data[0] & 1], data[1:]
    try:
        user, password = credentials(mechanism, response)
    except AuthenticationFailed as exc:
        if "Login was refused" not in exc.text:
            raise ContractViolation(f"a refusal that does not say so: {exc.text!r}") from exc
        return
    if mechanism == "AMQPLAIN":
        try:
            table = decode_table_entries(response)
        except (ValueError, IndexError, struct.error) as exc:
            raise ContractViolation("AMQPLAIN took a response the field table codec refuses") from exc
        agree("AMQPLAIN's user and password as a field table", (user, password),
              (table.get("LOGIN"), table.get("PASSWORD")))


def seeds() -> list[bytes]:
    def amqplain(*fields: tuple[str, str]) -> bytes:
        return b"".join(encode_shortstr(name) + b"S" + encode_longstr(value) for name, value in fields)

    return [b"\x00\x00guest\x00guest", b"\x00guest\x00guest\x00guest", b"\x00\x00gu\xc3\xa9st\x00pw",
            b"\x01" + amqplain(("LOGIN", "guest"), ("PASSWORD", "guest")),
            b"\x01" + amqplain(("PASSWORD", ""), ("LOGIN", "u"), ("LOCALE", "en_US"))]
