"""An AMQP 1.0 session (spec 2.5): begin/end, the transfer windows, and the links on it.

The session numbers transfer frames both ways.  Incoming: the peer may send
while our incoming window is open; it is opened again with a ``flow`` once
half of it is used, and a transfer beyond it ends the session with
``amqp:session:window-violation``.  Outgoing: deliveries wait while the
peer's incoming window (from its ``begin`` and ``flow`` frames) is closed.
Delivery ids of outgoing deliveries are the session's; their unsettled map
is kept here so a ``disposition`` naming a range of ids reaches each link.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from broker import errors

from .composite import Performative
from .connection import State
from .conditions import AmqpErrorCondition, ProtocolFault, Scope, SessionErrorCondition, error_of
from .definitions import (Attach, Begin, Coordinator, Detach, Disposition, End, Error, Flow, Rejected,
                          Transfer)
from .delivery_frames import accepted_frame
from .outcome_runs import apply_outcomes, id_ranges
from .transactions import SessionTransactions
from .transfer_arrival import NO_SHAPE
from .values import Symbol

if TYPE_CHECKING:
    from broker.messaging.journal import Durability
    from broker.messaging.queue_entry import QueueEntry

    from .connection import AmqpConnection10
    from .links import LinkEndpoint10, SendingLink

log = logging.getLogger(__name__)

#: transfer frames the peer may send before we open the window again
INCOMING_WINDOW = 4096
OUTGOING_WINDOW = 0x7FFFFFFF
HANDLE_MAX = 1023
_SERIAL = 0xFFFFFFFF
OPEN = State.OPEN


class Session:
    """One session; ``remote_channel`` the peer's channel, ``channel`` ours."""

    def __init__(self, connection: AmqpConnection10, remote_channel: int, channel: int, begin: Begin) -> None:
        self.connection = connection
        self.namespace = connection.namespace
        self.remote_channel = remote_channel
        self.channel = channel
        self.handle_max = min(begin.handle_max, HANDLE_MAX)
        self.next_incoming_id = begin.next_outgoing_id
        self.incoming_remaining = INCOMING_WINDOW
        self.next_outgoing_id = 0
        self.remote_incoming_window = begin.incoming_window
        self.next_delivery_id = 0
        self.links: dict[int, LinkEndpoint10] = {}           # by the peer's handle
        self.unsettled: dict[int, tuple[SendingLink, QueueEntry]] = {}   # outgoing, by delivery id
        self.ending = False                                     # we sent end with an error
        self.transfer_shape = NO_SHAPE                          # of the last whole transfer (.transfer_arrival)
        #: incoming deliveries to accept with the next flush (after the input, or a journal commit)
        self._accepted: list[int] = []
        self._durable_waits: dict[Durability, list[tuple[LinkEndpoint10, int]]] = {}
        self.ended = False
        self.transactions = SessionTransactions(self)          # the live transactions declared here
        model = connection.model
        self.model: Any = model.register_session(channel) if model is not None else None

    def __repr__(self) -> str:
        return f"<Session {self.remote_channel}->{self.channel}>"

    def start(self) -> None:
        self.send(Begin(remote_channel=self.remote_channel, next_outgoing_id=self.next_outgoing_id,
                        incoming_window=INCOMING_WINDOW, outgoing_window=OUTGOING_WINDOW,
                        handle_max=self.handle_max))

    def send(self, performative: Performative, payload: bytes = b"") -> None:
        if not self.ended:
            self.connection.send(self.channel, performative, payload)

    # -- input -----------------------------------------------------------------------------
    def performative(self, performative: Performative, payload: bytes) -> None:
        kind = type(performative)
        if kind is End:
            self._peer_end(performative)  # type: ignore[arg-type]
            return
        if self.ending:
            return                                # until the peer answers our end
        try:
            if kind is Transfer:
                self._transfer(performative, payload)  # type: ignore[arg-type]
            elif kind is Flow:
                self._flow(performative)  # type: ignore[arg-type]
            elif kind is Disposition:
                self._disposition(performative)  # type: ignore[arg-type]
            elif kind is Attach:
                self._attach(performative)  # type: ignore[arg-type]
            elif kind is Detach:
                self._detach(performative)  # type: ignore[arg-type]
            else:
                raise ProtocolFault(AmqpErrorCondition.ILLEGAL_STATE,
                                    f"{performative.SYMBOL} on an open session", Scope.SESSION)
        except ProtocolFault as fault:
            self.fault(fault)

    def fault(self, fault: ProtocolFault) -> None:
        if fault.scope is Scope.CONNECTION:
            raise fault
        if fault.scope is Scope.LINK and fault.handle is not None and fault.handle in self.links:
            self.links[fault.handle].close_with(fault.error)
            return
        self.end_with(fault.error)

    def _link(self, handle: int) -> LinkEndpoint10:
        link = self.links.get(handle)
        if link is None:
            raise ProtocolFault(SessionErrorCondition.UNATTACHED_HANDLE, f"no link is attached with handle {handle}",
                                Scope.SESSION)
        return link

    def _attach(self, attach: Attach) -> None:
        from .links import ReceivingLink, SendingLink
        from .management import management_link

        handle = attach.handle
        if handle > self.handle_max:
            raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD,
                                f"handle {handle} exceeds the handle-max of {self.handle_max}", Scope.SESSION)
        if handle in self.links:
            raise ProtocolFault(SessionErrorCondition.HANDLE_IN_USE, f"handle {handle} is in use", Scope.SESSION)
        # the peer's role: a sender attaches to the broker's receiving end, and the reverse
        link: LinkEndpoint10 | None = management_link(self, attach)
        if link is not None:
            pass
        elif not attach.role and isinstance(attach.target, Coordinator):
            from .coordinator import CoordinatorLink     # a transaction controller (spec 4.2)
            link = CoordinatorLink(self, attach)
        else:
            link = SendingLink(self, attach) if attach.role else ReceivingLink(self, attach)
        self.links[handle] = link
        link.attach()

    def _detach(self, detach: Detach) -> None:
        link = self._link(detach.handle)
        del self.links[detach.handle]
        link.peer_detached(detach)

    def _transfer(self, transfer: Transfer, payload: bytes) -> None:
        if self.incoming_remaining <= 0:
            raise ProtocolFault(SessionErrorCondition.WINDOW_VIOLATION,
                                f"transfer beyond the incoming window of {INCOMING_WINDOW}", Scope.SESSION)
        self.incoming_remaining -= 1
        self.next_incoming_id = (self.next_incoming_id + 1) & _SERIAL
        link = self._link(transfer.handle)
        try:
            link.transfer(transfer, payload)
        except errors.BrokerError as exc:
            link.close_with(error_of(exc))
        self._reopen_window()

    def whole_transfer(self, handle: int, delivery_id: int, settled: bool, payload: bytes) -> bool:
        """A whole delivery in one usual transfer frame (:mod:`.transfer_arrival`), taken as
        :meth:`performative` takes it; False, with nothing done, where that path must decide
        (the session ending, its window closed, a link that is not a plain receiving one)."""
        link = self.links.get(handle)
        if link is None or self.ending or self.incoming_remaining <= 0 or not link.takes_whole(len(payload)):
            return False
        self.incoming_remaining -= 1
        self.next_incoming_id = (self.next_incoming_id + 1) & _SERIAL
        try:
            try:
                link.whole_delivery(delivery_id, settled, payload)
            except errors.BrokerError as exc:
                link.close_with(error_of(exc))
            if self.incoming_remaining <= INCOMING_WINDOW // 2:    # (the first of _reopen_window's conditions)
                self._reopen_window()
        except ProtocolFault as fault:
            self.fault(fault)
        return True

    def _reopen_window(self) -> None:
        if self.incoming_remaining <= INCOMING_WINDOW // 2 and not self.ending:
            self.incoming_remaining = INCOMING_WINDOW
            self.send(self.flow())

    def flow(self, **link_fields: Any) -> Flow:
        """A flow frame with this session's state (and a link's, from ``link_fields``)."""
        return Flow(next_incoming_id=self.next_incoming_id, incoming_window=self.incoming_remaining,
                    next_outgoing_id=self.next_outgoing_id, outgoing_window=OUTGOING_WINDOW, **link_fields)

    def _flow(self, flow: Flow) -> None:
        next_incoming = flow.next_incoming_id if flow.next_incoming_id is not None else 0
        self.remote_incoming_window = (next_incoming + flow.incoming_window - self.next_outgoing_id) & _SERIAL
        if self.remote_incoming_window > OUTGOING_WINDOW:
            self.remote_incoming_window = 0            # went negative: the peer shrank it
        if flow.handle is not None:
            self._link(flow.handle).flow(flow)
        elif flow.echo:
            self.send(self.flow())
        self.resume_deliveries()

    def _disposition(self, disposition: Disposition) -> None:
        first = disposition.first
        last = disposition.last if disposition.last is not None else first
        if disposition.role:                      # the peer receives: deliveries we sent
            unsettled = self.unsettled
            if (last - first) & _SERIAL < len(unsettled):
                ids = [(first + i) & _SERIAL for i in range(((last - first) & _SERIAL) + 1)]
            else:
                ids = [i for i in unsettled if (i - first) & _SERIAL <= (last - first) & _SERIAL]
            state, settled = disposition.state, disposition.settled
            take = unsettled.pop if settled else unsettled.get
            run_link: SendingLink | None = None
            run: list[tuple[int, QueueEntry]] = []
            for delivery_id in ids:             # each link's consecutive deliveries as one run
                item = take(delivery_id, None)
                if item is not None:
                    sender, entry = item
                    if sender is not run_link:
                        if run_link is not None:
                            apply_outcomes(run_link, run, state, settled)
                        run_link, run = sender, []
                    run.append((delivery_id, entry))
            if run_link is not None:
                apply_outcomes(run_link, run, state, settled)
        elif disposition.settled:                 # the peer sends: it settles deliveries it sent us
            for endpoint in self.links.values():
                endpoint.peer_settled(first, last)

    # -- accepting incoming deliveries ----------------------------------------------------------
    def accept(self, link: LinkEndpoint10, delivery_id: int, after: Durability | None = None) -> None:
        """Accept ``delivery_id`` (of ``link``) when the input is done, or once ``after`` (the
        journal group holding the message) is durable; consecutive ids go as one disposition."""
        if after is None:
            if not self._accepted:
                self.connection.dispositions_due.add(self)
            self._accepted.append(delivery_id)
            return
        waiting = self._durable_waits.get(after)
        if waiting is None:
            waiting = self._durable_waits[after] = []
            after.when_durable(lambda: self._durable(after))
        waiting.append((link, delivery_id))

    def _durable(self, durability: Durability) -> None:
        waiting = self._durable_waits.pop(durability, [])
        if durability.error is not None:
            error = Error(condition=AmqpErrorCondition.INTERNAL_ERROR,
                          description=f"the message could not be stored: {durability.error}"[:1000])
            for link, delivery_id in waiting:
                if not link.detached and self._may_send():
                    self.send(Disposition(role=True, first=delivery_id, settled=True, state=Rejected(error=error)))
            return
        self._accepted.extend(delivery_id for link, delivery_id in waiting if not link.detached)
        self.flush_dispositions()

    def _may_send(self) -> bool:
        return not (self.ended or self.ending) and self.connection.is_open

    def flush_dispositions(self) -> None:
        ids, self._accepted = self._accepted, []
        if not ids or not self._may_send():
            return
        channel = self.channel
        self.connection.write_frames([accepted_frame(channel, first, last if last != first else None)
                                      for first, last in id_ranges(ids)])

    # -- output and dispatch -----------------------------------------------------------------
    def can_send(self) -> bool:
        connection = self.connection
        return self.remote_incoming_window > 0 and not self.ending and connection.state is OPEN \
            and connection.writable

    def send_transfer_frames(self, frames: list[bytes] | tuple[bytes]) -> None:
        count = len(frames)
        self.next_outgoing_id = (self.next_outgoing_id + count) & _SERIAL
        window = self.remote_incoming_window - count
        self.remote_incoming_window = window if window > 0 else 0
        self.connection.write_frames(frames)

    def send_transfer_frame(self, frame: bytes) -> None:
        """:meth:`send_transfer_frames` of one frame."""
        self.next_outgoing_id = (self.next_outgoing_id + 1) & _SERIAL
        window = self.remote_incoming_window - 1
        self.remote_incoming_window = window if window > 0 else 0
        self.connection.write_frame(frame)

    def take_delivery_id(self) -> int:
        delivery_id = self.next_delivery_id
        self.next_delivery_id = (delivery_id + 1) & _SERIAL
        return delivery_id

    def resume_deliveries(self) -> None:
        for link in self.links.values():
            link.resume()

    def unblocked(self) -> None:
        for link in self.links.values():
            link.unblocked()

    # -- end ---------------------------------------------------------------------------------
    def _peer_end(self, end: End) -> None:
        if end.error is not None:
            log.info("session %d ended by the client: %s", self.remote_channel, end.error.condition)
        was_ending = self.ending
        self.release_all()
        if not was_ending:
            self.send(End())
        self.ended = True
        self.connection.session_ended(self.remote_channel)

    def end_with(self, error: Error) -> None:
        """End the session from our side (the peer's end follows)."""
        if self.ending:
            return
        self.send(End(error=Error(condition=Symbol(error.condition), description=error.description)))
        self.release_all()
        self.ending = True

    def release_all(self) -> None:
        """The session ends: its links let go (suspended, not closed), unsettled deliveries go back."""
        for link in list(self.links.values()):
            link.release()
        self.links.clear()
        self._accepted.clear()
        self._durable_waits.clear()
        if self.namespace is not None:
            self.namespace.links.session_ended(self)
        if self.model is not None:
            self.model.unregister()
            self.model = None
