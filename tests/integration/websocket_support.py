"""A WebSocket relay for clients that speak AMQP over TCP only.

pika and python-qpid-proton have no WebSocket transport.  :class:`WebSocketRelay`
listens on a loopback TCP port and carries each connection's bytes, unchanged,
in binary messages of a real WebSocket client (the ``websockets`` package) to
a broker's WebSocket endpoint -- what CloudAMQP's websocket-tcp-relay does
the other way round.  The AMQP client and the WebSocket client are both
unmodified; only the relay between them is the test's.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from types import TracebackType

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.mgmt.conftest import wait_for_http

from .conftest import DeltaMQProcess, _free_port

CHUNK = 64 << 10
#: the message bound the test brokers set (deltamq.websocket_max_message_size)
MAX_MESSAGE = 1 << 20


class WebSocketBroker(DeltaMQProcess):
    """`deltamq serve` with its WebSocket port on a free number and a 1 MiB message bound;
    ``defines`` adds ``-D name=value`` options."""

    def __init__(self, **defines: str) -> None:
        ws_port = _free_port()
        super().__init__({"deltamq.ws_port": str(ws_port),
                          "deltamq.websocket_max_message_size": str(MAX_MESSAGE), **defines})
        self.ws_port = ws_port

    def start(self) -> None:
        super().start()
        wait_for_http(self)

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/"

    @property
    def path_url(self) -> str:
        return f"ws://127.0.0.1:{self.http_port}/amqp"


class WebSocketRelay:
    """TCP on ``port`` (loopback) -> WebSocket to ``url``, one WebSocket per TCP connection."""

    def __init__(self, url: str, subprotocols: Sequence[str] = ("amqp",)) -> None:
        self.url = url
        self.subprotocols = list(subprotocols)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.relayed = 0              # connections carried
        self.subprotocols_chosen: list[str | None] = []
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    def __enter__(self) -> WebSocketRelay:
        self._spawn(self._accept)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for sock in list(self._sockets):
            _close_quietly(sock)
        for thread in self._threads:
            thread.join(timeout=10)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(sock)
            self._spawn(self._carry, sock)

    def _carry(self, sock: socket.socket) -> None:
        """One TCP connection's WebSocket, both ways, until either end closes."""
        try:
            with connect(self.url, subprotocols=self.subprotocols,  # type: ignore[arg-type]
                         max_size=None, open_timeout=10) as ws:
                self.relayed += 1
                self.subprotocols_chosen.append(ws.subprotocol)
                up = threading.Thread(target=self._up, args=(sock, ws), daemon=True)
                up.start()
                self._down(sock, ws)
                up.join(timeout=10)
        except Exception:
            _close_quietly(sock)

    @staticmethod
    def _up(sock: socket.socket, ws: ClientConnection) -> None:
        """TCP -> WebSocket: each read becomes one binary message."""
        try:
            while data := sock.recv(CHUNK):
                ws.send(data)
        except (OSError, ConnectionClosed):
            pass
        finally:
            ws.close()

    @staticmethod
    def _down(sock: socket.socket, ws: ClientConnection) -> None:
        """WebSocket -> TCP: each message's payload, as it comes."""
        try:
            for message in ws:
                assert isinstance(message, bytes), "the broker sent a text message"
                sock.sendall(message)
        except (OSError, ConnectionClosed):
            pass
        finally:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
