"""Broker-J's connection limit (CLT) rules: reading them, and what they allow a user now.

A rule file (Broker-J's connection limit provider syntax)::

    # a comment; a \\ at the end of a line continues the rule
    CLT alice port=amqp connection_limit=10 connection_frequency_limit=60/1m
    CLT publishers connection_frequency_limit=30/2M
    CLT ALL BLOCK
    CONFIG default_frequency_period=60000 log_all=true

* ``CLT <user|group|ALL> [BLOCK] [port=<port name|ALL>] [property=value ...]``;
  the keywords and property names are case-insensitive, ``-`` and ``_`` in a
  property name optional (``connection-limit``, ``connectionLimit``);
* ``connection_limit`` (or ``connection_count``): how many connections the
  user may have open on the port at once; ``connection_frequency_limit`` (or
  ``connection_frequency_count``): how many it may open on the port within a
  period, ``N/period`` -- the period written ``1h30m``, ``2M``, ``0.5s``,
  ``H`` / ``M`` / ``S`` (one of them), ``hour`` / ``minute`` / ``second``,
  or an ISO-8601 duration (``PT2M``); just ``N`` means the default period;
  a negative limit means no limit;
* ``BLOCK``: the user may not connect on the port at all; ``port`` (default
  ``ALL``) names the AMQP port the rule applies to;
* ``CONFIG default_frequency_period=<ms>`` (1 minute unless set; 0 turns
  off the frequency limits that name no period, a negative period all of
  the file's, as Broker-J) and ``log_all=true`` (log every connection a rule
  governs, not only those it refuses);
* ``ACL`` lines are skipped (the same file may hold a Broker-J ACL), and a
  rule that limits nothing is dropped, as Broker-J does.

For a connection of user ``u`` on port ``p``, the rules naming ``u`` (for
``p`` or ALL ports) are merged into one, the most restrictive: the lowest
count, the lowest frequency for each period, blocked if any blocks.  Without
any, the rules of the groups ``u`` is in are merged the same way; without
those, the ``ALL`` rules.  A user no rule names is not limited.  Counts and
frequencies are per port.  Each provider's rules (:attr:`ConnectionLimitRule.source`)
limit on their own, as Broker-J chains its providers: one provider's rule
for ``u`` does not set aside another provider's ``ALL`` rule.

:class:`RuleLimits` is what :class:`~broker.transport.connection_limits.ConnectionLimits`
asks at open (:meth:`RuleLimits.refusal`) and tells what opened and closed.
Errors are :class:`~broker.security.acl_file.LineError` naming the line.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker.security.acl_file import LineError, _statements, _Token

log = logging.getLogger("deltamq")

ALL = "ALL"
#: Broker-J's default frequency period (qpid.broker.connectionLimiter.frequencyPeriodInMillis)
DEFAULT_PERIOD_MS = 60_000

_PROPERTIES = {"port": "port", "connectionlimit": "count", "connectioncount": "count",
               "connectionfrequencylimit": "frequency", "connectionfrequencycount": "frequency"}
_CONFIG = {"defaultfrequencyperiod": "period", "logall": "log_all"}
_WORDS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}
_DURATION = re.compile(r"(?:PT)?(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?",
                       re.IGNORECASE)


class ConnectionLimitSyntaxError(LineError):
    """A line of a connection limit file (or one rule given as text) that cannot be read."""


@dataclass(frozen=True)
class ConnectionLimitRule:
    """One CLT rule.  ``frequency_period``: seconds (None: the rule set's default period);
    ``source``: the provider it comes from (each provider's rules limit on their own)."""

    identity: str
    port: str = ALL
    count: int | None = None
    frequency: int | None = None
    frequency_period: float | None = None
    blocked: bool = False
    source: str = ""

    @property
    def empty(self) -> bool:
        return not self.blocked and self.count is None and self.frequency is None

    def text(self) -> str:
        """The rule as a line of a file."""
        parts = ["CLT", self.identity] + (["BLOCK"] if self.blocked else [])
        parts.append(f"port={self.port}")
        if self.count is not None:
            parts.append(f"connection_limit={self.count}")
        if self.frequency is not None:
            period = "" if self.frequency_period is None else \
                f"/{self.frequency_period:.3f}".rstrip("0").rstrip(".") + "S"   # never 1e+06
            parts.append(f"connection_frequency_limit={self.frequency}{period}")
        return " ".join(parts)


@dataclass(frozen=True)
class Limit:
    """The merged rule for one user on one port: what it may do."""

    blocked: bool = False
    count: int | None = None
    #: period (seconds) -> connections it may open within one
    frequencies: tuple[tuple[float, int], ...] = ()


@dataclass
class ParsedLimits:
    rules: list[ConnectionLimitRule]
    default_period_ms: int = DEFAULT_PERIOD_MS
    log_all: bool = False


def parse(text: str, source: str = "") -> ParsedLimits:
    """Read a connection limit file (see the module docstring)."""
    parsed = ParsedLimits([])
    for tokens in _statements(text, source):
        line = tokens[0].line
        if len(tokens) < 2:
            raise ConnectionLimitSyntaxError(f"Not enough tokens ('{tokens[0].text}' alone)", line,
                                             source)
        word = tokens[0].text.upper()
        if word == "CLT":
            rule = _rule(tokens[1:], line, source)
            if not rule.empty:
                parsed.rules.append(rule)
        elif word == "CONFIG":
            for key, value in _pairs(tokens[1:], line, source):
                setting = _CONFIG.get(_canonical(key))
                if setting == "period":
                    parsed.default_period_ms = _integer(value, key, line, source)
                elif setting == "log_all":
                    parsed.log_all = value.lower() == "true"
        elif word == "ACL" or (word.isdigit() and tokens[1].text.upper() == "ACL"):
            continue
        else:
            raise ConnectionLimitSyntaxError(f"Unrecognised initial token '{tokens[0].text}'", line,
                                             source)
    return parsed


def parse_rule(text: str) -> ConnectionLimitRule:
    """One rule as text, with or without the leading ``CLT``."""
    statements = list(_statements(text, "rule"))
    if len(statements) != 1:
        raise ConnectionLimitSyntaxError("Expected exactly one rule", 1, "rule")
    tokens = statements[0]
    if tokens[0].text.upper() == "CLT" and not tokens[0].quoted:
        tokens = tokens[1:]
    return _rule(tokens, 1, "rule")


def _rule(args: list[_Token], line: int, source: str) -> ConnectionLimitRule:
    if not args or not args[0].text.strip():
        raise ConnectionLimitSyntaxError("A rule names a user, a group or ALL", line, source)
    identity = ALL if args[0].text.upper() == ALL else args[0].text
    values: dict[str, str] = {}
    blocked = False
    rest = args[1:]
    while rest and rest[0].text.upper() == "BLOCK" and not rest[0].quoted:
        blocked, rest = True, rest[1:]
    for key, value in _pairs(rest, line, source):
        name = _PROPERTIES.get(_canonical(key))
        if name is None:
            raise ConnectionLimitSyntaxError(f"Unknown connection limit property: {key}", line,
                                             source)
        if name in values:
            raise ConnectionLimitSyntaxError(f"Property '{key}' has already been defined", line,
                                             source)
        values[name] = value
    count = frequency = None
    period: float | None = None
    if "count" in values:
        count = _limit(values["count"], "connection_limit", line, source)
    if "frequency" in values:
        number, _, written = values["frequency"].partition("/")
        frequency = _limit(number, "connection_frequency_limit", line, source)
        period = _period(written, line, source) if written else None
    port = values.get("port", ALL).strip()
    return ConnectionLimitRule(identity, ALL if port.upper() == ALL else port, count, frequency,
                               period, blocked)


def _pairs(tokens: list[_Token], line: int, source: str) -> Iterable[tuple[str, str]]:
    i = 0
    while i < len(tokens):
        key = tokens[i].text
        if i + 1 >= len(tokens):
            raise ConnectionLimitSyntaxError(f"Incomplete property (key only): '{key}'", line,
                                             source)
        if tokens[i + 1].text != "=" or tokens[i + 1].quoted:
            raise ConnectionLimitSyntaxError(f"Incomplete property (no equals) after '{key}'",
                                             line, source)
        if i + 2 >= len(tokens):
            raise ConnectionLimitSyntaxError(f"Incomplete property (no value): '{key}'", line,
                                             source)
        yield key, tokens[i + 2].text
        i += 3


def _canonical(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def _integer(text: str, what: str, line: int, source: str) -> int:
    if not re.fullmatch(r"\s*-?[0-9]{1,18}\s*", text):
        raise ConnectionLimitSyntaxError(f"'{what}' takes an integer, not '{text[:40]}'", line,
                                         source)
    return int(text)


def _limit(text: str, what: str, line: int, source: str) -> int | None:
    value = _integer(text, what, line, source)
    return None if value < 0 else value             # negative: no limit (Broker-J)


def _period(text: str, line: int, source: str) -> float:
    """Seconds of a period written as Broker-J takes it (see the module docstring)."""
    word = text.strip().lower()
    if word in _WORDS:
        return _WORDS[word]
    if word in ("h", "m", "s"):
        return _WORDS[{"h": "hour", "m": "minute", "s": "second"}[word]]
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groups()):
        raise ConnectionLimitSyntaxError(f"'{text[:40]}' is not a period (like 1m, 30s, 1h30m)",
                                         line, source)
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


# -- deciding ---------------------------------------------------------------------------

@dataclass
class RuleLimits:
    """The rules in force, and the connections they count (per port and user)."""

    rules: list[ConnectionLimitRule] = field(default_factory=list)
    default_period_ms: int = DEFAULT_PERIOD_MS
    log_all: bool = False
    clock: Callable[[], float] = time.monotonic
    open_now: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: (port, user) -> when its recent connections opened, oldest first
    opened_at: dict[tuple[str, str], deque[float]] = field(default_factory=dict)
    #: (port, user) -> the longest frequency period its last admission found (0: none)
    _window: dict[tuple[str, str], float] = field(default_factory=dict)

    def limit(self, user: str, groups: frozenset[str], port: str) -> Limit | None:
        """The merged rule for ``user`` on ``port`` (None: no rule limits it).

        Within each source's rules, the user's, else its groups', else the ``ALL``
        ones; what every source chose is merged most restrictive, which limits as
        checking each source on its own would (the counters are the same)."""
        sources: dict[str, list[ConnectionLimitRule]] = {}
        for rule in self.rules:
            if rule.port == ALL or rule.port == port:
                sources.setdefault(rule.source, []).append(rule)
        chosen: list[ConnectionLimitRule] = []
        for on_port in sources.values():
            for tier in ([r for r in on_port if r.identity == user],
                         [r for r in on_port if r.identity in groups],
                         [r for r in on_port if r.identity == ALL]):
                if tier:
                    chosen.extend(tier)
                    break
        return self._merged(chosen) if chosen else None

    def _merged(self, rules: list[ConnectionLimitRule]) -> Limit:
        counts = [r.count for r in rules if r.count is not None]
        frequencies: dict[float, int] = {}
        default = self.default_period_ms / 1000
        for rule in rules:
            if rule.frequency is None:
                continue
            period = rule.frequency_period if rule.frequency_period is not None else default
            if period <= 0:
                continue                 # frequency limits turned off (CONFIG)
            frequencies[period] = min(frequencies.get(period, rule.frequency), rule.frequency)
        return Limit(any(r.blocked for r in rules), min(counts) if counts else None,
                     tuple(sorted(frequencies.items())))

    def refusal(self, port: str, user: str, groups: frozenset[str]) -> str:
        """Why ``user`` may not open one more connection on ``port`` now ("" when it may)."""
        limit = self.limit(user, groups, port)
        key = (port, user)
        if limit is None:
            self._window[key] = 0.0
            return ""
        if limit.blocked:
            return f"user '{user}' is blocked on port '{port}' by a connection limit rule"
        if limit.count is not None and self.open_now[key] >= limit.count:
            return (f"user '{user}' has reached its connection limit of {limit.count} on port"
                    f" '{port}'")
        if limit.frequencies:
            now = self.clock()
            recent = self.opened_at.get(key, ())
            for period, most in limit.frequencies:
                if sum(1 for at in recent if now - at < period) >= most:
                    return (f"user '{user}' has reached its connection frequency limit of {most}"
                            f" per {period:g} s on port '{port}'")
        if self.log_all:
            log.info("connection limit rules: user '%s' on port '%s': %d open", user, port,
                     self.open_now[key])
        self._window[key] = max((period for period, _most in limit.frequencies), default=0.0)
        return ""

    def opened(self, port: str, user: str) -> None:
        key = (port, user)
        self.open_now[key] += 1
        if not self.rules:
            return
        longest = self._window.pop(key, None)
        if longest is None:             # not admitted through refusal(): any rule's period
            longest = max((r.frequency_period or self.default_period_ms / 1000 for r in self.rules
                           if r.frequency is not None), default=0.0)
        if longest <= 0:                # no frequency limit of its own: nothing to remember
            self.opened_at.pop(key, None)
            return
        now = self.clock()
        recent = self.opened_at.setdefault(key, deque())
        recent.append(now)
        while recent and now - recent[0] >= longest:
            recent.popleft()
        if not recent:
            del self.opened_at[key]

    def closed(self, port: str, user: str) -> None:
        key = (port, user)
        left = self.open_now[key] - 1
        if left > 0:
            self.open_now[key] = left
        else:
            del self.open_now[key]

    def reset_counters(self) -> None:
        self.opened_at.clear()
