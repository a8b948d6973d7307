"""Lease consumers (Spark jobs) in the model: their Consumer view and their Queue operations.

A :class:`~broker.messaging.leases.LeaseConsumer` shows as a Consumer child
of its Queue (``/api/latest/consumer/<node>/<vhost>/<queue>/<name>``), like
an AMQP consumer, with what only it has: ``heldMessages``, ``leaseExpires``
(milliseconds since the epoch), ``session`` (the job's planner process) and
``settledMessages``.  The view goes when the consumer detaches (its lease
ran out, it released everything, or its queue was deleted).

The Queue operations ``grantMessages``, ``claimMessages``,
``settleMessages`` and ``releaseMessages``
(:class:`broker.model.messaging_objects.Queue`) call the functions here;
message ids travel as ``[first, last]`` ranges.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.errors import PreconditionFailed
from broker.messaging.leases import Grant, LeaseConsumer, Leases, id_ranges, ids_in, ranges_in
from broker.model.attributes import derived
from broker.model.configured_object import ConfiguredObject
from broker.model.runtime import Consumer

if TYPE_CHECKING:
    from broker.messaging.queue import Queue as LiveQueue

__all__ = ["LeaseConsumerView", "grant", "claim", "settle", "release", "journal_location"]


class LeaseConsumerView(Consumer):
    """A lease consumer as management shows it (a Consumer with a lease)."""

    def __init__(self, parent: ConfiguredObject, consumer: LeaseConsumer) -> None:
        name = consumer.name
        if parent.child("Consumer", name) is not None:     # an AMQP consumer's tag
            name = f"{name}|lease"
        super().__init__(parent, {"name": name, "exclusive": False, "noAck": False,
                                  "arguments": {"x-lease-consumer": True}})
        self.consumer = consumer

    @derived(str, name="session", description="Lease consumers: the job's session (its planner"
                                                " process); AMQP consumers: the channel")
    def session_name(self) -> str:
        return self.consumer.session

    @derived(int, statistic=True, description="Lease consumers: messages granted and not yet settled")
    def held_messages(self) -> int:
        return self.consumer.held_count

    @derived(int, counter=True, description="Lease consumers: messages settled")
    def settled_messages(self) -> int:
        return self.consumer.settled

    @derived(int, description="Lease consumers: when the lease runs out unless renewed"
                              " (milliseconds since the epoch)")
    def lease_expires(self) -> int:
        clock = self.consumer.leases.clock
        return int((time.time() + self.consumer.deadline - clock()) * 1000)

    @derived(int, description="Lease consumers: the lease's length in seconds")
    def lease_seconds(self) -> int:
        return int(self.consumer.lease_seconds)


    def on_delete(self) -> None:
        """Management deletes the consumer: what it holds goes back to the queue at once."""
        consumer = self.consumer
        if consumer.on_detach is not None:
            consumer.on_detach = None
            consumer.leases.release(consumer.queue, consumer.name, None)
        super().on_delete()


def _leases(queue_view: Any) -> Leases:
    leases: Leases | None = getattr(queue_view.namespace, "leases", None)
    if leases is None:
        raise PreconditionFailed(f"{queue_view.label}: this virtual host has no lease consumers")
    return leases


def _attached(queue_view: ConfiguredObject, leases: Leases, live: LiveQueue, name: str) -> None:
    """Give a newly attached consumer its view (and take it away when it detaches)."""
    consumer = leases.find(live, name)
    if consumer is None or consumer.on_detach is not None:
        return
    view = LeaseConsumerView(queue_view, consumer)
    view._registered = True
    view.create()
    consumer.on_detach = view.unregister


def _answer(queue_view: Any, live: LiveQueue, name: str, session: str, grant: Grant | None) -> dict[str, Any]:
    consumer = _leases(queue_view).find(live, name)
    answer: dict[str, Any] = {"consumer": name, "session": session,
                              "heldMessages": consumer.held_count if consumer is not None else 0,
                              "journal": journal_location(queue_view)}
    if consumer is not None:
        clock = consumer.leases.clock
        answer["leaseExpires"] = int((time.time() + consumer.deadline - clock()) * 1000)
    if grant is not None:
        answer.update(grant=grant.number, count=grant.count,
                      messageIds=[[first, last] for first, last in grant.ranges],
                      redelivered=sorted([i, n] for i, n in grant.redelivered.items()),
                      missing=id_ranges(grant.missing))
    return answer


def grant(queue_view: Any, consumer: str, session: str, max_messages: int,
          lease_seconds: int) -> dict[str, Any]:
    live: LiveQueue = queue_view.live_object
    leases = _leases(queue_view)
    granted = leases.grant(live, consumer, session, max_messages, lease_seconds)
    _attached(queue_view, leases, live, consumer)
    return _answer(queue_view, live, consumer, session, granted)


def claim(queue_view: Any, consumer: str, session: str, message_ids: Any,
          lease_seconds: int) -> dict[str, Any]:
    live: LiveQueue = queue_view.live_object
    leases = _leases(queue_view)
    claimed = leases.claim(live, consumer, session, ids_in(message_ids), lease_seconds)
    _attached(queue_view, leases, live, consumer)
    return _answer(queue_view, live, consumer, session, claimed)


def settle(queue_view: Any, consumer: str, session: str, message_ids: Any,
           lease_seconds: int) -> dict[str, Any]:
    live: LiveQueue = queue_view.live_object
    leases = _leases(queue_view)
    wanted = ranges_in(message_ids)
    # not a journal transaction: should the commit fail, the journal keeps plain settle rows
    # and commits them again (a transaction's would be given up)
    done = leases.settle_ranges(live, consumer, session, wanted, lease_seconds)
    _attached(queue_view, leases, live, consumer)
    answer = _answer(queue_view, live, consumer, session, None)
    answer.update(settled=done.settled, unknown=done.unknown)
    return answer


def release(queue_view: Any, consumer: str, message_ids: Any) -> dict[str, Any]:
    live: LiveQueue = queue_view.live_object
    ids = None if message_ids is None else ids_in(message_ids)
    return {"consumer": consumer, "released": _leases(queue_view).release(live, consumer, ids)}


def journal_location(queue_view: Any) -> str | None:
    """Where the queue's virtual host journals messages (an absolute path or a URI), or None."""
    journal = getattr(queue_view.namespace, "journal", None)
    path = getattr(journal, "path", None)
    if path is None:
        return None
    return str(path.resolve()) if isinstance(path, Path) else str(path)
