"""JMS message selectors (JMS 2.0 section 3.8.1): the grammar, three-valued logic, types, limits."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import PreconditionFailed
from broker.messaging.message import Message, MessageProperties
from broker.messaging.selectors import (
    MAX_DEPTH, MAX_LENGTH, SELECTOR_ARGUMENT, SelectorError, compile_selector, selector_of)

from .support import message

HEADERS: dict[str, Any] = {
    "color": "red", "size": 5, "weight": 2.5, "flag": True, "off": False, "zero": 0, "neg": -7,
    "big": 10 ** 30, "price": Decimal("9.95"), "raw": b"bytes", "quote": "it's", "nested": {"a": 1},
    "under_score": "a_b", "percent": "50%", "newline": "a\nb", "dotted.name": "yes", "my-header": "dash",
    "JMSXGroupID": "g1", "empty": "",
}

MSG = message(b"body", headers=HEADERS, priority=7, delivery_mode=2, message_id="ID:1",
              correlation_id="corr", type="order", timestamp=1_700_000_000, reply_to="replies",
              user_id="guest", content_type="text/plain", expiration="60000")

#: (selector, expected: True / False / None = unknown) against MSG
CASES: list[tuple[str, bool | None]] = [
    # equality on every JMS type
    ("color = 'red'", True), ("color = 'blue'", False), ("color <> 'blue'", True), ("color <> 'red'", False),
    ("size = 5", True), ("size = 5.0", True), ("weight = 2.5", True), ("size <> 6", True),
    ("flag = TRUE", True), ("flag = FALSE", False), ("off = FALSE", True), ("TRUE = TRUE", True),
    ("quote = 'it''s'", True), ("empty = ''", True),
    # unlike types compare false, never unknown (JMS 3.8.1.2)
    ("color = 5", False), ("size = '5'", False), ("flag = 1", False), ("zero = FALSE", False),
    ("color <> 5", True), ("nested = 'x'", False), ("nested <> 'x'", True),
    # ordering: numbers only, strings/booleans are false
    ("size > 4", True), ("size >= 5", True), ("size < 5", False), ("size <= 5", True),
    ("weight > 2", True), ("weight < size", True), ("neg < zero", True),
    ("color > size", False), ("flag < size", False), ("big > 1e29", True),
    # arithmetic and Java's numeric promotion
    ("size + 1 = 6", True), ("size - 10 = -5", True), ("size * 2 = 10", True), ("size / 2 = 2", True),
    ("neg / 2 = -3", True), ("size / 2.0 = 2.5", True), ("size % 3 = 2", True), ("neg % 3 = -1", True),
    ("weight * 2 = 5", True), ("-size = -5", True), ("- -size = 5", True), ("+size = 5", True),
    ("1 + 2 * 3 = 7", True), ("(1 + 2) * 3 = 9", True), ("10 - 4 - 3 = 3", True), ("24 / 4 / 2 = 3", True),
    ("size / zero = 1", None), ("size % zero = 1", None), ("weight / zero > 1000", True),
    ("price > 9.9 AND price < 10", True), ("big + 1 > big", True), ("color + 1 = 1", None),
    # literals: hex, octal, long suffix, approximate forms
    ("0x1F = 31", True), ("0X1f = 31", True), ("017 = 15", True), ("0 = zero", True), ("5L = size", True),
    ("2.5 = weight", True), ("25E-1 = weight", True), (".25e1 = weight", True), ("5. = size", True),
    ("1.5E+1 = 15", True),
    # NULL semantics: absent properties are unknown; three-valued AND/OR/NOT
    ("missing = 1", None), ("missing <> 1", None), ("missing > 1", None), ("NOT missing = 1", None),
    ("missing IS NULL", True), ("missing IS NOT NULL", False), ("color IS NULL", False),
    ("color IS NOT NULL", True), ("nested IS NOT NULL", True), ("missing + 1 IS NULL", True),
    ("missing = 1 AND size = 5", None), ("missing = 1 AND size = 6", False),
    ("missing = 1 OR size = 5", True), ("missing = 1 OR size = 6", None),
    ("NOT (missing = 1 OR size = 6)", None), ("NOT (missing = 1 AND size = 6)", True),
    ("missing", None), ("NOT missing", None),
    # identifiers as booleans: a non-boolean value is false
    ("flag", True), ("off", False), ("NOT off", True), ("color", False), ("flag AND size = 5", True),
    # BETWEEN: inclusive, three-valued, numbers only
    ("size BETWEEN 5 AND 10", True), ("size BETWEEN 1 AND 5", True), ("size BETWEEN 6 AND 10", False),
    ("size NOT BETWEEN 6 AND 10", True), ("size NOT BETWEEN 1 AND 10", False),
    ("weight BETWEEN 2 AND 3", True), ("missing BETWEEN 1 AND 2", None),
    ("missing NOT BETWEEN 1 AND 2", None), ("size BETWEEN missing AND 2", False),
    ("size BETWEEN missing AND 9", None), ("color BETWEEN 1 AND 2", False),
    ("size BETWEEN 1 + 1 AND 2 * 3", True),
    # IN
    ("color IN ('red', 'blue')", True), ("color IN ('blue')", False), ("color NOT IN ('blue')", True),
    ("color NOT IN ('red', 'blue')", False), ("missing IN ('a')", None), ("missing NOT IN ('a')", None),
    ("size IN ('5')", False), ("quote IN ('it''s')", True),
    # LIKE with % and _, escapes, anchoring, newlines
    ("color LIKE 'r%'", True), ("color LIKE '%d'", True), ("color LIKE '%e%'", True), ("color LIKE 'r_d'", True),
    ("color LIKE 'r_'", False), ("color LIKE 're'", False), ("color LIKE 'red'", True), ("color LIKE '%'", True),
    ("empty LIKE '%'", True), ("empty LIKE '_'", False), ("color LIKE '%%%'", True), ("color LIKE 'R%'", False),
    ("color NOT LIKE 'b%'", True), ("missing LIKE '%'", None), ("missing NOT LIKE '%'", None),
    ("size LIKE '5'", False), ("color LIKE 'r%e%d'", True), ("color LIKE 'r%d%e'", False),
    ("color LIKE '%ed%ed'", False), ("color LIKE '_%_'", True), ("color LIKE '____'", False),
    ("under_score LIKE 'a\\_b' ESCAPE '\\'", True), ("color LIKE 'r\\_d' ESCAPE '\\'", False),
    ("percent LIKE '50!%' ESCAPE '!'", True), ("percent LIKE '5!%' ESCAPE '!'", False),
    ("percent LIKE '%!%' ESCAPE '!'", True), ("color LIKE 'r!ed' ESCAPE '!'", True),
    ("newline LIKE 'a_b'", True), ("newline LIKE 'a%'", True), ("color LIKE '.*'", False),
    ("color LIKE '[r]ed'", False), ("raw LIKE 'by%'", True),
    # header fields and their mapping
    ("JMSPriority = 7", True), ("JMSPriority > 4", True), ("JMSDeliveryMode = 'PERSISTENT'", True),
    ("JMSMessageID = 'ID:1'", True), ("JMSCorrelationID = 'corr'", True), ("JMSType = 'order'", True),
    ("JMSTimestamp = 1700000000000", True), ("JMSReplyTo = 'replies'", True), ("JMSRedelivered", False),
    ("JMSXDeliveryCount = 1", True), ("JMSXUserID = 'guest'", True), ("JMSXGroupID = 'g1'", True),
    ("amqp.priority = 7", True), ("amqp.correlation_id = 'corr'", True), ("amqp.durable", True),
    ("amqp.message_id = 'ID:1'", True), ("amqp.content_type = 'text/plain'", True),
    ("amqp.ttl = 60000", True), ("amqp.creation_time = JMSTimestamp", True), ("amqp.redelivered", False),
    ("dotted.name = 'yes'", True), ('"my-header" = \'dash\'', True), ('"color" = \'red\'', True),
    ("Color = 'red'", None),     # identifiers are case-sensitive
    # keywords in any case, comments, precedence
    ("color = 'red' and size = 5", True), ("color = 'blue' Or size = 5", True), ("not color = 'blue'", True),
    ("size Between 1 and 9", True), ("color iN ('red')", True), ("missing is null", True),
    ("TRUE OR FALSE AND FALSE", True), ("(TRUE OR FALSE) AND FALSE", False), ("NOT FALSE AND FALSE", False),
    ("NOT (FALSE AND FALSE)", True), ("NOT NOT TRUE", True),
    ("size = 5 -- a comment\n AND color = 'red'", True), ("/* lead */ size /* mid */ = 5 -- end", True),
    ("size > 4 = TRUE", True), ("size = 2 + 3", True), ("2 + 3 = size", True),
]


@pytest.mark.parametrize("text,expected", CASES)
def test_selector_table(text: str, expected: bool | None) -> None:
    selector = compile_selector(text)
    assert selector.evaluate(MSG) is expected
    assert selector.matches(MSG) is (expected is True)


def test_a_message_without_properties_has_the_jms_defaults() -> None:
    bare = message(b"x")
    assert compile_selector("JMSPriority = 4").matches(bare)           # JMS's default priority
    assert compile_selector("JMSDeliveryMode = 'NON_PERSISTENT'").matches(bare)
    assert compile_selector("JMSTimestamp = 0").matches(bare)
    assert compile_selector("JMSMessageID IS NULL").matches(bare)
    assert compile_selector("color IS NULL").matches(bare)
    assert compile_selector("amqp.ttl IS NULL").matches(bare)


def test_redelivery_facts_come_from_the_queue_entry() -> None:
    selector = compile_selector("JMSRedelivered AND JMSXDeliveryCount = 3 AND amqp.delivery_count = 2")
    assert not selector.matches(MSG)
    assert selector.matches(MSG, redelivered=True, delivery_count=2)


def test_annotations_are_properties_too() -> None:
    dead = Message.annotated({"x-first-death-reason": "expired"}, exchange="", routing_key="q", body=b"",
                             properties=MessageProperties(), arrival=0.0)
    assert compile_selector("\"x-first-death-reason\" = 'expired'").matches(dead)


def test_float_division_by_zero_is_ieee() -> None:
    assert compile_selector("weight / 0 > 1e308").matches(MSG)
    assert compile_selector("neg / 0.0 < -1e308").matches(MSG)
    assert not compile_selector("zero / 0.0 = zero / 0.0").matches(MSG)   # NaN equals nothing
    assert compile_selector("weight % 0 IS NOT NULL").matches(MSG)


def test_overflowing_mixed_arithmetic_is_unknown_not_an_error() -> None:
    huge = message(b"x", headers={"n": 10 ** 400})
    assert compile_selector("n * 1.5 > 0").evaluate(huge) is None
    assert compile_selector("n > 1.5").matches(huge)               # comparison alone is exact


def test_opaque_values_are_present_but_equal_nothing() -> None:
    assert compile_selector("nested IS NOT NULL AND NOT nested = 'a'").matches(MSG)


ERRORS: list[tuple[str, int, str]] = [
    ("", 0, "expected an expression"),
    ("   ", 3, "expected an expression"),
    ("color =", 7, "expected an identifier, a literal or '('"),
    ("color = 'red' size = 5", 14, "expected AND, OR or the end"),
    ("color = 'red", 8, "unterminated string"),
    ('"color = 1', 0, "unterminated quoted identifier"),
    ("a = 1 /* open", 6, "unterminated comment"),
    ("a # 1", 2, "unexpected character '#'"),
    ("\u00b9 = 1", 0, "unexpected character"),          # a superscript one is no digit
    ("a = \u0663", 4, "unexpected character"),           # nor is an Arabic-Indic three
    ("a = NULL", 4, "NULL cannot be compared"),
    ("NULL <> a", 5, "NULL cannot be compared"),
    ("'a' > 1", 0, "operand of '>' must be numeric"),
    ("a < 'b'", 4, "operand of '<' must be numeric"),
    ("a >= TRUE", 5, "operand of '>=' must be numeric"),
    ("a + 'x' = 1", 4, "operand of '+' must be numeric"),
    ("-'x' = 1", 1, "operand of '-' must be numeric"),
    ("(a = 1) + 1 = 2", 0, "operand of '+' must be numeric"),
    ("a BETWEEN 'x' AND 'y'", 10, "operand of 'BETWEEN' must be numeric"),
    ("a BETWEEN 1 OR 2", 12, "expected AND"),
    ("a IN (1, 2)", 6, "expected a string in the IN list"),
    ("a IN ('x',)", 10, "expected a string in the IN list"),
    ("a IN 'x'", 5, "expected '('"),
    ("a IN ('x'", 9, "expected ')'"),
    ("1 IN ('x')", 0, "IN applies to an identifier"),
    ("a LIKE b", 7, "expected a string pattern after LIKE"),
    ("a LIKE 'x' ESCAPE 'ab'", 18, "the ESCAPE string must be one character"),
    ("a LIKE 'x' ESCAPE ''", 18, "the ESCAPE string must be one character"),
    ("a LIKE 'x!' ESCAPE '!'", 7, "ends with its ESCAPE character"),
    ("1 + 2", 0, "expected a boolean expression"),
    ("'red'", 0, "expected a boolean expression"),
    ("a = 1 AND 5", 10, "expected a boolean expression"),
    ("NOT 'x'", 4, "expected a boolean expression"),
    ("a IS 1", 5, "expected NULL"),
    ("a IS NOT TRUE", 9, "expected NULL"),
    ("09 = a", 0, "invalid octal literal"),
    ("0x = a", 0, "hexadecimal literal without digits"),
    ("12abc = a", 0, "malformed number"),
    ("a = 1)", 5, "expected AND, OR or the end"),
    ("(a = 1", 6, "expected ')'"),
    ("AND = 1", 0, "expected an identifier"),
]


@pytest.mark.parametrize("text,position,reason", ERRORS)
def test_syntax_errors_name_the_position_and_what_was_expected(text: str, position: int, reason: str) -> None:
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    error = caught.value
    assert (error.position, reason in error.reason) == (position, True), error.reason
    assert error.reply_code == 406 and not error.hard
    assert f"position {position}" in error.reply_text


def test_length_is_bounded() -> None:
    longest = "a = 1" + " " * (MAX_LENGTH - 5)
    assert compile_selector(longest).matches(message(b"x", headers={"a": 1}))
    with pytest.raises(SelectorError, match="longer than"):
        compile_selector(longest + " ")


@pytest.mark.parametrize("nest", [
    lambda n: "(" * n + "a = 1" + ")" * n,
    lambda n: "NOT " * n + "a",
    lambda n: "- " * n + "a = 1",        # "--" would start a comment
    lambda n: "a" + " + a" * n + " = 1",
    lambda n: "a" + " = TRUE" * n,
])
def test_nesting_is_bounded(nest: Any) -> None:
    within = compile_selector(nest(MAX_DEPTH - 2))
    within.evaluate(message(b"x", headers={"a": 1}))
    with pytest.raises(SelectorError, match="nested more than"):
        compile_selector(nest(MAX_DEPTH + 1))


def test_long_flat_disjunctions_evaluate_without_recursion() -> None:
    text = " OR ".join(f"a={i}" for i in range(800))
    assert len(text) < MAX_LENGTH
    assert compile_selector(text).matches(message(b"x", headers={"a": 799}))


def test_like_patterns_do_not_backtrack() -> None:
    # a regex translation (.*a.*a.*...b) backtracks polynomially on this input
    selector = compile_selector("s LIKE '" + "%a" * 60 + "%b'")
    assert not selector.matches(message(b"x", headers={"s": "a" * 5000}))


def test_compiled_selectors_are_shared() -> None:
    assert compile_selector("size = 5") is compile_selector("size = 5")


def test_the_selector_argument() -> None:
    assert selector_of(None) is None
    assert selector_of({}) is None
    assert selector_of({SELECTOR_ARGUMENT: ""}) is None
    assert selector_of({SELECTOR_ARGUMENT: "  "}) is None
    found = selector_of({SELECTOR_ARGUMENT: "size = 5"})
    assert found is not None and found.text == "size = 5" and found.matches(MSG)
    assert selector_of({SELECTOR_ARGUMENT: b"size = 5"}) == found
    with pytest.raises(PreconditionFailed, match="is not a string"):
        selector_of({SELECTOR_ARGUMENT: 5})
    with pytest.raises(PreconditionFailed, match="not UTF-8"):
        selector_of({SELECTOR_ARGUMENT: b"\xff"})
    with pytest.raises(SelectorError):
        selector_of({SELECTOR_ARGUMENT: "size ="})


# -- hostile input: whatever the text, the answer is a selector or a SelectorError ------------------

_PIECES = ["a", "b", "color", "JMSPriority", "amqp.ttl", '"q-id"', "'x'", "'it''s'", "''", "1", "0x1F", "017",
           "2.5", ".5e3", "TRUE", "FALSE", "NULL", "NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN",
           "IS", "(", ")", ",", "=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "--", "/*", "*/",
           "\n", " "]

_FUZZ_MESSAGE = message(b"x", headers={"a": 0, "b": -3, "color": "red", "q-id": 2.5, "x": True,
                                       "big": 10 ** 400, "t": {"k": [1]}})


def _survives(text: str) -> None:
    try:
        selector = compile_selector(text)
    except SelectorError as error:
        assert 0 <= error.position <= len(text)
        return
    assert selector.evaluate(_FUZZ_MESSAGE) in (True, False, None)
    assert selector.evaluate(message(b"x")) in (True, False, None)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40).map(" ".join))
def test_token_soup_parses_or_fails_cleanly(text: str) -> None:
    _survives(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_any_text_parses_or_fails_cleanly(text: str) -> None:
    _survives(text)
