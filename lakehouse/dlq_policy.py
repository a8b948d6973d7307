"""The dead-letter processor's policy: which dead letters to handle, and what to do with each.

A policy is a small TOML file (read with the standard library's ``tomllib``);
``docs/dead-letter-processor.md`` shows one.  This module parses it into a
:class:`Policy` -- every mistake raises :class:`PolicyError` naming the file,
the rule and the key -- and decides, for one dead letter, what the job does
with it (:func:`classify`, :func:`decide`).  It is pure: no Spark, no broker,
no clock of its own, so the decisions are tested without either.

A dead letter is the copy of a message the broker dead-lettered (RabbitMQ's
``x-death`` headers, :mod:`broker.messaging.dead_letter`), found in one of the
policy's dead-letter queues.  Its *attempt* is the republish it would be:
one more than the ``x-deltamq-dlq-attempt`` header a previous republish put
on it (absent: 0), so the count survives every round trip through the
broker.  Rules are tried in order; the first whose every condition holds
decides (``default_action`` when none does):

* ``republish``: back to the exchange and routing key the message was
  published with before it died (``x-death``'s newest entry), or to the
  rule's ``exchange``/``routing_key``, with the rule's header edits, once its
  backoff has passed -- unless its attempt is over the retry cap, when it is
  parked instead;
* ``park``: kept in the curated table (body and all), not republished;
* ``drop``: recorded in the curated table without its body, not republished.
"""

from __future__ import annotations

import datetime
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

__all__ = ["Policy", "Rule", "Retry", "PolicyError", "DeadLetter", "Decision", "load_policy",
           "parse_policy", "classify", "decide", "ATTEMPT_HEADER", "REPUBLISH_ID_HEADER",
           "ACTIONS", "REPUBLISH", "PARK", "DROP"]

REPUBLISH: Final = "republish"
PARK: Final = "park"
DROP: Final = "drop"
ACTIONS: Final = (REPUBLISH, PARK, DROP)

#: the header a republished message carries: which attempt it is (1 for the first)
ATTEMPT_HEADER: Final = "x-deltamq-dlq-attempt"
#: the header a republished message carries: the deterministic id of that republish
REPUBLISH_ID_HEADER: Final = "x-deltamq-dlq-republish-id"

_TOP_KEYS = ("dead_letter_queues", "vhost", "curated_table", "default_action", "settle", "retry", "rule")
_RETRY_KEYS = ("max_attempts", "backoff_seconds", "backoff_multiplier", "backoff_max_seconds")
_RULE_KEYS = ("name", "match", "action", "exchange", "routing_key", "set_headers", "remove_headers",
              "max_attempts")
_MATCH_KEYS = ("reason", "source_queue", "dead_letter_queue", "headers", "min_deaths", "max_deaths")
_HEADER_VALUE_TYPES = (str, int, float, bool)


class PolicyError(ValueError):
    """The policy file is unreadable or says something the job cannot do; the message says what."""


@dataclass(frozen=True, slots=True)
class Retry:
    """The retry cap and the exponential backoff between republishes."""

    max_attempts: int = 3
    backoff_seconds: float = 5.0
    backoff_multiplier: float = 2.0
    backoff_max_seconds: float = 300.0

    def delay(self, attempt: int) -> float:
        """Seconds a dead letter waits before republish number ``attempt`` (from 1)."""
        raw = self.backoff_seconds * self.backoff_multiplier ** max(attempt - 1, 0)
        return min(raw, self.backoff_max_seconds)


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``[[rule]]``: conditions (all must hold; an absent one always does) and an action."""

    name: str
    action: str
    reasons: frozenset[str] | None = None
    source_queues: frozenset[str] | None = None
    dead_letter_queues: frozenset[str] | None = None
    headers: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    min_deaths: int | None = None
    max_deaths: int | None = None
    exchange: str | None = None
    routing_key: str | None = None
    set_headers: Mapping[str, Any] = field(default_factory=dict)
    remove_headers: tuple[str, ...] = ()
    max_attempts: int | None = None

    def matches(self, letter: DeadLetter) -> bool:
        if self.reasons is not None and letter.reason not in self.reasons:
            return False
        if self.source_queues is not None and letter.source_queue not in self.source_queues:
            return False
        if self.dead_letter_queues is not None and letter.dead_letter_queue not in self.dead_letter_queues:
            return False
        if self.min_deaths is not None and letter.death_count < self.min_deaths:
            return False
        if self.max_deaths is not None and letter.death_count > self.max_deaths:
            return False
        for name, accepted in self.headers.items():
            if name not in letter.headers or _plain(letter.headers[name]) not in accepted:
                return False
        return True


@dataclass(frozen=True, slots=True)
class Policy:
    """A parsed policy file (see the module's docstring and docs/dead-letter-processor.md)."""

    dead_letter_queues: tuple[str, ...]
    curated_table: Path
    vhost: str | None = None
    default_action: str = PARK
    retry: Retry = Retry()
    rules: tuple[Rule, ...] = ()
    #: take each curated dead letter out of its dead-letter queue (acknowledged by the job)
    settle: bool = True


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What the classification reads off one dead letter.

    ``reason``, ``source_queue``, ``source_exchange`` and ``source_routing_key``
    come from the newest ``x-death`` entry (None without one); ``death_count``
    is the sum of the entries' counts (how often the message died, anywhere);
    ``attempt`` is the republish this one would be.
    """

    dead_letter_queue: str
    headers: Mapping[str, Any]
    reason: str | None
    source_queue: str | None
    source_exchange: str | None
    source_routing_key: str | None
    death_count: int
    first_death_reason: str | None
    attempt: int


@dataclass(frozen=True, slots=True)
class Decision:
    """What the job does with a dead letter; ``exchange``/``routing_key``/``headers`` for republish."""

    action: str
    rule: str
    attempt: int
    delay_seconds: float = 0.0
    exchange: str | None = None
    routing_key: str | None = None
    headers: Mapping[str, Any] | None = None
    note: str | None = None


# -- reading the file ----------------------------------------------------------------

def load_policy(path: str | Path) -> Policy:
    """Read and check the policy at ``path``; relative table paths are relative to its directory."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read the policy ({exc})") from None
    return parse_policy(text, source=str(path), base=path.parent)


def parse_policy(text: str, *, source: str = "policy", base: Path = Path(".")) -> Policy:
    """Parse policy TOML; errors name ``source`` and the offending key."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{source}: not valid TOML: {exc}") from None
    where = source
    _known(document, _TOP_KEYS, where)
    queues = _names(document.get("dead_letter_queues"), f"{where}: 'dead_letter_queues'")
    if not queues:
        raise PolicyError(f"{where}: 'dead_letter_queues' is missing: name the dead-letter queue(s)"
                          " to process, e.g. dead_letter_queues = [\"orders.dlq\"]")
    table = document.get("curated_table")
    if not isinstance(table, str) or not table:
        raise PolicyError(f"{where}: 'curated_table' is missing: give the path of the curated Delta"
                          " table, e.g. curated_table = \"dlq/curated\"")
    if "`" in table:
        raise PolicyError(f"{where}: 'curated_table' must not contain a backquote (Spark SQL names the"
                          " table by its path in backquotes)")
    vhost = document.get("vhost")
    if vhost is not None and (not isinstance(vhost, str) or not vhost):
        raise PolicyError(f"{where}: 'vhost' must be a virtual host name (a non-empty string)")
    default_action = _action(document.get("default_action", PARK), f"{where}: 'default_action'")
    settle = document.get("settle", True)
    if not isinstance(settle, bool):
        raise PolicyError(f"{where}: 'settle' must be true or false (got {settle!r})")
    retry = _retry(document.get("retry", {}), f"{where}: [retry]")
    raw_rules = document.get("rule", [])
    if not isinstance(raw_rules, list):
        raise PolicyError(f"{where}: 'rule' must be an array of tables ([[rule]])")
    rules = tuple(_rule(raw, index, where) for index, raw in enumerate(raw_rules, 1))
    names = [rule.name for rule in rules]
    for name in names:
        if names.count(name) > 1:
            raise PolicyError(f"{where}: two rules are named '{name}': rule names must be unique")
    location = Path(table)
    return Policy(dead_letter_queues=tuple(queues),
                  curated_table=location if location.is_absolute() or "://" in table else base / location,
                  vhost=vhost, default_action=default_action, retry=retry, rules=rules, settle=settle)


def _known(table: Mapping[str, Any], keys: Sequence[str], where: str) -> None:
    for key in table:
        if key not in keys:
            raise PolicyError(f"{where}: unknown key '{key}' (known: {', '.join(keys)})")


def _names(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise PolicyError(f"{where} must be a name or a list of names (non-empty strings)")
    return list(values)


def _action(value: Any, where: str) -> str:
    if value not in ACTIONS:
        raise PolicyError(f"{where} must be one of {', '.join(ACTIONS)} (got {value!r})")
    return str(value)


def _number(value: Any, where: str, *, minimum: float, integer: bool = False) -> Any:
    numeric = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not numeric or not math.isfinite(value) or value < minimum:
        kind = "an integer" if integer else "a number"
        raise PolicyError(f"{where} must be {kind} >= {minimum:g} (got {value!r})")
    return value


def _retry(raw: Any, where: str) -> Retry:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where} must be a table")
    _known(raw, _RETRY_KEYS, where)
    defaults = Retry()
    retry = Retry(
        max_attempts=_number(raw.get("max_attempts", defaults.max_attempts),
                             f"{where} 'max_attempts'", minimum=0, integer=True),
        backoff_seconds=float(_number(raw.get("backoff_seconds", defaults.backoff_seconds),
                                      f"{where} 'backoff_seconds'", minimum=0)),
        backoff_multiplier=float(_number(raw.get("backoff_multiplier", defaults.backoff_multiplier),
                                         f"{where} 'backoff_multiplier'", minimum=1)),
        backoff_max_seconds=float(_number(raw.get("backoff_max_seconds", defaults.backoff_max_seconds),
                                          f"{where} 'backoff_max_seconds'", minimum=0)))
    if retry.backoff_max_seconds < retry.backoff_seconds:
        raise PolicyError(f"{where} 'backoff_max_seconds' ({retry.backoff_max_seconds:g}) is below"
                          f" 'backoff_seconds' ({retry.backoff_seconds:g})")
    return retry


def _rule(raw: Any, index: int, source: str) -> Rule:
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: rule {index} must be a table")
    name = raw.get("name", f"rule {index}")
    if not isinstance(name, str) or not name:
        raise PolicyError(f"{source}: rule {index}: 'name' must be a non-empty string")
    where = f"{source}: rule {index} ('{name}')"
    _known(raw, _RULE_KEYS, where)
    if "action" not in raw:
        raise PolicyError(f"{where}: 'action' is missing (one of {', '.join(ACTIONS)})")
    action = _action(raw["action"], f"{where}: 'action'")
    match = raw.get("match", {})
    if not isinstance(match, dict):
        raise PolicyError(f"{where}: 'match' must be a table")
    _known(match, _MATCH_KEYS, f"{where}: match")
    reasons = _names(match.get("reason"), f"{where}: match.reason")
    bad = [r for r in reasons if r not in _REASONS]
    if bad:
        raise PolicyError(f"{where}: match.reason '{bad[0]}' is not a dead-letter reason"
                          f" (one of {', '.join(_REASONS)})")
    headers = match.get("headers", {})
    if not isinstance(headers, dict):
        raise PolicyError(f"{where}: match.headers must be a table of header = value(s)")
    accepted = {key: _header_values(value, f"{where}: match.headers.{key}") for key, value in headers.items()}
    deaths = {key: _number(match[key], f"{where}: match.{key}", minimum=0, integer=True)
              for key in ("min_deaths", "max_deaths") if key in match}
    if deaths.get("min_deaths", 0) > deaths.get("max_deaths", math.inf):
        raise PolicyError(f"{where}: match.min_deaths is above match.max_deaths: no dead letter matches")
    edits = _edits(raw, action, where)
    max_attempts = raw.get("max_attempts")
    if max_attempts is not None:
        _number(max_attempts, f"{where}: 'max_attempts'", minimum=0, integer=True)
    source_queues = _names(match.get("source_queue"), f"{where}: match.source_queue")
    dead_letter_queues = _names(match.get("dead_letter_queue"), f"{where}: match.dead_letter_queue")
    return Rule(name=name, action=action,
                reasons=frozenset(reasons) if "reason" in match else None,
                source_queues=frozenset(source_queues) if "source_queue" in match else None,
                dead_letter_queues=frozenset(dead_letter_queues) if "dead_letter_queue" in match else None,
                headers=accepted, min_deaths=deaths.get("min_deaths"), max_deaths=deaths.get("max_deaths"),
                max_attempts=max_attempts, **edits)


_REASONS = ("rejected", "expired", "maxlen", "delivery_limit")


def _header_values(value: Any, where: str) -> tuple[Any, ...]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, _HEADER_VALUE_TYPES) for v in values):
        raise PolicyError(f"{where} must be a string, number or boolean, or a list of them")
    return tuple(values)


def _edits(raw: Mapping[str, Any], action: str, where: str) -> dict[str, Any]:
    """The republish settings of a rule (refused on rules that do not republish)."""
    edits: dict[str, Any] = {}
    for key in ("exchange", "routing_key"):
        if key in raw:
            if not isinstance(raw[key], str):
                raise PolicyError(f"{where}: '{key}' must be a string (\"\" is the default exchange)")
            edits[key] = raw[key]
    set_headers = raw.get("set_headers", {})
    if not isinstance(set_headers, dict):
        raise PolicyError(f"{where}: 'set_headers' must be a table of header = value")
    for key, value in set_headers.items():
        if not isinstance(value, _HEADER_VALUE_TYPES):
            raise PolicyError(f"{where}: set_headers.{key} must be a string, number or boolean")
    remove = _names(raw.get("remove_headers"), f"{where}: 'remove_headers'")
    reserved = [key for key in (*set_headers, *remove) if key in (ATTEMPT_HEADER, REPUBLISH_ID_HEADER)]
    if reserved:
        raise PolicyError(f"{where}: header '{reserved[0]}' is the processor's own and cannot be edited")
    edits["set_headers"] = dict(set_headers)
    edits["remove_headers"] = tuple(remove)
    if action != REPUBLISH:
        given = [key for key in ("exchange", "routing_key", "set_headers", "remove_headers", "max_attempts")
                 if key in raw]
        if given:
            raise PolicyError(f"{where}: '{given[0]}' only applies to action = \"republish\""
                              f" (this rule's action is \"{action}\")")
    return edits


# -- classification -------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """A header value as the policy compares it: text for bytes, numbers as numbers."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Decimal):
        return float(value)
    return value


def _count(value: Any) -> int:
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def classify(headers: Mapping[str, Any], dead_letter_queue: str) -> DeadLetter:
    """What the dead letter's headers (decoded, ``x-death`` included) say about it."""
    deaths = [d for d in headers.get("x-death") or () if isinstance(d, Mapping)]
    newest: Mapping[str, Any] = deaths[0] if deaths else {}
    keys = newest.get("routing-keys")
    first_key = keys[0] if isinstance(keys, (list, tuple)) and keys else None

    def text(value: Any) -> str | None:
        return None if value is None else str(_plain(value))

    return DeadLetter(
        dead_letter_queue=dead_letter_queue, headers=headers,
        reason=text(newest.get("reason")), source_queue=text(newest.get("queue")),
        source_exchange=text(newest.get("exchange")), source_routing_key=text(first_key),
        death_count=sum(_count(d.get("count", 1)) for d in deaths),
        first_death_reason=text(headers.get("x-first-death-reason")),
        attempt=_count(_plain(headers.get(ATTEMPT_HEADER, 0))) + 1)


def decide(policy: Policy, letter: DeadLetter) -> Decision:
    """The first matching rule's decision (``default_action`` if none), with the retry cap applied."""
    rule = next((r for r in policy.rules if r.matches(letter)), None)
    action = rule.action if rule is not None else policy.default_action
    name = rule.name if rule is not None else "default"
    if action != REPUBLISH:
        return Decision(action=action, rule=name, attempt=letter.attempt)
    cap = rule.max_attempts if rule is not None and rule.max_attempts is not None else policy.retry.max_attempts
    if letter.attempt > cap:
        return Decision(action=PARK, rule=name, attempt=letter.attempt,
                        note=f"retry cap: {cap} republish(es) already made")
    exchange = rule.exchange if rule is not None and rule.exchange is not None else letter.source_exchange
    routing_key = (rule.routing_key if rule is not None and rule.routing_key is not None
                   else letter.source_routing_key)
    if exchange is None or routing_key is None:
        return Decision(action=PARK, rule=name, attempt=letter.attempt,
                        note="no x-death header: the original exchange and routing key are unknown"
                             " (give the rule an exchange and routing_key)")
    headers = {key: value for key, value in letter.headers.items()
               if rule is None or key not in rule.remove_headers}
    if rule is not None:
        headers.update(rule.set_headers)
    headers[ATTEMPT_HEADER] = letter.attempt
    return Decision(action=REPUBLISH, rule=name, attempt=letter.attempt,
                    delay_seconds=policy.retry.delay(letter.attempt), exchange=exchange,
                    routing_key=routing_key, headers=headers)


def due_at(dead_lettered_at: datetime.datetime, decision: Decision) -> datetime.datetime | None:
    """When a republish decision may be carried out (None for other actions)."""
    if decision.action != REPUBLISH:
        return None
    return dead_lettered_at + datetime.timedelta(seconds=decision.delay_seconds)
