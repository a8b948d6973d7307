"""The JMS message selector grammar: text to a syntax tree, or a :class:`SelectorError`.

A selector is the conditional expression of SQL92 that JMS 2.0 (section
3.8.1, "Message selectors") defines over a message's header fields and
properties.  This module only reads it; :mod:`broker.messaging.selectors`
compiles the tree it returns into an evaluator.

What is accepted is what Qpid Broker-J (and ActiveMQ, whose grammar it
inherited) accepts:

* keywords in any case: ``NOT AND OR BETWEEN LIKE ESCAPE IN IS TRUE FALSE NULL``;
* identifiers: a letter, ``_`` or ``$``, then letters, digits, ``_``, ``$``
  or ``.`` (so ``amqp.priority`` is one name); case-sensitive; or quoted in
  double quotes (``"my-header"``, ``""`` for a quote), Broker-J's extension;
* literals: strings in single quotes (``''`` for a quote); exact numerics in
  decimal (an ``L`` suffix is allowed), hexadecimal ``0x1F`` and octal
  ``017``; approximate numerics ``1.5``, ``1.``, ``.5``, ``5E3``, ``1.5e-3``;
  ``TRUE``, ``FALSE``, ``NULL``;
* comments: ``-- to the end of the line`` and ``/* ... */``.

Precedence, loosest first: ``OR``; ``AND``; ``NOT``; ``=``, ``<>`` and
``IS [NOT] NULL``; ``<``, ``<=``, ``>``, ``>=``, ``[NOT] LIKE``,
``[NOT] BETWEEN``, ``[NOT] IN``; ``+``, ``-``; ``*``, ``/``, ``%``; unary
``+`` and ``-``.  (JMS puts all comparisons on one level; Broker-J's grammar
puts equality below ordering, which only matters for chains like
``a < b = TRUE``.)

Checks made while parsing, as Broker-J makes them: the whole selector and
the operands of ``AND``/``OR``/``NOT`` must be boolean (a comparison, or an
identifier, which then must hold a boolean); ``NULL`` cannot be an operand of
``=``/``<>`` (``IS NULL`` is the way); strings, booleans and ``NULL`` cannot
be ordered or used in arithmetic; ``IN`` applies to an identifier and lists
string literals; ``LIKE``'s pattern and ``ESCAPE`` are string literals, the
escape exactly one character.

Hostile input is bounded: at most :data:`MAX_LENGTH` characters, and at most
:data:`MAX_DEPTH` levels of nesting in the tree (parentheses, ``NOT``, unary
signs and chains of arithmetic all count), so neither parsing nor evaluation
can exhaust the stack; an exact numeric literal has at most :data:`MAX_DIGITS`
digits (Python converts and shows integers of a few thousand digits at most).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Union

from broker.errors import PreconditionFailed

__all__ = ["SelectorError", "parse", "MAX_LENGTH", "MAX_DEPTH", "MAX_DIGITS", "Node", "Literal", "Identifier",
           "Negate", "Arithmetic", "Compare", "Logic", "Not", "Between", "In", "Like", "IsNull"]

MAX_LENGTH: Final = 8192
MAX_DEPTH: Final = 64
MAX_DIGITS: Final = 1000

KEYWORDS: Final = frozenset({"NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS",
                             "TRUE", "FALSE", "NULL"})


class SelectorError(PreconditionFailed):
    """A selector that cannot be parsed; ``position`` is the 0-based offset of the fault.

    A 0-9-1 client is answered with channel.close 406 PRECONDITION_FAILED
    (RabbitMQ's answer to any invalid argument; Broker-J uses its own 409).
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"invalid message selector at position {position}: {message}")
        self.position = position
        self.reason = message


# -- the syntax tree ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Literal:
    value: Any               # str, int, float, bool or None (NULL)


@dataclass(frozen=True, slots=True)
class Identifier:
    name: str


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node


@dataclass(frozen=True, slots=True)
class Arithmetic:
    operator: str            # + - * / %
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Compare:
    operator: str            # = <> < <= > >=
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Logic:
    operator: str            # AND, OR
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class Between:
    operand: Node
    low: Node
    high: Node


@dataclass(frozen=True, slots=True)
class In:
    operand: Identifier
    values: frozenset[str]


@dataclass(frozen=True, slots=True)
class Like:
    operand: Node
    pattern: str
    escape: str | None


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node


Node = Union[Literal, Identifier, Negate, Arithmetic, Compare, Logic, Not, Between, In, Like, IsNull]

_BOOLEAN_NODES = (Compare, Logic, Not, Between, In, Like, IsNull)


def _is_boolean(node: Node) -> bool:
    """May stand where a boolean is wanted: a predicate, TRUE/FALSE, or an identifier."""
    if isinstance(node, Literal):
        return type(node.value) is bool
    return isinstance(node, _BOOLEAN_NODES) or isinstance(node, Identifier)


def _is_orderable(node: Node) -> bool:
    """May be an operand of <, >, arithmetic: not a string, boolean or NULL literal, not a predicate."""
    if isinstance(node, Literal):
        value = node.value
        return type(value) is int or type(value) is float
    return not isinstance(node, _BOOLEAN_NODES)


# -- tokens ---------------------------------------------------------------------------

# kinds
_ID, _STRING, _NUMBER, _KEYWORD, _SYMBOL, _END = "identifier", "string", "number", "keyword", "symbol", "end"

_SYMBOLS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "%", "(", ")", ",")
_SPACE = " \t\n\r\f"
_DIGITS = frozenset("0123456789")   # ASCII only: str.isdigit() takes '¹' and '٣' too
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    value: Any
    position: int

    def describe(self) -> str:
        if self.kind == _END:
            return "the end of the selector"
        if self.kind == _STRING:
            return f"string '{self.value}'"
        return f"{self.kind} {self.value!r}" if self.kind != _KEYWORD else self.value


def _identifier_start(char: str) -> bool:
    return char.isalpha() or char in "_$"


def _identifier_part(char: str) -> bool:
    return char.isalnum() or char in "_$."


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    index, length = 0, len(text)
    while True:
        while index < length:
            char = text[index]
            if char in _SPACE:
                index += 1
            elif text.startswith("--", index):
                end = text.find("\n", index)
                index = length if end < 0 else end + 1
            elif text.startswith("/*", index):
                end = text.find("*/", index + 2)
                if end < 0:
                    raise SelectorError("unterminated comment", index)
                index = end + 2
            else:
                break
        if index >= length:
            out.append(_Token(_END, None, length))
            return out
        char = text[index]
        start = index
        if char == "'" or char == '"':
            value, index = _quoted(text, index, char)
            out.append(_Token(_STRING if char == "'" else _ID, value, start))
        elif char in _DIGITS or (char == "." and index + 1 < length and text[index + 1] in _DIGITS):
            number, index = _number(text, index)
            out.append(_Token(_NUMBER, number, start))
        elif _identifier_start(char):
            while index < length and _identifier_part(text[index]):
                index += 1
            word = text[start:index]
            upper = word.upper()
            if upper in KEYWORDS:
                out.append(_Token(_KEYWORD, upper, start))
            else:
                out.append(_Token(_ID, word, start))
        else:
            for symbol in _SYMBOLS:
                if text.startswith(symbol, index):
                    out.append(_Token(_SYMBOL, symbol, start))
                    index += len(symbol)
                    break
            else:
                raise SelectorError(f"unexpected character {char!r}", index)


def _quoted(text: str, index: int, quote: str) -> tuple[str, int]:
    """A quoted string or identifier starting at ``index``; a doubled quote is one quote."""
    parts: list[str] = []
    start = index
    index += 1
    while True:
        end = text.find(quote, index)
        if end < 0:
            what = "string" if quote == "'" else "quoted identifier"
            raise SelectorError(f"unterminated {what}", start)
        parts.append(text[index:end])
        if text.startswith(quote, end + 1):
            parts.append(quote)
            index = end + 2
        else:
            return "".join(parts), end + 1


def _number(text: str, index: int) -> tuple[int | float, int]:
    """A numeric literal starting at ``index`` (Broker-J's forms; see the module's docstring)."""
    start, length = index, len(text)

    def digits(at: int) -> int:
        while at < length and text[at] in _DIGITS:
            at += 1
        return at

    if text.startswith(("0x", "0X"), index):
        end = index + 2
        while end < length and text[end] in _HEX:
            end += 1
        if end == index + 2:
            raise SelectorError("hexadecimal literal without digits", start)
        return _exact(text[index + 2:end], 16, start), _after_number(text, end, start)
    end = digits(index)
    is_float = False
    if end < length and text[end] == ".":
        is_float = True
        end = digits(end + 1)
    if end < length and text[end] in "eE":
        exponent = end + 1
        if exponent < length and text[exponent] in "+-":
            exponent += 1
        if exponent < length and text[exponent] in _DIGITS:
            is_float = True
            end = digits(exponent)
    literal = text[start:end]
    if is_float:
        return float(literal), _after_number(text, end, start)
    if end < length and text[end] in "lL":
        end += 1
    if literal != "0" and literal.startswith("0"):
        if not set(literal[1:]) <= _OCTAL:
            raise SelectorError(f"invalid octal literal {literal!r}", start)
        return _exact(literal[1:], 8, start), _after_number(text, end, start)
    return _exact(literal, 10, start), _after_number(text, end, start)


def _exact(digits: str, base: int, start: int) -> int:
    if len(digits) > MAX_DIGITS:
        raise SelectorError(f"exact numeric literal of {len(digits)} digits is longer than {MAX_DIGITS}", start)
    return int(digits, base)


def _after_number(text: str, end: int, start: int) -> int:
    if end < len(text) and (_identifier_part(text[end]) or text[end] in "'\""):
        raise SelectorError(f"malformed number {text[start:end + 1]!r}", start)
    return end


# -- the parser -------------------------------------------------------------------------


class _Parser:
    """Recursive descent over the token list; one method per precedence level."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.index = 0
        self.depth = 0

    # helpers
    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != _END:
            self.index += 1
        return token

    def at(self, kind: str, value: Any = None) -> bool:
        token = self.token
        return token.kind == kind and (value is None or token.value == value)

    def at_keyword(self, *words: str) -> bool:
        token = self.token
        return token.kind == _KEYWORD and token.value in words

    def at_symbol(self, *symbols: str) -> bool:
        token = self.token
        return token.kind == _SYMBOL and token.value in symbols

    def expect_keyword(self, word: str) -> None:
        if not self.at_keyword(word):
            self.fail(word)
        self.advance()

    def expect_symbol(self, symbol: str) -> None:
        if not self.at_symbol(symbol):
            self.fail(f"'{symbol}'")
        self.advance()

    def fail(self, expected: str, token: _Token | None = None) -> None:
        token = token or self.token
        raise SelectorError(f"expected {expected}, found {token.describe()}", token.position)

    def deeper(self, position: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SelectorError(f"nested more than {MAX_DEPTH} levels deep", position)

    def boolean(self, node: Node, position: int) -> Node:
        if not _is_boolean(node):
            raise SelectorError("expected a boolean expression (a comparison or an identifier)", position)
        return node

    def orderable(self, node: Node, position: int, operator: str) -> Node:
        if not _is_orderable(node):
            raise SelectorError(f"operand of '{operator}' must be numeric", position)
        return node

    # grammar
    def selector(self) -> Node:
        if self.at(_END):
            self.fail("an expression")
        position = self.token.position
        node = self.boolean(self.or_(), position)
        if not self.at(_END):
            self.fail("AND, OR or the end of the selector")
        return node

    def or_(self) -> Node:
        return self._logic("OR", self.and_)

    def and_(self) -> Node:
        return self._logic("AND", self.not_)

    def _logic(self, word: str, operand: Any) -> Node:
        position = self.token.position
        first = operand()
        if not self.at_keyword(word):
            return first  # type: ignore[no-any-return]
        operands = [self.boolean(first, position)]
        while self.at_keyword(word):
            self.advance()
            position = self.token.position
            operands.append(self.boolean(operand(), position))
        return Logic(word, tuple(operands))

    def not_(self) -> Node:
        if self.at_keyword("NOT"):
            token = self.advance()
            self.deeper(token.position)
            position = self.token.position
            node = Not(self.boolean(self.not_(), position))
            self.depth -= 1
            return node
        return self.equality()

    def equality(self) -> Node:
        left = self.comparison()
        depth = self.depth
        while True:
            token = self.token
            if self.at_symbol("=", "<>"):
                self.advance()
                if isinstance(left, Literal) and left.value is None:
                    raise SelectorError("NULL cannot be compared: use IS [NOT] NULL", token.position)
                position = self.token.position
                right = self.comparison()
                if isinstance(right, Literal) and right.value is None:
                    raise SelectorError("NULL cannot be compared: use IS [NOT] NULL", position)
                left = Compare(token.value, left, right)
            elif self.at_keyword("IS"):
                self.advance()
                negated = self.at_keyword("NOT")
                if negated:
                    self.advance()
                self.expect_keyword("NULL")
                left = Not(IsNull(left)) if negated else IsNull(left)
            else:
                self.depth = depth
                return left
            self.deeper(token.position)   # a left-deep chain is as deep as it is long

    def comparison(self) -> Node:
        position = self.token.position
        left = self.additive()
        depth = self.depth
        while True:
            token = self.token
            if self.at_symbol("<", "<=", ">", ">="):
                self.advance()
                self.orderable(left, position, token.value)
                right_position = self.token.position
                right = self.orderable(self.additive(), right_position, token.value)
                left = Compare(token.value, left, right)
                self.deeper(token.position)
                continue
            negated = False
            if self.at_keyword("NOT") and self.tokens[self.index + 1].kind == _KEYWORD \
                    and self.tokens[self.index + 1].value in ("LIKE", "BETWEEN", "IN"):
                self.advance()
                negated = True
            if self.at_keyword("LIKE"):
                self.advance()
                node: Node = self.like(left)
            elif self.at_keyword("BETWEEN"):
                self.advance()
                node = self.between(left, position)
            elif self.at_keyword("IN"):
                self.advance()
                node = self.in_(left, position)
            else:
                self.depth = depth
                return left
            left = Not(node) if negated else node
            self.deeper(token.position)

    def like(self, left: Node) -> Node:
        pattern_position = self.token.position
        pattern = self.string_literal("a string pattern after LIKE")
        escape = None
        if self.at_keyword("ESCAPE"):
            self.advance()
            token = self.token
            escape = self.string_literal("a string after ESCAPE")
            if len(escape) != 1:
                raise SelectorError(f"the ESCAPE string must be one character, not '{escape}'",
                                    token.position)
            _check_escapes(pattern, escape, pattern_position)
        return Like(left, pattern, escape)

    def between(self, left: Node, position: int) -> Node:
        self.orderable(left, position, "BETWEEN")
        low_position = self.token.position
        low = self.orderable(self.additive(), low_position, "BETWEEN")
        self.expect_keyword("AND")
        high_position = self.token.position
        high = self.orderable(self.additive(), high_position, "BETWEEN")
        return Between(left, low, high)

    def in_(self, left: Node, position: int) -> Node:
        if not isinstance(left, Identifier):
            raise SelectorError("IN applies to an identifier", position)
        self.expect_symbol("(")
        values = [self.string_literal("a string in the IN list")]
        while self.at_symbol(","):
            self.advance()
            values.append(self.string_literal("a string in the IN list"))
        self.expect_symbol(")")
        return In(left, frozenset(values))

    def string_literal(self, expected: str) -> str:
        if not self.at(_STRING):
            self.fail(expected)
        return self.advance().value  # type: ignore[no-any-return]

    def additive(self) -> Node:
        return self._arithmetic(("+", "-"), self.multiplicative)

    def multiplicative(self) -> Node:
        return self._arithmetic(("*", "/", "%"), self.unary)

    def _arithmetic(self, symbols: tuple[str, ...], operand: Any) -> Node:
        position = self.token.position
        left = operand()
        depth = self.depth
        while self.at_symbol(*symbols):
            token = self.advance()
            self.orderable(left, position, token.value)
            right_position = self.token.position
            right = self.orderable(operand(), right_position, token.value)
            left = Arithmetic(token.value, left, right)
            self.deeper(token.position)   # a left-deep chain is as deep as it is long
        self.depth = depth
        return left  # type: ignore[no-any-return]

    def unary(self) -> Node:
        if self.at_symbol("+", "-"):
            token = self.advance()
            self.deeper(token.position)
            position = self.token.position
            operand = self.orderable(self.unary(), position, token.value)
            self.depth -= 1
            if token.value == "+":
                return operand
            if isinstance(operand, Literal):
                return Literal(-operand.value)
            return Negate(operand)
        return self.primary()

    def primary(self) -> Node:
        token = self.token
        if token.kind == _SYMBOL and token.value == "(":
            self.advance()
            self.deeper(token.position)
            node = self.or_()
            self.expect_symbol(")")
            self.depth -= 1
            return node
        if token.kind in (_STRING, _NUMBER):
            self.advance()
            return Literal(token.value)
        if token.kind == _ID:
            self.advance()
            return Identifier(token.value)
        if token.kind == _KEYWORD and token.value in ("TRUE", "FALSE", "NULL"):
            self.advance()
            return Literal({"TRUE": True, "FALSE": False, "NULL": None}[token.value])
        self.fail("an identifier, a literal or '('")
        raise AssertionError("unreachable")


def _check_escapes(pattern: str, escape: str, position: int) -> None:
    index = 0
    while index < len(pattern):
        if pattern[index] == escape:
            if index + 1 >= len(pattern):
                raise SelectorError("the LIKE pattern ends with its ESCAPE character", position)
            index += 2
        else:
            index += 1


def parse(text: str) -> Node:
    """The syntax tree of selector ``text``; raises :class:`SelectorError`."""
    if len(text) > MAX_LENGTH:
        raise SelectorError(f"longer than {MAX_LENGTH} characters", MAX_LENGTH)
    return _Parser(text).selector()
