"""JMS message selectors (``messaging/selector_syntax.py``, compiled by ``messaging/selectors.py``).

The input is the selector's text (UTF-8, or Latin-1 when it is not UTF-8).
A selector that cannot be read is a ``SelectorError`` naming the position
(within the text) and what was expected; one that is read evaluates, on any
message, to true, false or unknown (None) without raising.
"""

from __future__ import annotations

from decimal import Decimal

from broker.messaging.selectors import SelectorError, compile_selector
from fuzz.contract import ContractViolation
from tests.unit.messaging.support import message

MAX_LEN = 9000      # past the parser's limit of 8192 characters
MESSAGES = [
    message(b"x"),
    message(b"body", headers={"a": 1, "b": "red", "c": 2.5, "d": True, "e": None, "f": Decimal("1.5"), "g": b"\xff",
                              "h": {"t": 1}, "big": 1 << 70, "dotted.name": "x", "my-header": "y"},
            priority=7, delivery_mode=2, message_id="ID:1", correlation_id="c", type="t", timestamp=1_700_000_000,
            reply_to="r", user_id="u", expiration="100"),
]


def one_input(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        selector = compile_selector(text)
    except SelectorError as exc:
        if not 0 <= exc.position <= len(text):
            raise ContractViolation(f"the error's position {exc.position} is outside the text") from exc
        return
    for candidate in MESSAGES:
        for redelivered in (False, True):
            result = selector.evaluate(candidate, redelivered=redelivered, delivery_count=3)
            if result not in (True, False, None):
                raise ContractViolation(f"the selector evaluated to {result!r}")


def seeds() -> list[bytes]:
    texts = ["a = 1", "b = 'red' AND c > 2.0 OR NOT d", "a BETWEEN 0 AND 0x10 AND b IN ('red', 'blue')",
             "b LIKE 'r!_%' ESCAPE '!'", "e IS NULL AND a IS NOT NULL", "(a + 2) * 3 / 4 % 5 >= -c",
             "\"my-header\" = 'y' -- comment\n AND dotted.name <> 'z' /* c */",
             "JMSPriority > 4 AND JMSXDeliveryCount < 5 AND JMSRedelivered = TRUE",
             "amqp.priority = 7 OR JMSCorrelationID = 'c'", "a = 1.5e3 OR a = .5 OR a = 017 OR a = 5L",
             "b NOT LIKE '%e%' AND a NOT BETWEEN 2 AND 3 AND b NOT IN ('x')"]
    return [text.encode() for text in texts]
