"""A receiver's disposition of a range of deliveries, applied as runs: once per link, not per delivery.

A client that receives settles in ranges: rhea, proton and Qpid JMS send one
``disposition`` (first..last, a state) for everything they accepted since
their last write.  :meth:`.session.Session._disposition` finds the
deliveries the range names and hands each link's consecutive ones to
:func:`apply_outcomes` as one *run*, which does what
:meth:`.links.SendingLink.outcome` does for each of them, with the work that
is the same for the whole run done once: the state's kind is looked at once,
each queue is scheduled for dispatch once, the link registry forgets the
run's delivery tags in one call, and when the receiver left the deliveries
unsettled (it settles second) the broker's settling ``disposition`` goes out
as one frame per range of consecutive ids (:func:`id_ranges`) instead of one
per delivery.

A transactional state, and a run of one delivery, go through ``outcome``
itself: nothing is gained there and the transaction's rules stay in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator

from .delivery_frames import TAG
from .definitions import Accepted, Disposition, Modified, Rejected, Released, TransactionalState

if TYPE_CHECKING:
    from broker.messaging.queue_entry import QueueEntry

    from .links import SendingLink

__all__ = ["apply_outcomes", "id_ranges", "queue_action"]

_SERIAL = 0xFFFFFFFF
_OUTCOMES = (Accepted, Rejected, Released, Modified)


def id_ranges(ids: Iterable[int]) -> Iterator[tuple[int, int]]:
    """``ids`` (delivery ids, in order) as runs of consecutive ids, ``(first, last)`` each;
    consecutive in serial number arithmetic (0xFFFFFFFF is followed by 0)."""
    first = last = -1
    for delivery_id in ids:
        if first < 0:
            first = last = delivery_id
        elif delivery_id == (last + 1) & _SERIAL:
            last = delivery_id
        else:
            yield first, last
            first = last = delivery_id
    if first >= 0:
        yield first, last


def queue_action(link: SendingLink, state: Any, settled: bool) -> str | None:
    """The queue's method (``settle``, ``reject``, ``release``) that the peer's ``state`` of a
    delivery sent on ``link`` asks for; None: nothing to do to the queue; ``""``: not an outcome
    at all (received), nothing happens.  One choice for :meth:`.links.SendingLink.outcome` and
    :func:`apply_outcomes`."""
    if link.browser is not None and (state is None or isinstance(state, _OUTCOMES)):
        return None                                # a copy: the queue's message is untouched
    if state is None or isinstance(state, Accepted):
        return "settle" if settled or state is not None else None
    if isinstance(state, Rejected):
        return "reject"
    if isinstance(state, (Released, Modified)):
        return "release"
    return ""                                      # received: not an outcome


def apply_outcomes(link: SendingLink, deliveries: list[tuple[int, QueueEntry]], state: Any,
                   settled: bool) -> None:
    """The peer's disposition (``state``, ``settled``) of ``deliveries`` -- ``(delivery id, entry)``
    pairs, all sent on ``link``, in the order of their ids: what ``link.outcome`` does for each."""
    if len(deliveries) == 1 or type(state) is TransactionalState:
        for delivery_id, entry in deliveries:
            link.outcome(delivery_id, entry, state, settled)
        return
    action = queue_action(link, state, settled)
    if action == "":
        return
    queues: dict[Any, None] = {}
    if action is None:
        for _delivery_id, entry in deliveries:
            queues[entry.queue] = None
    else:
        last: Any = None
        apply: Any = None
        for _delivery_id, entry in deliveries:
            queue = entry.queue
            if queue is not last:                   # (one queue, usually: its method looked up once)
                last, apply = queue, getattr(queue, action)
                queues[queue] = None
            apply(entry)
    session = link.session
    if not settled:                                # (a receiver in mode second settles after us)
        unsettled = session.unsettled
        for delivery_id, _entry in deliveries:
            unsettled.pop(delivery_id, None)
        for first, last in id_ranges(delivery_id for delivery_id, _entry in deliveries):
            session.send(Disposition(role=False, first=first, last=last if last != first else None,
                                     settled=True, state=state))
    if link.link is not None:
        prefix = link.tag_prefix
        link.namespace.links.settled_many(link.link, [prefix + TAG(delivery_id) for delivery_id, _entry in deliveries])
    schedule = link.connection.schedule_dispatch
    for queue in queues:
        schedule(queue)
