"""The fast path of an arriving delivery: a whole message in one usual transfer frame, no Transfer.

Nearly every frame a publishing client sends is a transfer that carries a
whole message (``more`` false) with the fields clients usually set: handle,
delivery-id, an 8- or 16-octet tag, message-format, settled.  The generic
path decodes it into a :class:`~.definitions.Transfer`, dispatches it by
type through the connection and the session, and has the receiving link
check every field a transfer may carry.  :func:`whole_transfer` reads the
fields with :func:`~.incoming_frames.usual_transfer_fields` -- or, for a
transfer laid out as the session's last one, from the delivery-id's octets
alone (:class:`TransferShape`) -- and hands them to the session
(:meth:`.session.Session.whole_transfer`) and the link
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

import sys
from struct import Struct
from typing import TYPE_CHECKING, Final, Protocol

from .incoming_frames import usual_transfer_fields

if TYPE_CHECKING:
    from .connection import AmqpConnection10

__all__ = ["whole_transfer", "whole_fields", "TransferShape", "ShapeHolder", "NO_SHAPE"]

_U32: Final = Struct(">I").unpack_from
#: the octets a uint's usual encodings take after their constructor
_UINT_WIDTH: Final = {0x43: 0, 0x52: 1, 0x70: 4}


class TransferShape:
    """The layout of the last whole transfer read on a session, field values aside.

    A publisher's transfers on one link differ only in their delivery-id and
    tag: the same list encoding and size, handle, id width, tag length,
    message-format, settled and more.  A transfer that has the same bytes as
    the last one everywhere but in the id's value and the tag's content is
    read from those two places alone (:func:`whole_fields`); it has the same
    fields as :func:`~.incoming_frames.usual_transfer_fields` reads, checked
    by the same rules, since every byte those rules look at is the same.
    """

    __slots__ = ("head", "id_at", "id_width", "tag_mark", "tag_mark_at", "tail", "tail_at", "end", "handle",
                 "settled")

    def __init__(self, body: bytes, handle: int, settled: bool, end: int) -> None:
        o = 6 if body[3] == 0xc0 else 12                  # the first field, in a list8 or a list32
        o += 1 + _UINT_WIDTH[body[o]]                     # past the handle: the delivery-id's constructor
        self.id_at = o + 1
        self.id_width = _UINT_WIDTH[body[o]]
        self.head = body[:self.id_at]
        self.tag_mark_at = self.id_at + self.id_width
        self.tag_mark = body[self.tag_mark_at:self.tag_mark_at + 2]          # vbin8 and the tag's length
        self.tail_at = self.tag_mark_at + 2 + body[self.tag_mark_at + 1]
        self.tail = body[self.tail_at:end]                # message-format, settled, more
        self.end = end
        self.handle = handle
        self.settled = settled


    def delivery_id(self, body: bytes) -> int:
        """The delivery-id of a transfer ``body`` of this shape; -1 for a body of another shape."""
        if len(body) >= self.end and body.startswith(self.head) and body.startswith(self.tag_mark, self.tag_mark_at) \
                and body.startswith(self.tail, self.tail_at):
            width = self.id_width
            at = self.id_at
            return _U32(body, at)[0] if width == 4 else body[at] if width else 0
        return -1

    @classmethod
    def nothing(cls) -> TransferShape:
        """The shape before the first whole transfer: it matches no body (none is that long)."""
        shape = cls.__new__(cls)
        shape.head = shape.tag_mark = shape.tail = b""
        shape.id_at = shape.id_width = shape.tag_mark_at = shape.tail_at = shape.handle = 0
        shape.end = sys.maxsize
        shape.settled = False
        return shape


class ShapeHolder(Protocol):
    """Where the last shape is kept (a :class:`~.session.Session`)."""

    transfer_shape: TransferShape


#: a session's shape before its first whole transfer
NO_SHAPE: Final = TransferShape.nothing()


def whole_fields(holder: ShapeHolder, body: bytes) -> tuple[int, int, bool, int] | None:
    """``(handle, delivery-id, settled, where the payload starts)`` of a frame ``body`` that is a
    whole delivery (``more`` false) in one usual transfer; None for any other body.  The shape of
    the last one is kept in ``holder.transfer_shape``."""
    shape = holder.transfer_shape
    delivery_id = shape.delivery_id(body)
    if delivery_id >= 0:
        return shape.handle, delivery_id, shape.settled, shape.end
    fields = usual_transfer_fields(body)
    if fields is None or fields[5]:
        return None
    handle, delivery_id, _tag, _message_format, settled, _more, start = fields
    holder.transfer_shape = TransferShape(body, handle, bool(settled), start)
    return handle, delivery_id, bool(settled), start


def whole_transfer(connection: AmqpConnection10, channel: int, body: bytes) -> bool:
    """Take the frame ``body`` on ``channel`` of an open ``connection`` if it is a whole delivery
    in one usual transfer; False (nothing done) for every other frame."""
    session = connection.sessions.get(channel)
    if session is None or channel > connection.channel_max:
        return False
    shape = session.transfer_shape
    delivery_id = shape.delivery_id(body)
    if delivery_id >= 0:                  # laid out as the last one: no tuple of fields
        return session.whole_transfer(shape.handle, delivery_id, shape.settled, body[shape.end:])
    fields = whole_fields(session, body)
    if fields is None:
        return False
    handle, delivery_id, settled, start = fields
    # the tag matters only to a link that settles second or resumes: those take the generic path
    return session.whole_transfer(handle, delivery_id, settled, body[start:])
