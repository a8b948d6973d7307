"""Publish rate limits: messages per second per publisher and per virtual host.

Two context variables of the virtual host (or the broker, or ``-D``), in
messages per second, -1 (the default) for no limit:

- ``deltamq.publish_rate_limit_per_connection``: each publisher (an AMQP 0-9-1
  connection, an AMQP 1.0 link);
- ``deltamq.publish_rate_limit_per_virtual_host``: all publishers of the virtual
  host together.

Each limit is a token bucket holding one second's worth of messages: a burst of
up to that many goes through at once, then the rate holds.  A publisher that
publishes with its bucket (or the virtual host's) empty is blocked the way
producer flow control blocks it (:class:`~broker.messaging.flow_control.PublisherFlow`,
reason ``publish rate limit``) until the bucket has refilled enough for it,
which :meth:`PublishRates.release_due` sees to with the virtual host's timers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.messaging.flow_control import PublisherFlow

__all__ = ["PER_PUBLISHER_VARIABLE", "PER_VIRTUAL_HOST_VARIABLE", "TokenBucket", "PublishRates",
           "rate_limit", "context_number"]

PER_PUBLISHER_VARIABLE = "deltamq.publish_rate_limit_per_connection"
PER_VIRTUAL_HOST_VARIABLE = "deltamq.publish_rate_limit_per_virtual_host"
#: a throttled publisher is released once its bucket holds this share of a second's messages
#: (and at least one)
RESUME_SHARE = 0.05


def context_number(variable: str, text: str | None, expected: str,
                   valid: Callable[[float], bool]) -> float | None:
    """``variable``'s value ``text`` as a number ``valid`` accepts (None: unset); else a
    ValueError saying what was ``expected``."""
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not valid(value):
        raise ValueError(f"context variable '{variable}' is {text!r}; expected {expected}")
    return value


def rate_limit(variable: str, text: str | None) -> float | None:
    """A limit's context value in messages per second; None for no limit (unset, -1)."""
    value = context_number(variable, text, "messages per second above 0, or -1 for no limit",
                           lambda v: v == -1 or v > 0)
    return None if value == -1 else value


class TokenBucket:
    """``rate`` tokens a second, at most one second's worth kept."""

    __slots__ = ("rate", "tokens", "updated")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.updated = now

    def take(self, now: float) -> float:
        """Take one token; the seconds until the bucket is usable again (0: it still is)."""
        tokens = min(self.rate, self.tokens + (now - self.updated) * self.rate) - 1
        self.tokens, self.updated = tokens, now
        if tokens > -1e-9:                  # a release computed in floating point is on time
            return 0.0
        return (max(1.0, self.rate * RESUME_SHARE) - tokens) / self.rate


class PublishRates:
    """The rate limits of one virtual host and the publishers they hold back now."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.per_publisher: float | None = None
        self.per_virtual_host: float | None = None
        #: is any limit set (read for every message published: a plain attribute)
        self.active = False
        self._vhost_bucket: TokenBucket | None = None
        self._buckets: dict[PublisherFlow, TokenBucket] = {}
        #: throttled publisher -> when it may publish again (clock seconds)
        self.throttled: dict[PublisherFlow, float] = {}
        #: times a publisher was throttled, since start
        self.throttled_count = 0

    def set_limits(self, per_publisher: float | None, per_virtual_host: float | None) -> None:
        self.per_publisher, self.per_virtual_host = per_publisher, per_virtual_host
        self.active = per_publisher is not None or per_virtual_host is not None
        now = self.clock()
        self._vhost_bucket = TokenBucket(per_virtual_host, now) if per_virtual_host else None
        self._buckets.clear()

    def charge(self, publisher: PublisherFlow) -> None:
        """``publisher`` published one message: throttle it if that was over a limit."""
        now = self.clock()
        wait = 0.0
        if self.per_publisher is not None:
            bucket = self._buckets.get(publisher)
            if bucket is None:
                bucket = self._buckets[publisher] = TokenBucket(self.per_publisher, now)
            wait = bucket.take(now)
        if self._vhost_bucket is not None:
            wait = max(wait, self._vhost_bucket.take(now))
        if wait > 0 and publisher not in self.throttled:
            self.throttled[publisher] = now + wait
            self.throttled_count += 1
            publisher._throttle(True)

    @property
    def next_release(self) -> float | None:
        return min(self.throttled.values()) if self.throttled else None

    def release_due(self, now: float) -> None:
        for publisher in [p for p, until in self.throttled.items() if until <= now]:
            del self.throttled[publisher]
            publisher._throttle(False)

    def forget(self, publisher: PublisherFlow) -> None:
        self._buckets.pop(publisher, None)
        self.throttled.pop(publisher, None)
