"""The fast path of an arriving delivery: a whole message in one usual transfer frame, no Transfer.

Nearly every frame a publishing client sends is a transfer that carries a
whole message (``more`` false) with the fields clients usually set: handle,
delivery-id, an 8- or 16-octet tag, message-format, settled.  The generic
path decodes it into a :class:`~.definitions.Transfer`, dispatches it by
type through the connection and the session, and has the receiving link
check every field a transfer may carry.  :func:`whole_transfer` reads the
fields with :func:`~.incoming_frames.usual_transfer_fields` and hands them
to the session (:meth:`.session.Session.whole_transfer`) and the link
(:meth:`.links.ReceivingLink.whole_delivery`) directly.

Where anything is unusual -- another encoding, ``more``, a channel without
a session, a session ending or out of window, a link that is not a plain
receiving link, one without credit, in rcv-settle-mode second, mid-delivery,
or a message over the size limit -- it returns False having changed nothing,
and the connection takes the generic path, which decides (and names any
fault) as before.  The outcome for the peer is the same either way
(tests/unit/protocol/amqp1_0/test_transfer_arrival.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .incoming_frames import usual_transfer_fields

if TYPE_CHECKING:
    from .connection import AmqpConnection10

__all__ = ["whole_transfer"]


def whole_transfer(connection: AmqpConnection10, channel: int, body: bytes) -> bool:
    """Take the frame ``body`` on ``channel`` of an open ``connection`` if it is a whole delivery
    in one usual transfer; False (nothing done) for every other frame."""
    fields = usual_transfer_fields(body)
    if fields is None:
        return False
    handle, delivery_id, _tag, _message_format, settled, more, start = fields
    if more or channel > connection.channel_max:
        return False
    session = connection.sessions.get(channel)
    # the tag matters only to a link that settles second or resumes: those take the generic path
    return session is not None and session.whole_transfer(handle, delivery_id, bool(settled), body[start:])
