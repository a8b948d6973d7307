"""The management plugin of an HTTP port: uvicorn serving :mod:`mgmt.app` on the broker's loop.

Found by the broker through entry point group ``deltamq.management``
(``HTTP = "mgmt.plugin:HttpManagement"``), as Broker-J finds HttpManagement
for a port of protocol HTTP; the broker never imports this package.  One
instance serves one port: the broker makes one for each HTTP port at
start-up, and another whenever an HTTP port is created over management.

:meth:`HttpManagement.bind` binds the listening sockets at once, as
:func:`broker.listeners.bind_sockets` binds AMQP ports -- so a port in use
is an OSError the broker reports (at start-up, or as the answer to the
request that created the port) -- and uvicorn's own signal handling is left
out: the broker owns SIGINT/SIGTERM and calls :meth:`HttpManagement.stop`.

While it serves, the plugin samples the counters of the whole broker once a
second (:class:`mgmt.rates.RateSampler`, one for all the HTTP ports of a
broker) so that rates are known before anyone asks for them.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskGroup, TaskStatus

from broker.listeners import bind_sockets
from broker.model.configured_object import ConfiguredObject
from broker.transport.websocket import PATH_VARIABLE, WebSocketSettings
from mgmt.app import create_app
from mgmt.rates import SAMPLED, RateSampler
from mgmt.security import Permissions
from mgmt.websocket import AmqpWebSocketEndpoint

log = logging.getLogger("deltamq.mgmt")

#: seconds open HTTP connections get to finish at shutdown
GRACEFUL_SHUTDOWN = 3
#: seconds between two rounds of reading every counter of the broker
SAMPLE_INTERVAL = 1.0


class _BrokerOwnedServer(uvicorn.Server):
    """uvicorn without its signal handlers: the broker stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpManagement:
    """:class:`broker.listeners.ManagementPlugin` for ports of type HTTP."""

    def __init__(self, port: ConfiguredObject, permissions: Permissions | None = None) -> None:
        self.port = port
        self.permissions = permissions
        self.bound_port: int | None = None
        self._sockets: list[socket.socket] = []
        self._server: _BrokerOwnedServer | None = None
        self._stopped: anyio.Event | None = None
        self._stopping = False

    @property
    def connection_count(self) -> int:
        server = self._server
        return len(server.server_state.connections) if server is not None else 0

    def bind(self) -> int:
        """Bind the listening sockets now (OSError when the port is in use); the bound number."""
        if not self._sockets:
            port: Any = self.port
            self._sockets = bind_sockets(port.local_host, int(port.port))
            self.bound_port = int(self._sockets[0].getsockname()[1])
        assert self.bound_port is not None
        return self.bound_port

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        port: Any = self.port
        self.bind()
        sockets = self._sockets
        self._stopped = anyio.Event()
        sampler = SAMPLED.attach(port.root, SAMPLE_INTERVAL)
        try:
            settings = WebSocketSettings.resolved(port.resolve)
            config = uvicorn.Config(self._application(settings), lifespan="off",
                                    log_config=None, access_log=False, server_header=False,
                                    timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
                                    ws="wsproto", ws_max_size=settings.max_message_size,
                                    ws_per_message_deflate=False,
                                    ssl_context_factory=_https_context(port))
            server = self._server = _BrokerOwnedServer(config)
            server.should_exit = self._stopping
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._serve_until_stopped, server, sockets, tg)
                while not server.started:
                    if server.should_exit:          # stopped before it started
                        task_status.started()
                        return
                    await anyio.sleep(0.01)
                tg.start_soon(_sample_rates, sampler)
                log.info("HTTP management on port '%s' listening on %s:%s", port.name,
                         port.local_host or "*", self.bound_port)
                task_status.started()
        finally:
            SAMPLED.detach(sampler)
            for sock in sockets:
                sock.close()
            self._stopped.set()

    def _application(self, settings: WebSocketSettings) -> Any:
        """Management, and AMQP over WebSocket at the port's path when the broker runs it."""
        app = create_app(self.port, self.permissions)
        port: Any = self.port
        path = port.resolve("${%s}" % PATH_VARIABLE).strip()
        activation = getattr(port.parent, "port_activation", None)
        websocket_protocols = getattr(activation, "websocket_protocols", None)
        if not path or websocket_protocols is None:
            return app
        path = path if path.startswith("/") else "/" + path
        log.info("HTTP port '%s' carries AMQP over WebSocket at %s", port.name, path)
        return AmqpWebSocketEndpoint(app, path, websocket_protocols(port), settings)

    @staticmethod
    async def _serve_until_stopped(server: _BrokerOwnedServer, sockets: list[socket.socket],
                                   tg: TaskGroup) -> None:
        try:
            await server.serve(sockets)
        finally:
            tg.cancel_scope.cancel()                # the sampler goes with the server

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish, return once serving has ended."""
        self._stopping = True
        if self._server is None or self._stopped is None:
            for sock in self._sockets:              # bound, never served
                sock.close()
            return
        self._server.should_exit = True
        await self._stopped.wait()


def _https_context(port: Any) -> Any:
    """uvicorn's SSL context factory for a port serving HTTPS (None: plain HTTP)."""
    if not getattr(port, "serves_tls", False):
        return None
    return lambda _config, _default: port.https_tls_context()


async def _sample_rates(sampler: RateSampler) -> None:
    """Read every counter of the broker once a second (shared by the broker's HTTP ports)."""
    while True:
        now = time.monotonic()
        if sampler.due(now):
            try:
                sampler.sample(now)
            except Exception:
                log.exception("sampling the broker's counters failed")
        await anyio.sleep(SAMPLE_INTERVAL)
