"""Limits on connections that have not finished opening, and on closing ones.

A connection is *opening* from the moment its socket is accepted until the
broker sends ``connection.open-ok``: it has sent no protocol header yet, or it
is somewhere between ``connection.start`` and ``connection.open``.  Opening
connections cost a descriptor each and have proved nothing, so:

- each must finish opening within ``deltamq.connection_open_timeout`` seconds
  (Broker-J's maximum authentication delay, RabbitMQ's ``handshake_timeout``:
  10 s); past it its socket is closed without a word, as RabbitMQ does -- the
  peer may not have said which protocol it speaks, and before ``tune-ok`` an
  AMQP 0-9-1 client need not understand ``connection.close``;
- one source address may have at most
  ``deltamq.max_opening_connections_per_address`` of them at once; a socket
  beyond that is closed as soon as it is accepted.  Opened connections do not
  count, so a host's working clients are never affected -- only its next
  connection waits until an opening one finishes or times out.

``deltamq.connection_close_timeout`` bounds a closing connection: how long the
broker waits for ``connection.close-ok`` after it sent ``connection.close``,
and how long, after it sent ``close-ok``, it keeps reading (and discarding)
until the client closes its socket (RabbitMQ's closing timeout: 30 s, or the
heartbeat interval when that is shorter).

Closing many connections for the same reason logs one line, then at most one
summary line per :data:`NOTICE_INTERVAL` for each reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.errors import ConfigurationError

log = logging.getLogger(__name__)

OPEN_TIMEOUT_VARIABLE = "deltamq.connection_open_timeout"
MAX_OPENING_VARIABLE = "deltamq.max_opening_connections_per_address"
CLOSE_TIMEOUT_VARIABLE = "deltamq.connection_close_timeout"

#: seconds between two summary lines about connections closed for one reason
NOTICE_INTERVAL = 30.0
#: source addresses named in a summary line
NOTICE_TOP_ADDRESSES = 3


@dataclass(frozen=True, slots=True)
class HandshakeLimits:
    """The limits one port applies (defaults as in the broker's built-in context)."""

    open_timeout: float = 10.0
    max_opening_per_address: int = 100
    close_timeout: float = 30.0

    @classmethod
    def resolved(cls, resolve: Callable[[str], str]) -> HandshakeLimits:
        """The limits from the context variables, as ``resolve`` expands ``${name}``."""
        def number(variable: str) -> float:
            text = resolve("${%s}" % variable)
            try:
                value = float(text)
            except ValueError:
                raise ConfigurationError(f"context variable '{variable}' must be a number,"
                                         f" not '{text}'") from None
            return value

        open_timeout, close_timeout = number(OPEN_TIMEOUT_VARIABLE), number(CLOSE_TIMEOUT_VARIABLE)
        per_address = number(MAX_OPENING_VARIABLE)
        if open_timeout <= 0 or close_timeout <= 0:
            raise ConfigurationError(f"context variables '{OPEN_TIMEOUT_VARIABLE}' and"
                                     f" '{CLOSE_TIMEOUT_VARIABLE}' must be positive")
        if per_address != int(per_address) or (per_address < 1 and per_address != -1):
            raise ConfigurationError(f"context variable '{MAX_OPENING_VARIABLE}' must be a"
                                     " positive integer, or -1 for no limit")
        return cls(open_timeout, int(per_address), close_timeout)

    def closing_timeout(self, heartbeat: float) -> float:
        """How long a closing connection may take: the close timeout, or the heartbeat if shorter."""
        return min(self.close_timeout, heartbeat) if heartbeat > 0 else self.close_timeout


class Notices:
    """Log the first event of a kind at once; sum up the next ones in one line per interval."""

    def __init__(self, logger: logging.Logger = log, interval: float = NOTICE_INTERVAL,
                 clock: Callable[[], float] | None = None,
                 call_later: Callable[[float, Callable[[], None]], Any] | None = None) -> None:
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._call_later = call_later
        self._quiet_until: dict[str, float] = {}
        #: kind -> (level, what happened, count per address) not yet logged
        self._pending: dict[str, tuple[int, str, Counter[str]]] = {}

    def note(self, kind: str, level: int, address: str, line: str, summary: str) -> None:
        """One event of ``kind`` from ``address``: ``line`` describes it alone, ``summary``
        (e.g. "connections closed: not opened within 10 s") many of them."""
        now = self._now()
        pending = self._pending.get(kind)
        if pending is None and now >= self._quiet_until.get(kind, now):
            self.logger.log(level, "%s", line)
            self._quiet_until[kind] = now + self.interval
            return
        if pending is None:
            pending = self._pending[kind] = (level, summary, Counter())
            self._later(self._quiet_until[kind] - now, lambda: self.flush(kind))
        pending[2][address] += 1

    def flush(self, kind: str | None = None) -> None:
        """Log the summary of ``kind`` (every kind: None) now, if any is pending."""
        for name in [kind] if kind is not None else list(self._pending):
            pending = self._pending.pop(name, None)
            if pending is None:
                continue
            level, summary, by_address = pending
            top = ", ".join(f"{address}: {n}" for address, n
                            in by_address.most_common(NOTICE_TOP_ADDRESSES))
            more = len(by_address) - NOTICE_TOP_ADDRESSES
            self.logger.log(level, "%d more %s (from %s%s)", sum(by_address.values()), summary,
                            top, f" and {more} more addresses" if more > 0 else "")
            self._quiet_until[name] = self._now() + self.interval

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def _later(self, delay: float, callback: Callable[[], None]) -> None:
        if self._call_later is not None:
            self._call_later(delay, callback)
        else:
            asyncio.get_running_loop().call_later(delay, callback)


@dataclass
class OpeningConnections:
    """The connections not yet opened, counted per source address, across every port."""

    by_address: Counter[str] = field(default_factory=Counter)
    refused: int = 0          # sockets closed at once: their address had too many opening
    timed_out: int = 0        # connections closed for not opening in time
    notices: Notices = field(default_factory=Notices)

    def admit(self, address: str, limits: HandshakeLimits) -> bool:
        """A socket from ``address`` was accepted: count it, or say it must be closed."""
        cap = limits.max_opening_per_address
        if 0 <= cap <= self.by_address[address]:
            self.refused += 1
            self.notices.note(
                "refused", logging.WARNING, address,
                f"closing a new connection from {address}: it already has {cap} connections"
                f" that have not finished opening ({MAX_OPENING_VARIABLE})",
                f"new connections closed at once: their address had {cap} connections"
                " opening")
            return False
        self.by_address[address] += 1
        return True

    def done(self, address: str) -> None:
        """A counted connection opened, or went away before it did."""
        left = self.by_address[address] - 1
        if left > 0:
            self.by_address[address] = left
        else:
            del self.by_address[address]

    def expired(self, address: str, limits: HandshakeLimits, where: str) -> None:
        """A connection from ``address`` did not open in time (``where``: what it awaited)."""
        self.timed_out += 1
        self.notices.note(
            "timed out", logging.INFO, address,
            f"closing connection from {address}: not opened within {limits.open_timeout:g} s"
            f" ({where})",
            f"connections closed: not opened within {limits.open_timeout:g} s")

    @property
    def count(self) -> int:
        return sum(self.by_address.values())
