"""Accepting connections on a listening socket, and going on when descriptors run out.

Why not ``loop.create_server``?  Under uvloop, an ``accept`` that fails with
EMFILE (the process is out of file descriptors) makes libuv accept every
client waiting in the backlog and reset it at once, silently -- and should
libuv report the error instead, uvloop closes the listening handle for good.
asyncio's own loop logs a traceback every second.  :class:`Acceptor` accepts
itself and, when the process (or the system) is out of descriptors or
memory, stops accepting, logs once, and tries again every
:data:`ACCEPT_RETRY_DELAY` seconds (RabbitMQ's acceptors pause likewise); new
clients wait in the listen backlog meanwhile, and are taken as soon as
descriptors free up (the open timeout of :mod:`.handshake` frees those held by
half-open sockets).
Accepting again is logged once too.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time
from collections.abc import Callable

log = logging.getLogger("deltamq")

#: seconds between two tries to accept while the process is out of descriptors
ACCEPT_RETRY_DELAY = 0.5
#: connections taken per wake-up, so a storm of them cannot starve the loop
ACCEPTS_PER_WAKEUP = 64


class Acceptor:
    """Accepts on one listening socket; each connection gets a protocol from ``protocols``."""

    def __init__(self, sock: socket.socket, protocols: Callable[[], asyncio.Protocol],
                 name: str) -> None:
        self.sock = sock
        self.protocols = protocols
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._starved_since: float | None = None
        self._connecting: set[asyncio.Task[object]] = set()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        self._loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting (before the socket is closed: a watched descriptor must not go)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._loop is not None and self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
        self._loop = None

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, _address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue                    # the client gave up while it waited in the backlog
            except OSError as exc:
                self._starved(exc)
                return
            if self._starved_since is not None:
                log.warning("AMQP port '%s' accepts connections again, after %.1f s",
                            self.name, time.monotonic() - self._starved_since)
                self._starved_since = None
            self._connect(conn)

    def _connect(self, conn: socket.socket) -> None:
        assert self._loop is not None
        conn.setblocking(False)
        if conn.family in (socket.AF_INET, socket.AF_INET6):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task: asyncio.Task[object] = self._loop.create_task(
            self._loop.connect_accepted_socket(self.protocols, conn))  # type: ignore[arg-type]
        self._connecting.add(task)

        def connected(done: asyncio.Task[object]) -> None:
            self._connecting.discard(done)
            if not done.cancelled() and done.exception() is not None:
                log.debug("accepted connection dropped: %r", done.exception())
                conn.close()
        task.add_done_callback(connected)

    def _starved(self, exc: OSError) -> None:
        """accept failed (EMFILE, ENFILE, ENOBUFS, ENOMEM, ...): pause, retry, log once."""
        loop = self._loop
        if loop is None:
            return
        if self._starved_since is None:
            self._starved_since = time.monotonic()
            soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.warning("AMQP port '%s' cannot accept connections: %s (open files limit %s);"
                        " new clients wait in the backlog, retrying every %g s",
                        self.name, exc.strerror or exc, soft, ACCEPT_RETRY_DELAY)
        loop.remove_reader(self.sock.fileno())
        self._retry = loop.call_later(ACCEPT_RETRY_DELAY, self._resume)

    def _resume(self) -> None:
        self._retry = None
        if self._loop is not None:
            self._loop.add_reader(self.sock.fileno(), self._accept)
