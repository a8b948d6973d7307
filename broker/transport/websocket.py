"""AMQP over WebSocket: the server side of RFC 6455 as a byte-stream layer (sans-IO).

The AMQP WebSocket Binding (OASIS amqp-wsb v1.0) tunnels one AMQP byte
stream through a WebSocket connection: the client opens it with an HTTP
upgrade offering the subprotocol ``amqp`` (section 2.1), and from then on
the AMQP bytes -- the protocol header included -- travel as the payload of
*binary* messages (section 2.3).  Message boundaries mean nothing: a frame
may span messages and a message may carry several frames, so this layer
passes payload bytes up as they arrive, without waiting for a message to
end.  The same framing carries AMQP 0-9-1 (and 0-8, 0-9): the header
detection above this layer picks the engine, as on a plain socket.

:class:`WebSocketLayer` sits in a connection's layer chain
(:mod:`broker.transport.layers`) between the socket -- or the TLS layer, for
``wss`` -- and header detection.  It answers the upgrade request (HTTP 101,
or an HTTP error whose body says what was wrong), answers pings, and closes
with the code RFC 6455 section 7.4.1 gives for each fault: 1003 for a text
message (AMQP is binary), 1009 for a message over the size limit, 1002 for a
framing error (an unmasked client frame among them, section 5.1).  A close
from the client is answered and ends the stream; when the engine ends it
(:meth:`end_stream`), the layer sends a close of its own.  wsproto does the
framing and the handshake's header checks.

:func:`choose_subprotocol` is shared with the management server's
WebSocket path (``mgmt.websocket``), so both refuse and accept alike.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Message, Ping,
                            Request, TextMessage)
from wsproto.utilities import RemoteProtocolError

from broker.errors import ConfigurationError
from broker.transport.layers import Layer, LayerFactory

#: the subprotocol of the AMQP WebSocket Binding, then the name its drafts used
#: (``AMQPWSB10``: earlier Qpid brokers, Azure Service Bus, rhea's examples)
SUBPROTOCOLS = ("amqp", "AMQPWSB10")

MAX_MESSAGE_SIZE_VARIABLE = "deltamq.websocket_max_message_size"
SUBPROTOCOL_REQUIRED_VARIABLE = "deltamq.websocket_subprotocol_required"
#: the path of an HTTP port that carries AMQP over WebSocket ("" for none)
PATH_VARIABLE = "deltamq.websocket_path"
#: the built-in values of the variables above, and the default configuration's WebSocket
#: port number (broker.model.system_config adds them)
CONTEXT_DEFAULTS = {
    "deltamq.ws_port": "5673",
    PATH_VARIABLE: "/amqp",
    MAX_MESSAGE_SIZE_VARIABLE: str(16 << 20),
    SUBPROTOCOL_REQUIRED_VARIABLE: "true",
}

#: an upgrade request's head larger than this is refused (h11's own default bound)
MAX_REQUEST_HEAD = 16 << 10
#: the largest binary message the layer sends: longer output goes in several
#: (clients bound what they accept: Python's websockets at 1 MiB by default)
MAX_SENT_MESSAGE = 256 << 10

#: RFC 6455 section 7.4.1 status codes
NORMAL_CLOSURE = 1000
PROTOCOL_ERROR = 1002
UNSUPPORTED_DATA = 1003
MESSAGE_TOO_BIG = 1009

_HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True, slots=True)
class WebSocketSettings:
    """What a port's WebSocket connections allow (defaults as in the built-in context)."""

    max_message_size: int = int(CONTEXT_DEFAULTS[MAX_MESSAGE_SIZE_VARIABLE])
    #: refuse an upgrade that offers no subprotocol at all (one that offers only
    #: others is always refused)
    subprotocol_required: bool = True

    @classmethod
    def resolved(cls, resolve: Callable[[str], str]) -> WebSocketSettings:
        """The settings from the context variables, as ``resolve`` expands ``${name}``."""
        size_text = resolve("${%s}" % MAX_MESSAGE_SIZE_VARIABLE).strip()
        required_text = resolve("${%s}" % SUBPROTOCOL_REQUIRED_VARIABLE).strip().lower()
        try:
            size = int(size_text)
        except ValueError:
            size = 0
        if size < 1:
            raise ConfigurationError(f"context variable '{MAX_MESSAGE_SIZE_VARIABLE}' must be a"
                                     f" positive number of bytes, not '{size_text}'")
        if required_text not in ("true", "false"):
            raise ConfigurationError(f"context variable '{SUBPROTOCOL_REQUIRED_VARIABLE}' must be"
                                     f" true or false, not '{required_text}'")
        return cls(size, required_text == "true")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an upgrade request is refused: the HTTP status and a line for the body."""

    status: int
    reason: str
    headers: tuple[tuple[bytes, bytes], ...] = ()


def choose_subprotocol(offered: Sequence[str], required: bool = True) -> str | None | Refusal:
    """The subprotocol to accept from those a client offers (None: accept with none).

    The binding's ``amqp`` wins over the draft's name.  A client that offers
    subprotocols, none of them AMQP's, speaks something else: refused.  One
    that offers none is refused when ``required`` (the binding says a client
    offers ``amqp``), else accepted without one.
    """
    for name in SUBPROTOCOLS:
        if name in offered:
            return name
    if offered:
        return Refusal(HTTPStatus.BAD_REQUEST,
                       f"none of the offered WebSocket subprotocols ({', '.join(offered)}) is"
                       f" served here; offer {SUBPROTOCOLS[0]!r}")
    if required:
        return Refusal(HTTPStatus.BAD_REQUEST,
                       f"no WebSocket subprotocol offered; offer {SUBPROTOCOLS[0]!r}"
                       " (Sec-WebSocket-Protocol: amqp)")
    return None


def http_refusal(refusal: Refusal) -> bytes:
    """A complete HTTP/1.1 response refusing an upgrade, after which the socket closes."""
    body = (refusal.reason + "\n").encode()
    try:
        phrase = HTTPStatus(refusal.status).phrase
    except ValueError:
        phrase = "Error"
    lines = [f"HTTP/1.1 {refusal.status} {phrase}".encode(),
             b"Content-Type: text/plain; charset=utf-8",
             b"Content-Length: " + str(len(body)).encode(),
             b"Connection: close",
             *(name + b": " + value for name, value in refusal.headers)]
    return b"\r\n".join(lines) + _HEAD_END + body


class WebSocketState(enum.Enum):
    HANDSHAKE = "awaiting the upgrade request"
    OPEN = "open"
    CLOSED = "closed"


class WebSocketLayer:
    """One connection's WebSocket, server side: binary payload up, binary messages down."""

    def __init__(self, settings: WebSocketSettings = WebSocketSettings()) -> None:
        self.settings = settings
        self.state = WebSocketState.HANDSHAKE
        #: the subprotocol accepted (None before the handshake, or none accepted)
        self.subprotocol: str | None = None
        #: what the connection was refused or closed for (for a log line)
        self.close_reason = ""
        self._ws = WSConnection(ConnectionType.SERVER)
        self._head = b""               # the upgrade request, until its head is complete
        self._out: list[bytes] = []    # the layer's own output (handshake, pongs, close)
        self._out_size = 0
        self._message_size = 0         # bytes of the binary message being received

    # -- Layer ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self.state is WebSocketState.CLOSED

    def receive_data(self, data: bytes) -> bytes:
        if self.state is WebSocketState.OPEN:
            self._ws.receive_data(data)
            return self._events()
        if self.state is WebSocketState.HANDSHAKE:
            return self._handshake(data)
        return b""                     # closed: whatever still comes is dropped

    def send_data(self, data: bytes) -> bytes:
        if self.state is not WebSocketState.OPEN:
            return b""                 # the stream has ended: nothing more goes out
        if len(data) <= MAX_SENT_MESSAGE:
            return self._ws.send(Message(data=data))
        return b"".join(self._ws.send(Message(data=data[o:o + MAX_SENT_MESSAGE]))
                        for o in range(0, len(data), MAX_SENT_MESSAGE))

    def data_to_send(self) -> bytes:
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        self._out_size = 0
        return out

    @property
    def buffered_bytes(self) -> int:
        return len(self._head) + self._out_size

    def end_stream(self) -> bytes:
        """The connection ends (the engine finished): the close frame, once
        (:meth:`broker.transport.layers.LayerChain.end` asks)."""
        if self.state is WebSocketState.OPEN:
            self._close(NORMAL_CLOSURE, "")
            return self.data_to_send()
        self.state = WebSocketState.CLOSED
        return b""

    # -- the upgrade -----------------------------------------------------------------------
    def _handshake(self, data: bytes) -> bytes:
        self._head += data
        end = self._head.find(_HEAD_END)
        if end < 0:
            if len(self._head) > MAX_REQUEST_HEAD:
                self._refuse(Refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                                     f"the upgrade request's head exceeds {MAX_REQUEST_HEAD}"
                                     " bytes"))
            return b""
        # feed wsproto the request's head only: it drops what follows the request
        # once it accepts, and a client may send its first frames right behind it
        head, rest = self._head[:end + len(_HEAD_END)], self._head[end + len(_HEAD_END):]
        self._head = b""
        try:
            self._ws.receive_data(head)
            request = next((e for e in self._ws.events() if isinstance(e, Request)), None)
        except RemoteProtocolError as exc:
            hint = exc.event_hint
            status = getattr(hint, "status_code", HTTPStatus.BAD_REQUEST)
            headers = tuple(getattr(hint, "headers", ()) or ())
            self._refuse(Refusal(status, f"not a WebSocket upgrade request: {exc}", headers))
            return b""
        except UnicodeError:           # wsproto decodes the target and Host, tokens as ASCII
            self._refuse(Refusal(HTTPStatus.BAD_REQUEST, "not a WebSocket upgrade request: the"
                                 " request target or a header value is not ASCII"))
            return b""
        if request is None:            # a request with a body: not an upgrade
            self._refuse(Refusal(HTTPStatus.BAD_REQUEST, "not a WebSocket upgrade request"))
            return b""
        choice = choose_subprotocol(request.subprotocols, self.settings.subprotocol_required)
        if isinstance(choice, Refusal):
            self._refuse(choice)
            return b""
        self.subprotocol = choice
        self._emit(self._ws.send(AcceptConnection(subprotocol=choice)))
        self.state = WebSocketState.OPEN
        if rest:
            self._ws.receive_data(rest)
        return self._events()

    def _refuse(self, refusal: Refusal) -> None:
        self.close_reason = f"HTTP {refusal.status}: {refusal.reason}"
        self._emit(http_refusal(refusal))
        self.state = WebSocketState.CLOSED

    # -- messages ----------------------------------------------------------------------------
    def _events(self) -> bytes:
        up: list[bytes] = []
        for event in self._ws.events():
            if isinstance(event, BytesMessage):
                self._message_size += len(event.data)
                if self._message_size > self.settings.max_message_size:
                    self._close(MESSAGE_TOO_BIG, "message exceeds"
                                f" {self.settings.max_message_size} bytes")
                    break
                if event.message_finished:
                    self._message_size = 0
                up.append(bytes(event.data))
            elif isinstance(event, TextMessage):
                self._close(UNSUPPORTED_DATA, "AMQP travels in binary messages, not text")
                break
            elif isinstance(event, Ping):
                self._emit(self._ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                self._closed_by_peer(event)
                break
            # a Pong answers nothing we sent: ignored
        return b"".join(up)

    def _closed_by_peer(self, event: CloseConnection) -> None:
        if self._ws.state is ConnectionState.REMOTE_CLOSING:
            self.close_reason = f"closed by the client ({event.code})"
            self._emit(self._ws.send(event.response()))
            self.state = WebSocketState.CLOSED
        else:                          # wsproto reports a framing error as a close event
            self._close(event.code or PROTOCOL_ERROR, event.reason or "")

    def _close(self, code: int, reason: str) -> None:
        self.close_reason = f"{code} {reason}".strip()
        self._emit(self._ws.send(CloseConnection(code=code, reason=reason)))
        self.state = WebSocketState.CLOSED

    def _emit(self, data: bytes) -> None:
        if data:
            self._out.append(data)
            self._out_size += len(data)


def websocket_layers(settings: WebSocketSettings, below: LayerFactory | None = None
                     ) -> LayerFactory:
    """A port's layer factory: the layers ``below`` (TLS, for ``wss``), then WebSocket."""
    def layers() -> Sequence[Layer]:
        return [*(below() if below is not None else ()), WebSocketLayer(settings)]
    return layers
