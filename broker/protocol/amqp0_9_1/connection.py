"""The AMQP 0-8 / 0-9 / 0-9-1 connection engine (server side), sans-IO.

It implements :class:`~broker.protocol.engine.Engine`: feed it bytes with
:meth:`AmqpConnection.receive_data`; take bytes to write with
:meth:`AmqpConnection.data_to_send`.  It never touches a socket, a clock or a
thread: the transport drives it, tells it when written bytes have drained
(:meth:`output_drained`) and when the peer went away (:meth:`connection_lost`),
and hears through ``on_event`` what the connection needs (opened, closing,
finished, reading paused, heartbeat timing, a password to verify off the loop).

Everything that affects the connection's state machine lives here; the
semantics of channel methods live in :mod:`.channel`.

Error handling follows spec 0-9-1 section 1.8 / 4.2.x: a *soft* error closes
one channel (``channel.close``), a *hard* error closes the connection
(``connection.close``); after sending ``connection.close`` every frame but
``connection.close``/``close-ok`` is discarded.
"""

from __future__ import annotations

import enum
import logging
import struct
import uuid
from typing import Any, Callable

from broker import errors
from broker.messaging.flow_control import PublisherFlow
from broker.protocol.detect import AmqpVersion
from broker.protocol.engine import (Closing, EngineEvent, Finished, IdleTiming, Opened,
                                    OutputQueue, PauseReading, ResumeReading, WorkRequested)
from broker.protocol.host import Principal, ProtocolHost
from broker.protocol import internal_errors
from broker.protocol.internal_errors import dispatch_pending
from broker.security import sasl_exchange
from broker.security.sasl_exchange import SaslServer, SaslStep
from broker.security.access_control import UNCHECKED, ConnectionAccess

from . import access_checks
from . import methods as m
from .method_decoding import MethodDecoder
from .versions import SERVER_ONLY, VERSION_TABLES, method_ids, server_properties
from .held_frames import HeldFrames
from .store_wait import StoreWaits
from .codec import (FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD,
                    FRAME_MIN_SIZE, HEARTBEAT_FRAME, method_frame)

log = logging.getLogger(__name__)

_FRAME_HEADER = struct.Struct(">BHI")


class State(enum.Enum):
    AWAITING_START_OK = "awaiting connection.start-ok"
    AWAITING_SECURE_OK = "awaiting connection.secure-ok"   # the SASL response came empty
    AUTHENTICATING = "authenticating"      # the transport is verifying credentials
    AWAITING_TUNE_OK = "awaiting connection.tune-ok"
    AWAITING_OPEN = "awaiting connection.open"
    OPEN = "open"
    CLOSING = "closing"          # we sent connection.close and await close-ok
    CLOSED = "closed"


HOLD_LIMIT = 1 << 20             # input held from a blocked publisher before reading stops
HEARTBEAT_SEND_AFTER = 0.45      # of the interval: beat when we were quiet this long (spec 4.2.7)
HEARTBEAT_EXPIRE_AFTER = 2.0     # of the interval: a peer silent this long is gone


class _Desynchronised(errors.FrameError):
    """A framing error after which the byte stream cannot be followed any more."""


class AmqpConnection(OutputQueue):
    """One client connection speaking AMQP 0-8, 0-9 or 0-9-1."""

    def __init__(self, host: ProtocolHost, version: AmqpVersion, *, remote_host: str,
                 remote_port: int = 0, port_name: str = "AMQP") -> None:
        from .channel import Channel  # noqa: F401  (import cycle: channel needs this module)

        self.host = host
        self.version = version
        self.remote_host = remote_host
        self.remote_port = remote_port
        self.port_name = port_name
        self.id = str(uuid.uuid4())
        self.state = State.AWAITING_START_OK
        self._mechanism = ""                   # the SASL mechanism chosen in start-ok
        self._sasl: SaslServer | None = None   # its exchange (several steps for SCRAM)
        self._sasl_done: SaslStep | None = None   # logged in; the server's final data sent
        _, self._encoders, self._version_pair = VERSION_TABLES[version]
        #: payload -> method (:mod:`.method_decoding`)
        self.decode_method: Callable[[bytes], m.Method] = MethodDecoder(version).decode
        self._rest = b""
        self._init_output()
        self.on_output: Callable[[], None] = lambda: None
        self.on_event: Callable[[EngineEvent], None] = lambda event: None
        self.closed = False                  # transport closes once output is flushed
        #: connection.open-ok was sent (the transport stops timing the opening)
        self.opened = False
        #: closed by sending connection.close-ok: the client closes the socket next, and
        #: until it does the transport reads and drops what still comes (RabbitMQ does)
        self.awaits_peer_close = False
        self.close_reason = ""
        self.principal: Principal | None = None
        self.authentication: Callable[[], SaslStep] | None = None   # work for a worker thread
        self.namespace: Any = None
        self.access: ConnectionAccess = UNCHECKED     # the ACL checks, from connection.open on
        self.model: Any = None             # the runtime Connection object in the model tree
        self.virtual_host_name = ""
        self.virtual_host_as_named = ""        # as connection.open named it ("/" for the default)
        self.client_properties: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self.channel_max = host.channel_max
        self.frame_max = host.frame_max
        #: the host's bound as it was when the connection came (read on every publish)
        self.max_message_size = host.max_message_size
        self._frame_limit = max(host.frame_max, FRAME_MIN_SIZE)
        self.heartbeat = 0
        self.channels: dict[int, Channel] = {}
        self._dispatch_pending: set[Any] = set()
        self.confirms_due: set[Channel] = set()    # channels owing basic.ack for publishes
        self.blocked = False
        self._block_reason = ""
        #: what blocks this connection's publishing: an alarm, overfull queues it fed
        self.publisher_flow = PublisherFlow(self._flow_changed, self.failed)
        self._told_blocked = False
        self._held = HeldFrames()
        self._reading_paused = False
        #: channels whose later frames wait for a durable change to be stored (:mod:`.store_wait`)
        self.store_waits = StoreWaits()
        self.has_published = False
        self.bytes_received = 0
        self.messages_received = 0
        self.messages_sent = 0

    # -- transport-facing API -------------------------------------------------
    def start(self) -> None:
        """Begin the handshake (spec 4.2.2): send connection.start."""
        major, minor = self._version_pair
        mechanisms = " ".join(self.host.sasl_mechanisms(self.remote_host)).encode()
        self.send_method(0, m.ConnectionStart(
            version_major=major, version_minor=minor,
            server_properties=server_properties(self.host.product, self.host.version),
            mechanisms=mechanisms, locales=b"en_US",
        ))

    def receive_data(self, data: bytes) -> None:
        if self.state is State.CLOSED:
            return
        self.bytes_received += len(data)
        buf = self._rest + data if self._rest else data
        n = len(buf)
        o = 0
        limit = self._frame_limit
        # read once per read, not per frame (the objects stay; what they hold changes)
        unpack, held, waits, channels = _FRAME_HEADER.unpack_from, self._held, self.store_waits, \
            self.channels
        try:
            while n - o >= 7 and self.state is not State.AUTHENTICATING:
                ftype, channel, size = unpack(buf, o)
                if size > limit - 8:
                    raise _Desynchronised(
                        f"frame of {size + 8} bytes exceeds the negotiated frame_max of {limit}")
                end = o + 7 + size
                if end >= n:
                    break
                if buf[end] != FRAME_END:
                    raise _Desynchronised(f"frame-end octet is 0x{buf[end]:02x}, expected 0xce")
                payload = buf[o + 7:end]
                o = end + 1
                if channel and (self._told_blocked or held.channels or waits.held) \
                        and self._hold(ftype, channel, payload):
                    continue
                try:
                    # content frames of an open channel (two of a publish's three frames)
                    # without the general dispatch: what _frame does for them, one call less
                    if (ftype == FRAME_BODY or ftype == FRAME_HEADER) and self.state is State.OPEN \
                            and (ch := channels.get(channel)) is not None:
                        if ftype == FRAME_BODY:
                            ch.body_frame(payload)
                        else:
                            ch.header_frame(payload)
                    else:
                        self._frame(ftype, channel, payload)
                except errors.BrokerError as exc:
                    # close, and read on: the frames behind are discarded, but for close-ok
                    self._connection_error(exc)
                if self.state is State.CLOSED:
                    break
        except _Desynchronised as exc:
            # Framing is lost: nothing after this point can be parsed, so there is
            # no close-ok to wait for.  Say why, then drop the connection.
            self._connection_error(exc)
            self._finish()
        except Exception as exc:  # a bug must not take the broker down with it
            self.failed(exc)
        self._rest = buf[o:] if o < n and self.state is not State.CLOSED else b""
        if self.state is State.AUTHENTICATING and len(self._rest) > limit:  # (reading is paused then)
            self._rest = b""
            self._connection_error(errors.FrameError(f"more than frame_max ({limit} bytes) sent"
                                                     " before the login was answered"))
        self._after_input()

    def output_drained(self) -> None:
        """The transport wrote everything it took: deliveries may resume."""
        was_full = not self.writable
        self._in_flight = 0
        if was_full and self.state is State.OPEN:
            try:
                for ch in list(self.channels.values()):
                    ch.resume_deliveries()
                dispatch_pending(self)
            except Exception as exc:
                self.failed(exc)

    @property
    def buffered_bytes(self) -> int:
        """Bytes this connection buffers: unparsed input and unsent output.

        Publishes held from a blocked publisher are left out: they are bounded
        (:data:`HOLD_LIMIT`) and go only once the alarm clears, so counting
        them could keep the memory alarm set for good.
        """
        return len(self._rest) + self._out_bytes

    @property
    def reading_paused(self) -> bool:
        """A blocked publisher is read only until its held frames reach :data:`HOLD_LIMIT`
        (likewise a connection whose channels wait for the store); nothing is read while
        a login is checked (a client may send at most one frame before it is answered)."""
        return (self._held.size >= HOLD_LIMIT or self.store_waits.reading_paused
                or self.state is State.AUTHENTICATING)

    def connection_lost(self) -> None:
        """The peer went away (EOF, reset, missed heartbeats): release everything."""
        if self.state is State.CLOSED:
            return
        self._teardown()
        self.state = State.CLOSED
        self.closed = True

    def send_heartbeat(self) -> None:
        self._write(HEARTBEAT_FRAME)

    keepalive = send_heartbeat

    def work_done(self, result: Any, error: BaseException | None = None) -> None:
        self.authentication_done(result, error)
        if not self.closed:
            self._reading_changed()

    def close(self, error: errors.BrokerError) -> None:
        """Broker-initiated close (e.g. 320 CONNECTION_FORCED on shutdown)."""
        self._connection_error(error)
        self._after_input()

    def set_blocked(self, blocked: bool, reason: str = "low on memory") -> None:
        """Resource alarm changed (what follows: :meth:`_flow_changed`)."""
        self.publisher_flow.set_alarm(reason if blocked else "")

    @property
    def blocked_reason(self) -> str:
        """Why publishing is blocked ("" when it is not), for management."""
        return self._block_reason if self.blocked else ""

    def _flow_changed(self) -> None:
        """A resource alarm or an overfull queue (:mod:`broker.messaging.flow_control`)
        blocks this connection, or no longer does.

        As in RabbitMQ, only connections that publish are blocked: one that has
        published hears connection.blocked now, another when it next publishes
        (:meth:`publishing`); unblocked goes to whoever heard blocked.
        """
        blocked = self.publisher_flow.blocked
        if blocked == self.blocked:
            if blocked:
                self._block_reason = self.publisher_flow.reason
            return
        self.blocked = blocked
        self._block_reason = self.publisher_flow.reason
        if blocked:
            if self.has_published:
                self._notify_blocked()
        elif self._told_blocked:
            self._told_blocked = False
            if self.state is State.OPEN:
                self.send_method(0, m.ConnectionUnblocked())
            self._release_held()

    def _hold(self, ftype: int, channel: int, payload: bytes) -> bool:
        """Hold back a blocked publisher's channel traffic (:mod:`.held_frames`); True when
        ``payload`` was held.  A channel waiting for the store holds all its frames
        (:mod:`.store_wait`)."""
        if channel in self.store_waits:
            self.store_waits.hold(ftype, channel, payload)
            self._reading_changed()
            return True
        if not (self._told_blocked or self._held.channels):
            return False
        held = self._held.hold(ftype, channel, payload)
        if held is None or (held and self._held.size >= HOLD_LIMIT and not self._reading_paused):
            self._reading_changed()
        return bool(held)

    def _reading_changed(self) -> None:
        paused = self.reading_paused
        if paused != self._reading_paused:
            self._reading_paused = paused
            self.on_event(PauseReading() if paused else ResumeReading())

    def _release_held(self) -> None:
        held = self._held.take()
        self._reading_changed()
        try:
            for index, (ftype, channel, payload) in enumerate(held):
                if self.state is not State.OPEN and self.state is not State.CLOSING:
                    break
                if self._told_blocked:          # what was let through overfilled a queue again
                    self._held.put_back(held[index:])
                    self._reading_changed()
                    break
                if channel in self.store_waits:
                    self.store_waits.hold(ftype, channel, payload)
                    continue
                self._frame(ftype, channel, payload)
        except Exception as exc:
            self.failed(exc)
        self._after_input()

    def release_channel(self, number: int) -> None:
        """Channel ``number`` no longer waits for the store: process its held frames, up to its next wait."""
        frames = self.store_waits.release(number)
        try:
            for index, (ftype, payload) in enumerate(frames):
                if self.state is not State.OPEN and self.state is not State.CLOSING:
                    break
                if number in self.store_waits:          # waits again: the rest stays held
                    for later, rest in frames[index:]:
                        self.store_waits.hold(later, number, rest)
                    break
                self._frame(ftype, number, payload)
        except Exception as exc:
            self.failed(exc)
        self._after_input()
        self._reading_changed()                         # the transport reads again once below the limit

    def publishing(self) -> None:
        """A basic.publish arrived: note it, and tell a blocked publisher so."""
        self.has_published = True
        if self.blocked and not self._told_blocked:
            self._notify_blocked()

    def _notify_blocked(self) -> None:
        self._told_blocked = True
        if self.state is State.OPEN and self.client_capabilities.get("connection.blocked"):
            self.send_method(0, m.ConnectionBlocked(reason=self._block_reason))

    # -- output -----------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if not self._out:
            self._out.append(data)
            self._out_bytes += len(data)
            self.on_output()
        else:
            self._out.append(data)
            self._out_bytes += len(data)

    def write_frames(self, frames: list[bytes], size: int) -> None:
        """Queue several already-encoded frames (deliveries)."""
        wake = not self._out
        self._out.extend(frames)
        self._out_bytes += size
        if wake:
            self.on_output()

    def encode_method(self, channel: int, method: m.Method) -> bytes:
        encoder = self._encoders.get(type(method))
        if encoder is None:
            raise errors.InternalError(f"{method.NAME} does not exist in AMQP {self.version.value}")
        return method_frame(channel, encoder(method))

    def send_method(self, channel: int, method: m.Method) -> None:
        self._write(self.encode_method(channel, method))

    @property
    def is_open(self) -> bool:
        return self.state is State.OPEN

    def run_dispatch(self) -> None:
        """Deliver what consumers may take now (after output that held deliveries back)."""
        dispatch_pending(self)

    def schedule_dispatch(self, queue: Any) -> None:
        self._dispatch_pending.add(queue)

    def _after_input(self) -> None:
        try:
            if self.confirms_due:
                due, self.confirms_due = self.confirms_due, set()
                for ch in due:
                    ch.flush_confirms()
            if self._dispatch_pending:
                dispatch_pending(self)
        except Exception as exc:  # (:mod:`broker.protocol.internal_errors`)
            self.failed(exc)

    # -- frames -----------------------------------------------------------------
    def _frame(self, ftype: int, channel: int, payload: bytes) -> None:
        if ftype == FRAME_METHOD:
            self._method_frame(channel, payload)
        elif ftype == FRAME_BODY or ftype == FRAME_HEADER:
            if self.state is State.CLOSING:
                return
            ch = self.channels.get(channel)
            if ch is None or self.state is not State.OPEN:
                raise errors.UnexpectedFrame(
                    f"content frame on channel {channel}, which is not open")
            if ftype == FRAME_BODY:
                ch.body_frame(payload)
            else:
                ch.header_frame(payload)
        elif ftype == FRAME_HEARTBEAT:
            if channel != 0:
                raise errors.FrameError(f"heartbeat frame on channel {channel}, must be channel 0")
        else:
            raise errors.FrameError(f"unknown frame type {ftype}")

    def _method_frame(self, channel: int, payload: bytes) -> None:
        method = self.decode_method(payload)
        cls = type(method)
        if self.state is State.CLOSING:
            if channel == 0 and cls is m.ConnectionCloseOk:
                self._finish()
            elif channel == 0 and cls is m.ConnectionClose:
                self._send_close_ok()
            return
        if cls in SERVER_ONLY:
            raise errors.CommandInvalid(f"{method.NAME} is sent by servers, not clients")
        if channel == 0:
            self._connection_method(method)
            return
        if self.state is not State.OPEN:
            raise errors.UnexpectedFrame(f"{method.NAME} on channel {channel} before connection.open-ok")
        ch = self.channels.get(channel)
        if ch is None:
            if cls is m.ChannelOpen:
                self._open_channel(channel)
            elif cls is m.ChannelCloseOk or cls is m.ChannelClose:
                # close of a channel we already forgot: answer close, ignore close-ok
                if cls is m.ChannelClose:
                    self.send_method(channel, m.ChannelCloseOk())
            else:
                raise errors.ChannelError(
                    f"expected 'channel.open' on channel {channel}, got '{method.NAME}'")
            return
        if self.access.control.active and not access_checks.permitted(ch, method):
            return
        ch.method(method, payload)

    def _open_channel(self, number: int) -> None:
        from .channel import Channel

        if number > self.channel_max:
            # RabbitMQ: 530 NOT_ALLOWED, "channel_max exceeded"
            raise errors.NotAllowed(
                f"channel {number} exceeds the negotiated channel_max of {self.channel_max}")
        self.channels[number] = Channel(self, number)
        reply = m.ChannelOpenOk() if self.version is AmqpVersion.V0_8 else m.ChannelOpenOk(channel_id=b"")
        self.send_method(number, reply)

    def channel_closed(self, number: int) -> None:
        self.channels.pop(number, None)

    # -- connection class (channel 0) ------------------------------------------
    def _connection_method(self, method: m.Method) -> None:
        cls = type(method)
        state = self.state
        if cls is m.ConnectionClose:
            self._teardown()
            self._send_close_ok()
        elif cls is m.ConnectionCloseOk:
            raise errors.CommandInvalid("connection.close-ok without a connection.close")
        elif state is State.AWAITING_START_OK and cls is m.ConnectionStartOk:
            self._start_ok(method)  # type: ignore[arg-type]
        elif state is State.AWAITING_SECURE_OK and cls is m.ConnectionSecureOk:
            self._sasl_response(method.response)  # type: ignore[attr-defined]
        elif state is State.AWAITING_TUNE_OK and cls is m.ConnectionTuneOk:
            self._tune_ok(method)  # type: ignore[arg-type]
        elif state is State.AWAITING_OPEN and cls is m.ConnectionOpen:
            self._open(method)  # type: ignore[arg-type]
        elif state is State.OPEN and cls is m.ConnectionUpdateSecret:
            self.send_method(0, m.ConnectionUpdateSecretOk())
        elif state is State.OPEN and cls in (m.ConnectionBlocked, m.ConnectionUnblocked):
            pass  # a client may tell us it is blocked; nothing to do
        elif cls in (m.ChannelOpen, m.ChannelClose, m.ChannelFlow):
            raise errors.ChannelError(f"{method.NAME} on channel 0, which is the connection's")
        elif state is State.OPEN:
            # RabbitMQ: "CHANNEL_ERROR - unexpected method in connection state running"
            raise errors.ChannelError(f"unexpected method {method.NAME} in connection state running")
        else:
            raise errors.CommandInvalid(f"{method.NAME} is not valid while {state.value}")

    def _start_ok(self, method: m.ConnectionStartOk) -> None:
        self.client_properties = method.client_properties
        caps = method.client_properties.get("capabilities")
        self.client_capabilities = caps if isinstance(caps, dict) else {}
        mechanism = method.mechanism
        offered = self.host.sasl_mechanisms(self.remote_host)
        if mechanism not in offered:
            # 403 as for any refused login, even without authentication_failure_close: no password was tried
            raise errors.ConnectionAccessRefused(f"authentication mechanism '{mechanism}' is not"
                                                 f" supported; this broker offers: {' '.join(offered)}")
        self._mechanism = mechanism
        self._sasl = sasl_exchange.start(self.host, mechanism, self.remote_host)
        if not method.response and mechanism in sasl_exchange.CLIENT_FIRST:
            # No initial response (Qpid's clients): a client-first mechanism gets an empty challenge and
            # the response comes in connection.secure-ok (RFC 4422 section 5, spec 0-9-1 1.4.2.3).
            self.state = State.AWAITING_SECURE_OK
            self.send_method(0, m.ConnectionSecure(challenge=b""))
            return
        self._sasl_response(method.response)

    def _sasl_response(self, response: bytes) -> None:
        # Verifying a salted hash is deliberately slow: the transport runs this
        # in a worker thread and reports back through authentication_done().
        if self._sasl_done is not None:
            # RFC 4422 section 5: the server's final data went in connection.secure
            if response:
                raise errors.AuthenticationFailed("connection.secure-ok after the server's"
                                                  " final SASL message must be empty")
            self._logged_in(self._sasl_done.principal)
            return
        server = self._sasl
        assert server is not None
        self.state = State.AUTHENTICATING
        self.authentication = lambda: server.respond(response)
        self.on_event(WorkRequested(self.authentication))
        self._reading_changed()

    def authentication_done(self, step: SaslStep | None, error: BaseException | None = None) -> None:
        """The transport ran :attr:`authentication`; continue the handshake (spec 4.2.2):
        a challenge in connection.secure, else connection.tune."""
        self.authentication = None
        if self.state is not State.AUTHENTICATING:
            return
        if error is None and step is not None and (step.challenge is not None
                                                   or step.additional_data):
            if step.complete:
                self._sasl_done = step
            self.state = State.AWAITING_SECURE_OK
            self.send_method(0, m.ConnectionSecure(challenge=step.challenge or step.additional_data))
            if self._rest:
                self.receive_data(b"")
            return
        principal = step.principal if step is not None else None
        if error is not None or principal is None:
            text = error.text if isinstance(error, errors.BrokerError) else f"authentication failed: {error!r}"
            log.info("login refused for %s: %s", self.remote_host, text)
            self._refuse_login(text)
            self._after_input()
            return
        self._logged_in(principal)
        if self._rest:                      # frames the client sent without waiting
            self.receive_data(b"")

    def _logged_in(self, principal: Principal) -> None:
        # (also from the frame loop, SCRAM's last secure-ok: the loop reads on by itself)
        self.principal = principal
        self._sasl = self._sasl_done = None
        self.state = State.AWAITING_TUNE_OK
        self.send_method(0, m.ConnectionTune(channel_max=self.host.channel_max, frame_max=self.host.frame_max,
                                             heartbeat=self.host.heartbeat))

    def _refuse_login(self, text: str) -> None:
        # RabbitMQ's authentication_failure_close: clients that announce it get a
        # connection.close with 403; others just see the socket close (spec 0-9-1).
        if self.client_capabilities.get("authentication_failure_close"):
            err = errors.AuthenticationFailed(text)
            self.send_method(0, m.ConnectionClose(reply_code=err.reply_code, reply_text=err.reply_text[:255]))
        self.close_reason = text
        self._finish()

    def _tune_ok(self, method: m.ConnectionTuneOk) -> None:
        frame_max = method.frame_max or self.host.frame_max
        if frame_max < FRAME_MIN_SIZE:
            raise errors.NotAllowed(
                f"negotiated frame_max = {frame_max} is lower than the minimum allowed value ({FRAME_MIN_SIZE})")
        if frame_max > self.host.frame_max:
            raise errors.NotAllowed(
                f"negotiated frame_max = {frame_max} is higher than the maximum allowed value ({self.host.frame_max})")
        self.frame_max = frame_max
        self._frame_limit = frame_max
        self.channel_max = min(method.channel_max or self.host.channel_max, self.host.channel_max) or 65535
        self.heartbeat = method.heartbeat
        self.state = State.AWAITING_OPEN
        if self.heartbeat:
            self.on_event(IdleTiming(self.heartbeat, self.heartbeat * HEARTBEAT_SEND_AFTER,
                                     self.heartbeat * HEARTBEAT_EXPIRE_AFTER))

    def _open(self, method: m.ConnectionOpen) -> None:
        assert self.principal is not None
        self.namespace = self.host.open_virtual_host(method.virtual_host, self.principal)
        self.virtual_host_name = self.namespace.vhost_name
        self.access = self.host.access(self.principal, self.virtual_host_name, self.remote_host)
        self.virtual_host_as_named = method.virtual_host or "/"
        self.state = State.OPEN
        self.opened = True
        self.send_method(0, m.ConnectionOpenOk())
        self.on_event(Opened())
        self.host.connection_opened(self)
        reason = self.host.alarm_reason
        if reason:
            self.set_blocked(True, reason)

    # -- errors and shutdown ------------------------------------------------------
    def reply_text(self, exc: errors.BrokerError) -> str:
        """``exc``'s text for this client, at most a short string long, naming the virtual host
        as the client did in connection.open (``/``, not ``default``), as RabbitMQ's texts do."""
        text = exc.reply_text
        named, own = self.virtual_host_as_named, self.virtual_host_name
        if named and named != own:
            text = text.replace(f"vhost '{own}'", f"vhost '{named}'")
        return text[:255]

    def _connection_error(self, exc: errors.BrokerError, class_id: int = 0, method_id: int = 0) -> None:
        if self.state in (State.CLOSING, State.CLOSED):
            return
        reply_text = self.reply_text(exc)
        log.info("closing connection %s from %s: %s", self.id, self.remote_host, reply_text)
        self.close_reason = reply_text
        if self.state in (State.AWAITING_START_OK, State.AWAITING_SECURE_OK, State.AUTHENTICATING,
                          State.AWAITING_TUNE_OK):
            # before tune the peer may not understand connection.close: just go
            self.send_method(0, m.ConnectionClose(reply_code=exc.reply_code, reply_text=reply_text,
                                                  class_id=class_id, method_id=method_id))
            self._finish()
            return
        self._teardown()
        self.send_method(0, m.ConnectionClose(reply_code=exc.reply_code, reply_text=reply_text,
                                              class_id=class_id, method_id=method_id))
        self.state = State.CLOSING
        self.on_event(Closing())

    def failed(self, exc: Exception) -> None:
        """What raised while input was handled: a BrokerError closes the connection with its
        code; anything else is a bug, answered with 541 INTERNAL_ERROR (:mod:`.internal_errors`)."""
        if isinstance(exc, errors.BrokerError):
            self._connection_error(exc)
            return
        internal_errors.fail(self.id, self.remote_host, exc,
                             lambda text: self._connection_error(errors.InternalError(text)),
                             self._finish_quietly)

    def _finish_quietly(self) -> None:
        self.state, self.closed = State.CLOSED, True
        self.on_event(Finished())

    def hard_error_in_method(self, exc: errors.BrokerError, method: m.Method) -> None:
        class_id, method_id = method_ids(method, self.version)
        self._connection_error(exc, class_id, method_id)

    def _teardown(self) -> None:
        was_open = self.state is State.OPEN or self.state is State.CLOSING
        try:
            self.publisher_flow.close()
            for ch in list(self.channels.values()):
                ch.release_all()
            self.channels.clear()
            if self.namespace is not None:
                try:
                    self.namespace.owner_closed(self)
                except errors.BrokerError:
                    log.exception("deleting exclusive queues of %s", self.id)
        finally:    # whatever failed above, the connection stops counting (connection limits)
            if was_open and self.namespace is not None:
                self.host.connection_closed(self)
                self.namespace = None

    def _send_close_ok(self) -> None:
        self.send_method(0, m.ConnectionCloseOk())
        self.awaits_peer_close = True
        self._finish()

    def _finish(self) -> None:
        if self.state is not State.CLOSED:
            self._teardown()
        self.state = State.CLOSED
        if not self.closed:
            self.closed = True
            self.on_event(Finished(linger=self.awaits_peer_close))

    def __repr__(self) -> str:
        return f"<AmqpConnection {self.remote_host}:{self.remote_port} {self.version.value} {self.state.name}>"
