"""JMS message selectors, compiled once and evaluated against the protocol-neutral message.

A selector (JMS 2.0 section 3.8.1) filters what a consumer receives or what a
binding routes.  Clients send it as the ``x-filter-jms-selector`` argument of
AMQP 0-9-1 basic.consume / queue.bind (Broker-J's convention) or, over AMQP
1.0, as the ``apache.org:selector-filter:string`` filter of a link's source;
either way the engine passes the text to :func:`compile_selector` and asks the
:class:`Selector` whether a message :meth:`~Selector.matches`.

The grammar is read by :mod:`broker.messaging.selector_syntax`; this module
turns the tree into nested closures (one call per node, no tree walking per
message) and evaluates them with SQL's three-valued logic: a comparison
involving NULL (an absent property) is *unknown* (``None``); ``NOT unknown``
is unknown; ``unknown AND false`` is false, ``unknown OR true`` is true; a
message matches only when the selector is *true*.

Types, as JMS says: only like types compare (exact and approximate numbers
with each other, with Python's exact comparison of int and float); comparing
unlike types is false, not unknown; strings and booleans compare with ``=``
and ``<>`` only (ordering them is false).  Arithmetic follows Java's numeric
promotion: int op int stays exact (and does not overflow), anything with a
float is a float; integer ``/`` truncates toward zero and ``%`` takes the
dividend's sign; an integer division by zero is unknown, a float one gives
IEEE infinity or NaN.  Arithmetic on a non-number is unknown.

Identifiers (see docs/selectors.md for the table) name, in this order of
lookup: the JMS header fields JMS lets selectors use (``JMSDeliveryMode``,
``JMSPriority``, ``JMSMessageID``, ``JMSTimestamp``, ``JMSCorrelationID``,
``JMSType``), those Broker-J adds (``JMSReplyTo``, ``JMSRedelivered``), the
JMSX properties the broker knows (``JMSXDeliveryCount``, ``JMSXUserID``), the
``amqp.*`` names of the AMQP selector-filter convention (``amqp.priority``,
``amqp.correlation_id``, ...), and otherwise the message's application
headers / properties (the common view's ``headers``).  Header values are
seen as JMS types: int, float, str, bool; a decimal is a float, bytes are
UTF-8 text; anything else (a table, an array, a timestamp) is a value of no
JMS type, present (not NULL) but equal to nothing.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any, Callable, Final, Mapping

from broker.errors import PreconditionFailed
from broker.messaging.message import Message, MessageProperties
from broker.messaging.selector_syntax import (
    MAX_DEPTH, MAX_LENGTH, Arithmetic, Between, Compare, Identifier, In, IsNull, Like, Literal, Logic,
    Negate, Node, Not, SelectorError, parse)

__all__ = ["Selector", "SelectorError", "compile_selector", "selector_of", "SELECTOR_ARGUMENT",
           "MAX_LENGTH", "MAX_DEPTH"]

#: the 0-9-1 argument (basic.consume, queue.bind) carrying a selector, as Broker-J names it
SELECTOR_ARGUMENT: Final = "x-filter-jms-selector"

#: JMS's default priority, reported for a message that has none
DEFAULT_PRIORITY: Final = 4


class _Facts:
    """What one evaluation reads: the message, its place in a queue, and its view decoded once."""

    __slots__ = ("message", "redelivered", "delivery_count", "_view")

    def __init__(self, message: Message, redelivered: bool, delivery_count: int) -> None:
        self.message = message
        self.redelivered = redelivered
        self.delivery_count = delivery_count
        self._view: MessageProperties | None = None

    def view(self) -> MessageProperties:
        view = self._view
        if view is None:
            view = self._view = self.message.properties
        return view


Evaluator = Callable[[_Facts], Any]


class Selector:
    """A compiled selector: ``text`` as given, and the test built from it."""

    __slots__ = ("text", "_test")

    def __init__(self, text: str, test: Evaluator) -> None:
        self.text = text
        self._test = test

    def evaluate(self, message: Message, *, redelivered: bool = False,
                 delivery_count: int = 0) -> bool | None:
        """True, False, or None (unknown) for ``message``.

        ``redelivered`` and ``delivery_count`` describe the message's place in
        the queue a consumer takes it from (JMSRedelivered, JMSXDeliveryCount);
        a binding, routing a new message, leaves them at their defaults.
        """
        try:
            return self._test(_Facts(message, redelivered, delivery_count))  # type: ignore[no-any-return]
        except ArithmeticError:      # int-to-float overflow in mixed arithmetic: no JMS answer
            return None

    def matches(self, message: Message, *, redelivered: bool = False, delivery_count: int = 0) -> bool:
        """Whether ``message`` is selected: the selector is true for it (not false, not unknown)."""
        try:
            return self._test(_Facts(message, redelivered, delivery_count)) is True
        except ArithmeticError:
            return False

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Selector) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


@lru_cache(maxsize=512)
def compile_selector(text: str) -> Selector:
    """The :class:`Selector` for ``text``; raises :class:`SelectorError` naming the position.

    Compiled selectors are immutable and shared: consumers with the same
    selector text get the same object.
    """
    return Selector(text, _boolean(parse(text)))


def selector_of(arguments: Mapping[str, Any] | None) -> Selector | None:
    """The selector in a consume's or binding's ``x-filter-jms-selector`` argument, if any.

    Absent, empty or blank: no selector (JMS: an empty selector selects every
    message).  Anything but text is refused with 406 PRECONDITION_FAILED.
    """
    if not arguments:
        return None
    value = arguments.get(SELECTOR_ARGUMENT)
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise PreconditionFailed(f"invalid arg '{SELECTOR_ARGUMENT}': not UTF-8 text") from None
    if not isinstance(value, str):
        raise PreconditionFailed(f"invalid arg '{SELECTOR_ARGUMENT}': {value!r} is not a string")
    if not value.strip():
        return None
    return compile_selector(value)


# -- identifiers ----------------------------------------------------------------------------


def jms_value(value: Any) -> Any:
    """A header value as a selector sees it (see the module's docstring)."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Decimal):
        return float(value)
    for jms_type in (bool, int, float, str):      # subclasses of the JMS types
        if isinstance(value, jms_type):
            return jms_type(value)
    return value


def _header(name: str) -> Evaluator:
    def header(facts: _Facts) -> Any:
        headers = facts.view().headers
        if not headers:
            return None
        value = headers.get(name)
        kind = type(value)
        if kind is str or kind is int or kind is float or kind is bool or value is None:
            return value
        return jms_value(value)
    return header


def _priority(facts: _Facts) -> int:
    priority = facts.view().priority
    return DEFAULT_PRIORITY if priority is None else priority


def _timestamp_ms(facts: _Facts) -> int | None:
    """The timestamp (seconds in the common view) in milliseconds; JMS's 0 when there is none."""
    stamp: Any = facts.view().timestamp
    if stamp is None:
        return 0
    if isinstance(stamp, datetime):
        return int(stamp.timestamp() * 1000)
    if _is_number(stamp):
        return int(stamp * 1000)
    return None


def _ttl_ms(facts: _Facts) -> int | None:
    expiration: Any = facts.view().expiration
    return int(expiration) if isinstance(expiration, str) and expiration.isascii() \
        and expiration.isdigit() else None


def _field(name: str) -> Evaluator:
    def field(facts: _Facts) -> Any:
        return jms_value(getattr(facts.view(), name))
    return field


_HEADER_FIELDS: dict[str, Evaluator] = {
    # JMS 2.0 3.8.1.1: the header fields a selector may name
    "JMSDeliveryMode": lambda facts: "PERSISTENT" if facts.message.persistent else "NON_PERSISTENT",
    "JMSPriority": _priority,
    "JMSMessageID": _field("message_id"),
    "JMSTimestamp": _timestamp_ms,
    "JMSCorrelationID": _field("correlation_id"),
    "JMSType": _field("type"),
    # Broker-J's additions
    "JMSReplyTo": _field("reply_to"),
    "JMSRedelivered": lambda facts: facts.redelivered,
    # JMSX properties the broker itself knows (JMS 3.5.9)
    "JMSXDeliveryCount": lambda facts: facts.delivery_count + 1,
    "JMSXUserID": _field("user_id"),
    # the AMQP selector-filter convention (apache.org:selector-filter:string): amqp.<field>
    "amqp.message_id": _field("message_id"),
    "amqp.user_id": _field("user_id"),
    "amqp.reply_to": _field("reply_to"),
    "amqp.correlation_id": _field("correlation_id"),
    "amqp.content_type": _field("content_type"),
    "amqp.content_encoding": _field("content_encoding"),
    "amqp.priority": _priority,
    "amqp.durable": lambda facts: facts.message.persistent,
    "amqp.creation_time": _timestamp_ms,
    "amqp.ttl": _ttl_ms,
    "amqp.redelivered": lambda facts: facts.redelivered,
    "amqp.delivery_count": lambda facts: facts.delivery_count,
}


def _identifier(name: str) -> Evaluator:
    return _HEADER_FIELDS.get(name) or _header(name)


# -- compiling the tree ------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    kind = type(value)
    return kind is int or kind is float


_JMS_TYPES = (str, int, float, bool)


def _equal(left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return None
    kind = type(left)
    if kind is type(right):
        return kind in _JMS_TYPES and bool(left == right)
    return _is_number(left) and _is_number(right) and bool(left == right)


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: bool(a < b), "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b), ">=": lambda a, b: bool(a >= b)}


def _compare(node: Compare) -> Evaluator:
    left, right = _value(node.left), _value(node.right)
    operator = node.operator
    if operator in ("=", "<>"):
        negate = operator == "<>"
        if isinstance(node.right, Literal):
            return _equal_constant(left, node.right.value, negate)

        def equal(facts: _Facts) -> bool | None:
            answer = _equal(left(facts), right(facts))
            return answer if answer is None or not negate else not answer
        return equal
    order = _ORDER[operator]

    def ordered(facts: _Facts) -> bool | None:
        a = left(facts)
        if a is None:
            return None
        b = right(facts)
        if b is None:
            return None
        if _is_number(a) and _is_number(b):
            return order(a, b)
        return False
    return ordered


def _equal_constant(left: Evaluator, constant: Any, negate: bool) -> Evaluator:
    """``identifier = 'literal'``, the commonest selector, without the general type dispatch."""
    kind = type(constant)
    numeric = _is_number(constant)

    def equal(facts: _Facts) -> bool | None:
        value = left(facts)
        if value is None:
            return None
        value_kind = type(value)
        same = (value == constant) if (value_kind is kind or (numeric and _is_number(value))) else False
        return (not same) if negate else bool(same)
    return equal


def _int_divide(a: int, b: int) -> int | None:
    if b == 0:
        return None
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


def _float_divide(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _divide(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return _int_divide(a, b)
    return _float_divide(float(a), float(b))


def _modulo(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        if b == 0:
            return None
        remainder = abs(a) % abs(b)
        return remainder if a >= 0 else -remainder
    a, b = float(a), float(b)
    return math.nan if b == 0 else math.fmod(a, b)


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": _divide, "%": _modulo}


def _arithmetic(node: Arithmetic) -> Evaluator:
    left, right = _value(node.left), _value(node.right)
    operate = _ARITHMETIC[node.operator]

    def arithmetic(facts: _Facts) -> Any:
        a = left(facts)
        if not _is_number(a):
            return None
        b = right(facts)
        if not _is_number(b):
            return None
        return operate(a, b)
    return arithmetic


def _negate(node: Negate) -> Evaluator:
    operand = _value(node.operand)

    def negate(facts: _Facts) -> Any:
        value = operand(facts)
        return -value if _is_number(value) else None
    return negate


def _logic(node: Logic) -> Evaluator:
    operands = tuple(_boolean(operand) for operand in node.operands)
    if node.operator == "AND":
        def conjunction(facts: _Facts) -> bool | None:
            unknown = False
            for operand in operands:
                answer = operand(facts)
                if answer is False:
                    return False
                if answer is None:
                    unknown = True
            return None if unknown else True
        return conjunction

    def disjunction(facts: _Facts) -> bool | None:
        unknown = False
        for operand in operands:
            answer = operand(facts)
            if answer is True:
                return True
            if answer is None:
                unknown = True
        return None if unknown else False
    return disjunction


def _not(node: Not) -> Evaluator:
    operand = _boolean(node.operand)

    def negation(facts: _Facts) -> bool | None:
        answer = operand(facts)
        return None if answer is None else not answer
    return negation


def _between(node: Between) -> Evaluator:
    operand, low, high = _value(node.operand), _value(node.low), _value(node.high)

    def at_most(a: Any, b: Any) -> bool | None:
        if a is None or b is None:
            return None
        return bool(a <= b) if _is_number(a) and _is_number(b) else False

    def between(facts: _Facts) -> bool | None:
        value = operand(facts)
        above, below = at_most(low(facts), value), at_most(value, high(facts))
        if above is False or below is False:
            return False
        return None if above is None or below is None else True
    return between


def _in(node: In) -> Evaluator:
    operand, values = _value(node.operand), node.values

    def member(facts: _Facts) -> bool | None:
        value = operand(facts)
        if value is None:
            return None
        return type(value) is str and value in values
    return member


def _like(node: Like) -> Evaluator:
    operand = _value(node.operand)
    matcher = like_matcher(node.pattern, node.escape)

    def like(facts: _Facts) -> bool | None:
        value = operand(facts)
        if value is None:
            return None
        return type(value) is str and matcher(value)
    return like


def _is_null(node: IsNull) -> Evaluator:
    operand = _value(node.operand)
    return lambda facts: operand(facts) is None


def like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """A test of a whole string against a LIKE pattern (``%`` any run, ``_`` one character).

    No backtracking regular expression: the pattern is cut at its ``%`` into
    fixed-length segments; the first must match at the start, the last at the
    end, and each middle one is found leftmost after the previous one (which
    is always a right choice when the segments between are unbounded).  So a
    hostile pattern costs at most segments x length steps.
    """
    segments: list[list[str]] = [[]]
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if escape is not None and char == escape:
            segments[-1].append(re.escape(pattern[index + 1]))
            index += 2
            continue
        if char == "%":
            segments.append([])
        elif char == "_":
            segments[-1].append(".")
        else:
            segments[-1].append(re.escape(char))
        index += 1
    compiled = [re.compile("".join(parts), re.DOTALL) for parts in segments]
    widths = [len(parts) for parts in segments]
    if len(compiled) == 1:
        only = compiled[0]
        return lambda value: only.fullmatch(value) is not None
    head, tail, middle = compiled[0], compiled[-1], list(zip(compiled[1:-1], widths[1:-1]))
    head_width, tail_width = widths[0], widths[-1]

    def matches(value: str) -> bool:
        end = len(value) - tail_width
        if end < head_width or head.match(value) is None or tail.fullmatch(value, end) is None:
            return False
        position = head_width
        for segment, width in middle:
            if width:
                found = segment.search(value, position, end)
                if found is None:
                    return False
                position = found.end()
        return True
    return matches


def _constant(value: Any) -> Evaluator:
    return lambda facts: value


_COMPILERS: dict[type, Callable[[Any], Evaluator]] = {
    Compare: _compare, Arithmetic: _arithmetic, Negate: _negate, Logic: _logic, Not: _not,
    Between: _between, In: _in, Like: _like, IsNull: _is_null}


def _value(node: Node) -> Evaluator:
    """The evaluator of ``node`` as a value."""
    if isinstance(node, Literal):
        return _constant(node.value)
    if isinstance(node, Identifier):
        return _identifier(node.name)
    return _COMPILERS[type(node)](node)


def _boolean(node: Node) -> Evaluator:
    """The evaluator of ``node`` where a boolean is wanted: an identifier must hold one."""
    if isinstance(node, Identifier):
        value = _identifier(node.name)

        def truth(facts: _Facts) -> bool | None:
            held = value(facts)
            if held is None:
                return None
            return held if type(held) is bool else False
        return truth
    return _value(node)
