"""Broker-J's ACL rule file: reading it into rules, and writing rules back as text.

The syntax (Broker-J's ``AclFileParser``)::

    # a comment, to the end of the line (also after a rule)
    [number] ACL {ALLOW|ALLOW-LOG|DENY|DENY-LOG} {user|group|ALL} {action|ALL} \\
        [{object|ALL} [property=value ...]]
    CONFIG defaultdeny=true            # or defaultallow / defaultdefer

* keywords, actions, object types and property names are case-insensitive;
  user and group names are not;
* a value is a word or a quoted string (``"..."`` or ``'...'``), or a list
  ``["a", "b"]``; a property given twice means either value;
* a ``\\`` at the end of a line continues the statement on the next line;
  anywhere else it is an error;
* a leading number orders the rule (rules are considered in number order; a
  rule without one comes 10 after the one before); a number used twice is
  an error; a rule that repeats an earlier one is dropped;
* ``GROUP`` lines are refused, as Broker-J refuses them: groups come from a
  group provider (:mod:`broker.security.group_file`).

Every error is an :class:`AclSyntaxError` naming the line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from broker.errors import ConfigurationError
from broker.security.acl_rules import ALL, ObjectType, Operation, Outcome, Property, Result, \
    Rule, RuleSet

log = logging.getLogger(__name__)

E = TypeVar("E", bound=Enum)

#: lines end as a text editor ends them (not at every character Unicode calls a line break)
LINE_BREAK = re.compile(r"\r\n|\r|\n")

#: the gap Broker-J leaves between unnumbered rules
NUMBER_INCREMENT = 10
#: a rule number is a Java int in Broker-J: at most 9 digits always fit
MAX_NUMBER_DIGITS = 9
_RULE_NUMBER = re.compile(r"[0-9]{1,%d}" % MAX_NUMBER_DIGITS)

_CONFIG_DEFAULTS = {"defaultallow": Result.ALLOWED, "defaultdefer": Result.DEFERRED,
                    "defaultdeny": Result.DENIED}
_SINGLE = set('=[],')
_SPECIAL = _SINGLE | set('#"\'\\')


class LineError(ConfigurationError):
    """A line of a rule or group file that cannot be read: the message names the file and line."""

    def __init__(self, message: str, line: int, source: str = "") -> None:
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{message} at line {line}")
        self.line = line


class AclSyntaxError(LineError):
    """A line of an ACL file (or one rule given as text) that cannot be read."""


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    line: int
    quoted: bool = False


def _statements(text: str, source: str) -> Iterable[list[_Token]]:
    """The file's statements as token lists (comments dropped, continuations joined)."""
    tokens: list[_Token] = []
    for number, raw in enumerate(LINE_BREAK.split(text), start=1):
        continued = False
        i, n = 0, len(raw)
        while i < n:
            ch = raw[i]
            if ch.isspace():
                i += 1
            elif ch == "#":
                break
            elif ch == "\\":
                rest = raw[i + 1:].strip()
                if rest and not rest.startswith("#"):
                    raise AclSyntaxError("Premature continuation character", number, source)
                continued = True
                break
            elif ch in "\"'":
                end = raw.find(ch, i + 1)
                if end < 0:
                    raise AclSyntaxError(f"Unterminated quoted value (missing {ch})", number,
                                         source)
                tokens.append(_Token(raw[i + 1:end], number, quoted=True))
                i = end + 1
            elif ch in _SINGLE:
                tokens.append(_Token(ch, number))
                i += 1
            else:
                start = i
                while i < n and not raw[i].isspace() and raw[i] not in _SPECIAL:
                    i += 1
                tokens.append(_Token(raw[start:i], number))
        if continued:
            if not tokens:
                raise AclSyntaxError("Continuation of an empty line", number, source)
            continue
        if tokens:
            yield tokens
            tokens = []
    if tokens:
        yield tokens


def _keyword(token: _Token) -> str:
    return "" if token.quoted else token.text.upper()


@dataclass
class ParsedAcl:
    """What an ACL text says: the rules in order and the default result."""

    rules: list[Rule]
    default: Result = Result.DENIED
    #: whether a CONFIG line set the default
    default_given: bool = False

    def rule_set(self) -> RuleSet:
        return RuleSet(self.rules, self.default)


def parse(text: str, source: str = "") -> ParsedAcl:
    """Read an ACL file's text (see the module docstring); AclSyntaxError on a bad line."""
    numbered: dict[int, Rule] = {}
    seen: set[tuple[object, ...]] = set()
    default, default_given = Result.DENIED, False
    last = -NUMBER_INCREMENT
    for tokens in _statements(text, source):
        first = tokens[0]
        line = first.line
        if len(tokens) < 2:
            raise AclSyntaxError(f"Not enough tokens ('{first.text}' alone)", line, source)
        number: int | None = None
        if not first.quoted and first.text.isdigit():
            if not _RULE_NUMBER.fullmatch(first.text):
                raise AclSyntaxError(f"Invalid rule number '{first.text[:20]}' (digits 0-9, at"
                                     f" most {MAX_NUMBER_DIGITS} of them)", line, source)
            number = int(first.text)
            if _keyword(tokens[1]) != "ACL":
                raise AclSyntaxError(f"Number not allowed before '{tokens[1].text}'", line,
                                     source)
            if number in numbered:
                raise AclSyntaxError(f"Invalid rule number {number} (used before)", line, source)
            tokens = tokens[1:]
        word = _keyword(tokens[0])
        if word == "ACL":
            rule = _rule(tokens[1:], line, source)
            key = rule.key()
            if key in seen:
                log.warning("%sduplicate ACL rule at line %d ignored", f"{source}: " if source
                            else "", line)
                continue
            seen.add(key)
            position = number if number is not None else last + NUMBER_INCREMENT
            numbered[position] = rule
            last = max(last, position)
        elif word == "CONFIG":
            default = _config(tokens[1:], line, source, default)
            default_given = True
        elif word == "GROUP":
            raise AclSyntaxError("GROUP keyword not supported: groups are defined by a group"
                                 " provider (GroupFile), not in the ACL file", line, source)
        else:
            raise AclSyntaxError(f"Unrecognised initial token '{tokens[0].text}'", line, source)
    return ParsedAcl([numbered[k] for k in sorted(numbered)], default, default_given)


def parse_rule(text: str) -> Rule:
    """One rule as text, with or without the leading ``ACL`` (for management's addRule)."""
    statements = list(_statements(text, "rule"))
    if len(statements) != 1:
        raise AclSyntaxError("Expected exactly one rule", 1, "rule")
    tokens = statements[0]
    if _keyword(tokens[0]) == "ACL":
        tokens = tokens[1:]
    return _rule(tokens, 1, "rule")


def _rule(args: list[_Token], line: int, source: str) -> Rule:
    if len(args) < 3:
        raise AclSyntaxError("Not enough data for an acl (permission, identity and action are"
                             " required)", line, source)
    outcome = _enum(Outcome, args[0], "permission", line, source)
    identity = args[1].text
    if not identity.strip():
        raise AclSyntaxError("Empty identity (a user, a group or ALL)", line, source)
    if identity.upper() == ALL:
        identity = ALL
    operation = _enum(Operation, args[2], "action", line, source)
    object_type = ObjectType.ALL
    predicates: dict[Property, tuple[str, ...]] = {}
    if len(args) > 3:
        object_type = _enum(ObjectType, args[3], "object type", line, source)
        for name, values, at in _pairs(args[4:], line, source):
            try:
                prop = Property.parse(name)
            except ValueError:
                known = ", ".join(p.value for p in Property)
                raise AclSyntaxError(f"Not a valid property: '{name}' (known: {known})", at,
                                     source) from None
            predicates[prop] = predicates.get(prop, ()) + values
    try:
        return Rule(outcome, identity, operation, object_type, predicates)
    except ValueError as exc:
        raise AclSyntaxError(str(exc), line, source) from None


def _config(args: list[_Token], line: int, source: str, default: Result) -> Result:
    if not args:
        raise AclSyntaxError("Not enough data for config", line, source)
    for name, values, at in _pairs(args, line, source):
        key = name.lower()
        if key not in _CONFIG_DEFAULTS:
            raise AclSyntaxError(f"Unknown config property '{name}' (known:"
                                 f" {', '.join(_CONFIG_DEFAULTS)})", at, source)
        if len(values) != 1 or values[0].lower() not in ("true", "false"):
            raise AclSyntaxError(f"Config property '{name}' takes true or false", at, source)
        if values[0].lower() == "true":
            default = _CONFIG_DEFAULTS[key]
    return default


def _pairs(tokens: list[_Token], line: int, source: str
           ) -> Iterable[tuple[str, tuple[str, ...], int]]:
    """``key=value`` and ``key=[v1, v2]`` pairs: (key, values, line of the key)."""
    i, n = 0, len(tokens)
    while i < n:
        key = tokens[i]
        if key.text in _SINGLE and not key.quoted:
            raise AclSyntaxError(f"Expected a property name, found '{key.text}'", key.line, source)
        if i + 1 >= n:
            raise AclSyntaxError(f"Incomplete property (key only): '{key.text}'", key.line, source)
        if tokens[i + 1].text != "=" or tokens[i + 1].quoted:
            raise AclSyntaxError(f"Incomplete property (no equals) after '{key.text}'", key.line,
                                 source)
        if i + 2 >= n:
            raise AclSyntaxError(f"Incomplete property (no value): '{key.text}'", key.line, source)
        value = tokens[i + 2]
        if value.text == "[" and not value.quoted:
            values: list[str] = []
            j = i + 3
            while j < n and not (tokens[j].text == "]" and not tokens[j].quoted):
                if not (tokens[j].text == "," and not tokens[j].quoted):
                    values.append(tokens[j].text)
                j += 1
            if j >= n:
                raise AclSyntaxError(f"Incomplete property (no close bracket): '{key.text}'",
                                     key.line, source)
            if not values:
                raise AclSyntaxError(f"Property '{key.text}' has an empty list", key.line, source)
            yield key.text, tuple(values), key.line
            i = j + 1
        elif value.text in _SINGLE and not value.quoted:
            raise AclSyntaxError(f"Incomplete property (no value): '{key.text}'", key.line, source)
        else:
            yield key.text, (value.text,), key.line
            i += 3


def _enum(kind: type[E], token: _Token, what: str, line: int, source: str) -> E:
    wanted = token.text.upper().replace("_", "-") if kind is Outcome else token.text.upper()
    for member in kind:
        if member.value == wanted:
            return member
    known = ", ".join(m.value for m in kind)
    raise AclSyntaxError(f"Not a valid {what}: '{token.text}' (known: {known})", line, source)


# -- writing ---------------------------------------------------------------------------------

def format_rule(rule: Rule) -> str:
    """``ACL ALLOW-LOG alice CREATE QUEUE name="q*"``: a rule as one line of the file."""
    parts = ["ACL", rule.outcome.value, _word(rule.identity), rule.operation.value,
             rule.object_type.value]
    for prop, values in rule.predicates.items():
        if len(values) == 1:
            parts.append(f"{prop.value}={_quoted(values[0])}")
        else:
            parts.append(f"{prop.value}=[{', '.join(_quoted(v) for v in values)}]")
    return " ".join(parts)


def format_acl(rules: Iterable[Rule], default: Result | None = None) -> str:
    """The text of a file holding ``rules`` (and a CONFIG line unless ``default`` is None)."""
    lines = []
    if default is not None:
        key = next(name for name, result in _CONFIG_DEFAULTS.items() if result is default)
        lines.append(f"CONFIG {key}=true")
    lines.extend(format_rule(rule) for rule in rules)
    return "\n".join(lines) + "\n"


def _word(text: str) -> str:
    if text and not any(ch.isspace() or ch in _SPECIAL for ch in text):
        return text
    return _quoted(text)


def _quoted(text: str) -> str:
    return f"'{text}'" if '"' in text else f'"{text}"'
