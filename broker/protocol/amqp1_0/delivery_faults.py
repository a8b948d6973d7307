"""A sending link's side of :mod:`broker.messaging.consumer_faults`.

A queue delivers to a 1.0 sending link from whichever connection made the
message deliverable.  When the link's own code raises on such a call (a
transfer that cannot be encoded, a message that cannot be converted from
0-9-1), the queue detaches the link as a consumer and calls
:meth:`DeliveryFaults.delivery_failed`: the link forgets the delivery (its
session's unsettled map, the link's resumable unsettled record), so the
queue alone takes the message back, and the link's connection closes with
``amqp:internal-error`` through :mod:`broker.protocol.internal_errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.messaging.link_registry import Link, LinkRegistry
    from broker.messaging.queue_entry import QueueEntry

    from .session import Session

__all__ = ["DeliveryFaults"]


class DeliveryFaults:
    """Mixed into :class:`~broker.protocol.amqp1_0.links.SendingLink`."""

    if TYPE_CHECKING:
        session: Session
        connection: Any
        cancelled: bool
        link: Link | None
        namespace: Any

        def tag_of(self, delivery_id: int) -> bytes: ...

    def delivery_failed(self, entry: QueueEntry, exc: Exception) -> None:
        """Our ``deliver`` of ``entry`` raised: forget the delivery, close our connection."""
        self.cancelled = True
        unsettled = self.session.unsettled
        for delivery_id, (link, held) in list(unsettled.items()):
            if held is entry and link is self:
                del unsettled[delivery_id]
                if self.link is not None:
                    links: LinkRegistry = self.namespace.links
                    links.settled(self.link, self.tag_of(delivery_id))
        self.connection_failed(exc)

    def connection_failed(self, exc: Exception) -> None:
        """Our code raised on a call from another connection: close ours with
        ``amqp:internal-error``, as our own input would have."""
        self.cancelled = True
        self.connection.failed(exc)
