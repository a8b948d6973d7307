"""Producer flow control per queue: only the publishers feeding an overfull queue are blocked.

A queue whose overflow policy is ``producer-flow-control`` (Broker-J's
``overflowPolicy`` ``PRODUCER_FLOW_CONTROL``; declare argument
``overflowPolicy`` or ``qpid.policy_type``) keeps every message it is given,
however deep it gets; instead, once its depth passes a maximum
(``maximumQueueDepthMessages`` / ``x-max-length``, ``maximumQueueDepthBytes``
/ ``x-max-length-bytes``) it becomes *overfull*, and each publisher that
routes a message to it from then on is blocked -- an AMQP 0-9-1 connection
hears ``connection.blocked`` and is no longer read, an AMQP 1.0 link has its
credit taken back.  Publishers to other queues go on.  Once the depth is back
at or below the *resume limit* -- :data:`RESUME_LIMIT_VARIABLE` percent of
each maximum (Broker-J's ``queue.queueFlowResumeLimit``, 80 by default) --
the queue is underfull again and every publisher it blocked is released
(unless another overfull queue or a resource alarm still blocks it).

A queue's depth here is what it holds for consumers: messages ready,
delivered and not yet settled, and arriving (awaiting their journal commit);
bytes are the bodies of the ready and unsettled ones.  A queue becomes
overfull when a publish finds it past a maximum (Broker-J: "exceeds"); it is
looked at again, to release its publishers, by :meth:`QueueFlowControl.recheck`,
which the broker runs with the virtual host's timers (every few tens of
milliseconds, only while some queue is overfull).  Each change of a queue is
logged once.

Engines give each publisher a :class:`PublisherFlow` (0-9-1: one per
connection; 1.0: one per link) and, after routing a message, call
:meth:`QueueFlowControl.published` -- in a virtual host without such queues
it returns at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from broker.messaging.publish_rate import PublishRates, context_number

if TYPE_CHECKING:
    from broker.messaging.queue import Queue

__all__ = ["PRODUCER_FLOW_CONTROL", "RESUME_LIMIT_VARIABLE", "DEFAULT_RESUME_LIMIT", "PublisherFlow",
           "QueueFlowControl", "resume_limit"]

log = logging.getLogger("deltamq")

#: the overflow policy (:attr:`QueueSettings.overflow`) that blocks publishers
PRODUCER_FLOW_CONTROL = "producer-flow-control"
#: the context variable holding the resume limit, in percent of each maximum (Broker-J's name)
RESUME_LIMIT_VARIABLE = "queue.queueFlowResumeLimit"
DEFAULT_RESUME_LIMIT = 80.0
#: seconds between two looks at the overfull queues
RECHECK_INTERVAL = 0.02


def resume_limit(text: str | None) -> float:
    """The value of :data:`RESUME_LIMIT_VARIABLE` (unset: the default): a percentage 0-100."""
    value = context_number(RESUME_LIMIT_VARIABLE, text, "a percentage from 0 to 100",
                           lambda v: 0 <= v <= 100)
    return DEFAULT_RESUME_LIMIT if value is None else value


class PublisherFlow:
    """What blocks one publisher: a resource alarm (``alarm``, its reason) and overfull queues.

    ``on_change`` is called whenever :attr:`blocked` or :attr:`reason` may have
    changed; the engine then blocks or releases what it publishes through.  When
    a queue releases the publisher from another connection's turn (a queue
    deleted, drained by a consumer) and ``on_change`` raises, ``on_failure``
    gets the exception (the engine closes its own connection with the internal
    error) and the caller goes on.
    """

    __slots__ = ("alarm", "queues", "throttled", "_on_change", "_on_failure", "_control")

    def __init__(self, on_change: Callable[[], None] = lambda: None,
                 on_failure: Callable[[Exception], None] | None = None) -> None:
        #: why a resource alarm blocks publishers ("low on memory"), "" when none does
        self.alarm = ""
        #: the overfull queues this publisher fed, in the order they blocked it
        self.queues: dict[Queue, None] = {}
        #: held back by a publish rate limit (:mod:`broker.messaging.publish_rate`)
        self.throttled = False
        self._on_change = on_change
        self._on_failure = on_failure
        self._control: QueueFlowControl | None = None

    @property
    def blocked(self) -> bool:
        return bool(self.alarm or self.queues or self.throttled)

    @property
    def held(self) -> bool:
        """Blocked by what this virtual host decides (overfull queues, rate limits), not an alarm."""
        return bool(self.queues or self.throttled)

    @property
    def reason(self) -> str:
        """Why it is blocked, "" when it is not (the alarm's words, then the queues)."""
        parts = [self.alarm] if self.alarm else []
        if self.queues:
            names = ", ".join(f"'{queue.name}'" for queue in self.queues)
            parts.append(f"queue {names} overfull" if len(self.queues) == 1
                         else f"queues {names} overfull")
        if self.throttled:
            parts.append("publish rate limit")
        return "; ".join(parts)

    def set_alarm(self, reason: str) -> None:
        """A resource alarm set (``reason``) or cleared ("")."""
        if reason != self.alarm:
            self.alarm = reason
            self._on_change()

    def close(self) -> None:
        """The publisher is gone: no queue holds on to it any more."""
        control, self._control = self._control, None
        if control is not None:
            control.forget(self)
        self.queues.clear()
        self.throttled = False

    def _throttle(self, on: bool) -> None:
        self.throttled = on
        self._on_change()

    def _block(self, queue: Queue) -> None:
        self.queues[queue] = None
        self._on_change()

    def _release(self, queue: Queue) -> None:
        if queue in self.queues:
            del self.queues[queue]
            try:
                self._on_change()
            except Exception as exc:
                if self._on_failure is None:
                    raise
                self._on_failure(exc)


class QueueFlowControl:
    """One virtual host's queues with the producer-flow-control policy, and whom they block."""

    def __init__(self, vhost_name: str = "", resume_percent: float = DEFAULT_RESUME_LIMIT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.vhost_name = vhost_name
        #: percent of each maximum at or below which an overfull queue is underfull again
        self.resume_percent = resume_percent
        #: the queues with the policy, and their maximums (messages, bytes; None: none)
        self.watched: dict[Queue, tuple[int | None, int | None]] = {}
        #: overfull queue -> the publishers it blocks
        self.overfull: dict[Queue, set[PublisherFlow]] = {}
        #: times a queue became overfull / a publisher was blocked, since start
        self.overfull_count = 0
        self.blocked_count = 0
        self._recheck_at = 0.0
        #: the publish rate limits (:mod:`broker.messaging.publish_rate`)
        self.rates = PublishRates(clock)

    # -- the queues ---------------------------------------------------------------------

    def queue_added(self, queue: Queue) -> None:
        settings = queue.settings
        if settings.overflow == PRODUCER_FLOW_CONTROL and settings.limited:
            self.watched[queue] = (settings.max_length, settings.max_length_bytes)

    def queue_deleted(self, queue: Queue) -> None:
        """A deleted queue blocks no one any more."""
        self.watched.pop(queue, None)
        publishers = self.overfull.pop(queue, None)
        if publishers is not None:
            log.info("queue '%s' in vhost '%s' deleted while overfull: %d publishers released",
                     queue.name, self.vhost_name, len(publishers))
            for publisher in publishers:
                publisher._release(queue)

    def is_overfull(self, queue: Queue) -> bool:
        return queue in self.overfull

    def blocked_publishers(self, queue: Queue) -> int:
        return len(self.overfull.get(queue, ()))

    # -- publishing ---------------------------------------------------------------------

    def published(self, publisher: PublisherFlow, queues: Iterable[Queue]) -> None:
        """``publisher`` routed a message to ``queues``: block it on each that is overfull
        (and throttle it when it is over a publish rate limit)."""
        publisher._control = self
        if self.rates.active:
            self.rates.charge(publisher)
        watched = self.watched
        if not watched:
            return
        for queue in queues:
            maximums = watched.get(queue)
            if maximums is None:
                continue
            blocked = self.overfull.get(queue)
            if blocked is None:
                max_messages, max_bytes = maximums
                if not ((max_messages is not None and queue.message_count + queue.unacked_count
                         + queue.held_count > max_messages)
                        or (max_bytes is not None and queue.message_bytes + queue.unacked_bytes > max_bytes)):
                    continue
                blocked = self.overfull[queue] = set()
                self.overfull_count += 1
                log.warning("queue '%s' in vhost '%s' is overfull (%s); publishers to it are"
                            " blocked until it is back at %g%% of its maximum", queue.name,
                            self.vhost_name, _depth_text(queue), self.resume_percent)
            if publisher not in blocked:
                blocked.add(publisher)
                self.blocked_count += 1
                publisher._block(queue)

    @property
    def next_recheck(self) -> float | None:
        """When :meth:`recheck` is due (clock seconds); None while no queue is overfull and
        no publisher is throttled."""
        release = self.rates.next_release
        if not self.overfull:
            return release
        return self._recheck_at if release is None else min(self._recheck_at, release)

    def recheck(self, now: float = 0.0) -> None:
        """Release the publishers of every overfull queue that is back at its resume limit.

        ``now``: the clock's time (the next recheck is due :data:`RECHECK_INTERVAL` later).
        """
        self._recheck_at = now + RECHECK_INTERVAL
        self.rates.release_due(now)
        for queue in [q for q in self.overfull if q.deleted or self._underfull(q)]:
            publishers = self.overfull.pop(queue)
            if not queue.deleted:
                log.warning("queue '%s' in vhost '%s' is underfull again (%s): %d publishers"
                            " released", queue.name, self.vhost_name, _depth_text(queue),
                            len(publishers))
            for publisher in publishers:
                publisher._release(queue)

    def forget(self, publisher: PublisherFlow) -> None:
        self.rates.forget(publisher)
        for blocked in self.overfull.values():
            blocked.discard(publisher)

    def _underfull(self, queue: Queue) -> bool:
        settings = queue.settings
        share = self.resume_percent / 100.0
        messages, size = depth(queue)
        return ((settings.max_length is None or messages <= settings.max_length * share)
                and (settings.max_length_bytes is None or size <= settings.max_length_bytes * share))


def depth(queue: Queue) -> tuple[int, int]:
    """(messages, body bytes) ``queue`` holds for consumers, as flow control counts them."""
    return (queue.message_count + queue.unacked_count + queue.held_count,
            queue.message_bytes + queue.unacked_bytes)


def _depth_text(queue: Queue) -> str:
    settings = queue.settings
    messages, size = depth(queue)
    limits = []
    if settings.max_length is not None:
        limits.append(f"{messages} messages, maximum {settings.max_length}")
    if settings.max_length_bytes is not None:
        limits.append(f"{size} bytes, maximum {settings.max_length_bytes}")
    return "; ".join(limits)
