"""What escapes an engine (a bug it did not catch) drops that connection only: the listener and the
other connections go on -- driven through the asyncio protocol, and end to end with pika against
an in-process listener whose engines serve one real namespace."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.channel import Channel
from broker.protocol.amqp0_9_1.connection import AmqpConnection
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry

from ..protocol.harness import FakeHost
from .test_tcp_protocol import SUPPORTED, _connected


class Bug(RuntimeError):
    """What the injected code raises."""


def _bug_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None and isinstance(r.exc_info[1], Bug)]


@pytest.mark.timeout(30)
def test_an_exception_out_of_the_engine_drops_that_connection_only(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        host = FakeHost()
        registry = ConnectionRegistry()
        broken, broken_transport, _ = await _connected(host, registry)
        fine, fine_transport, encoder = await _connected(host, registry)

        def receive_data(data: bytes) -> None:
            raise Bug("escaped the engine")

        def set_blocked(blocked: bool, reason: str) -> None:
            raise Bug("escaped the engine")

        assert broken.engine is not None
        broken.engine.receive_data = receive_data          # type: ignore[method-assign]
        broken.engine.set_blocked = set_blocked            # type: ignore[method-assign]
        registry.set_blocked(True, "low on memory")        # the failing one does not stop the rest
        assert fine.engine is not None and fine.engine.blocked    # type: ignore[attr-defined]
        broken.data_received(b"anything")                  # already dropped: no second log line
        await broken_transport.closed_event.wait()
        assert broken_transport.aborted and broken not in registry.connections
        assert len(_bug_records(caplog)) == 1
        registry.set_blocked(False, "")
        fine_transport.written.clear()
        fine.data_received(encoder.encode(1, m.QueueDeclare(queue="q")))
        assert b"\x00\x32\x00\x0b" in fine_transport.written        # queue.declare-ok
        assert not fine_transport.closed and fine in registry.connections

    asyncio.run(scenario())


# -- end to end, with pika -----------------------------------------------------------------

class Listener:
    """An asyncio server on a loopback port in a thread, its engines over one FakeHost."""

    def __init__(self) -> None:
        self.host = FakeHost()
        self.registry = ConnectionRegistry()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        def engine(version, remote_host, remote_port):  # type: ignore[no-untyped-def]
            return AmqpConnection(self.host, version, remote_host=remote_host,
                                  remote_port=remote_port)

        server = self.loop.run_until_complete(self.loop.create_server(
            lambda: AmqpProtocol(engine, SUPPORTED, self.registry), "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()
        self.loop.run_until_complete(server.wait_closed())
        self.loop.close()

    def __enter__(self) -> Listener:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", self.port, credentials=pika.PlainCredentials("guest", "guest"),
            blocked_connection_timeout=10, socket_timeout=10))


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as running:
        yield running


@pytest.mark.timeout(60)
def test_pika_a_bug_in_a_method_handler_closes_that_connection_with_541(
        listener: Listener, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    other = listener.connect()
    other_channel = other.channel()
    other_channel.queue_declare("q")
    other_channel.confirm_delivery()
    other_channel.basic_publish("", "q", b"confirmed before")        # confirmed: it waits
    victim = listener.connect()
    monkeypatch.setattr(Channel, "_basic_qos", lambda self, method: (_ for _ in ()).throw(
        Bug("injected")))
    victim_channel = victim.channel()                 # handlers are bound when it opens
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        victim_channel.basic_qos(prefetch_count=1)
    assert closed.value.reply_code == 541
    assert len(_bug_records(caplog)) == 1
    # the listener accepts, and the other connection is served, as before
    later = listener.connect()
    later.close()
    other_channel.basic_publish("", "q", b"after")
    bodies = []
    for _ in range(2):
        _method, _props, body = other_channel.basic_get("q", auto_ack=True)
        bodies.append(body)
    assert bodies == [b"confirmed before", b"after"]
    other.close()
