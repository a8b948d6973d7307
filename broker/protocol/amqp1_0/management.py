"""The ``$management`` node on AMQP 1.0 links (the AMQP Management draft, as Broker-J does it).

A client sends requests on a link whose target is ``$management`` and reads
the responses on a link of its own:

- :class:`ManagementLink` -- the broker's end of the request link.  Each
  request is accepted when it arrives, handed to the broker's management
  node (:meth:`ManagementHost.manage`: the connection's virtual host, or the
  broker when the connection opened with hostname ``$management``, as
  Broker-J's management address space), and answered once the node is done
  (a change, once it is durable): ``statusCode``/``statusDescription`` in
  the application properties, ``correlation-id`` the request's
  correlation-id or else its message-id, the result in an ``amqp-value``.
- The answer goes to the request's ``reply-to``: a :class:`ReplyLink` of
  the same connection -- a receiver attached with source ``$management``
  whose target address is that reply-to (Broker-J's management consumer;
  the link's name when its target has no address), the request's own
  session first -- or else the queue or exchange the address names
  (a queue of the client's, a dynamic node), as any message to that
  address is routed.  A request without ``reply-to`` is performed and its
  answer dropped (Broker-J's facade creates objects so).

What the node does is :mod:`broker.model.management_node`, reached through
the host: the engine never touches the model.
"""

from __future__ import annotations

import json
import logging
import struct
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from broker import errors
from broker.messaging.link_registry import Attachment
from broker.messaging.link_terminus import Terminus
from broker.messaging.transaction import AutoCommitTransaction

from .addresses import resolve_target
from .conditions import AmqpErrorCondition, ProtocolFault, Scope
from .definitions import (AmqpValue, ApplicationProperties, Attach, Error, Properties, Rejected, Source, Target,
                          Transfer)
from .framing import transfer_frames
from .links import LINK_CREDIT, LinkEndpoint10, ReceivingLink, SendingLink
from .terminus_fields import source_of, target_of
from .message_format import message_from_transfer
from .sections import DATA, MessageSections, encode_sections
from .values import DecodeError, Int

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(__name__)

MANAGEMENT_ADDRESS = "$management"
#: the open's hostname that names the broker's management rather than a virtual host's
BROKER_HOSTNAME = "$management"
_TAG = struct.Struct(">Q")

#: (statusCode, statusDescription, body) -> None
Answer = Callable[[int, str, Any], None]


class ManagementHost(Protocol):
    """What the engine asks of the broker to answer a request (see :class:`BrokerHost`)."""

    def manage(self, virtual_host: str | None, principal: Any, properties: Mapping[str, Any], body: Any,
               answer: Answer) -> None:
        """Perform the request on ``virtual_host``'s node (None: the broker's) as
        ``principal``; call ``answer`` once done (possibly later, from the event loop)."""
        ...


def management_link(session: Session, attach: Attach) -> LinkEndpoint10 | None:
    """The endpoint for an attach that names the management node, else None (the hook
    :meth:`Session._attach` asks first)."""
    if attach.role:                                  # the peer receives: responses
        source = attach.source
        if isinstance(source, Source) and source.address == MANAGEMENT_ADDRESS:
            return ReplyLink(session, attach)
        return None
    target = attach.target
    if isinstance(target, Target) and target.address == MANAGEMENT_ADDRESS:
        return ManagementLink(session, attach)
    return None


class ManagementLink(ReceivingLink):
    """The broker's end of a link that sends requests to ``$management``."""

    def requested_terminus(self) -> Terminus | None:
        if getattr(self.connection.host, "manage", None) is None:
            raise ProtocolFault(AmqpErrorCondition.NOT_FOUND, "this broker has no management node",
                                Scope.LINK, self.handle)
        return super().requested_terminus()

    def established(self, attachment: Attachment) -> None:
        self.answer_attach(self.peer_attach.target or target_of(attachment.link.terminus),
                           max_message_size=self.max_message_size)
        if not self.connection.blocked:
            self.credit = LINK_CREDIT
            self.send_flow()

    def _publish(self, delivery_id: int, settled: bool, payload: bytes, state: Any = None) -> None:
        connection = self.connection
        connection.messages_received += 1
        try:
            sections = MessageSections(payload)
            properties = sections.properties
            application = sections.application_properties or {}
            body = _body(sections)
        except ValueError as exc:                     # malformed sections
            self._settle(delivery_id, settled, Rejected(error=Error(
                condition=AmqpErrorCondition.DECODE_ERROR, description=str(exc)[:1000])))
            return
        if not settled:
            self.session.accept(self, delivery_id)
        reply_to = None if properties is None or properties.reply_to is None else str(properties.reply_to)
        correlation = None if properties is None else \
            properties.correlation_id if properties.correlation_id is not None else properties.message_id
        scope = None if connection.hostname == BROKER_HOSTNAME else connection.virtual_host_name
        host = cast(ManagementHost, connection.host)

        def answer(status: int, description: str, result: Any) -> None:
            self.respond(reply_to, correlation, status, description, result)

        host.manage(scope, connection.principal, {str(k): v for k, v in application.items()}, body, answer)

    # -- the response ----------------------------------------------------------------------------
    def respond(self, reply_to: str | None, correlation: Any, status: int, description: str,
                result: Any) -> None:
        """Send the response to ``reply_to`` (dropped when there is none, or it names nothing)."""
        if reply_to is None or not self.connection.is_open:
            return
        try:
            payload = response_payload(reply_to, correlation, status, description, result)
        except ValueError as exc:                     # a result with no AMQP encoding
            log.exception("encoding the management response to %s", reply_to)
            payload = response_payload(reply_to, correlation, 500, f"the result cannot be encoded: {exc}", None)
        link = self.reply_link(reply_to)
        if link is not None:
            link.offer(payload)
            return
        namespace = self.connection.namespace
        if namespace is None:
            return
        try:
            destination = resolve_target(namespace, reply_to)
            routing_key = destination.routing_key if not destination.key_from_subject else ""
            message = message_from_transfer(payload, exchange=destination.exchange, routing_key=routing_key,
                                            arrival=namespace.clock())
            AutoCommitTransaction().enqueue(message, namespace.route(destination.exchange, message))
        except errors.BrokerError as exc:
            log.info("management response to '%s' dropped: %s", reply_to, exc.text or exc)
            return
        self.connection.run_dispatch()

    def reply_link(self, address: str) -> ReplyLink | None:
        """The reply link of this connection for ``address``, on this session first."""
        sessions = [self.session] + [s for s in self.connection.sessions.values() if s is not self.session]
        for session in sessions:
            for link in session.links.values():
                if isinstance(link, ReplyLink) and link.attached and not link.detached \
                        and link.reply_address == address:
                    return link
        return None


class ReplyLink(SendingLink):
    """The broker's end of a link that reads responses (source ``$management``).

    Responses wait here until the client gives credit; they are sent settled
    unless the client asked for unsettled deliveries (snd-settle-mode
    unsettled), and are not kept once sent: an answer is not redelivered.
    """

    def __init__(self, session: Session, attach: Attach) -> None:
        super().__init__(session, attach)
        self.pending: deque[bytes] = deque()

    @property
    def reply_address(self) -> str:
        """What a request's reply-to names to reach this link: its target's address."""
        target = self.peer_attach.target
        address = target.address if isinstance(target, Target) else None
        return str(address) if address is not None else self.name

    def established(self, attachment: Attachment) -> None:
        self.answer_attach(self.peer_attach.source or source_of(attachment.link.terminus), initial_delivery_count=0)

    def offer(self, payload: bytes) -> None:
        if not self.detached:
            self.pending.append(payload)
            self.fill()

    def fill(self) -> None:
        """Send what waits, as far as the credit goes."""
        session = self.session
        settled = self.peer_attach.snd_settle_mode != 0      # mixed or settled: ours to choose
        while self.pending and self.credit > 0 and not self.detached and session.can_send():
            payload = self.pending.popleft()
            delivery_id = session.take_delivery_id()
            transfer = Transfer(handle=self.handle, delivery_id=delivery_id, delivery_tag=_TAG.pack(delivery_id),
                                message_format=0, settled=settled)
            frames = transfer_frames(session.channel, transfer, payload, self.connection.max_frame_size)
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
            self.connection.messages_sent += 1
            session.send_transfer_frames(frames)

    def send_flow(self, **fields: Any) -> None:
        if not self.detached:
            self.session.send(self.session.flow(handle=self.handle, delivery_count=self.delivery_count,
                                                link_credit=self.credit, available=len(self.pending), **fields))

    def resume(self) -> None:
        self.fill()

    def release(self) -> None:
        self.pending.clear()
        super().release()


def _body(sections: MessageSections) -> Any:
    """The request's body: an amqp-value as it is; data sections holding JSON (content type
    ``application/json``) decoded; anything else None."""
    body = sections.body()
    if sections.body_kind != DATA:
        return body
    properties = sections.properties
    if properties is not None and str(properties.content_type or "").startswith("application/json"):
        try:
            return json.loads(b"".join(body))
        except ValueError:
            raise DecodeError("the request's data section is not JSON") from None
    return None


def response_payload(reply_to: str, correlation: Any, status: int, description: str, result: Any) -> bytes:
    """A response message: properties, application properties (statusCode as an int, as
    Broker-J's JMS clients read it), the result as an amqp-value."""
    application: dict[str, Any] = {"statusCode": Int(status)}
    if description:
        application["statusDescription"] = description
    return encode_sections([Properties(message_id=str(uuid.uuid4()), to=reply_to, correlation_id=correlation),
                            ApplicationProperties(value=application),
                            AmqpValue(value=result)])
