"""In-memory AMQP 1.0 test client wired to the server engine (no sockets), over a real Namespace."""

from __future__ import annotations

import struct
from typing import Any

from broker.protocol.amqp1_0.composite import Composite, Performative
from broker.protocol.amqp1_0.connection import AmqpConnection10
from broker.protocol.amqp1_0.definitions import (Attach, Begin, Data, Flow, Header, Open, SaslInit, Source,
                                                 Target, Transfer)
from broker.protocol.amqp1_0.encoding import encode
from broker.protocol.amqp1_0.framing import AMQP_HEADER, TYPE_AMQP, TYPE_SASL, Frame, encode_frame
from broker.protocol.detect import AmqpVersion

from ..harness import FakeHost, run_authentication

_SIZE = struct.Struct(">I")


class Host10(FakeHost):
    """FakeHost with the mechanisms an AMQP 1.0 port offers; ANONYMOUS when ``anonymous``."""

    anonymous: bool = False

    def sasl_mechanisms(self, remote_host: str) -> list[str]:
        return ["AMQPLAIN", "PLAIN", "ANONYMOUS"] if self.anonymous else ["AMQPLAIN", "PLAIN"]

    def authenticate_anonymous(self, remote_host: str) -> Any:
        if not self.anonymous:
            return super().authenticate_anonymous(remote_host)
        from ..harness import User
        return User("anonymous")


def message_payload(body: bytes = b"body", *, durable: bool = False) -> bytes:
    return encode(Header(durable=durable)) + encode(Data(value=body))


class Client10:
    """Frames in, frames out: ``received`` holds (channel, value, payload) of what the server sent,
    ``events`` the engine events; protocol headers show as ("header", bytes, b"")."""

    def __init__(self, host: FakeHost | None = None, *, sasl: bool = True) -> None:
        self.host = host or Host10()
        version = AmqpVersion.V1_0_SASL if sasl else AmqpVersion.V1_0
        self.server = AmqpConnection10(self.host, version, remote_host="127.0.0.1")
        self.events: list[Any] = []
        self.server.on_event = self.events.append
        self.received: list[tuple[Any, Any, bytes]] = []
        self._buffer = b""
        self.server.start()
        self._read()

    # -- sending ------------------------------------------------------------------------
    def raw(self, data: bytes) -> None:
        self.server.receive_data(data)
        run_authentication(self.server)
        self._read()

    def send(self, performative: Performative, channel: int = 0, payload: bytes = b"") -> None:
        self.raw(encode_frame(performative, channel, payload))

    def sasl(self, frame: Composite) -> None:
        self.raw(encode_frame(frame, frame_type=TYPE_SASL))

    # -- reading --------------------------------------------------------------------------
    def _read(self) -> None:
        self._buffer += self.server.data_to_send()
        while len(self._buffer) >= 8:
            if self._buffer[:4] == b"AMQP":
                self.received.append(("header", self._buffer[:8], b""))
                self._buffer = self._buffer[8:]
                continue
            size = _SIZE.unpack_from(self._buffer)[0]
            if len(self._buffer) < size:
                return
            raw, self._buffer = self._buffer[:size], self._buffer[size:]
            frame = Frame(raw[5], struct.unpack_from(">H", raw, 6)[0], raw[raw[4] * 4:])
            if frame.empty:
                self.received.append((frame.channel, None, b""))
            elif frame.type == TYPE_AMQP:
                value, payload = frame.performative()
                self.received.append((frame.channel, value, payload))
            else:
                self.received.append((frame.channel, frame.sasl_frame(), b""))

    def take(self) -> list[tuple[Any, Any, bytes]]:
        taken, self.received = self.received, []
        return taken

    def values(self) -> list[Any]:
        return [value for _channel, value, _payload in self.take()]

    def expect(self, kind: type) -> Any:
        for index, (_channel, value, _payload) in enumerate(self.received):
            if isinstance(value, kind):
                del self.received[:index + 1]
                return value
        raise AssertionError(f"no {kind.__name__} among {self.received}")

    # -- conversations ----------------------------------------------------------------------
    def handshake(self, **open_fields: Any) -> Open:
        self.sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"))
        self.raw(AMQP_HEADER)
        fields = {"container_id": "test-client", **open_fields}
        self.send(Open(**fields))
        return self.expect(Open)

    def begin(self, channel: int = 0, incoming_window: int = 1000) -> Begin:
        self.send(Begin(next_outgoing_id=0, incoming_window=incoming_window, outgoing_window=1000), channel)
        return self.expect(Begin)

    def attach_sender(self, address: str | None, handle: int = 0, name: str = "sender", channel: int = 0,
                      snd_settle_mode: int = 2) -> None:
        """The client sends: the broker's end receives (our role: sender, false)."""
        self.send(Attach(name=name, handle=handle, role=False, snd_settle_mode=snd_settle_mode,
                         source=Source(address="client"), target=Target(address=address),
                         initial_delivery_count=0), channel)

    def open_senders(self, *links: tuple[str, str]) -> None:
        """Log in, begin a session on channel 0 and attach a sender to each (address, link name),
        on handles 0, 1, ...; what the broker answered is taken."""
        self.handshake()
        self.begin()
        for handle, (address, name) in enumerate(links):
            self.attach_sender(address, handle=handle, name=name)
        self.take()

    def attach_receiver(self, address: str, handle: int = 1, name: str = "receiver", channel: int = 0,
                        snd_settle_mode: int = 0) -> None:
        self.send(Attach(name=name, handle=handle, role=True, snd_settle_mode=snd_settle_mode,
                         source=Source(address=address), target=Target(address="client")), channel)

    def transfer(self, handle: int, delivery_id: int, payload: bytes, *, settled: bool = False,
                 channel: int = 0, **fields: Any) -> None:
        self.send(Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=struct.pack(">I", delivery_id),
                           message_format=0, settled=settled, **fields), channel, payload)

    def credit(self, handle: int, credit: int, *, delivery_count: int = 0, drain: bool = False,
               incoming_window: int = 1000, next_incoming_id: int = 0, channel: int = 0) -> None:
        self.send(Flow(next_incoming_id=next_incoming_id, incoming_window=incoming_window, next_outgoing_id=0,
                       outgoing_window=1000, handle=handle, delivery_count=delivery_count, link_credit=credit,
                       drain=drain), channel)
