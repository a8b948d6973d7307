"""The sockets the ports of the model listen on, while the broker runs.

:class:`Listeners` is the :class:`~broker.model.port.PortActivation` the
server gives the Broker once its event loop runs: from then on every Port
that opens -- at start-up, or created over management later -- listens at
once, and one that is deleted stops listening and closes the connections
that came in through it, as in Broker-J.

A port's socket is bound synchronously when the port opens, so a port
number in use fails the creation itself (nothing is stored); accepting on
it starts on the next turn of the event loop.  An AMQP port accepts with the
broker's own transport (:mod:`broker.transport.accept`,
:mod:`broker.transport.tcp`); a port that carries HTTP runs a new instance of
the management plugin of its type.  Every AMQP port applies the handshake
limits of its context (:mod:`broker.transport.handshake`), and counts
opening connections per source address in one table shared by all ports.
"""

from __future__ import annotations

import errno
import logging
import socket
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from broker import errors
from broker.model.port import Port, PortListener, Transport
from broker.transport.accept import Acceptor
from broker.transport.handshake import HandshakeLimits, OpeningConnections
from broker.transport.keepalive import TcpKeepAlive
from broker.transport.layers import LayerFactory, no_layers
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry, close_all
from broker.transport.tls import layer_factory
from broker.transport.websocket import WebSocketSettings, websocket_layers

log = logging.getLogger("deltamq")

BACKLOG = 4096
#: tries at one free number for both families when port 0 listens on every interface
_ANY_PORT_TRIES = 8
#: why connections are closed when their port is deleted
PORT_DELETED = "broker forced connection closure with reason 'port deleted'"
SHUTDOWN = "broker forced connection closure with reason 'shutdown'"


class ManagementPlugin(Protocol):
    """What the ``deltamq.management`` entry point's class builds for one port.

    ``plugin = Plugin(port)``; ``plugin.bind()`` binds its listening sockets
    at once (OSError when it cannot) and returns the bound port number;
    ``await plugin.serve(task_status=...)`` serves them, reporting started once
    it accepts; ``await plugin.stop()`` lets the requests in flight finish and
    returns once ``serve`` has.
    """

    def bind(self) -> int: ...

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None: ...

    async def stop(self) -> None: ...


#: (port, its connection registry) -> what makes the protocol of each accepted connection
AmqpProtocols = Callable[[Port, ConnectionRegistry], Callable[[], AmqpProtocol]]


def bind_sockets(host: str | None, port: int, backlog: int = BACKLOG) -> list[socket.socket]:
    """Listening sockets for ``host`` and ``port``, as asyncio's ``create_server`` binds them.

    ``host`` None is every interface: one IPv4 and one IPv6-only socket (peers
    keep their plain IPv4 addresses), on the same number even for port 0.
    """
    if host is not None:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
        return [socket.create_server((host, port), family=family, backlog=backlog)]
    for attempt in range(_ANY_PORT_TRIES):
        ipv4 = socket.create_server(("0.0.0.0", port), backlog=backlog)
        if not socket.has_ipv6:
            return [ipv4]
        number = ipv4.getsockname()[1]
        try:
            ipv6 = socket.create_server(("::", number), family=socket.AF_INET6, backlog=backlog)
        except OSError as exc:
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT):
                return [ipv4]                   # no IPv6 on this host
            ipv4.close()
            if port == 0 and exc.errno == errno.EADDRINUSE and attempt + 1 < _ANY_PORT_TRIES:
                continue                        # the number is taken for IPv6: another one
            raise
        return [ipv4, ipv6]
    raise OSError(errno.EADDRINUSE, "no port number free for both IPv4 and IPv6")


def where(port: Port) -> str:
    return f"{port.local_host or '*'}:{port.port}"


class AmqpListener:
    """An AMQP port listening: its sockets, the connections that came in through them."""

    def __init__(self, port: Port, sockets: list[socket.socket],
                 protocols: Callable[[], AmqpProtocol], registry: ConnectionRegistry) -> None:
        self.port = port
        self.sockets = sockets
        self.registry = registry
        self.bound_port = int(sockets[0].getsockname()[1])
        self.bound_host = port.local_host
        self.requested_port = int(port.port)
        self.closed = False
        self._acceptors: list[Acceptor] = []
        #: every connection accepted, handshake done or not (the registry has the former)
        self._accepted: weakref.WeakSet[AmqpProtocol] = weakref.WeakSet()

        def accept() -> AmqpProtocol:
            protocol = protocols()
            self._accepted.add(protocol)
            return protocol
        self._accept = accept

    @property
    def connection_count(self) -> int:
        return len(self.registry.connections)

    def reconfigure(self) -> None:
        try:
            self.registry.limits = HandshakeLimits.resolved(self.port.resolve)
        except errors.BrokerError as exc:
            log.error("AMQP port '%s' keeps its handshake limits: %s", self.port.name, exc)
        try:
            self.registry.keepalive = TcpKeepAlive.resolved(self.port.resolve)
        except errors.BrokerError as exc:
            log.error("AMQP port '%s' keeps its TCP keepalive: %s", self.port.name, exc)
        try:
            self.registry.layers, self.registry.transport = transport_layers(self.port)
        except errors.BrokerError as exc:
            log.error("AMQP port '%s' keeps its transport settings: %s", self.port.name, exc)

    async def serve(self) -> None:
        for sock in self.sockets:
            if self.closed:
                return
            acceptor = Acceptor(sock, self._accept, self.port.name)
            acceptor.start()
            self._acceptors.append(acceptor)

    def close(self) -> None:
        """Stop listening; close every connection that came in here (320 CONNECTION_FORCED)."""
        if self.closed:
            return
        self.stop_listening()
        error = errors.ConnectionForced(PORT_DELETED)
        for protocol in list(self._accepted):
            try:
                protocol.close(error)
            except Exception:
                log.exception("closing a connection of port '%s'", self.port.name)
        log.info("AMQP port '%s' no longer listening on %s", self.port.name, self.bound_port)

    async def shutdown(self) -> None:
        """Broker shutdown: stop listening, close every connection, give them a moment."""
        self.stop_listening()
        await close_all(self.registry, SHUTDOWN)

    def stop_listening(self) -> None:
        if self.closed:
            return
        self.closed = True
        for acceptor in self._acceptors:
            acceptor.close()
        for sock in self.sockets:
            sock.close()


def transport_layers(port: Port) -> tuple[LayerFactory, str]:
    """The layers an AMQP port's connections get under header detection, and the transport
    their model objects name: WebSocket for ``WS``; TLS under WebSocket for ``WSS``; TLS for
    ``SSL`` (with plain TCP beside it when the port also carries ``TCP``, told apart by the
    first byte); none for ``TCP``."""
    names = [transport.name for transport in port.transports]
    context = getattr(port, "connection_tls_context", None)
    if Transport.WS in port.transports or Transport.WSS in port.transports:
        wss = Transport.WSS in port.transports and context is not None
        below = layer_factory(["SSL"], context) if wss and context is not None else None
        return (websocket_layers(WebSocketSettings.resolved(port.resolve), below=below),
                (Transport.WSS if wss else Transport.WS).value)
    if context is None:
        return no_layers, Transport.TCP.value
    upgrade = any(protocol.name == "AMQP_1_0" for protocol in port.protocols)  # 1.0's TLS header
    return layer_factory(names, context, upgrade=upgrade), Transport.TCP.value


class HttpListener:
    """A port carrying HTTP: a management plugin instance serving it."""

    def __init__(self, port: Port, plugin: ManagementPlugin, bound_port: int,
                 websockets: ConnectionRegistry) -> None:
        self.port = port
        self.plugin = plugin
        #: the AMQP connections that came in over the port's WebSocket path
        self.websockets = websockets
        self.bound_port = bound_port
        self.bound_host = port.local_host
        self.requested_port = int(port.port)
        self.closed = False
        self.started = anyio.Event()

    @property
    def connection_count(self) -> int:
        return int(getattr(self.plugin, "connection_count", 0))

    def reconfigure(self) -> None:
        pass

    async def serve(self) -> None:
        if self.closed:                         # closed before its turn came (a failed start)
            self.started.set()
            return
        try:
            async with anyio.create_task_group() as group:
                await group.start(self.plugin.serve)
                self.started.set()
        except (Exception, SystemExit) as exc:      # uvicorn exits when it cannot start
            log.error("HTTP port '%s' stopped: %s", self.port.name, exc, exc_info=True)
        finally:
            self.closed = True
            self.started.set()

    def close(self, group: TaskGroup) -> None:
        """Stop serving -- after the responses in flight, the one that deleted the port too."""
        if self.closed:
            return
        self.closed = True
        group.start_soon(self._stop)

    async def _stop(self) -> None:
        await close_all(self.websockets, PORT_DELETED)
        await self.plugin.stop()
        log.info("HTTP port '%s' no longer listening on %s", self.port.name, self.bound_port)

    async def shutdown(self) -> None:
        self.closed = True
        await close_all(self.websockets, SHUTDOWN)   # 320 to AMQP clients before HTTP stops
        await self.plugin.stop()


class _Handle:
    """The :class:`~broker.model.port.PortListener` a port holds."""

    def __init__(self, listeners: Listeners, listener: AmqpListener | HttpListener) -> None:
        self.listeners = listeners
        self.listener = listener

    @property
    def bound_port(self) -> int:
        return -1 if self.listener.closed else self.listener.bound_port

    @property
    def bound_host(self) -> str | None:
        return self.listener.bound_host

    @property
    def requested_port(self) -> int:
        return self.listener.requested_port

    @property
    def connection_count(self) -> int:
        return self.listener.connection_count

    def reconfigure(self) -> None:
        self.listener.reconfigure()

    def close(self) -> None:
        self.listeners.closed(self.listener)


class Listeners:
    """The broker's :class:`~broker.model.port.PortActivation`, on its one event loop."""

    def __init__(self, group: TaskGroup, amqp_protocols: AmqpProtocols,
                 management: Callable[[Port], ManagementPlugin]) -> None:
        self.group = group
        self.amqp_protocols = amqp_protocols
        self.management = management
        self._amqp: list[AmqpListener] = []
        self._http: list[HttpListener] = []
        #: connections not yet opened, per source address, on every AMQP port
        self.opening = OpeningConnections()

    def listen(self, port: Port) -> PortListener | None:
        """Bind ``port`` now and start accepting on it (OSError when it cannot bind)."""
        if any(protocol.name == "HTTP" for protocol in port.protocols):
            return _Handle(self, self._listen_http(port))
        if port.type.upper() == "AMQP":
            return _Handle(self, self._listen_amqp(port))
        return None

    def _listen_amqp(self, port: Port) -> AmqpListener:
        limits = HandshakeLimits.resolved(port.resolve)
        layers, transport = transport_layers(port)
        sockets = bind_sockets(port.local_host, int(port.port))
        registry = ConnectionRegistry(limits=limits, opening=self.opening, layers=layers,
                                      transport=transport,
                                      keepalive=TcpKeepAlive.resolved(port.resolve))
        listener = AmqpListener(port, sockets, self.amqp_protocols(port, registry), registry)
        self._amqp.append(listener)
        self.group.start_soon(listener.serve)
        log.info("AMQP port '%s' listening on %s:%s (%s%s)", port.name, port.local_host or "*",
                 listener.bound_port, ", ".join(p.name for p in port.protocols),
                 "; " + "+".join(t.name for t in port.transports)
                 if [t.name for t in port.transports] != ["TCP"] else "")
        return listener

    def _listen_http(self, port: Port) -> HttpListener:
        plugin = self.management(port)
        wss = Transport.SSL in port.transports          # HTTPS: its WebSocket path is wss
        websockets = ConnectionRegistry(limits=HandshakeLimits.resolved(port.resolve),
                                        opening=self.opening,
                                        transport=(Transport.WSS if wss else Transport.WS).value)
        listener = HttpListener(port, plugin, plugin.bind(), websockets)
        self._http.append(listener)
        self.group.start_soon(listener.serve)
        return listener

    def closed(self, listener: AmqpListener | HttpListener) -> None:
        """The port of ``listener`` closed (deleted): stop listening."""
        if isinstance(listener, AmqpListener):
            if listener in self._amqp:
                self._amqp.remove(listener)
            listener.close()
        else:
            if listener in self._http:
                self._http.remove(listener)
            listener.close(self.group)

    def registries(self) -> Iterator[ConnectionRegistry]:
        """The connections of every AMQP port and WebSocket path (the memory alarm blocks them)."""
        for listener in self._amqp:
            yield listener.registry
        for http in self._http:
            yield http.websockets

    def websocket_protocols(self, port: Port) -> Callable[[], AmqpProtocol]:
        """What makes the protocol of each AMQP connection that comes in over the WebSocket
        path of HTTP ``port`` (its management plugin bridges them): authenticated by the
        port's provider, counted, blocked by the alarms and closed at shutdown like an AMQP
        port's connections."""
        for http in self._http:
            if http.port is port:
                return self.amqp_protocols(port, http.websockets)
        raise errors.ConfigurationError(f"{port.label}: not an HTTP port of this broker")

    async def wait_started(self) -> None:
        """Return once every HTTP port serves (or failed to)."""
        for listener in list(self._http):
            await listener.started.wait()

    async def shutdown(self, management_timeout: float) -> None:
        """Stop management first (requests in flight may finish), then every AMQP connection."""
        http, self._http = self._http, []
        with anyio.move_on_after(management_timeout):
            for listener in http:
                await listener.shutdown()
        amqp, self._amqp = self._amqp, []
        for amqp_listener in amqp:
            amqp_listener.stop_listening()         # no new connection while the others close
        for amqp_listener in amqp:
            await amqp_listener.shutdown()
        self.opening.notices.flush()
