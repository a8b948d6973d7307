"""The management plugin of an HTTP port: uvicorn serving :mod:`mgmt.app` on the broker's loop.

Found by the broker through entry point group ``deltamq.management``
(``HTTP = "mgmt.plugin:HttpManagement"``), as Broker-J finds HttpManagement
for a port of protocol HTTP; the broker never imports this package.

The listening socket is bound here -- ``bindingAddress`` "" meaning every
interface, IPv4 and IPv6, as for AMQP ports -- so a port in use is an
OSError the broker reports at start-up, and uvicorn's own signal handling
is left out: the broker owns SIGINT/SIGTERM and calls :meth:`stop`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskStatus

from broker.model.configured_object import ConfiguredObject
from mgmt.app import create_app
from mgmt.security import Permissions

log = logging.getLogger("deltamq.mgmt")

#: seconds open HTTP connections get to finish at shutdown
GRACEFUL_SHUTDOWN = 3


class _BrokerOwnedServer(uvicorn.Server):
    """uvicorn without its signal handlers: the broker stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Listening sockets for ``host`` (None: every interface, IPv4 and IPv6) and ``port``."""
    if host is None:
        if socket.has_dualstack_ipv6():
            return [socket.create_server(("::", port), family=socket.AF_INET6,
                                         dualstack_ipv6=True, backlog=1024)]
        return [socket.create_server(("0.0.0.0", port), backlog=1024)]
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return [socket.create_server((host, port), family=family, backlog=1024)]


class HttpManagement:
    """:class:`broker.server.ManagementPlugin` for ports of type HTTP."""

    def __init__(self, port: ConfiguredObject, permissions: Permissions | None = None) -> None:
        self.port = port
        self.permissions = permissions
        self.bound_port: int | None = None
        self._server: _BrokerOwnedServer | None = None
        self._stopped: anyio.Event | None = None

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        port: Any = self.port
        sockets = bind_sockets(port.local_host, int(port.port))
        self.bound_port = int(sockets[0].getsockname()[1])
        self._stopped = anyio.Event()
        try:
            config = uvicorn.Config(create_app(self.port, self.permissions), lifespan="off",
                                    log_config=None, access_log=False, server_header=False,
                                    timeout_graceful_shutdown=GRACEFUL_SHUTDOWN)
            server = self._server = _BrokerOwnedServer(config)
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve, sockets)
                while not server.started:
                    await anyio.sleep(0.01)
                log.info("HTTP management on port '%s' listening on %s:%s", port.name,
                         port.local_host or "*", self.bound_port)
                task_status.started()
        finally:
            for sock in sockets:
                sock.close()
            self._stopped.set()

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish, return once serving has ended."""
        if self._server is None or self._stopped is None:
            return
        self._server.should_exit = True
        await self._stopped.wait()
