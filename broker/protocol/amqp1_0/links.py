"""AMQP 1.0 links (spec 2.6, 3.5): the broker's end of each, through the link registry.

A link is attached through the virtual host's
:class:`~broker.messaging.link_registry.LinkRegistry` under
(container id, link name, role): the registry decides whether it is new,
resumed or recovered, and takes it from another endpoint first when it is
attached elsewhere (that endpoint is detached with ``amqp:link:stolen``).
Only once the registry hands the link over (:meth:`LinkEndpoint10.link_attached`)
does the broker answer the peer's ``attach``.

- :class:`ReceivingLink` -- the client sends.  Its target's address names an
  exchange and routing key (:mod:`.addresses`); the broker grants credit,
  assembles multi-frame transfers, drops aborted ones, routes each message
  and settles: at once for a pre-settled transfer, else with ``accepted``
  once a durable queue's journal has committed it, or ``rejected`` when
  nothing took it.
- :class:`SendingLink` -- the client receives from a queue.  It is one of
  the queue's consumers while it has credit (the client's ``flow``);
  ``drain`` uses up what the queue cannot fill; deliveries stay unsettled
  until the client's ``disposition`` (accepted -> acknowledged, released and
  modified -> requeued, rejected -> dead-lettered or dropped), unless the
  link sends them settled (at most once).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.messaging.flow_control import PublisherFlow
from broker.messaging.link_registry import AttachKind, Attachment, Link, LinkKey
from broker.messaging.link_terminus import Terminus
from broker.messaging.selectors import compile_selector
from broker.messaging.termini import LinkRole
from broker.messaging.transaction import AutoCommitTransaction
from broker.security.acl_rules import ObjectType, Operation

from .addresses import Destination, resolve_source, resolve_target
from .browsing import QueueBrowser, is_browser
from .conditions import AmqpErrorCondition, LinkErrorCondition, ProtocolFault, Scope, error_of
from .definitions import (Accepted, Attach, Coordinator, Detach, Disposition, Error, Flow, Rejected, Source, Target,
                          TransactionalState, Transfer)
from .delivery_faults import DeliveryFaults
from .delivery_frames import transfer_frame
from .first_delivery import FirstTransfers
from .terminus_fields import source_of, target_of, terminus_of
from .dynamic_nodes import (TEMPORARY_QUEUE_PREFIX, answer_target, dynamic_source_fields, make_dynamic_node,
                            needs_node)
from .framing import transfer_frames
from .sections import MessageSections

from .encoding import encode
from .message_format import message_from_transfer, transfer_payload_parts
from .outcome_runs import queue_action
from .receipts import Receipts
from .receiver_options import answer_source, binding_key_of, checked_selector, consumer_priority
from .resume import peer_unsettled, reconcile_receiving, reconcile_sending, unsettled_field
from .settlement import NULL_STATE, RCV_SECOND, SND_SETTLED, negotiated_modes, receiver_settles_second

if TYPE_CHECKING:
    from collections.abc import Mapping
    from broker.messaging.queue import Queue
    from broker.messaging.queue_entry import QueueEntry

    from .session import Session
    from .transactions import Transaction10

log = logging.getLogger(__name__)

#: credit a receiving link grants, renewed once half of it is used
LINK_CREDIT = 1000
_TAG = struct.Struct(">Q")
#: bytes of a frame outside the attach: the frame header and room for incomplete-unsettled
_ATTACH_FRAME_SLACK = 16


class LinkEndpoint10:
    """The broker's end of one link on a session (the registry's LinkEndpoint)."""

    role: LinkRole

    def __init__(self, session: Session, attach: Attach) -> None:
        self.session = session
        self.connection = session.connection
        self.namespace = session.namespace
        self.peer_attach = attach
        self.handle = attach.handle
        self.name = str(attach.name)
        self.key = LinkKey(self.connection.remote_container_id, self.name, self.role)
        self.link: Link | None = None
        self.detached = False                  # we sent our detach (the peer's may follow)
        self.attached = False                  # we answered the attach
        #: the settlement modes of our answer (:mod:`.settlement`: the peer's, once valid)
        self.snd_settle_mode: int = attach.snd_settle_mode
        self.rcv_settle_mode = 0
        #: our attach answered with a cut unsettled map (``incomplete-unsettled``)
        self.incomplete_sent = False

    @property
    def connection_name(self) -> str:
        model = self.connection.model
        return str(getattr(model, "name", "")) or f"{self.connection.remote_host}:{self.connection.remote_port}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} handle {self.handle}>"

    # -- attach ------------------------------------------------------------------------------
    def attach(self) -> None:
        try:
            self.snd_settle_mode, self.rcv_settle_mode = negotiated_modes(self.peer_attach, self.handle)
            requested = self.requested_terminus()
            self.namespace.links.attach(self, self.key, requested)
        except ProtocolFault as fault:
            self.refuse(fault.error)
        except errors.BrokerError as exc:
            self.refuse(error_of(exc))

    def requested_terminus(self) -> Terminus | None:
        raise NotImplementedError

    def link_attached(self, attachment: Attachment) -> None:
        if self.detached:                      # the peer detached while the steal was under way
            self.namespace.links.detach(attachment.link, self, closed=False)
            return
        self.link = attachment.link
        try:
            self.established(attachment)
        except ProtocolFault as fault:
            self.refuse(fault.error)
        except errors.BrokerError as exc:
            self.refuse(error_of(exc))

    def established(self, attachment: Attachment) -> None:
        raise NotImplementedError

    def link_stolen(self, link: Link) -> None:
        self.send_detach(Error(condition=LinkErrorCondition.STOLEN,
                               description=f"link '{self.name}' was attached on another session"))
        self.release()
        self.link = None                       # the peer's answering detach changes nothing more
        self.namespace.links.detach(link, self, closed=False)

    def _check_dynamic_node(self) -> None:
        """CREATE QUEUE of the temporary queue a dynamic terminus asks for (its name is made later)."""
        self.connection.access.check(Operation.CREATE, ObjectType.QUEUE, TEMPORARY_QUEUE_PREFIX,
                                     durable=False, auto_delete=True, temporary=True)

    def attach_refused(self, error: errors.BrokerError) -> None:
        self.refuse(error_of(error))

    def refuse(self, error: Error) -> None:
        """Answer the attach with no terminus, then detach closed with ``error`` (spec 2.6.3)."""
        if not self.attached:
            self.answer_attach(None)
        self.close_with(error)

    def answer_attach(self, node: Source | Target | Coordinator | None,
                      unsettled: Mapping[bytes, bytes] | None = None, **fields: Any) -> None:
        """Answer the peer's attach with our terminus ``node``, the settlement modes and our
        ``unsettled`` map (tag -> stored state), cut to what fits one frame (2.6.13)."""
        attach = self.peer_attach
        self.attached = True
        our_role = self.role is LinkRole.RECEIVING     # role true: the receiver
        if our_role:
            source, target = attach.source, node
        else:
            source, target = node, attach.target
        answer = Attach(name=attach.name, handle=self.handle, role=our_role, snd_settle_mode=self.snd_settle_mode,
                        rcv_settle_mode=self.rcv_settle_mode, source=source, target=target, **fields)
        if unsettled:
            budget = self.connection.max_frame_size - _ATTACH_FRAME_SLACK - len(encode(answer))
            field, self.incomplete_sent = unsettled_field(unsettled, budget)
            answer = dataclasses.replace(answer, unsettled=field, incomplete_unsettled=self.incomplete_sent)
        self.session.send(answer)

    # -- detach ------------------------------------------------------------------------------
    def send_detach(self, error: Error | None, closed: bool = True) -> None:
        if not self.detached:
            self.detached = True
            self.session.send(Detach(handle=self.handle, closed=closed, error=error))

    def close_with(self, error: Error) -> None:
        """Detach and close the link from our side with ``error``."""
        self.send_detach(error)
        self.release()
        if self.link is not None:
            self.namespace.links.detach(self.link, self, closed=True)
            self.link = None

    def peer_detached(self, detach: Detach) -> None:
        self.release()
        if self.link is not None:
            self.namespace.links.detach(self.link, self, closed=detach.closed)
            self.link = None
        elif not self.attached:                # still waiting to steal the link: stop waiting
            waited = self.namespace.links.get(self.key)
            if waited is not None:
                self.namespace.links.detach(waited, self, closed=False)
        if not self.detached:
            self.detached = True
            self.session.send(Detach(handle=self.handle, closed=detach.closed))

    # -- what the session passes on ----------------------------------------------------------
    def transfer(self, transfer: Transfer, payload: bytes) -> None:
        raise ProtocolFault(AmqpErrorCondition.NOT_ALLOWED, "transfer to a link on which the broker sends",
                            Scope.LINK, self.handle)

    def flow(self, flow: Flow) -> None:
        if flow.echo:
            self.send_flow()

    def takes_whole(self, size: int) -> bool:
        """Whether :meth:`whole_delivery` may take a delivery of ``size`` bytes in one transfer now."""
        return False

    def whole_delivery(self, delivery_id: int, settled: bool, payload: bytes) -> None:
        raise NotImplementedError                # only where takes_whole says yes

    def send_flow(self, **fields: Any) -> None:
        raise NotImplementedError

    def outcome(self, delivery_id: int, entry: QueueEntry, state: Any, settled: bool) -> None:
        """The peer's disposition of a delivery we sent."""

    def peer_settled(self, first: int, last: int) -> None:
        """The peer settled deliveries it sent us (ids ``first``..``last``)."""

    def resume(self) -> None:
        """Output may flow again."""

    def unblocked(self) -> None:
        """The resource alarm cleared."""

    def release(self) -> None:
        """Stop using the link: it is detached, stolen, or its session ends."""


# -- the client sends ---------------------------------------------------------------------------

class ReceivingLink(LinkEndpoint10):
    role = LinkRole.RECEIVING

    def __init__(self, session: Session, attach: Attach) -> None:
        super().__init__(session, attach)
        self.destination: Destination | None = None
        self.delivery_count = attach.initial_delivery_count or 0
        self.credit = 0
        self.max_message_size = self.connection.host.max_message_size
        self._delivery_id: int | None = None        # the delivery being assembled
        self._settled = False
        self._state: Any = None                     # the delivery's state (transactional-state: in a txn)
        self._parts: list[bytes] = []
        self._size = 0
        self._aborting = False
        self._tag = b""                              # of the delivery being assembled
        self._resume = False
        self._second = False                         # it is settled only after the peer settles
        self.receipts = Receipts(self)               # answers beyond mode first
        self.tx = AutoCommitTransaction()
        #: the overfull queues this link fed (producer flow control): its credit is taken back
        self.publisher_flow = PublisherFlow(self._flow_changed, self.connection.failed)
        self._revoked = 0                            # transfers the peer may have sent before it knew

    def requested_terminus(self) -> Terminus | None:
        return terminus_of(self.peer_attach.target)

    def established(self, attachment: Attachment) -> None:
        link = attachment.link
        terminus = link.terminus
        if needs_node(terminus):                        # a dynamic target: a temporary queue
            self._check_dynamic_node()
            terminus = make_dynamic_node(self.namespace, link)
        if terminus.address is not None:
            self.destination = resolve_target(self.namespace, terminus.address)
        peer = self.peer_attach
        reconcile_receiving(self.namespace.links, link, peer_unsettled(peer.unsettled),
                            bool(peer.incomplete_unsettled))
        self.answer_attach(answer_target(peer.target, target_of(terminus), terminus), link.unsettled,
                           max_message_size=self.max_message_size)
        if not self.connection.blocked:
            self.credit = LINK_CREDIT
            self.send_flow()

    def send_flow(self, **fields: Any) -> None:
        if not self.detached:
            self.session.send(self.session.flow(handle=self.handle, delivery_count=self.delivery_count,
                                                link_credit=self.credit, **fields))

    def flow(self, flow: Flow) -> None:
        if flow.delivery_count is not None:
            # the sender's view (spec 2.6.7): credit left = our limit minus what it sent since
            self.credit = max(((self.delivery_count + self.credit - flow.delivery_count + 0x80000000)
                               & 0xFFFFFFFF) - 0x80000000, 0)
            self.delivery_count = flow.delivery_count
        super().flow(flow)

    def transfer(self, transfer: Transfer, payload: bytes) -> None:
        if self.detached:
            return
        if self._delivery_id is None:
            if transfer.delivery_id is None:
                raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD, "first transfer of a delivery without delivery-id",
                                    Scope.LINK, self.handle)
            if self.credit <= 0:
                if self._revoked <= 0:
                    raise ProtocolFault(LinkErrorCondition.TRANSFER_LIMIT_EXCEEDED,
                                        "transfer without link credit", Scope.LINK, self.handle)
                self._revoked -= 1                   # sent on credit taken back meanwhile
                self.credit += 1
            if self.incomplete_sent and not transfer.resume:
                raise ProtocolFault(AmqpErrorCondition.ILLEGAL_STATE,
                                    "a new delivery on a link whose unsettled map was incomplete"
                                    " (only resumed deliveries may follow it)", Scope.LINK, self.handle)
            self._second = receiver_settles_second(self.rcv_settle_mode, transfer.rcv_settle_mode, self.handle)
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
            self._delivery_id = transfer.delivery_id
            self._tag = bytes(transfer.delivery_tag or b"")
            self._resume = bool(transfer.resume)
            self._settled = bool(transfer.settled)
            self._state = None
            self._parts, self._size = [], 0
        elif transfer.delivery_id is not None and transfer.delivery_id != self._delivery_id:
            raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD,
                                f"delivery {transfer.delivery_id} began before delivery {self._delivery_id}"
                                " was complete", Scope.LINK, self.handle)
        if transfer.settled:
            self._settled = True
        if transfer.state is not None:
            self._state = transfer.state
        if transfer.aborted:
            self._delivery_id = None                  # spec 2.6.14: an aborted delivery is dropped
            self._parts, self._size = [], 0
            self._renew_credit()
            return
        self._parts.append(payload)
        self._size += len(payload)
        if self._size > self.max_message_size:
            raise ProtocolFault(LinkErrorCondition.MESSAGE_SIZE_EXCEEDED,
                                f"message of more than {self.max_message_size} bytes", Scope.LINK, self.handle)
        if transfer.more:
            return
        delivery_id, settled = self._delivery_id, self._settled
        parts, self._parts, self._delivery_id = self._parts, [], None
        if not (self._resume and self.receipts.resumed(delivery_id, self._tag, settled, self._second)):
            self._publish(delivery_id, settled, parts[0] if len(parts) == 1 else b"".join(parts), self._state)
        self._renew_credit()

    def takes_whole(self, size: int) -> bool:
        return (self._delivery_id is None and self.credit > 0 and not self.incomplete_sent and not self.detached
                and self.rcv_settle_mode != RCV_SECOND and size <= self.max_message_size)

    def whole_delivery(self, delivery_id: int, settled: bool, payload: bytes) -> None:
        """:meth:`transfer` of a delivery in one usual transfer (no more, state, resume or abort)."""
        self._second = False                         # (the assembly state is for deliveries of several frames)
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        self._publish(delivery_id, settled, payload)
        if self.credit <= LINK_CREDIT // 2:                  # (the first of _renew_credit's conditions)
            self._renew_credit()

    def _renew_credit(self) -> None:
        if self.credit <= LINK_CREDIT // 2 and not self.connection.blocked \
                and not self.publisher_flow.held and not self.detached:
            self.credit = LINK_CREDIT
            self.send_flow()

    def unblocked(self) -> None:
        self._renew_credit()

    def _flow_changed(self) -> None:
        """An overfull queue this link fed, or a publish rate limit, blocks it: its credit goes
        to 0 now (what the peer sent before it heard is still taken); released, it gets credit again."""
        if self.publisher_flow.held:
            if self.credit > 0 and not self.detached:
                self._revoked += self.credit
                self.credit = 0
                self.send_flow()
        else:
            self._revoked = 0
            self._renew_credit()

    def _publish(self, delivery_id: int, settled: bool, payload: bytes, state: Any = None) -> None:
        ns = self.namespace
        txn = self.session.transactions.of(state, self) if state is not None else None
        self.connection.messages_received += 1
        try:
            destination = self.destination
            if destination is not None and not destination.key_from_subject:
                exchange, routing_key = destination.exchange, destination.routing_key
            else:
                exchange, routing_key = self._route_by_properties(payload)
            self.connection.access.check_publish(exchange, routing_key)
            message = message_from_transfer(payload, exchange=exchange, routing_key=routing_key,
                                            arrival=ns.clock())
            queues = ns.route(exchange, message)
        except errors.BrokerError as exc:
            self._settle(delivery_id, settled, Rejected(error=error_of(exc)), txn)
            return
        except ValueError as exc:                     # the sections are malformed
            self._settle(delivery_id, settled, Rejected(error=Error(
                condition=AmqpErrorCondition.DECODE_ERROR, description=str(exc)[:1000])), txn)
            return
        if not queues:
            self._settle(delivery_id, settled, Rejected(error=Error(
                condition=AmqpErrorCondition.NOT_FOUND,
                description=f"no queue is bound to receive the message (exchange '{exchange}',"
                            f" routing key '{routing_key}')")), txn)
            return
        if not (self.tx if txn is None else txn.work).enqueue(message, queues):
            self._settle(delivery_id, settled, Rejected(error=Error(
                condition=AmqpErrorCondition.RESOURCE_LIMIT_EXCEEDED,
                description="a queue refused the message (it is full)")), txn)
            return
        ns.flow.published(self.publisher_flow, queues)          # producer flow control
        if txn is not None:                           # enqueued on commit; accepted in the txn now
            self._settle(delivery_id, settled, Accepted(), txn)
            return
        if settled:
            return
        journal = getattr(ns, "journal", None) if message.journal_id else None
        after = journal.pending if journal is not None else None
        if self._second:
            self.receipts.accept(delivery_id, self._tag, after)
        else:
            self.session.accept(self, delivery_id, after)

    def _route_by_properties(self, payload: bytes) -> tuple[str, str]:
        """Exchange and routing key of a message to a target whose key is the subject, or to the
        anonymous relay (the ``to`` address)."""
        destination = self.destination
        properties = MessageSections(payload).properties
        if destination is not None:
            subject = properties.subject if properties is not None else None
            return destination.exchange, subject or ""
        to = properties.to if properties is not None else None
        if to is None:
            raise errors.NotFound("a message to the anonymous relay without a 'to' address")
        resolved = resolve_target(self.namespace, str(to))
        if resolved.key_from_subject:
            subject = properties.subject if properties is not None else None
            return resolved.exchange, subject or ""
        return resolved.exchange, resolved.routing_key

    def _settle(self, delivery_id: int, settled: bool, state: Any, txn: Transaction10 | None = None) -> None:
        if txn is not None:
            state = txn.posted(state, settled)
        if settled or self.detached or self.session.ended or not self.connection.is_open:
            return
        if self._second:                        # exactly once: kept until the peer settles
            self.receipts.answer(delivery_id, self._tag, state)
            return
        self.session.send(Disposition(role=True, first=delivery_id, settled=True, state=state))

    def peer_settled(self, first: int, last: int) -> None:
        self.receipts.peer_settled(first, last)

    def release(self) -> None:
        self._parts, self._delivery_id = [], None
        self.receipts.clear()                   # the tags stay in the link's map, for its resume
        self.publisher_flow.close()


# -- the client receives --------------------------------------------------------------------------

class SendingLink(DeliveryFaults, LinkEndpoint10):
    role = LinkRole.SENDING

    def __init__(self, session: Session, attach: Attach) -> None:
        super().__init__(session, attach)
        self.queue: Queue | None = None
        self.credit = 0
        self.delivery_count = 0
        self.drain = False
        self.no_ack = attach.snd_settle_mode == SND_SETTLED     # settled: at most once
        #: delivery tags: unique to this endpoint (a resumed link's map may hold older ones), a
        #: delivery's tag the prefix and its delivery id (:meth:`tag_of`)
        self.tag_prefix = os.urandom(4)
        self.tag = self.name
        self.priority = 0
        self.selector: Any = None
        self.cancelled = True
        self.model: Any = None
        self.browser: QueueBrowser | None = None         # distribution-mode copy: it takes nothing
        self.binding_key: str | None = None              # from a legacy binding filter
        self.first_transfers = FirstTransfers(session.channel, self.handle, self.tag_prefix, self.no_ack)

    def requested_terminus(self) -> Terminus | None:
        terminus = terminus_of(self.peer_attach.source)
        if terminus is not None and terminus.selector is not None:
            checked_selector(terminus.selector, self.handle)     # a bad one refuses the link
        return terminus

    def established(self, attachment: Attachment) -> None:
        link = attachment.link
        requested = attachment.requested
        if attachment.kind is AttachKind.RESUMED and requested is not None and not requested.dynamic \
                and requested != link.terminus:
            # a resumed link's source is the client's new one (a JMS subscription re-created with
            # another selector or topic is a new subscription: its queue is made again)
            self.namespace.links.update_terminus(link, requested)
        terminus = link.terminus
        self.priority = consumer_priority(self.peer_attach)
        if needs_node(terminus):                        # a dynamic source: a temporary queue
            self._check_dynamic_node()
            terminus = make_dynamic_node(self.namespace, link)
        if terminus.address is None:
            raise errors.NotFound("a source without an address")
        node = resolve_source(self.namespace, terminus.address)
        if node.queue is not None:
            self.connection.access.check(Operation.CONSUME, ObjectType.QUEUE, node.queue)
            if terminus.selector is not None:
                self.selector = compile_selector(terminus.selector)
            self._consume(self.namespace.queue(node.queue, owner=self.connection), terminus,
                          browse=is_browser(terminus.distribution_mode))
            return
        self.binding_key = binding_key_of(self.peer_attach.source.filter if self.peer_attach.source else None)
        if self.binding_key is not None:
            node = replace(node, binding_key=self.binding_key)
        self.connection.access.check(Operation.BIND, ObjectType.EXCHANGE, node.exchange,
                                     routing_key=node.binding_key, temporary=True)

        def subscribed(name: str | None, error: errors.BrokerError | None) -> None:
            session = self.session
            if self.link is not link or self.detached or session.ended or session.ending \
                    or not self.connection.is_open:
                return                                  # gone while the queue was made
            if error is not None or name is None:
                self.refuse(error_of(error or errors.NotFound("no subscription queue")))
                return
            self._consume(self.namespace.queue(name), terminus)
            self.connection.run_dispatch()

        # the binding carries the selector (x-filter-jms-selector): no consumer selector
        self.namespace.links.subscribe(link, node.exchange, node.binding_key, subscribed)

    def _consume(self, queue: Queue, terminus: Terminus, browse: bool = False) -> None:
        self.queue = queue
        link, peer = self.link, self.peer_attach
        if link is not None and (link.unsettled or link.held):
            for touched in reconcile_sending(self.namespace.links, link, peer_unsettled(peer.unsettled),
                                             bool(peer.incomplete_unsettled)):
                self.connection.schedule_dispatch(touched)
        self.answer_attach(answer_source(peer.source, source_of(terminus), terminus,
                                         binding_key=self.binding_key, **dynamic_source_fields(terminus)),
                           link.unsettled if link else None, initial_delivery_count=0)
        if browse:          # copy on a subscription (Qpid JMS's topics) is what it does anyway
            self.browser = QueueBrowser(self, queue, self.selector)
            self.cancelled = False
            return
        if peer.incomplete_unsettled:
            return              # 2.6.13: no new deliveries to a peer whose unsettled map was incomplete
        queue.add_consumer(self)
        self.cancelled = False
        smodel = self.session.model
        if smodel is not None:
            self.model = smodel.register_consumer(self.tag, queue=queue.name, exclusive=False,
                                                  no_ack=self.no_ack, arguments={})

    # -- the queue's Consumer contract ----------------------------------------------------------
    def can_deliver(self, entry: QueueEntry) -> bool:
        return self.credit > 0 and not self.cancelled and self.session.can_send()

    def tag_of(self, delivery_id: int) -> bytes:
        """The tag of the delivery ``delivery_id`` this endpoint sent."""
        return self.tag_prefix + _TAG.pack(delivery_id)

    def deliver(self, entry: QueueEntry) -> None:
        session = self.session
        delivery_id = session.next_delivery_id
        session.next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
        count = entry.delivery_count
        tag = self.tag_prefix + _TAG.pack(delivery_id)
        frame = self.first_transfers.frame(delivery_id, entry.message, self.connection.max_frame_size) \
            if count == 0 else None
        if frame is None:
            payload = transfer_payload_parts(entry.message, delivery_count=count, first_acquirer=count == 0)
            frame = transfer_frame(session.channel, self.handle, delivery_id, tag, self.no_ack, payload,
                                   self.connection.max_frame_size)
        frames: list[bytes] | None = None
        if frame is None:
            payload = transfer_payload_parts(entry.message, delivery_count=count, first_acquirer=count == 0)
            transfer = Transfer(handle=self.handle, delivery_id=delivery_id, delivery_tag=tag,
                                message_format=0, settled=self.no_ack)
            frames = transfer_frames(session.channel, transfer, b"".join(payload), self.connection.max_frame_size)
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        if not self.no_ack:
            session.unsettled[delivery_id] = (self, entry)
            if self.link is not None and self.browser is None:    # a browser's copies resume as nothing
                self.namespace.links.record_unsettled(self.link, tag, NULL_STATE)
        self.connection.messages_sent += 1
        if frame is not None:
            session.send_transfer_frame(frame)
        else:
            session.send_transfer_frames(frames or [])

    def queue_deleted(self, queue: Queue) -> None:
        self.close_with(Error(condition=AmqpErrorCondition.RESOURCE_DELETED,
                              description=f"queue '{queue.name}' was deleted"))

    # -- credit -----------------------------------------------------------------------------------
    def flow(self, flow: Flow) -> None:
        if flow.link_credit is not None:
            their_count = flow.delivery_count if flow.delivery_count is not None else 0
            # spec 2.6.7: credit counts from the receiver's delivery-count
            self.credit = max(((their_count + flow.link_credit - self.delivery_count + 0x80000000)
                               & 0xFFFFFFFF) - 0x80000000, 0)
        self.drain = flow.drain
        self.fill()
        if self.drain and self.credit > 0:
            if self.browser is None or not self.browser.awaiting:   # (else answered once the head lands)
                self.end_drain()
        elif flow.echo:
            self.send_flow()

    def end_drain(self) -> None:
        """A drain ends: the credit the queue could not fill is used up."""
        self.delivery_count = (self.delivery_count + self.credit) & 0xFFFFFFFF
        self.credit = 0
        self.send_flow(drain=True)

    def fill(self) -> None:
        """Use the credit the peer gave: deliver what the queue holds (before a drain ends it)."""
        if self.browser is not None:
            self.browser.look()
        elif self.queue is not None and not self.cancelled:
            self.queue.dispatch()

    def send_flow(self, **fields: Any) -> None:
        if not self.detached:
            available = self.queue.message_count if self.queue is not None else 0
            self.session.send(self.session.flow(handle=self.handle, delivery_count=self.delivery_count,
                                                link_credit=self.credit, available=available, **fields))

    def resume(self) -> None:
        if self.queue is not None and not self.cancelled and self.credit > 0:
            self.connection.schedule_dispatch(self.browser or self.queue)

    # -- settlement -------------------------------------------------------------------------------
    def outcome(self, delivery_id: int, entry: QueueEntry, state: Any, settled: bool) -> None:
        if type(state) is TransactionalState:        # applied when its transaction commits
            self.session.transactions.retire(self, delivery_id, entry, state, settled)
            return
        action = queue_action(self, state, settled)
        if action == "":
            return                                   # received: not an outcome
        queue = entry.queue
        if action is not None:                       # (None: a browser's copy, or nothing to settle)
            getattr(queue, action)(entry)
        if not settled:                              # (a receiver in mode second settles after us)
            self.session.unsettled.pop(delivery_id, None)
            self.session.send(Disposition(role=False, first=delivery_id, settled=True, state=state))
        if self.link is not None:
            self.namespace.links.settled(self.link, self.tag_of(delivery_id))
        self.connection.schedule_dispatch(queue)

    def release(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if self.queue is not None and self.browser is None:
                self.queue.remove_consumer(self)
            elif self.browser is not None:
                self.browser.stop()
        if self.model is not None:
            self.model.unregister()
            self.model = None
        unsettled = self.session.unsettled
        mine = [i for i, (link, _entry) in unsettled.items() if link is self]
        queues = set()
        # durability unsettled-state: the link keeps its unsettled deliveries for its resume
        link = self.link
        links = self.namespace.links
        keep = link is not None and link.terminus.keeps_unsettled
        for delivery_id in mine:
            _link, entry = unsettled.pop(delivery_id)
            if self.browser is not None:             # a browser's copies were never taken
                continue
            tag = self.tag_of(delivery_id)
            if keep:
                assert link is not None
                links.hold(link, tag, entry)
                continue
            if link is not None:
                links.settled(link, tag)
            entry.queue.release(entry)
            queues.add(entry.queue)
        for queue in queues:
            self.connection.schedule_dispatch(queue)
