"""AMQP over WebSocket on an HTTP port, under a path (``/amqp`` by default).

uvicorn serves management on the broker's own event loop (:mod:`mgmt.plugin`),
so a WebSocket it has upgraded can be handed to the broker as if it were an
accepted socket: :class:`AsgiWebSocketTransport` turns the connection's ASGI
messages into an ``asyncio.Transport`` under the broker's
:class:`~broker.transport.tcp.AmqpProtocol`, which runs header detection and
the engine it picks, with the same timers, handshake limits, flow control
and memory alarm as a connection of an AMQP port.  The broker makes those
protocols for the port (:meth:`broker.listeners.Listeners.websocket_protocols`):
the connections authenticate with the HTTP port's provider and are closed
with 320 CONNECTION_FORCED before management stops.

uvicorn (with wsproto) does the framing, answers pings, and closes a
connection whose message exceeds ``deltamq.websocket_max_message_size`` with
1009.  This endpoint chooses the subprotocol as the WebSocket port does
(:func:`broker.transport.websocket.choose_subprotocol`), refusing with HTTP
400 and a line saying why; a text message is closed with 1003; a plain HTTP
request to the path gets 426 Upgrade Required.  Every other request goes to
the management application.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio

from broker.transport.websocket import (MAX_SENT_MESSAGE, NORMAL_CLOSURE, UNSUPPORTED_DATA,
                                        Refusal, WebSocketSettings, choose_subprotocol)

log = logging.getLogger("deltamq.mgmt")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: an ASGI application (Litestar's own signature is narrower than these aliases)
AsgiApp = Callable[..., Awaitable[None]]

#: RFC 6455 7.4.1: the broker dropped the connection (open timeout, missed heartbeats)
POLICY_VIOLATION = 1008
#: asyncio's default write buffer limits, until the protocol sets its own
_DEFAULT_HIGH_WATER = 64 << 10


class AsgiWebSocketTransport(asyncio.Transport):
    """An accepted ASGI WebSocket seen as a socket: writes become binary messages."""

    def __init__(self, send: Send, scope: Scope) -> None:
        client = scope.get("client") or ("?", 0)
        server = scope.get("server") or ("?", 0)
        super().__init__(extra={"peername": (str(client[0]), int(client[1] or 0)),
                                "sockname": tuple(server)})
        self._send = send
        self._protocol: asyncio.Protocol | None = None
        self._pending: list[bytes] = []
        self._size = 0                 # pending plus in flight
        self._high, self._low = _DEFAULT_HIGH_WATER, _DEFAULT_HIGH_WATER // 4
        self._write_paused = False
        self._closing = False
        self._close_code = NORMAL_CLOSURE
        self._wake = asyncio.Event()
        self.reading = asyncio.Event()
        self.reading.set()

    # -- asyncio.Transport ---------------------------------------------------------------
    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._pending.append(bytes(data))
        self._size += len(data)
        self._wake.set()
        if not self._write_paused and self._size > self._high and self._protocol is not None:
            self._write_paused = True
            self._protocol.pause_writing()

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        self.reading.set()             # the reader drops what still comes, and sees the end

    def abort(self) -> None:
        """Dropped by the broker: what is pending is discarded, the WebSocket closes."""
        self._pending.clear()
        self._close_code = POLICY_VIOLATION
        self.close()

    def close_unsupported(self) -> None:
        """A text message came: AMQP is binary (RFC 6455 7.4.1, 1003)."""
        self._pending.clear()
        self._close_code = UNSUPPORTED_DATA
        self.close()

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self.reading.clear()

    def resume_reading(self) -> None:
        self.reading.set()

    def is_reading(self) -> bool:
        return self.reading.is_set()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = _DEFAULT_HIGH_WATER if high is None else high
        self._low = self._high // 4 if low is None else low

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def get_write_buffer_size(self) -> int:
        return self._size

    def can_write_eof(self) -> bool:
        return False

    # -- the writer task -------------------------------------------------------------------
    async def write_out(self) -> None:
        """Send what the broker writes, as binary messages; the close once it closes."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._pending:
                    data = b"".join(self._pending)
                    self._pending.clear()
                    for o in range(0, len(data), MAX_SENT_MESSAGE):
                        await self._send({"type": "websocket.send",
                                          "bytes": data[o:o + MAX_SENT_MESSAGE]})
                    self._size = max(0, self._size - len(data))
                    if self._write_paused and self._size <= self._low:
                        self._write_paused = False
                        if self._protocol is not None:
                            self._protocol.resume_writing()
                if self._closing:
                    await self._send({"type": "websocket.close", "code": self._close_code})
                    return
        except OSError:                # uvicorn's ClientDisconnected: the peer has gone
            self._closing = True


class AmqpWebSocketEndpoint:
    """ASGI: AMQP over WebSocket at ``path``; every other request goes to ``app``."""

    def __init__(self, app: AsgiApp, path: str, protocols: Callable[[], asyncio.Protocol],
                 settings: WebSocketSettings) -> None:
        self.app = app
        self.path = path
        self.protocols = protocols
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("path") != self.path or scope["type"] not in ("websocket", "http"):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await _upgrade_required(send)
        else:
            await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        choice = choose_subprotocol(list(scope.get("subprotocols") or ()),
                                    self.settings.subprotocol_required)
        if isinstance(choice, Refusal):
            log.info("refusing AMQP WebSocket upgrade from %s: %s",
                     (scope.get("client") or ("?",))[0], choice.reason)
            await _refuse(scope, send, choice)
            return
        await send({"type": "websocket.accept", "subprotocol": choice})
        transport = AsgiWebSocketTransport(send, scope)
        protocol = self.protocols()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(transport.write_out)
                await _read_in(receive, protocol, transport)
                if not transport.is_closing():
                    group.cancel_scope.cancel()    # the client went: nothing more to send
        finally:
            protocol.connection_lost(None)


async def _read_in(receive: Receive, protocol: asyncio.Protocol,
                   transport: AsgiWebSocketTransport) -> None:
    """Hand binary messages to the protocol until the WebSocket closes (paused while the
    protocol says so: uvicorn stops reading the socket until the next receive)."""
    while True:
        await transport.reading.wait()
        message = await receive()
        if message["type"] != "websocket.receive":
            return                     # websocket.disconnect
        data = message.get("bytes")
        if data is None:
            transport.close_unsupported()
            continue                   # the close goes out; the disconnect follows
        await transport.reading.wait()  # paused while it was on its way: held until resumed
        if not transport.is_closing():
            protocol.data_received(data)


async def _refuse(scope: Scope, send: Send, refusal: Refusal) -> None:
    body = (refusal.reason + "\n").encode()
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": POLICY_VIOLATION})    # HTTP 403
        return
    headers = [(b"content-type", b"text/plain; charset=utf-8"),
               (b"content-length", str(len(body)).encode()), *refusal.headers]
    await send({"type": "websocket.http.response.start", "status": int(refusal.status),
                "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


async def _upgrade_required(send: Send) -> None:
    body = b"this path carries AMQP over WebSocket: open a WebSocket (subprotocol amqp)\n"
    await send({"type": "http.response.start", "status": 426,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            (b"upgrade", b"websocket"), (b"connection", b"Upgrade")]})
    await send({"type": "http.response.body", "body": body})
