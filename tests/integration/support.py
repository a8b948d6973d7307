"""What the integration tests share: unique names, waiting, client factories,
and a bare AMQP 0-9-1 socket for the bytes no well-behaved client will send.

The bare socket uses pamqp (aiormq's codec, unmodified) to build and read
frames, and hand-built bytes where a test needs a frame pamqp would refuse to
make (oversized, truncated, garbage).
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from pamqp import body as pbody
from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader
from pamqp import heartbeat as pheartbeat

PROTOCOL_HEADER_0_9_1 = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
FRAME_OVERHEAD = 8  # 7-byte frame header + frame-end octet (0-9-1 §2.3.5)


def unique(kind: str) -> str:
    """A name no other test (or earlier run against the same broker) uses."""
    return f"it.{kind}.{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class BrokerEndpoint:
    """Where the broker under test listens and how to log in."""

    host: str
    port: int
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    external: bool = False
    product: str = ""
    version: str = ""
    server_properties: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_url(cls, url: str, **kw: Any) -> "BrokerEndpoint":
        parts = urlsplit(url)
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        vhost = unquote(path) if path else "/"
        return cls(host=parts.hostname or "127.0.0.1", port=parts.port or 5672,
                   user=unquote(parts.username or "guest"),
                   password=unquote(parts.password or "guest"), vhost=vhost, **kw)

    @property
    def is_rabbitmq(self) -> bool:
        return self.product == "RabbitMQ"

    def url(self, scheme: str = "amqp", vhost: str | None = None, user: str | None = None,
            password: str | None = None) -> str:
        from urllib.parse import quote
        v = self.vhost if vhost is None else vhost
        return (f"{scheme}://{quote(user or self.user, safe='')}:"
                f"{quote(self.password if password is None else password, safe='')}"
                f"@{self.host}:{self.port}/{quote(v, safe='')}")

    # -- client factories -------------------------------------------------
    def pika_params(self, **kw: Any) -> Any:
        import pika
        kw.setdefault("credentials", pika.PlainCredentials(self.user, self.password))
        kw.setdefault("virtual_host", self.vhost)
        kw.setdefault("connection_attempts", 1)
        kw.setdefault("socket_timeout", 10)
        kw.setdefault("blocked_connection_timeout", 30)
        return pika.ConnectionParameters(self.host, self.port, **kw)

    def pika(self, **kw: Any) -> Any:
        """A pika BlockingConnection (use as a context manager)."""
        import pika
        return pika.BlockingConnection(self.pika_params(**kw))

    def py_amqp(self, **kw: Any) -> Any:
        """A connected py-amqp Connection (use as a context manager)."""
        import amqp
        kw.setdefault("userid", self.user)
        kw.setdefault("password", self.password)
        kw.setdefault("virtual_host", self.vhost)
        kw.setdefault("connect_timeout", 10)
        conn = amqp.Connection(f"{self.host}:{self.port}", **kw)
        conn.connect()
        return conn

    def kombu(self, **kw: Any) -> Any:
        """A kombu Connection over py-amqp (use as a context manager; connects lazily)."""
        import kombu
        return kombu.Connection(hostname=self.host, port=self.port, userid=self.user,
                                password=self.password, virtual_host=self.vhost,
                                transport="pyamqp", connect_timeout=10, **kw)

    def raw(self, timeout: float = 10.0) -> "RawAMQP":
        return RawAMQP(self.host, self.port, timeout)


class RawAMQP:
    """A bare TCP socket with just enough of AMQP 0-9-1 to misbehave on purpose."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self._buf = b""
        self.frame_max = 0
        self.start: Any = None
        self.eof = False

    # -- bytes ------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method: Any) -> None:
        self.send(pframe.marshal(method, channel))

    def send_frame(self, frame_type: int, channel: int, payload: bytes) -> None:
        self.send(struct.pack(">BHI", frame_type, channel, len(payload)) + payload + FRAME_END)

    def send_content(self, channel: int, body: bytes, properties: Any = None,
                     body_size: int | None = None) -> None:
        """Content header then body frames cut to the negotiated frame_max."""
        size = len(body) if body_size is None else body_size
        self.send(pframe.marshal(pheader.ContentHeader(0, size, properties), channel))
        chunk = (self.frame_max or 131072) - FRAME_OVERHEAD
        for i in range(0, len(body), chunk):
            self.send(pframe.marshal(pbody.ContentBody(body[i:i + chunk]), channel))

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no data from the broker in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self._buf += data
        return True

    def read_raw(self, n: int, timeout: float | None = None) -> bytes:
        """Exactly n bytes, or fewer if the broker closes first."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self._buf) < n and self._fill(deadline):
            pass
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def read_until_eof(self, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (timeout or self.timeout)
        while self._fill(deadline):
            pass
        out, self._buf = self._buf, b""
        return out

    def read_frame_raw(self, timeout: float | None = None) -> tuple[int, int, bytes] | None:
        """(type, channel, payload) of the next frame; None at EOF."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self._buf) < 7:
            if not self._fill(deadline):
                return None
        ftype, channel, size = struct.unpack(">BHI", self._buf[:7])
        while len(self._buf) < 7 + size + 1:
            if not self._fill(deadline):
                return None
        payload = self._buf[7:7 + size]
        assert self._buf[7 + size:8 + size] == FRAME_END, "frame-end octet missing"
        self._buf = self._buf[8 + size:]
        return ftype, channel, payload

    def read_frame(self, timeout: float | None = None) -> tuple[int, Any] | None:
        """(channel, pamqp frame) of the next frame; None at EOF."""
        raw = self.read_frame_raw(timeout)
        if raw is None:
            return None
        ftype, channel, payload = raw
        data = struct.pack(">BHI", ftype, channel, len(payload)) + payload + FRAME_END
        _, ch, value = pframe.unmarshal(data)
        return ch, value

    def expect(self, cls: type, timeout: float | None = None, skip_heartbeats: bool = True) -> Any:
        while True:
            got = self.read_frame(timeout)
            assert got is not None, f"broker closed the socket while we waited for {cls.__name__}"
            _, value = got
            if skip_heartbeats and isinstance(value, pheartbeat.Heartbeat):
                continue
            assert isinstance(value, cls), f"expected {cls.__name__}, got {value!r}"
            return value

    # -- conversations ------------------------------------------------------
    def handshake(self, ep: BrokerEndpoint, heartbeat: int = 0, frame_max: int | None = None,
                  channel_max: int | None = None,
                  protocol_header: bytes = PROTOCOL_HEADER_0_9_1) -> commands.Connection.Tune:
        """Protocol header → start-ok (PLAIN) → tune-ok → open; returns the server's Tune.
        (connection.start/tune/open and their answers are laid out alike in 0-8, 0-9, 0-9-1.)"""
        self.send(protocol_header)
        self.start = self.expect(commands.Connection.Start)
        response = f"\0{ep.user}\0{ep.password}"
        self.send_method(0, commands.Connection.StartOk(
            client_properties={"product": "deltamq-integration-raw",
                               "capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN", response=response))
        tune = self.expect(commands.Connection.Tune)
        fmax = tune.frame_max if frame_max is None else frame_max
        cmax = tune.channel_max if channel_max is None else channel_max
        self.frame_max = fmax
        self.send_method(0, commands.Connection.TuneOk(channel_max=cmax, frame_max=fmax,
                                                       heartbeat=heartbeat))
        self.send_method(0, commands.Connection.Open(virtual_host=ep.vhost))
        frame = self.read_frame_raw()  # open-ok: 0-8 names its field known-hosts, same bytes
        assert frame is not None and frame[2][:4] == b"\x00\x0a\x00\x29", f"not open-ok: {frame}"
        return tune

    def open_channel(self, channel: int = 1) -> None:
        self.send_method(channel, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def wait_connection_close(self, timeout: float | None = None) -> Any:
        """Skip frames until connection.close (answer close-ok); None if the socket just ends."""
        while True:
            try:
                got = self.read_frame(timeout)
            except (ConnectionResetError, OSError):
                return None
            if got is None:
                return None
            _, value = got
            if isinstance(value, commands.Connection.Close):
                try:
                    self.send_method(0, commands.Connection.CloseOk())
                except OSError:
                    pass
                return value

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawAMQP":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def assert_closed_with(close: Any, code: int, text: str | None = None) -> None:
    """A connection.close / channel.close carried `code` (and `text` in its reply-text)."""
    assert close is not None, f"expected a close with {code}, but the socket just ended"
    got = (close.reply_code, close.reply_text)
    assert close.reply_code == code, f"expected {code}, got {got}"
    if text is not None:
        assert text in close.reply_text, f"expected {text!r} in {got}"


def closed_by_broker(conn: Any, timeout: float) -> int:
    """Run a pika BlockingConnection's I/O until the broker closes it (within ``timeout``
    seconds, else the test fails); the reply code it closed with."""
    import pika.exceptions
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    return int(info.value.reply_code)


def pika_reply(exc: BaseException) -> tuple[int, str]:
    """(reply_code, reply_text) from a pika channel/connection-closed exception."""
    code = getattr(exc, "reply_code", None)
    text = getattr(exc, "reply_text", None)
    if code is None and exc.args and isinstance(exc.args[0], tuple):
        code, text = exc.args[0][:2]
    if code is None:  # Probable*Error wraps the close as text: "(403) 'ACCESS_REFUSED ...'"
        import re
        m = re.search(r"\((\d{3})\)\s*['\"]?(.*)", str(exc))
        if m:
            return int(m.group(1)), m.group(2)
    if code is None:
        raise AssertionError(f"no AMQP reply code in {exc!r}")
    return int(code), str(text)


def mount_tmpfs(directory: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` (e.g. ``"24m"``) on ``directory``; False where mounting is
    not allowed (it needs root or CAP_SYS_ADMIN)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@contextmanager
def tmpfs(size: str, prefix: str) -> Iterator[Path]:
    """A new tmpfs of ``size``, unmounted and removed afterwards; skips the test where
    mounting is not allowed."""
    where = Path(tempfile.mkdtemp(prefix=prefix))
    if not mount_tmpfs(where, size):
        shutil.rmtree(where, ignore_errors=True)
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)


class Publisher:
    """A pika connection (to ``proc``'s AMQP port) that notes connection.blocked and
    connection.unblocked; ``name`` is its connection_name, management's ``clientId``."""

    def __init__(self, proc: Any, name: str = "") -> None:
        import pika

        properties = {"connection_name": name} if name else None
        self.connection = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", proc.amqp_port, client_properties=properties))
        self.events: list[str] = []
        self.connection.add_on_connection_blocked_callback(
            lambda _c, frame: self.events.append(f"blocked: {frame.method.reason}"))
        self.connection.add_on_connection_unblocked_callback(
            lambda _c, _frame: self.events.append("unblocked"))
        self.channel = self.connection.channel()

    def wait_for(self, event: str, timeout: float = 10.0,
                 meanwhile: Callable[[], bool] = lambda: True) -> None:
        """Serve the connection until ``event`` was seen and ``meanwhile`` says it is done."""
        deadline = time.monotonic() + timeout
        while not (meanwhile() and event in self.events) and time.monotonic() < deadline:
            self.connection.process_data_events(time_limit=0.1)
        assert event in self.events, self.events
