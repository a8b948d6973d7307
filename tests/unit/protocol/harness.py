"""In-memory harness: a frame-level test client wired to a server engine, no sockets."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from broker import errors
from broker.messaging.message import MessageProperties
from broker.messaging.namespace import Namespace
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.codec import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, frame
from broker.protocol.amqp0_9_1.connection import AmqpConnection
from broker.protocol.amqp0_9_1.properties import decode_properties, encode_properties
from broker.protocol.detect import AmqpVersion
from broker.security.access_control import AccessControl, ConnectionAccess

_DECODERS = {AmqpVersion.V0_8: m.DECODERS_0_8, AmqpVersion.V0_9: m.DECODERS_0_9,
             AmqpVersion.V0_9_1: m.DECODERS_0_9_1}
_ENCODERS = {AmqpVersion.V0_8: m.ENCODERS_0_8, AmqpVersion.V0_9: m.ENCODERS_0_9,
             AmqpVersion.V0_9_1: m.ENCODERS_0_9_1}


@dataclass
class User:
    name: str


def run_authentication(server: Any) -> None:
    """Run the engine's pending SASL steps as the transport does (there in a worker thread;
    SCRAM has two) and hand each result back with ``work_done``."""
    while (auth := server.authentication) is not None:
        try:
            principal = auth()
        except Exception as exc:
            server.work_done(None, exc)
        else:
            server.work_done(principal)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeHost:
    """A ProtocolHost over one real Namespace, with a guest/guest user."""

    clock: FakeClock = field(default_factory=FakeClock)
    product: str = "DeltaMQ"
    version: str = "test"
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    idle_timeout: int = 0
    max_message_size: int = 1 << 20
    #: the resource alarm's reason ("low on disk"), "" when publishers are not blocked
    alarm: str = ""
    opened: list[Any] = field(default_factory=list)
    #: the ACL decisions (configure it with rule sets to test the engines' checks)
    access_control: AccessControl = field(default_factory=AccessControl)
    namespace: Namespace = field(init=False)

    def __post_init__(self) -> None:
        self.namespace = Namespace(vhost_name="default", clock=self.clock)

    def sasl_mechanisms(self, remote_host: str) -> list[str]:
        return ["AMQPLAIN", "PLAIN"]

    def authenticate(self, username: str, password: str, remote_host: str) -> User:
        if (username, password) != ("guest", "guest"):
            raise errors.AuthenticationFailed(f"user '{username}' - invalid credentials")
        return User(username)

    def authenticate_anonymous(self, remote_host: str) -> User:
        raise errors.AuthenticationFailed("ANONYMOUS is not enabled")

    def open_virtual_host(self, name: str, principal: Any) -> Namespace:
        if name not in ("/", "", "default"):
            raise errors.InvalidPath(f"no virtual host '{name}'")
        return self.namespace

    def access(self, principal: Any, vhost_name: str, remote_host: str) -> ConnectionAccess:
        access = self.access_control.connection_access(principal.name, remote_host, vhost_name)
        access.check_access()
        return access

    def connection_opened(self, connection: Any) -> None:
        self.opened.append(connection)

    def connection_closed(self, connection: Any) -> None:
        self.opened.remove(connection)

    @property
    def alarm_reason(self) -> str:
        return self.alarm


@dataclass
class Delivery:
    channel: int
    method: m.Method
    properties: MessageProperties
    body: bytes


class Client:
    """Encodes client frames and decodes what the server engine answers."""

    def __init__(self, host: FakeHost, version: AmqpVersion = AmqpVersion.V0_9_1) -> None:
        self.host = host
        self.version = version
        self.server = AmqpConnection(host, version, remote_host="127.0.0.1")
        self._rest = b""
        self.frames: list[tuple[int, int, Any]] = []    # (type, channel, method|payload)
        self._pending: dict[int, list[Any]] = {}
        self.server.start()

    # -- sending ----------------------------------------------------------------
    def raw(self, data: bytes) -> None:
        self.server.receive_data(data)
        run_authentication(self.server)
        self._read()

    def encode(self, channel: int, method: m.Method) -> bytes:
        return frame(FRAME_METHOD, channel, _ENCODERS[self.version][type(method)](method))

    def send(self, channel: int, method: m.Method) -> None:
        self.raw(self.encode(channel, method))

    def publish_bytes(self, channel: int, exchange: str, routing_key: str, body: bytes,
                      properties: MessageProperties | None = None, *, mandatory: bool = False,
                      frame_max: int = 131072) -> bytes:
        props = encode_properties(properties or MessageProperties())
        data = self.encode(channel, m.BasicPublish(exchange=exchange, routing_key=routing_key,
                                                   mandatory=mandatory))
        data += frame(FRAME_HEADER, channel, struct.pack(">HHQ", 60, 0, len(body)) + props)
        step = frame_max - 8
        for i in range(0, len(body), step):
            data += frame(FRAME_BODY, channel, body[i:i + step])
        return data

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes,
                properties: MessageProperties | None = None, *, mandatory: bool = False) -> None:
        self.raw(self.publish_bytes(channel, exchange, routing_key, body, properties, mandatory=mandatory))

    def handshake(self, vhost: str = "/") -> None:
        self.expect(m.ConnectionStart)
        self.send(0, m.ConnectionStartOk(client_properties={"capabilities": {
            "consumer_cancel_notify": True, "connection.blocked": True,
            "authentication_failure_close": True, "publisher_confirms": True}},
            mechanism="PLAIN", response=b"\x00guest\x00guest", locale="en_US"))
        tune = self.expect(m.ConnectionTune)
        self.send(0, m.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0))
        self.send(0, m.ConnectionOpen(virtual_host=vhost))
        self.expect(m.ConnectionOpenOk)

    def open_connection(self, vhost: str = "/") -> None:
        """Log in as guest (PLAIN) and send connection.open, whatever the server answers it."""
        self.expect(m.ConnectionStart)
        self.send(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                         response=b"\x00guest\x00guest", locale="en_US"))
        tune = self.expect(m.ConnectionTune)
        self.send(0, m.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max,
                                        heartbeat=0))
        self.send(0, m.ConnectionOpen(virtual_host=vhost))

    def open_channel(self, number: int = 1) -> None:
        self.send(number, m.ChannelOpen())
        self.expect(m.ChannelOpenOk, number)

    # -- receiving ----------------------------------------------------------------
    def _read(self) -> None:
        data = self._rest + self.server.data_to_send()
        self.server.output_drained()
        o = 0
        while len(data) - o >= 8:
            ftype, channel, size = struct.unpack_from(">BHI", data, o)
            if len(data) < o + 8 + size:
                break
            payload = data[o + 7:o + 7 + size]
            assert data[o + 7 + size] == 0xCE
            o += 8 + size
            if ftype == FRAME_METHOD:
                key = struct.unpack_from(">I", payload)[0]
                method = _DECODERS[self.version][key](payload, 4)
                if method.CONTENT:
                    self._pending[channel] = [method, None, b"", 0]
                else:
                    self.frames.append((ftype, channel, method))
            elif ftype == FRAME_HEADER:
                pending = self._pending[channel]
                _cls, _w, size_ = struct.unpack_from(">HHQ", payload)
                pending[1] = decode_properties(payload[12:])
                pending[3] = size_
                if size_ == 0:
                    self._complete(channel)
            elif ftype == FRAME_BODY:
                pending = self._pending[channel]
                pending[2] += payload
                if len(pending[2]) >= pending[3]:
                    self._complete(channel)
            else:
                self.frames.append((ftype, channel, payload))
        self._rest = data[o:]

    def _complete(self, channel: int) -> None:
        method, props, body, _ = self._pending.pop(channel)
        self.frames.append((FRAME_METHOD, channel, Delivery(channel, method, props, body)))

    def pump(self) -> None:
        self._read()

    def take(self) -> list[tuple[int, Any]]:
        self._read()
        out = [(ch, obj) for _t, ch, obj in self.frames]
        self.frames.clear()
        return out

    def expect(self, cls: type, channel: int | None = None) -> Any:
        self._read()
        if not self.frames:
            raise AssertionError(f"expected {cls.__name__}, got nothing")
        _t, ch, obj = self.frames.pop(0)
        got = obj.method if isinstance(obj, Delivery) and cls is not Delivery else obj
        if cls is Delivery:
            assert isinstance(obj, Delivery), f"expected a delivery, got {obj!r}"
        else:
            assert isinstance(got, cls), f"expected {cls.__name__}, got {obj!r}"
        if channel is not None:
            assert ch == channel, f"expected channel {channel}, got {ch}"
        return obj

    def deliveries(self) -> list[Delivery]:
        self._read()
        out = [obj for _t, _ch, obj in self.frames if isinstance(obj, Delivery)]
        self.frames = [f for f in self.frames if not isinstance(f[2], Delivery)]
        return out
