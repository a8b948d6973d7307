"""Deliveries: consumers of a channel and the frames that carry a message.

A :class:`Subscription` is the channel's side of ``basic.consume``: the queue
asks it whether it can take a message now (prefetch credit, channel flow,
connection writability — Broker-J's "pull when the connection can write")
and hands it the entries it acquires.
"""

from __future__ import annotations

from struct import Struct
from typing import TYPE_CHECKING, Any

from broker.errors import PreconditionFailed
from broker.messaging.selectors import selector_of

from .codec import FRAME_BODY, FRAME_END, FRAME_END_BYTE, FRAME_HEADER, FRAME_METHOD, encode_shortstr
from .properties import FORMAT

if TYPE_CHECKING:
    from broker.messaging.message import Message
    from broker.messaging.queue import Queue, QueueEntry

    from .channel import Channel

_FRAME_HEADER = Struct(">BHI")
_DELIVER_TAIL = Struct(">QB")
_CONTENT_HEADER = Struct(">HHQ")
_BASIC_DELIVER = b"\x00\x3c\x00\x3c"       # basic.deliver: class 60, method 60
_BASIC_GET_OK = b"\x00\x3c\x00\x47"        # basic.get-ok: class 60, method 71
_BASIC_RETURN = b"\x00\x3c\x00\x32"        # basic.return: class 60, method 50
_MESSAGE_COUNT = Struct(">I")
_REPLY_CODE = Struct(">H")


# "frame-end of the method frame + content header frame header + class/weight/size"
_END_AND_CONTENT_HEADER = Struct(">BBHIHHQ")
# "frame-end of the previous frame + body frame header"
_END_AND_BODY_HEADER = Struct(">BBHI")


def content_frames(out: list[bytes], channel: int, message: Message, frame_max: int,
                   *, after_method: bool = False) -> int:
    """Append the content header and body frames of ``message``; return bytes appended.

    With ``after_method`` the caller has appended a method frame *without* its
    frame-end octet, and this function supplies it: one fewer piece per frame
    on the hottest path of the broker.
    """
    props = message.native_for(FORMAT)
    body = message.body
    size = len(body)
    header_len = 12 + len(props)
    if after_method:
        out.append(_END_AND_CONTENT_HEADER.pack(FRAME_END, FRAME_HEADER, channel, header_len, 60, 0, size))
    else:
        out.append(_FRAME_HEADER.pack(FRAME_HEADER, channel, header_len))
        out.append(_CONTENT_HEADER.pack(60, 0, size))
    out.append(props)
    total = header_len + 8
    if not size:
        out.append(FRAME_END_BYTE)
        return total
    chunk = frame_max - 8
    if size <= chunk:
        out.append(_END_AND_BODY_HEADER.pack(FRAME_END, FRAME_BODY, channel, size))
        out.append(body)
        out.append(FRAME_END_BYTE)
        return total + size + 8
    view = memoryview(body)
    for start in range(0, size, chunk):
        piece = view[start:start + chunk]
        out.append(_END_AND_BODY_HEADER.pack(FRAME_END, FRAME_BODY, channel, len(piece)))
        out.append(bytes(piece))
    out.append(FRAME_END_BYTE)
    return total + size + 8 * ((size + chunk - 1) // chunk)


def _method(out: list[bytes], channel: int, payload: bytes) -> int:
    out.append(_FRAME_HEADER.pack(FRAME_METHOD, channel, len(payload)))
    out.append(payload)
    out.append(FRAME_END_BYTE)
    return len(payload) + 8


def deliver_frames(out: list[bytes], channel: int, encoded_tag: bytes, delivery_tag: int,
                   redelivered: bool, message: Message, frame_max: int) -> int:
    exchange = _shortstr(message.exchange)
    routing_key = _shortstr(message.routing_key)
    payload_len = 13 + len(encoded_tag) + len(exchange) + len(routing_key)
    out.append(b"".join((
        _FRAME_HEADER.pack(FRAME_METHOD, channel, payload_len), _BASIC_DELIVER, encoded_tag,
        _DELIVER_TAIL.pack(delivery_tag, redelivered), exchange, routing_key,
    )))
    return payload_len + 7 + content_frames(out, channel, message, frame_max, after_method=True)


def get_ok_frames(out: list[bytes], channel: int, delivery_tag: int, redelivered: bool,
                  message: Message, message_count: int, frame_max: int) -> int:
    payload = b"".join((
        _BASIC_GET_OK, _DELIVER_TAIL.pack(delivery_tag, redelivered),
        _shortstr(message.exchange), _shortstr(message.routing_key), _MESSAGE_COUNT.pack(message_count),
    ))
    return _method(out, channel, payload) + content_frames(out, channel, message, frame_max)


def return_frames(out: list[bytes], channel: int, reply_code: int, reply_text: str,
                  message: Message, frame_max: int) -> int:
    payload = b"".join((
        _BASIC_RETURN, _REPLY_CODE.pack(reply_code), encode_shortstr(reply_text[:255]),
        _shortstr(message.exchange), _shortstr(message.routing_key),
    ))
    return _method(out, channel, payload) + content_frames(out, channel, message, frame_max)


_SHORTSTR_CACHE: dict[str, bytes] = {}


def _shortstr(s: str) -> bytes:
    """Encode names that recur (exchange names, routing keys) once."""
    encoded = _SHORTSTR_CACHE.get(s)
    if encoded is None:
        encoded = encode_shortstr(s)
        if len(_SHORTSTR_CACHE) > 10_000:
            _SHORTSTR_CACHE.clear()
        _SHORTSTR_CACHE[s] = encoded
    return encoded


def consumer_priority(arguments: dict[str, Any]) -> int:
    """RabbitMQ's ``x-priority`` consume argument (default 0; higher goes first)."""
    value = arguments.get("x-priority", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PreconditionFailed(f"invalid arg 'x-priority' for consumer: {value!r} is not an integer")
    return value


class Subscription:
    """One ``basic.consume``: a consumer of a queue on behalf of a channel."""

    __slots__ = ("tag", "encoded_tag", "queue", "channel", "no_ack", "exclusive",
                 "prefetch_count", "unacked", "arguments", "cancelled", "model", "priority", "selector")

    def __init__(self, channel: Channel, queue: Queue, tag: str, *, no_ack: bool,
                 exclusive: bool, prefetch_count: int, arguments: dict[str, Any]) -> None:
        self.channel = channel
        self.queue = queue
        self.tag = tag
        self.encoded_tag = encode_shortstr(tag)
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch_count = prefetch_count      # per-consumer limit (basic.qos global=false)
        self.unacked = 0
        self.arguments = arguments
        self.priority = consumer_priority(arguments)
        #: Broker-J's x-filter-jms-selector: only matching messages come to this consumer
        self.selector = selector_of(arguments)
        self.cancelled = False
        self.model: Any = None            # the runtime Consumer object in the model tree

    # -- the queue's Consumer contract ---------------------------------------
    def can_deliver(self, entry: QueueEntry) -> bool:
        if self.cancelled:
            return False
        if self.no_ack:
            return self.channel.can_send()
        if self.prefetch_count and self.unacked >= self.prefetch_count:
            return False
        return self.channel.can_send_unacked(len(entry.message.body))

    def deliver(self, entry: QueueEntry) -> None:
        self.channel.deliver(self, entry)

    def queue_deleted(self, queue: Queue) -> None:
        self.channel.consumer_cancelled_by_broker(self)

    def delivery_failed(self, entry: QueueEntry, exc: Exception) -> None:
        """Our ``deliver`` of ``entry`` raised (:mod:`broker.messaging.consumer_faults`): forget
        the entry (its queue takes it back) and close this connection with 541 INTERNAL_ERROR."""
        self.cancelled = True
        channel = self.channel
        for tag, (held, _sub) in list(channel.unacked.items()):
            if held is entry:
                del channel.unacked[tag]
                channel.unacked_bytes -= entry.message.body_size
                self.unacked -= 1
        self.connection_failed(exc)

    def connection_failed(self, exc: Exception) -> None:
        """Our code raised on a call from another connection: close ours (541), as our own
        input would have."""
        self.cancelled = True
        self.channel.connection.failed(exc)

    def __repr__(self) -> str:
        return f"<Subscription {self.tag!r} on {self.queue.name!r}>"
