"""The AMQP 1.0 connection engine (server side), sans-IO.

It implements :class:`~broker.protocol.engine.Engine` as the 0-9-1 engine
does: the transport feeds it bytes after the protocol header it detected,
writes what :meth:`AmqpConnection10.data_to_send` gives, and hears through
``on_event`` what the connection needs.

The phases (spec 2.2, 2.4, 5.3):

1. SASL (the ``AMQP 3 1 0 0`` header): the broker answers with its header
   and ``sasl-mechanisms``; ``sasl-init`` carries the response, verified off
   the event loop (:class:`~broker.protocol.engine.WorkRequested`);
   ``sasl-outcome`` ends the layer, and the client sends the AMQP header next
   (possibly in the same read as its last SASL frame).  A client that opens
   with the plain AMQP header where the port offers no ``ANONYMOUS`` gets
   the SASL header back and the socket closes (spec 5.3.1).
2. ``open``: container id, max-frame-size (at least 512), channel-max,
   idle-time-out, and the hostname, which names the virtual host as Broker-J
   maps it (``vhost:<name>`` or a virtual host's name; anything else the
   default virtual host).  Idle time-out (spec 2.4.5): the transport sends an
   empty frame after half the peer's idle-time-out of silence (one under
   :data:`MIN_PEER_IDLE_TIME_OUT_MS` is refused: beating every few
   milliseconds is not a service the broker gives); the broker's own offer is
   the Broker's ``connection.idleTimeout`` (seconds; 0 by default, as Broker-J
   offers, so nothing is offered), and a peer silent for twice the offer is
   closed with ``amqp:resource-limit-exceeded`` (the spec's offer is half the
   real threshold).  Without an offer, a vanished peer is found by TCP
   keepalive (:mod:`broker.transport.keepalive`).  An offer has a price on
   the client: rhea re-arms its heartbeat timer on every socket write when the
   broker offers one (docs/amqp-1-0-benchmarks.md, "The idle-time-out offer").
3. Sessions on channels (:mod:`.session`), links on sessions (:mod:`.links`).

Malformed input closes the connection with ``amqp:decode-error``, a frame
that cannot be honoured with ``amqp:connection:framing-error``; neither ever
escapes as an exception.
"""

from __future__ import annotations

import enum
import logging
import uuid
from typing import Any, Callable

from broker import errors
from broker.protocol.detect import AmqpVersion
from broker.protocol.engine import (Closing, EngineEvent, Finished, IdleTiming, Opened, OutputQueue, WorkRequested)
from broker.protocol.host import Principal, ProtocolHost
from broker.protocol import internal_errors
from broker.protocol.internal_errors import dispatch_pending
from broker.security import sasl_exchange
from broker.security.sasl_exchange import SaslServer, SaslStep
from broker.security.access_control import UNCHECKED, ConnectionAccess

from .composite import Performative
from .conditions import (AmqpErrorCondition, ConnectionErrorCondition, ProtocolFault, Scope, error_of)
from .definitions import (MIN_MAX_FRAME_SIZE, Begin, Close, End, Error, Open, SaslChallenge, SaslCode,
                          SaslInit, SaslMechanisms, SaslOutcome, SaslResponse)
from .framing import AMQP_HEADER, EMPTY_FRAME, SASL_HEADER, TYPE_AMQP, TYPE_SASL, FramingError, encode_frame
from .incoming_frames import BodyReader, performative_of
from .transfer_arrival import whole_transfer
from .values import DecodeError, Symbol

log = logging.getLogger(__name__)

#: the SASL mechanisms this engine speaks (of those the port's provider offers)
MECHANISMS = ("EXTERNAL", "SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "ANONYMOUS")
IDLE_SEND_FRACTION = 0.5         # beat after half the peer's idle-time-out (spec 2.4.5)
IDLE_EXPIRE_FACTOR = 2.0         # a peer silent twice our idle-time-out is gone
#: the shortest idle-time-out a peer may ask for (Broker-J's and RabbitMQ's minimum too)
MIN_PEER_IDLE_TIME_OUT_MS = 1000
#: what the broker's open offers: SHARED-SUBS, JMS 2.0 shared subscriptions (Qpid JMS asks for it)
OFFERED_CAPABILITIES: tuple[str, ...] = ("SHARED-SUBS",)


class State(enum.Enum):
    AWAITING_SASL_INIT = "awaiting sasl-init"
    AUTHENTICATING = "authenticating"
    AWAITING_SASL_RESPONSE = "awaiting sasl-response"    # a challenge was sent
    AWAITING_HEADER = "awaiting the AMQP header"
    AWAITING_OPEN = "awaiting open"
    OPEN = "open"
    CLOSE_SENT = "close sent"        # we sent close and await the peer's
    CLOSED = "closed"


class AmqpConnection10(OutputQueue):
    """One client connection speaking AMQP 1.0."""

    #: bytes of a read handled before the output is written (the transport hands a larger
    #: read over in slices): a publisher gets its ``accepted`` and the consumers their
    #: deliveries every few dozen transfers, not once per read of up to 256 KB
    input_slice = 16384

    def __init__(self, host: ProtocolHost, version: AmqpVersion, *, remote_host: str,
                 remote_port: int = 0, port_name: str = "AMQP") -> None:
        from .session import Session

        self.host = host
        self.version = version
        self.port_protocol = "AMQP_1_0"
        self.remote_host = remote_host
        self.remote_port = remote_port
        self.port_name = port_name
        self.id = str(uuid.uuid4())
        self.container_id = f"deltamq-{self.id}"
        self.state = State.AWAITING_SASL_INIT
        self.on_output: Callable[[], None] = lambda: None
        self.on_event: Callable[[EngineEvent], None] = lambda event: None
        self._reader = BodyReader(MIN_MAX_FRAME_SIZE)
        self._init_output()
        self.closed = False
        self.close_reason = ""
        self.principal: Principal | None = None
        self.authentication: Callable[[], SaslStep] | None = None
        self._sasl: SaslServer | None = None
        self.namespace: Any = None
        self.access: ConnectionAccess = UNCHECKED     # the ACL checks, from open on
        self.model: Any = None
        self.virtual_host_name = ""
        #: the open's hostname (``$management``: the broker's management node, see .management)
        self.hostname = ""
        self.client_properties: dict[str, Any] = {}
        self.remote_container_id = ""
        #: the idle-time-out our open offered (ms; 0: none)
        self.offered_idle_ms = 0
        #: the largest frame the peer takes (its open's max-frame-size)
        self.max_frame_size = MIN_MAX_FRAME_SIZE
        self.channel_max = host.channel_max
        self.sessions: dict[int, Session] = {}        # by the peer's channel
        self._our_channels: set[int] = set()
        self._dispatch_pending: set[Any] = set()
        #: sessions with incoming deliveries to accept once the input is processed
        self.dispositions_due: set[Session] = set()
        self.blocked = False
        self._alarm = ""                     # why the alarm blocks publishers
        self.bytes_received = 0
        self.messages_received = 0
        self.messages_sent = 0

    # -- transport-facing API -------------------------------------------------------------
    @property
    def buffered_bytes(self) -> int:
        return self._reader.buffered_bytes + self._out_bytes

    @property
    def is_open(self) -> bool:
        return self.state is State.OPEN

    def start(self) -> None:
        if self.version is AmqpVersion.V1_0_SASL:
            offered = self._offered_mechanisms()
            self._write(SASL_HEADER)
            self._write(encode_frame(SaslMechanisms(sasl_server_mechanisms=[Symbol(m) for m in offered]),
                                     frame_type=TYPE_SASL))
            return
        # the plain header: only a port that lets anyone in may skip SASL (spec 5.3.1)
        if "ANONYMOUS" not in self.host.sasl_mechanisms(self.remote_host):
            self.close_reason = "the client skipped SASL, which this port requires"
            self._write(SASL_HEADER)
            self._finish()
            return
        self._write(AMQP_HEADER)
        self._authenticate_with("ANONYMOUS", b"")

    def receive_data(self, data: bytes) -> None:
        if self.state is State.CLOSED:
            return
        self.bytes_received += len(data)
        try:
            if self.state is State.OPEN or self.state is State.CLOSE_SENT or self.state is State.AWAITING_OPEN:
                self._amqp_frames(data)
            else:
                self._reader.append(data)
                self._pre_open()
        except FramingError as exc:
            self._connection_error(ConnectionErrorCondition.FRAMING_ERROR, str(exc), finish=True)
        except DecodeError as exc:
            self._connection_error(AmqpErrorCondition.DECODE_ERROR, str(exc))
        except ProtocolFault as exc:
            self._connection_error(exc.condition, exc.description)
        except Exception as exc:  # a bug must not take the broker down with it
            self.failed(exc)
        self._after_input()

    def output_drained(self) -> None:
        was_full = not self.writable
        self._in_flight = 0
        if was_full and self.state is State.OPEN:
            try:
                for session in list(self.sessions.values()):
                    session.resume_deliveries()
                dispatch_pending(self)
            except Exception as exc:
                self.failed(exc)

    def keepalive(self) -> None:
        self._write(EMPTY_FRAME)

    def idle_expired(self, silence: float) -> None:
        """The transport heard nothing for twice our idle-time-out: a close explaining why goes
        before the socket does (spec 2.4.5)."""
        if self.state is State.OPEN:
            self._connection_error(AmqpErrorCondition.RESOURCE_LIMIT_EXCEEDED,
                                   f"no frame received for {silence:.0f} s (idle-time-out"
                                   f" {self.offered_idle_ms} ms)", finish=True)

    def work_done(self, result: Any, error: BaseException | None = None) -> None:
        self.authentication = None
        if self.state is not State.AUTHENTICATING:
            return
        step: SaslStep | None = result
        if error is None and step is not None and step.challenge is not None:
            self._write(encode_frame(SaslChallenge(challenge=step.challenge), frame_type=TYPE_SASL))
            self.state = State.AWAITING_SASL_RESPONSE
            self.receive_data(b"")            # a response the client sent without waiting
            return
        if error is not None or step is None or step.principal is None:
            text = error.text if isinstance(error, errors.BrokerError) else f"authentication failed: {error!r}"
            log.info("AMQP 1.0 login refused for %s: %s", self.remote_host, text)
            self.close_reason = text
            if self.version is AmqpVersion.V1_0_SASL:
                self._write(encode_frame(SaslOutcome(code=SaslCode.AUTH), frame_type=TYPE_SASL))
            self._finish()
            return
        self.principal = step.principal
        self._sasl = None
        if self.version is AmqpVersion.V1_0_SASL:
            # spec 5.3.3.6: additional-data carries the server's final message (SCRAM)
            self._write(encode_frame(SaslOutcome(code=SaslCode.OK,
                                                 additional_data=step.additional_data or None),
                                     frame_type=TYPE_SASL))
            self.state = State.AWAITING_HEADER
            self._reader.expect_header()
        else:
            self.state = State.AWAITING_OPEN
        self.receive_data(b"")                # what the client sent without waiting

    @property
    def blocked_reason(self) -> str:
        """Why publishing is blocked: the alarm, the overfull queues links fed ("": it is not)."""
        reasons = [self._alarm] if self.blocked else []
        for session in self.sessions.values():
            reasons += [flow.reason for link in session.links.values()
                        if (flow := getattr(link, "publisher_flow", None)) is not None and flow.held]
        return "; ".join(dict.fromkeys(reasons))

    def set_blocked(self, blocked: bool, reason: str) -> None:
        if blocked == self.blocked:
            return
        self.blocked = blocked
        self._alarm = reason
        if not blocked and self.state is State.OPEN:
            for session in list(self.sessions.values()):
                session.unblocked()
            self._after_input()

    def close(self, error: errors.BrokerError) -> None:
        self._broker_error(error)
        self._after_input()

    def connection_lost(self) -> None:
        if self.state is State.CLOSED:
            return
        self._teardown()
        self.state = State.CLOSED
        self.closed = True

    # -- SASL and the headers ------------------------------------------------------------
    def _pre_open(self) -> None:
        reader = self._reader
        while self.state is State.AWAITING_SASL_INIT or self.state is State.AWAITING_SASL_RESPONSE:
            frame = reader.next_frame()
            if frame is None:
                return
            if frame.type != TYPE_SASL or frame.empty:
                raise DecodeError(f"frame of type 0x{frame.type:02x} during the SASL exchange", 0)
            init = frame.sasl_frame()
            if self.state is State.AWAITING_SASL_RESPONSE:
                if not isinstance(init, SaslResponse):
                    raise DecodeError(f"{init.SYMBOL} where sasl-response was expected", 0)
                self._sasl_step(init.response)
            elif not isinstance(init, SaslInit):
                raise DecodeError(f"{init.SYMBOL} from a client that has not sent sasl-init", 0)
            else:
                self._sasl_init(init)
        if self.state is State.AWAITING_HEADER:
            header = reader.next_header()
            if header is None:
                return
            if header != AMQP_HEADER:
                self.close_reason = f"expected the AMQP header after SASL, got {header!r}"
                self._write(AMQP_HEADER)
                self._finish()
                return
            self._write(AMQP_HEADER)
            self.state = State.AWAITING_OPEN
            self._amqp_frames(b"")

    def _offered_mechanisms(self) -> list[str]:
        """The port's mechanisms that this engine speaks, most preferred first."""
        return [m for m in self.host.sasl_mechanisms(self.remote_host) if m in MECHANISMS]

    def _sasl_init(self, init: SaslInit) -> None:
        mechanism = str(init.mechanism)
        offered = self._offered_mechanisms()
        if mechanism not in offered:
            self.close_reason = f"SASL mechanism '{mechanism}' is not offered"
            self._write(encode_frame(SaslOutcome(code=SaslCode.AUTH), frame_type=TYPE_SASL))
            self._finish()
            return
        self._authenticate_with(mechanism, init.initial_response)

    def _authenticate_with(self, mechanism: str, response: bytes | None) -> None:
        try:
            self._sasl = sasl_exchange.start(self.host, mechanism, self.remote_host)
        except errors.AuthenticationFailed as exc:
            self.state = State.AUTHENTICATING
            self.work_done(None, exc)
            return
        if response is None and mechanism in sasl_exchange.CLIENT_FIRST:
            # no initial response: an empty challenge asks for it (RFC 4422 section 5)
            self._write(encode_frame(SaslChallenge(challenge=b""), frame_type=TYPE_SASL))
            self.state = State.AWAITING_SASL_RESPONSE
            return
        self._sasl_step(response or b"")

    def _sasl_step(self, response: bytes) -> None:
        # run off the loop (a salted hash is slow by design); work_done() goes on
        server = self._sasl
        assert server is not None
        self.state = State.AUTHENTICATING
        self.authentication = lambda: server.respond(response)
        self.on_event(WorkRequested(self.authentication))

    # -- AMQP frames -------------------------------------------------------------------------
    def _amqp_frames(self, data: bytes) -> None:
        closed, open_ = State.CLOSED, State.OPEN
        for frame_type, channel, body in self._reader.bodies(data):
            state = self.state
            if state is closed:
                return
            if not body:
                continue                      # a heartbeat
            if frame_type != TYPE_AMQP:
                raise DecodeError(f"frame of type 0x{frame_type:02x} after the SASL exchange", 0)
            if state is open_ and whole_transfer(self, channel, body):
                continue                      # a whole delivery in one usual transfer (.transfer_arrival)
            performative, payload = performative_of(frame_type, channel, body)
            self._performative(channel, performative, payload)

    def _performative(self, channel: int, performative: Performative, payload: bytes) -> None:
        kind = type(performative)
        if self.state is State.CLOSE_SENT:
            if kind is Close:
                self._finish(linger=False)
            return
        if self.state is State.AWAITING_OPEN:
            if kind is not Open:
                raise ProtocolFault(AmqpErrorCondition.ILLEGAL_STATE,
                                    f"{performative.SYMBOL} before open")
            self._open(performative)  # type: ignore[arg-type]
            return
        if kind is Close:
            self._peer_close(performative)  # type: ignore[arg-type]
            return
        if kind is Open:
            raise ProtocolFault(AmqpErrorCondition.ILLEGAL_STATE, "a second open")
        if channel > self.channel_max:
            raise ProtocolFault(ConnectionErrorCondition.FRAMING_ERROR,
                                f"channel {channel} exceeds the negotiated channel-max of {self.channel_max}")
        session = self.sessions.get(channel)
        if kind is Begin:
            if session is not None:
                raise ProtocolFault(AmqpErrorCondition.ILLEGAL_STATE, f"begin on channel {channel}, which is in use")
            self._begin(channel, performative)  # type: ignore[arg-type]
            return
        if session is None:
            if kind is End:
                return                        # an end crossing ours
            raise ProtocolFault(AmqpErrorCondition.ILLEGAL_STATE,
                                f"{performative.SYMBOL} on channel {channel}, which has no session")
        session.performative(performative, payload)

    def _open(self, open_: Open) -> None:
        assert self.principal is not None
        if open_.max_frame_size < MIN_MAX_FRAME_SIZE:
            raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD,
                                f"max-frame-size {open_.max_frame_size} is below the minimum of 512")
        peer_idle_ms = open_.idle_time_out or 0
        if 0 < peer_idle_ms < MIN_PEER_IDLE_TIME_OUT_MS:
            raise ProtocolFault(AmqpErrorCondition.NOT_ALLOWED,
                                f"idle-time-out {peer_idle_ms} ms is below the minimum of"
                                f" {MIN_PEER_IDLE_TIME_OUT_MS} ms")
        self.remote_container_id = str(open_.container_id)
        self.client_properties = {str(k): v for k, v in (open_.properties or {}).items()}
        self.max_frame_size = min(open_.max_frame_size, 1 << 31)
        self.channel_max = min(open_.channel_max, self.host.channel_max)
        self.hostname = str(open_.hostname or "")
        self.namespace = self._virtual_host(open_.hostname)
        self.virtual_host_name = self.namespace.vhost_name
        self.access = self.host.access(self.principal, self.virtual_host_name, self.remote_host)
        our_max = max(self.host.frame_max, MIN_MAX_FRAME_SIZE)
        self._reader.max_frame_size = our_max
        idle_ms = self.offered_idle_ms = self.host.idle_timeout * 1000
        self._write(encode_frame(Open(
            container_id=self.container_id, hostname=open_.hostname, max_frame_size=our_max,
            channel_max=self.channel_max, idle_time_out=idle_ms or None,
            offered_capabilities=[Symbol(c) for c in OFFERED_CAPABILITIES] or None,
            properties={Symbol("product"): self.host.product, Symbol("version"): self.host.version})))
        self.state = State.OPEN
        peer_idle = peer_idle_ms / 1000
        if peer_idle or idle_ms:
            self.on_event(IdleTiming(peer_idle or idle_ms / 1000, peer_idle * IDLE_SEND_FRACTION,
                                     idle_ms / 1000 * IDLE_EXPIRE_FACTOR))
        self.on_event(Opened())
        self.host.connection_opened(self)
        reason = self.host.alarm_reason
        if reason:
            self.set_blocked(True, reason)

    def _virtual_host(self, hostname: str | None) -> Any:
        """Broker-J's mapping: ``vhost:<name>`` or a virtual host's name; else the default one."""
        assert self.principal is not None
        name = str(hostname or "")
        if name.startswith("vhost:"):
            return self.host.open_virtual_host(name[len("vhost:"):], self.principal)
        try:
            return self.host.open_virtual_host(name, self.principal)
        except errors.ResourceError:       # a connection limit (refused once, counted once)
            raise
        except (errors.InvalidPath, errors.NotAllowed):      # no virtual host of that name
            return self.host.open_virtual_host("", self.principal)

    def _begin(self, channel: int, begin: Begin) -> None:
        from .session import Session

        if begin.remote_channel is not None:
            raise ProtocolFault(AmqpErrorCondition.NOT_IMPLEMENTED, "the broker begins no sessions of its own")
        ours = channel if channel not in self._our_channels else \
            next(c for c in range(self.channel_max + 1) if c not in self._our_channels)
        self._our_channels.add(ours)
        session = Session(self, channel, ours, begin)
        self.sessions[channel] = session
        session.start()

    def session_ended(self, remote_channel: int) -> None:
        session = self.sessions.pop(remote_channel, None)
        if session is not None:
            self._our_channels.discard(session.channel)

    def _peer_close(self, close: Close) -> None:
        if close.error is not None:
            log.info("AMQP 1.0 connection %s closed by the client: %s %s", self.id, close.error.condition,
                     close.error.description or "")
        self._teardown()
        self._write(encode_frame(Close()))
        self._finish(linger=True)

    # -- output ------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        wake = not self._out
        self._out.append(data)
        self._out_bytes += len(data)
        if wake:
            self.on_output()

    #: one frame (or any bytes) to write
    write_frame = _write

    def write_frames(self, frames: list[bytes] | tuple[bytes]) -> None:
        wake = not self._out
        self._out.extend(frames)
        self._out_bytes += sum(map(len, frames)) if len(frames) > 1 else len(frames[0])
        if wake:
            self.on_output()

    def send(self, channel: int, performative: Performative, payload: bytes = b"") -> None:
        if self.state is State.OPEN:
            self._write(encode_frame(performative, channel, payload))

    def schedule_dispatch(self, queue: Any) -> None:
        self._dispatch_pending.add(queue)

    def run_dispatch(self) -> None:
        dispatch_pending(self)

    def _after_input(self) -> None:
        try:
            if self.dispositions_due:
                due, self.dispositions_due = self.dispositions_due, set()
                for session in due:
                    session.flush_dispositions()
            if self._dispatch_pending and self.state is State.OPEN:
                dispatch_pending(self)
        except Exception as exc:  # (:mod:`broker.protocol.internal_errors`)
            self.failed(exc)

    # -- errors and shutdown -------------------------------------------------------------------
    def failed(self, exc: Exception) -> None:
        """What raised while input was handled: a BrokerError closes the connection with its
        condition; anything else is a bug, answered with ``amqp:internal-error``."""
        if isinstance(exc, errors.BrokerError):
            self._broker_error(exc)
            return
        internal_errors.fail(
            self.id, self.remote_host, exc,
            lambda text: self._connection_error(AmqpErrorCondition.INTERNAL_ERROR, text),
            self._finish_quietly)

    def _finish_quietly(self) -> None:
        self.state, self.closed = State.CLOSED, True
        self.on_event(Finished())

    def _broker_error(self, exc: errors.BrokerError) -> None:
        from .conditions import condition_of

        self._connection_error(condition_of(exc), error_of(exc).description or "")

    def fault(self, exc: ProtocolFault) -> None:
        """A fault found by a session or link that ends the connection."""
        if exc.scope is Scope.CONNECTION:
            self._connection_error(exc.condition, exc.description)

    def _connection_error(self, condition: str, description: str, *, finish: bool = False) -> None:
        if self.state is State.CLOSE_SENT or self.state is State.CLOSED:
            return
        log.info("closing AMQP 1.0 connection %s from %s: %s %s", self.id, self.remote_host, condition,
                 description)
        self.close_reason = description
        if self.state in (State.AWAITING_SASL_INIT, State.AUTHENTICATING, State.AWAITING_HEADER):
            self._finish()
            return
        if self.state is State.AWAITING_OPEN:
            # spec 2.4.1: an open goes first, even when it is followed by a close at once
            self._write(encode_frame(Open(container_id=self.container_id)))
            finish = True
        self._teardown()
        self._write(encode_frame(Close(error=Error(condition=Symbol(condition), description=description[:1000]))))
        if finish:
            self._finish()
            return
        self.state = State.CLOSE_SENT
        self.on_event(Closing())

    def _teardown(self) -> None:
        was_open = self.state is State.OPEN or self.state is State.CLOSE_SENT
        namespace = self.namespace
        try:
            for session in list(self.sessions.values()):
                session.release_all()
            self.sessions.clear()
            self._our_channels.clear()
            if namespace is not None:
                namespace.links.connection_closed(self)
                try:
                    namespace.owner_closed(self)
                except errors.BrokerError:
                    log.exception("deleting exclusive queues of %s", self.id)
        finally:    # whatever failed above, the connection stops counting (connection limits)
            if namespace is not None:
                if was_open:
                    self.host.connection_closed(self)
                self.namespace = None

    def _finish(self, *, linger: bool = False) -> None:
        if self.state is not State.CLOSED:
            self._teardown()
        self.state = State.CLOSED
        if not self.closed:
            self.closed = True
            self.on_event(Finished(linger=linger))

    def __repr__(self) -> str:
        return f"<AmqpConnection10 {self.remote_host}:{self.remote_port} {self.state.name}>"
