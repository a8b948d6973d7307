"""One AMQP 0-9-1 channel: exchange, queue, basic, tx and confirm classes.

The channel turns methods into calls on the virtual host's
:class:`~broker.messaging.namespace.Namespace` and keeps the per-channel
state the spec gives it: the content being assembled (basic.publish, then a
header frame, then body frames — spec 4.2.6), delivery tags and unacked
deliveries, prefetch limits (basic.qos), flow, transaction and confirm mode.

Publishes go through the channel's server transaction: an auto-commit one
applies them at once, a ``tx.select``-ed one at ``tx.commit`` (Broker-J's
``AutoCommitTransaction``/``LocalTransaction``).  Publisher confirms are kept
by a :class:`~.confirms.ConfirmLedger` and answered in order, never before
the journal has made the message durable; tx.commit-ok likewise waits for the
journal.

Soft errors (spec 1.8: 3xx/4xx "soft-error" codes) close only this channel;
hard errors propagate to the connection.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import TYPE_CHECKING, Any, Callable

from broker import errors
from broker.messaging.message import Message, MessageProperties
from broker.messaging.queue import Queue
from broker.messaging.transaction import AutoCommitTransaction, LocalTransaction

from . import direct_reply
from . import methods as m
from .codec import malformed_reason
from .confirms import ACK, NACK, ConfirmLedger, Outcome
from .delivery import Subscription, deliver_frames, get_ok_frames, return_frames
from .properties import FORMAT, decode_properties, encode_properties, parse_content_header
from .replies import Reservation, ReplyOrder
from .sender_selected import route_sender_selected
from .declarations import DeclarationMethods
from .connection import State
from .tx import PRODUCER_HEADER, Mode, TxMethods

if TYPE_CHECKING:
    from broker.messaging.journal import Durability, MessageJournal
    from broker.messaging.queue import QueueEntry

    from .connection import AmqpConnection

log = logging.getLogger(__name__)

OPEN = State.OPEN


class Channel(DeclarationMethods, TxMethods):
    def __init__(self, connection: AmqpConnection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.namespace = connection.namespace
        self.closing = False
        self.flow_active = True
        self.mode = Mode.NORMAL
        self.tx: LocalTransaction | AutoCommitTransaction = AutoCommitTransaction()
        # content assembly (spec 4.2.6)
        self._publish: m.BasicPublish | None = None
        self._body_size = 0
        self._properties = b""
        self._body_parts: list[bytes] = []
        self._body_received = 0
        #: the last header-less properties decoded, as received and decoded: a publisher
        #: sends the same ones again and again (the message keeps the bytes, not the view)
        self._last_properties: tuple[bytes, MessageProperties] = (b"", MessageProperties())
        # deliveries
        self._next_tag = 1
        self.unacked: dict[int, tuple[QueueEntry, Subscription | None]] = {}
        self.unacked_bytes = 0
        self.subscriptions: dict[str, Subscription] = {}
        self.prefetch_count = 0          # channel-wide (global=true)
        self.prefetch_size = 0
        self.consumer_prefetch = 0       # applied to new consumers (global=false)
        self.confirms = ConfirmLedger()        # publisher confirms (confirm mode only)
        self._awaiting: Durability | None = None   # the journal group confirms wait for
        self._journal: MessageJournal | None = getattr(self.namespace, "journal", None)
        self.last_queue_name = ""
        # everything this channel sends, in request order (tx.commit-ok may hold the rest back)
        self._replies = ReplyOrder(self._write)
        self.reply_consumer: direct_reply.ReplyConsumer | None = None
        # the runtime Session object in the model tree (management lists it)
        model = connection.model
        self.model: Any = model.register_session(number) if model is not None else None
        self._handlers: dict[type, Callable[[Any], None]] = {
            m.BasicPublish: self._basic_publish,
            m.BasicAck: self._basic_ack,
            m.BasicNack: self._basic_nack,
            m.BasicReject: self._basic_reject,
            m.BasicConsume: self._basic_consume,
            m.BasicCancel: self._basic_cancel,
            m.BasicGet: self._basic_get,
            m.BasicQos: self._basic_qos,
            m.BasicRecover: self._basic_recover,
            m.BasicRecoverAsync: self._basic_recover, m.BasicRecoverSync: self._basic_recover,
            m.ExchangeDeclare: self._exchange_declare,
            m.ExchangeDelete: self._exchange_delete,
            m.ExchangeBind: self._exchange_bind,
            m.ExchangeUnbind: self._exchange_unbind,
            m.ExchangeBound: self._exchange_bound,
            m.QueueDeclare: self._queue_declare,
            m.QueueBind: self._queue_bind,
            m.QueueUnbind: self._queue_unbind,
            m.QueuePurge: self._queue_purge,
            m.QueueDelete: self._queue_delete,
            m.ChannelFlow: self._channel_flow,
            m.ChannelFlowOk: lambda method: None,
            m.ChannelClose: self._channel_close,
            m.ChannelCloseOk: self._channel_close_ok,
            m.ChannelOpen: self._channel_open_again,
            m.TxSelect: self._tx_select,
            m.TxCommit: self._tx_commit,
            m.TxRollback: self._tx_rollback,
            m.ConfirmSelect: self._confirm_select,
            m.AccessRequest: self._access_request,
            m.BasicCancelOk: lambda method: None,
        }

    # -- output ---------------------------------------------------------------------
    def reply(self, method: m.Method) -> None:
        """Send ``method`` on this channel, after every reply still owed (see :mod:`.replies`)."""
        data = self.connection.encode_method(self.number, method)
        self._replies.send([data], len(data))

    def _write(self, frames: list[bytes], size: int) -> None:
        if self.connection.is_open:        # a reply released after the connection closed stays unsent
            self.connection.write_frames(frames, size)

    # -- frame entry points ------------------------------------------------------
    def method(self, method: m.Method, payload: bytes) -> None:
        if self.closing:
            if isinstance(method, m.ChannelCloseOk):
                self.connection.channel_closed(self.number)
            elif isinstance(method, m.ChannelClose):
                self.reply(m.ChannelCloseOk())
            return
        if self._publish is not None:
            raise errors.UnexpectedFrame(
                f"expected content header for class 60, got method {method.NAME} on channel {self.number}")
        handler = self._handlers.get(type(method))
        if handler is None:
            raise errors.NotImplemented_(f"{method.NAME} is not implemented")
        try:
            handler(method)
        except errors.BrokerError as exc:
            if exc.hard:
                self.connection.hard_error_in_method(exc, method)
            else:
                self.soft_error(exc, method)

    def header_frame(self, payload: bytes) -> None:
        if self.closing:
            return
        if self._publish is None or self._properties:
            raise errors.UnexpectedFrame(f"content header frame on channel {self.number} without basic.publish")
        try:
            class_id, body_size, props = parse_content_header(payload)
        except Exception as exc:
            raise errors.FrameError(f"malformed content header: {exc}")
        if class_id != 60:
            raise errors.UnexpectedFrame(f"content header for class {class_id}, expected 60 (basic)")
        max_size = self.connection.max_message_size
        if body_size > max_size:
            publish = self._publish
            self._publish = None
            self._body_size = body_size
            self._skip_body(publish, errors.PreconditionFailed(
                f"message size {body_size} is larger than configured max size {max_size}"))
            return
        self._properties = props or b"\x00\x00"
        self._body_size = body_size
        if body_size == 0:
            self._complete_publish()

    def body_frame(self, payload: bytes) -> None:
        if self.closing:
            return
        if self._publish is None or not self._properties:
            raise errors.UnexpectedFrame(f"content body frame on channel {self.number} without a content header")
        self._body_parts.append(payload)
        self._body_received += len(payload)
        if self._body_received >= self._body_size:
            if self._body_received > self._body_size:
                raise errors.FrameError(
                    f"content body of {self._body_received} bytes exceeds the declared {self._body_size}")
            self._complete_publish()

    def _skip_body(self, publish: m.BasicPublish, exc: errors.BrokerError) -> None:
        # close the channel; the body frames that follow are dropped because closing
        self.soft_error(exc, publish)

    # -- basic.publish -------------------------------------------------------------
    def _basic_publish(self, method: m.BasicPublish) -> None:
        if method.immediate:
            # RabbitMQ 3.0+: immediate is not supported, and says so loudly
            raise errors.NotImplemented_("immediate=true")
        self.connection.publishing()
        self._publish = method
        self._properties = b""
        self._body_parts = []
        self._body_received = 0
        if self.mode is Mode.CONFIRM:
            self.confirms.publish()

    def _complete_publish(self) -> None:
        publish = self._publish
        assert publish is not None
        self._publish = None
        parts = self._body_parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self._body_parts = []
        encoded = self._properties
        self._properties = b""
        if encoded == self._last_properties[0]:
            props = self._last_properties[1]
        else:
            try:
                props = decode_properties(encoded, 0)
            except (ValueError, IndexError, struct.error) as exc:
                self.connection.hard_error_in_method(
                    errors.FrameError(f"malformed content header properties: {malformed_reason(exc)}"),
                    publish)
                return
            if props.headers is None:       # (no table in it: nothing anyone could change)
                self._last_properties = (encoded, props)
        ns = self.namespace
        self.connection.messages_received += 1
        if props.reply_to == direct_reply.PSEUDO_QUEUE:
            try:
                props = props.replace(reply_to=direct_reply.requester_address(self))
            except errors.BrokerError as exc:
                self.soft_error(exc, publish)
                return
            encoded = encode_properties(props)
        if not publish.exchange and publish.routing_key.startswith(direct_reply.PREFIX):
            self._publish_reply(publish, body, props, encoded)
            return
        try:
            headers = props.headers
            if headers and PRODUCER_HEADER in headers:   # exactly-once publishing: see .tx
                props, encoded, headers = self.producer_marked(props)
            if headers and ("CC" in headers or "BCC" in headers):
                message, queues = route_sender_selected(ns, publish.exchange, publish.routing_key,
                                                        body, props)
            else:
                message = Message(exchange=publish.exchange, routing_key=publish.routing_key, body=body,
                                  properties=props, native=encoded, format=FORMAT,
                                  arrival=ns.clock())  # the namespace's clock: engines have none
                queues = ns.route(publish.exchange, message)
        except errors.BrokerError as exc:
            if exc.hard:
                self.connection.hard_error_in_method(exc, publish)
            else:
                self.soft_error(exc, publish)
            return
        if not queues:
            if publish.mandatory:
                out: list[bytes] = []
                size = return_frames(out, self.number, 312, "NO_ROUTE", message, self.connection.frame_max)
                self._replies.send(out, size)
            self._confirm(ACK)
            return
        accepted = self.tx.enqueue(message, queues)     # at once, or at tx.commit
        ns.flow.published(self.connection.publisher_flow, queues)     # producer flow control
        if self.mode is Mode.CONFIRM:
            if not accepted:
                self._confirm(NACK)
            elif message.journal_id and self._journal is not None:
                self._confirm(self._journal.pending or ACK)
            else:
                self._confirm(ACK)

    def _publish_reply(self, publish: m.BasicPublish, body: bytes, props: MessageProperties,
                       encoded: bytes) -> None:
        """A reply to a direct reply-to requester: straight to its channel, no queue."""
        message = Message(exchange="", routing_key=publish.routing_key, body=body, properties=props,
                          native=encoded, format=FORMAT, arrival=self.namespace.clock())
        target = direct_reply.target(self.namespace, publish.routing_key)
        if target is not None and not target.channel.closing:
            try:
                target.channel.deliver_reply(target, message)
            except Exception as exc:    # the requester's code: its connection closes, not ours
                target.channel.connection.failed(exc)
        elif publish.mandatory:
            out: list[bytes] = []
            size = return_frames(out, self.number, 312, "NO_ROUTE", message, self.connection.frame_max)
            self._replies.send(out, size)
        self._confirm(ACK)

    def deliver_reply(self, consumer: direct_reply.ReplyConsumer, message: Message) -> None:
        tag = self._next_tag
        self._next_tag = tag + 1
        out: list[bytes] = []
        size = deliver_frames(out, self.number, consumer.encoded_tag, tag, False, message,
                              self.connection.frame_max)
        self.connection.messages_sent += 1
        self._replies.send(out, size)

    def _confirm(self, outcome: Outcome) -> None:
        """Record the outcome of the publish just completed (confirm mode only)."""
        if self.mode is Mode.CONFIRM:
            self.confirms.record(outcome)
            self.connection.confirms_due.add(self)

    def flush_confirms(self) -> None:
        """Answer every publish whose outcome is known, in order, as few frames as possible."""
        if self.closing:
            return
        answers, blocked = self.confirms.answers()
        for ack, tag, multiple in answers:
            self.reply(m.BasicAck(delivery_tag=tag, multiple=multiple) if ack
                       else m.BasicNack(delivery_tag=tag, multiple=multiple, requeue=False))
        if blocked is not None and self._awaiting is not blocked:
            self._awaiting = blocked
            blocked.when_durable(self._journal_durable)

    def _journal_durable(self) -> None:
        self._awaiting = None
        if self.connection.channels.get(self.number) is self:
            self.flush_confirms()

    # -- consumers and deliveries ----------------------------------------------------
    def can_send(self) -> bool:
        # no deliveries while a reply is owed: a consume-ok held behind it must precede them
        return self.flow_active and not self.closing and self.connection.writable and not self._replies.waiting

    def can_send_unacked(self, size: int) -> bool:
        # (can_send, inlined: asked before every delivery)
        if not (self.flow_active and not self.closing and self.connection.writable
                and not self._replies.waiting):
            return False
        if self.prefetch_count and len(self.unacked) >= self.prefetch_count:
            return False
        if self.prefetch_size and self.unacked and self.unacked_bytes + size > self.prefetch_size:
            return False
        return True

    def deliver(self, sub: Subscription, entry: QueueEntry) -> None:
        tag = self._next_tag
        self._next_tag = tag + 1
        message = entry.message
        if not sub.no_ack:
            self.unacked[tag] = (entry, sub)
            self.unacked_bytes += len(message.body)
            sub.unacked += 1
        out: list[bytes] = []
        connection = self.connection
        size = deliver_frames(out, self.number, sub.encoded_tag, tag, entry.redelivered, message,
                              connection.frame_max)
        connection.messages_sent += 1
        if self._replies.waiting:           # behind a reply still owed
            self._replies.send(out, size)
        elif connection.state is OPEN:      # (what _write does, two calls less on the hottest path)
            connection.write_frames(out, size)

    def resume_deliveries(self) -> None:
        for sub in self.subscriptions.values():
            self.connection.schedule_dispatch(sub.queue)

    def consumer_cancelled_by_broker(self, sub: Subscription) -> None:
        """The queue was deleted: tell the client if it understands basic.cancel from us."""
        if self.subscriptions.pop(sub.tag, None) is None:
            return
        self._forget(sub)
        caps = self.connection.client_capabilities
        if caps.get("consumer_cancel_notify") and not self.closing:
            self.reply(m.BasicCancel(consumer_tag=sub.tag, nowait=True))

    @staticmethod
    def _forget(sub: Subscription) -> None:
        sub.cancelled = True
        if sub.model is not None:
            sub.model.unregister()
            sub.model = None

    def _basic_consume(self, method: m.BasicConsume) -> None:
        tag = method.consumer_tag or f"amq.ctag-{os.urandom(16).hex()}"
        if tag in self.subscriptions or (self.reply_consumer and self.reply_consumer.tag == tag):
            raise errors.NotAllowed(f"attempt to reuse consumer tag '{tag}'")
        if method.queue == direct_reply.PSEUDO_QUEUE:
            self.reply_consumer = direct_reply.consume(self, tag, method.no_ack)
            if not method.nowait:
                self.reply(m.BasicConsumeOk(consumer_tag=tag))
            return
        queue = self._queue(method.queue)
        sub = Subscription(self, queue, tag, no_ack=method.no_ack, exclusive=method.exclusive,
                           prefetch_count=self.consumer_prefetch, arguments=method.arguments)
        sub.cancelled = True                      # no deliveries before consume-ok
        queue.add_consumer(sub, exclusive=method.exclusive)
        self.subscriptions[tag] = sub
        if self.model is not None:
            sub.model = self.model.register_consumer(tag, queue=queue.name, exclusive=method.exclusive,
                                                     no_ack=method.no_ack, arguments=method.arguments)
        if not method.nowait:
            self.reply(m.BasicConsumeOk(consumer_tag=tag))
        sub.cancelled = False
        self.connection.schedule_dispatch(queue)

    def _basic_cancel(self, method: m.BasicCancel) -> None:
        if self.reply_consumer is not None and self.reply_consumer.tag == method.consumer_tag:
            direct_reply.cancel(self.reply_consumer)
            self.reply_consumer = None
        sub = self.subscriptions.pop(method.consumer_tag, None)
        if sub is not None:
            self._forget(sub)
            sub.queue.remove_consumer(sub)
        if not method.nowait:
            self.reply(m.BasicCancelOk(consumer_tag=method.consumer_tag))

    def _basic_get(self, method: m.BasicGet) -> None:
        queue = self._queue(method.queue)
        # a FIFO queue's head is ready whatever arrives behind it; any other kind (priority,
        # sorted, last-value) may owe its head to a message still on its way to disk
        fifo_head_ready = queue.message_count and type(queue) is Queue
        held = None if fifo_head_ready else queue.held_until
        if held is not None:
            # what was published before is on its way to disk: answer once it has arrived
            # (as RabbitMQ, where a get right after a publish finds the message); what is
            # asked after the get waits behind its answer
            place = self._replies.reserve()
            held.when_durable(lambda: self._get_now(method, queue, place))
            return
        out: list[bytes] = []
        size = self._get(method, queue, out)
        self._replies.send(out, size)

    def _get_now(self, method: m.BasicGet, queue: Queue, place: Reservation) -> None:
        connection = self.connection
        if not connection.is_open:
            self._replies.discard()
            return
        out: list[bytes] = []
        size = 0
        if not self.closing and connection.channels.get(self.number) is self:
            size = self._get(method, queue, out)
        self._replies.fill(place, out, size)          # a moot get still lets a close-ok go
        if not self._replies.holding and not self.closing:
            self.resume_deliveries()
            connection.run_dispatch()

    def _get(self, method: m.BasicGet, queue: Queue, out: list[bytes]) -> int:
        """Take a message for ``basic.get``: its get-ok frames (or get-empty) into ``out``."""
        entry = queue.get()
        if entry is None:
            data = self.connection.encode_method(self.number, m.BasicGetEmpty())
            out.append(data)
            return len(data)
        tag = self._next_tag
        self._next_tag = tag + 1
        if method.no_ack:
            queue.settle(entry)
        else:
            self.unacked[tag] = (entry, None)
            self.unacked_bytes += entry.message.body_size
        self.connection.messages_sent += 1
        return get_ok_frames(out, self.number, tag, entry.redelivered, entry.message, queue.message_count,
                             self.connection.frame_max)

    def _basic_qos(self, method: m.BasicQos) -> None:
        if method.global_:
            self.prefetch_count = method.prefetch_count
            self.prefetch_size = method.prefetch_size
        else:
            self.consumer_prefetch = method.prefetch_count
            self.prefetch_size = method.prefetch_size
        self.reply(m.BasicQosOk())
        self.resume_deliveries()

    # -- settlement --------------------------------------------------------------
    def _take(self, delivery_tag: int, multiple: bool) -> list[tuple[QueueEntry, Subscription | None]]:
        unacked = self.unacked
        if multiple:
            upto = delivery_tag or self._next_tag
            if unacked and upto >= self._next_tag - 1:
                # every delivery outstanding (tags are below the next one): all at once
                taken = list(unacked.values())
                unacked.clear()
            else:
                taken = []
                while unacked:
                    tag = next(iter(unacked))
                    if tag > upto:
                        break
                    taken.append(unacked.pop(tag))
            if delivery_tag and not taken and delivery_tag >= self._next_tag:
                raise errors.PreconditionFailed(f"unknown delivery tag {delivery_tag}")
        else:
            item = unacked.pop(delivery_tag, None)
            if item is None:
                raise errors.PreconditionFailed(f"unknown delivery tag {delivery_tag}")
            taken = [item]
        size = 0
        last: Subscription | None = None
        for entry, sub in taken:
            size += len(entry.message.body)
            if sub is not None:
                sub.unacked -= 1
                if sub is not last and not sub.cancelled:
                    last = sub                  # (a run of one consumer's: its queue once)
                    self.connection.schedule_dispatch(sub.queue)
        self.unacked_bytes -= size
        if self.prefetch_count or self.prefetch_size:
            self.resume_deliveries()
        return taken

    def _basic_ack(self, method: m.BasicAck) -> None:
        settle = self.tx.settle
        if self.mode is Mode.TX:
            for entry, _sub in self._take_for_settlement(method.delivery_tag, method.multiple).values():
                settle(entry)
        else:                       # (what _take_for_settlement comes to outside a transaction)
            for entry, _sub in self._take(method.delivery_tag, method.multiple):
                settle(entry)

    def _take_for_settlement(self, delivery_tag: int, multiple: bool
                             ) -> dict[int, tuple[QueueEntry, Subscription | None]]:
        """Take deliveries off the unacked map; in a transaction, rollback puts them back."""
        before = set(self.unacked) if self.mode is Mode.TX else None
        taken_list = self._take(delivery_tag, multiple)
        if before is None:
            return dict(enumerate(taken_list))
        taken = {tag: item for tag, item in zip(sorted(before - set(self.unacked)), taken_list)}
        assert isinstance(self.tx, LocalTransaction)
        self.tx.add_rollback_action(lambda: self._restore_unacked(taken))
        return taken

    def _restore_unacked(self, taken: dict[int, tuple[QueueEntry, Subscription | None]]) -> None:
        merged = {**self.unacked, **taken}
        self.unacked = {tag: merged[tag] for tag in sorted(merged)}
        for entry, sub in taken.values():
            self.unacked_bytes += entry.message.body_size
            if sub is not None:
                sub.unacked += 1

    def _basic_reject(self, method: m.BasicReject) -> None:
        self._settle_negatively(self._take_for_settlement(method.delivery_tag, False), method.requeue)

    def _basic_nack(self, method: m.BasicNack) -> None:
        self._settle_negatively(self._take_for_settlement(method.delivery_tag, method.multiple), method.requeue)

    def _settle_negatively(self, taken: dict[int, tuple[QueueEntry, Subscription | None]], requeue: bool) -> None:
        for entry, _sub in taken.values():
            if requeue:
                self.tx.release(entry)
            else:
                self.tx.reject(entry)
            self.connection.schedule_dispatch(entry.queue)

    def _basic_recover(self, method: m.BasicRecover | m.BasicRecoverAsync | m.BasicRecoverSync) -> None:
        # Both requeue=true and requeue=false put the messages back in their queues
        # (redelivered), so they reach this or another consumer again.
        self.release_unacked()
        ok: Any = {m.BasicRecover: m.BasicRecoverOk, m.BasicRecoverSync: m.BasicRecoverSyncOk}.get(type(method))
        if ok in self.connection._encoders:     # 0-9's basic.recover is asynchronous: it has no recover-ok
            self.reply(ok())

    def release_unacked(self) -> None:
        taken = list(self.unacked.values())
        self.unacked.clear()
        self.unacked_bytes = 0
        for entry, sub in taken:
            if sub is not None:
                sub.unacked -= 1
            entry.queue.release(entry)
            self.connection.schedule_dispatch(entry.queue)

    def release_all(self) -> None:
        """Channel or connection closing: cancel consumers, requeue what was not acked."""
        for sub in list(self.subscriptions.values()):
            self._forget(sub)
            sub.queue.remove_consumer(sub)
        self.subscriptions.clear()
        if self.reply_consumer is not None:
            direct_reply.cancel(self.reply_consumer)
            self.reply_consumer = None
        if self.model is not None:
            self.model.unregister()
            self.model = None
        if isinstance(self.tx, LocalTransaction):
            self.tx.rollback()
        self.release_unacked()
        self._publish = None

    # -- channel class -------------------------------------------------------------
    def _channel_flow(self, method: m.ChannelFlow) -> None:
        self.flow_active = method.active
        self.reply(m.ChannelFlowOk(active=method.active))
        if method.active:
            self.resume_deliveries()

    def _channel_close(self, method: m.ChannelClose) -> None:
        self.flush_confirms()                  # publishes before the close are confirmed first
        self.connection.confirms_due.discard(self)
        self.release_all()
        self.closing = True                    # late journal callbacks must not answer
        self.reply(m.ChannelCloseOk())
        self.connection.channel_closed(self.number)

    def _channel_close_ok(self, method: m.ChannelCloseOk) -> None:
        raise errors.CommandInvalid(f"channel.close-ok on channel {self.number}, which was not closing")

    def _channel_open_again(self, method: m.ChannelOpen) -> None:
        raise errors.ChannelError(f"second 'channel.open' seen on channel {self.number}")

    def _access_request(self, method: Any) -> None:
        # 0-8/0-9 access.request: realms are gone; grant ticket 1 as Broker-J does
        self.reply(m.AccessRequestOk(ticket=1))

    def soft_error(self, exc: errors.BrokerError, method: m.Method) -> None:
        from .versions import method_ids

        class_id, method_id = method_ids(method, self.connection.version)
        log.debug("closing channel %d: %s", self.number, exc.reply_text)
        self.release_all()
        self.closing = True
        self.connection.confirms_due.discard(self)
        self.reply(m.ChannelClose(
            reply_code=exc.reply_code, reply_text=self.connection.reply_text(exc), class_id=class_id,
            method_id=method_id))

    # -- confirm class (tx class: .tx) ---------------------------------------------
    def _confirm_select(self, method: m.ConfirmSelect) -> None:
        if self.mode is Mode.TX:
            raise errors.PreconditionFailed("cannot switch from tx to confirm mode")
        self.mode = Mode.CONFIRM
        if not method.nowait:
            self.reply(m.ConfirmSelectOk())
