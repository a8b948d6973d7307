"""Limits on open connections: per port (``maxOpenConnections``) and per user.

A connection counts from the moment it opens a virtual host (0-9-1
``connection.open``, 1.0 ``open``) until it closes.  When it tries to open:

- its port already has ``maxOpenConnections`` open connections (Broker-J's
  Port attribute; -1: no limit), or
- its user already has ``deltamq.connection_limit_per_user`` open connections
  on any port (a context variable, so it may be set for the whole broker, on
  one port's context, or with ``-D``; -1: no limit; Broker-J's connection
  limit rules and qpidd's ``--connection-limit-per-user`` have the same
  meaning), or
- Broker-J's connection limit rules (``BrokerConnectionLimitProvider``
  objects, :mod:`broker.security.connection_limit_rules`) block its user on
  the port, or the user has the rules' count of connections open there, or
  opened the frequency limit's number there within its period,

it is refused with :class:`ConnectionLimitReached`: an AMQP 0-9-1 client gets
``connection.close`` 530 NOT_ALLOWED, an AMQP 1.0 client ``close`` with
``amqp:resource-limit-exceeded``, each with a text naming the limit.
Refusals are counted (per port, and in all) and logged once per
:data:`~broker.transport.handshake.NOTICE_INTERVAL` for each kind, then summed
up, as the handshake limits are.

Connections that have not opened yet are bounded by :mod:`.handshake`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from broker import errors
from broker.security.connection_limit_rules import RuleLimits
from broker.transport.handshake import Notices

log = logging.getLogger("deltamq")

PER_USER_VARIABLE = "deltamq.connection_limit_per_user"
#: built-in values of the context variables read here
CONTEXT_DEFAULTS = {PER_USER_VARIABLE: "-1"}


class ConnectionLimitReached(errors.ResourceError, errors.NotAllowed):
    """A connection over a limit: 530 NOT_ALLOWED for 0-9-1, ``amqp:resource-limit-exceeded``
    for 1.0 (the first base names the 1.0 condition, the code is 0-9-1's)."""

    reply_code, reply_name = 530, "NOT_ALLOWED"


def per_user_limit(resolve: Callable[[str], str]) -> int:
    """:data:`PER_USER_VARIABLE` as ``resolve`` expands ``${name}`` (-1: no limit)."""
    text = resolve("${%s}" % PER_USER_VARIABLE)
    try:
        value = int(text)
    except ValueError:
        raise errors.ConfigurationError(f"context variable '{PER_USER_VARIABLE}' must be an"
                                        f" integer (-1: no limit), not '{text}'") from None
    if value < -1:
        raise errors.ConfigurationError(f"context variable '{PER_USER_VARIABLE}' must be -1"
                                        f" (no limit) or more, not {value}")
    return value


@dataclass
class ConnectionLimits:
    """The broker's open connections, counted per port and per user."""

    by_port: Counter[str] = field(default_factory=Counter)
    by_user: Counter[str] = field(default_factory=Counter)
    #: refusals per port, since start
    refused: Counter[str] = field(default_factory=Counter)
    notices: Notices = field(default_factory=lambda: Notices(log))
    #: each counted connection -> (port, user)
    _counted: dict[object, tuple[str, str]] = field(default_factory=dict)
    #: the connection limit rules in force (set by the providers' model objects)
    rules: RuleLimits = field(default_factory=RuleLimits)

    def admit(self, port: str, max_open: int, user: str, per_user: int,
              groups: frozenset[str] = frozenset()) -> None:
        """May ``user`` (in ``groups``) open one more connection on ``port``?
        ConnectionLimitReached if not."""
        if 0 <= max_open <= self.by_port[port]:
            self._refuse(port, user, "port", f"port '{port}' has reached its maxOpenConnections"
                                               f" of {max_open}")
        if 0 <= per_user <= self.by_user[user]:
            self._refuse(port, user, "user", f"user '{user}' has reached the connection limit"
                                               f" per user of {per_user}"
                                               f" ({PER_USER_VARIABLE})")
        if self.rules.rules:
            why = self.rules.refusal(port, user, groups)
            if why:
                self._refuse(port, user, "rule", why)

    def opened(self, connection: object, port: str, user: str) -> None:
        """``connection`` opened: count it until :meth:`closed`."""
        if connection in self._counted:
            return
        self._counted[connection] = (port, user)
        self.by_port[port] += 1
        self.by_user[user] += 1
        self.rules.opened(port, user)

    def closed(self, connection: object) -> None:
        found = self._counted.pop(connection, None)
        if found is None:
            return
        port, user = found
        _decrement(self.by_port, port)
        _decrement(self.by_user, user)
        self.rules.closed(port, user)

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    def _refuse(self, port: str, user: str, kind: str, why: str) -> None:
        self.refused[port] += 1
        self.notices.note(f"limit {kind}", logging.WARNING, f"user '{user}'",
                          f"refusing a connection of user '{user}': {why}",
                          f"connections refused: {why}")
        raise ConnectionLimitReached(f"connection refused: {why}")


def _decrement(counts: Counter[str], key: str) -> None:
    left = counts[key] - 1
    if left > 0:
        counts[key] = left
    else:
        del counts[key]
