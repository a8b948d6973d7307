"""Throttling failed logins, per source address and per user name.

Every login -- AMQP SASL, REST Basic credentials, the console's login --
reaches an authentication provider's ``authenticate``, which asks the
broker's :class:`LoginThrottle` first.  After ``max_failures`` failed logins
within ``window`` seconds from one source address, or for one user name, that
source (or user) is *blocked*: every further attempt is refused at once,
without looking at the password -- the right one included -- until the block
ends.  A block lasts ``block`` seconds, doubled for each block that follows
another within ``max_block`` seconds of it (up to ``max_block``).

A successful login forgets the user's failures, not the source's: a client
that owns one account cannot reset the count of a source that sprays
passwords across users.  Blocking a user name lets anyone who can reach the
broker lock that user out for a while (every throttle of logins does); the
per-user limit is what stops guessing one password from many addresses.

Logins are verified in worker threads (the hashes are slow on purpose), so
the throttle's tables are guarded by a lock; nothing slow happens under it.
Time comes from an injected clock: the tests drive it by hand.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from broker.errors import AuthenticationFailed

log = logging.getLogger(__name__)

#: context variables (``-D``, the environment, the configuration file) and their defaults
MAX_FAILURES_VARIABLE = "deltamq.login.max_failures"
MAX_SOURCE_FAILURES_VARIABLE = "deltamq.login.max_source_failures"
WINDOW_VARIABLE = "deltamq.login.failure_window"
BLOCK_VARIABLE = "deltamq.login.block"
MAX_BLOCK_VARIABLE = "deltamq.login.max_block"
CONTEXT_DEFAULTS: dict[str, str] = {
    MAX_FAILURES_VARIABLE: "5",
    # a source address may be shared (NAT, one host running many clients)
    MAX_SOURCE_FAILURES_VARIABLE: "20",
    WINDOW_VARIABLE: "60",
    BLOCK_VARIABLE: "10",
    MAX_BLOCK_VARIABLE: "900",
}
#: keys remembered at most; beyond it the least recently failed are forgotten
MAX_TRACKED = 100_000


class LoginThrottled(AuthenticationFailed):
    """A login refused because its source or user is blocked (403 over AMQP, 429 over HTTP)."""

    def __init__(self, text: str, retry_after: float) -> None:
        super().__init__(text)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class ThrottleSettings:
    """Limits of the throttle; 0 failures turns a limit off."""

    max_failures: int = 5
    max_source_failures: int = 20
    window: float = 60.0
    block: float = 10.0
    max_block: float = 900.0

    @classmethod
    def from_context(cls, lookup: Callable[[str], str]) -> ThrottleSettings:
        """The settings from context variables (``lookup(name)`` gives a variable's text)."""
        def number(name: str, integral: bool) -> float:
            text = lookup(name)
            try:
                value = int(text) if integral else float(text)
            except ValueError:
                raise ValueError(f"context variable {name} must be a number, not {text!r}"
                                 ) from None
            if value < 0 or not math.isfinite(value):
                raise ValueError(f"context variable {name} must not be negative")
            return value

        return cls(max_failures=int(number(MAX_FAILURES_VARIABLE, True)),
                   max_source_failures=int(number(MAX_SOURCE_FAILURES_VARIABLE, True)),
                   window=number(WINDOW_VARIABLE, False),
                   block=number(BLOCK_VARIABLE, False),
                   max_block=number(MAX_BLOCK_VARIABLE, False))


@dataclass(slots=True)
class _Record:
    """What the throttle knows of one source or user."""

    failures: deque[float] = field(default_factory=deque)
    blocked_until: float = 0.0
    #: blocks in a row (each follows the previous within max_block): the next one's length
    blocks: int = 0
    last_failure: float = 0.0


class LoginThrottle:
    """Counts failed logins per source and per user; refuses the blocked ones."""

    def __init__(self, settings: ThrottleSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or ThrottleSettings()
        self.clock = clock
        self._lock = threading.Lock()
        self._sources: dict[str, _Record] = {}
        self._users: dict[str, _Record] = {}
        #: failed logins (wrong credentials), since start
        self.failures = 0
        #: attempts refused because their source or user was blocked, since start
        self.refused = 0

    def admit(self, user: str, source: str | None, mechanism: str = "PLAIN") -> None:
        """Raise :class:`LoginThrottled` if ``source`` or ``user`` is blocked now."""
        now = self.clock()
        with self._lock:
            for kind, table, key in (("address", self._sources, source),
                                     ("user", self._users, user)):
                record = table.get(key) if key else None
                if record is not None and now < record.blocked_until:
                    self.refused += 1
                    wait = record.blocked_until - now
                    who = f"address {key}" if kind == "address" else f"user '{key}'"
                    raise LoginThrottled(
                        f"Login was refused using authentication mechanism {mechanism}."
                        f" Too many failed logins for {who}: try again in {math.ceil(wait)} s.",
                        wait)

    def failed(self, user: str, source: str | None) -> None:
        """Count a failed login; block its source or user once over their limit."""
        now = self.clock()
        settings = self.settings
        with self._lock:
            self.failures += 1
            if source:                          # an unknown peer is not everyone's address
                self._count(self._sources, source, settings.max_source_failures, now,
                            f"address {source}")
            self._count(self._users, user, settings.max_failures, now, f"user '{user}'")

    def succeeded(self, user: str) -> None:
        """A correct login forgets the user's failures (the source's stay counted)."""
        with self._lock:
            self._users.pop(user, None)

    def blocked(self, now: float | None = None) -> tuple[int, int]:
        """(sources, users) blocked at ``now`` (default: the clock's now)."""
        at = self.clock() if now is None else now
        with self._lock:
            return (sum(1 for r in self._sources.values() if at < r.blocked_until),
                    sum(1 for r in self._users.values() if at < r.blocked_until))

    def _count(self, table: dict[str, _Record], key: str, limit: int, now: float,
               who: str) -> None:
        if limit <= 0:
            return
        settings = self.settings
        record = table.pop(key, None)           # re-inserted last: the table stays in LRU order
        if record is None:
            record = _Record()
            if len(table) >= MAX_TRACKED:
                self._forget_quiet(table, now)
        elif now - record.last_failure > settings.max_block:
            record.blocks = 0                   # quiet long enough: start again from `block`
        table[key] = record
        record.last_failure = now
        failures = record.failures
        failures.append(now)
        while failures and now - failures[0] > settings.window:
            failures.popleft()
        if len(failures) >= limit:
            failures.clear()
            length = min(settings.block * 2 ** record.blocks, settings.max_block)
            record.blocked_until = now + length
            record.blocks += 1
            # once per block, not per refused attempt
            log.warning("logins for %s are refused for %g s after %d failures within %g s",
                        who, length, limit, settings.window)

    def _forget_quiet(self, table: dict[str, _Record], now: float) -> None:
        """Drop the records that no longer matter; if none, the oldest half."""
        settings = self.settings
        horizon = max(settings.window, settings.max_block)
        for key in [k for k, r in table.items()
                    if now >= r.blocked_until and now - r.last_failure > horizon]:
            del table[key]
        if len(table) >= MAX_TRACKED:
            for key in list(table)[:len(table) // 2]:
                del table[key]


def settings_from(context: Mapping[str, str]) -> ThrottleSettings:
    """Settings from a plain mapping of context variables (missing ones: the defaults)."""
    return ThrottleSettings.from_context(lambda name: context.get(name, CONTEXT_DEFAULTS[name]))
