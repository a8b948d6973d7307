"""A first delivery's transfer frame in one step, from what a sending link keeps.

Nearly every delivery to a 1.0 consumer is a message's first (delivery-count
0, first-acquirer true), kept as received with its body in one data section
and without broker annotations, whose delivery-id is 256 or more.  Its
transfer frame is the frame header, the transfer performative -- the same
octets for every delivery on the link but the delivery-id and the tag (the
link's prefix and the id) -- and the payload: the first delivery's header,
the sections after it, the data section's start, the body and the footer
(:func:`.delivery_frames.payload_parts`), where all but the body depend only
on the metadata's bytes and the body's size.

:class:`FirstTransfers` keeps the performative's fixed octets for one link,
and the layout cache of :mod:`.delivery_frames` keeps the payload's parts
before the body per body size, so the frame is one ``join`` of nine parts
with two computed: the id's four octets and the frame's size.  It returns
None wherever that does not hold, and the caller takes
:func:`.delivery_frames.transfer_frame` and
:func:`.message_format.transfer_payload_parts`, which write the same bytes
(tests/unit/protocol/amqp1_0/test_first_delivery.py).
"""

from __future__ import annotations

from struct import Struct
from typing import Final

from broker.messaging.message import Message

from .delivery_frames import first_payload_head
from .encoding import FALSE, TRUE, enc_uint
from .message_format import FORMAT

__all__ = ["FirstTransfers"]

_FRAME_HEADER: Final = Struct(">IBBH").pack
_U32: Final = Struct(">I").pack
_TRANSFER: Final = b"\x00\x53\x14\xc0"       # descriptor of transfer, then a list8
_FORMAT_0: Final = b"\x43"                   # message-format 0 as uint0
#: the tag: the link's 4-octet prefix and the delivery id as 8 octets (SendingLink.tag_of)
_TAG_SIZE: Final = 12


class FirstTransfers:
    """The transfer frames of first deliveries on one sending link (channel, handle, settled and
    the tag's prefix fixed): :meth:`frame`, or None where the generic path must write it."""

    __slots__ = ("channel", "head", "mark", "tail", "fixed")

    def __init__(self, channel: int, handle: int, tag_prefix: bytes, settled: bool) -> None:
        h = enc_uint(handle)
        # the list8's size and count: handle, id (0x70 and 4 octets), tag, message-format, settled
        list_size = 1 + len(h) + 5 + 2 + _TAG_SIZE + 1 + 1
        self.channel = channel
        self.head = _TRANSFER + bytes((list_size, 5)) + h + b"\x70"
        self.mark = b"\xa0" + bytes((_TAG_SIZE,)) + tag_prefix + b"\x00\x00\x00\x00"
        self.tail = _FORMAT_0 + (TRUE if settled else FALSE)
        #: frame header, performative: all but the payload
        self.fixed = 8 + len(self.head) + 4 + len(self.mark) + 4 + len(self.tail)

    def frame(self, delivery_id: int, message: Message, max_frame_size: int) -> bytes | None:
        """The one frame of ``message``'s first delivery as ``delivery_id``, or None where the
        generic path must write it (an id below 256, another format, annotations, another layout,
        more than one frame)."""
        if delivery_id < 256 or message.format is not FORMAT or message.annotations is not None:
            return None
        native = message.received_native()
        if native is None:
            return None
        body = message.body
        head = first_payload_head(native, len(body))
        if head is None:
            return None
        prefix, footer = head
        size = self.fixed + len(prefix) + len(body) + len(footer)
        if size > max_frame_size:
            return None
        u = _U32(delivery_id)
        return b"".join((_FRAME_HEADER(size, 2, 0, self.channel), self.head, u, self.mark, u, self.tail,
                         prefix, body, footer))
