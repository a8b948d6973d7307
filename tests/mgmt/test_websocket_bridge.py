"""The HTTP port's AMQP WebSocket path in memory: ASGI messages in, a protocol driven, ASGI out.

A recording protocol stands where the broker's AmqpProtocol runs in production
(tests/integration/test_websocket.py drives the real one with real clients);
these tests pin what the bridge itself does: subprotocol refusals over HTTP,
binary messages to ``data_received``, writes to binary messages, flow control
both ways, and how it closes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.transport.websocket import MAX_SENT_MESSAGE, WebSocketSettings
from mgmt.websocket import AmqpWebSocketEndpoint

pytestmark = pytest.mark.timeout(30)

SCOPE: dict[str, Any] = {"type": "websocket", "path": "/amqp", "subprotocols": ["amqp"],
                         "client": ("10.0.0.7", 40001), "server": ("127.0.0.1", 8080),
                         "extensions": {"websocket.http.response": {}}}


class Recorder(asyncio.Protocol):
    """Records what the bridge hands it; closes the transport when told to."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.received: list[bytes] = []
        self.events: list[str] = []
        self.lost = asyncio.Event()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.events.append(f"made {transport.get_extra_info('peername')}")

    def data_received(self, data: bytes) -> None:
        self.received.append(data)

    def pause_writing(self) -> None:
        self.events.append("pause_writing")

    def resume_writing(self) -> None:
        self.events.append("resume_writing")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        self.lost.set()


class Asgi:
    """The server side of one ASGI WebSocket connection, as a test drives it."""

    def __init__(self, scope: dict[str, Any] | None = None) -> None:
        self.scope = dict(SCOPE if scope is None else scope)
        self.incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.received_count = 0
        self.send_gate = asyncio.Event()
        self.send_gate.set()

    async def receive(self) -> dict[str, Any]:
        message = await self.incoming.get()
        self.received_count += 1
        return message

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_gate.wait()
        self.sent.append(message)
        if message["type"] == "websocket.close":
            self.incoming.put_nowait({"type": "websocket.disconnect", "code": message["code"]})

    def types(self) -> list[str]:
        return [m["type"] for m in self.sent]


async def _until(condition: Any) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def _endpoint(recorder: Recorder, required: bool = True) -> AmqpWebSocketEndpoint:
    async def other_app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    return AmqpWebSocketEndpoint(other_app, "/amqp", lambda: recorder,
                                 WebSocketSettings(subprotocol_required=required))


def test_binary_messages_reach_the_protocol_and_writes_go_out_as_binary_messages() -> None:
    async def scenario() -> None:
        recorder, asgi = Recorder(), Asgi()
        asgi.incoming.put_nowait({"type": "websocket.connect"})
        task = asyncio.create_task(_endpoint(recorder)(asgi.scope, asgi.receive, asgi.send))
        asgi.incoming.put_nowait({"type": "websocket.receive", "bytes": b"AMQP\x00\x00\x09\x01"})
        await _until(lambda: recorder.received)
        assert asgi.sent[0] == {"type": "websocket.accept", "subprotocol": "amqp"}
        assert recorder.events[0] == "made ('10.0.0.7', 40001)"
        assert recorder.received == [b"AMQP\x00\x00\x09\x01"]
        big = bytes(range(256)) * (MAX_SENT_MESSAGE // 256 + 1)
        recorder.transport.write(b"connection.start")
        recorder.transport.write(big)
        await _until(lambda: len(asgi.sent) >= 3)
        payload = b"".join(m["bytes"] for m in asgi.sent[1:])
        assert payload == b"connection.start" + big
        assert all(len(m["bytes"]) <= MAX_SENT_MESSAGE for m in asgi.sent[1:])
        recorder.transport.close()                    # the engine finished
        await asyncio.wait_for(task, 10)
        assert asgi.sent[-1] == {"type": "websocket.close", "code": 1000}
        assert recorder.events[-1] == "lost"

    asyncio.run(scenario())


def test_a_text_message_closes_with_1003_and_is_not_passed_on() -> None:
    async def scenario() -> None:
        recorder, asgi = Recorder(), Asgi()
        asgi.incoming.put_nowait({"type": "websocket.connect"})
        asgi.incoming.put_nowait({"type": "websocket.receive", "text": "AMQP"})
        await asyncio.wait_for(_endpoint(recorder)(asgi.scope, asgi.receive, asgi.send), 10)
        assert asgi.sent[-1] == {"type": "websocket.close", "code": 1003}
        assert recorder.received == [] and recorder.events[-1] == "lost"

    asyncio.run(scenario())


def test_the_client_going_away_tells_the_protocol() -> None:
    async def scenario() -> None:
        recorder, asgi = Recorder(), Asgi()
        asgi.incoming.put_nowait({"type": "websocket.connect"})
        asgi.incoming.put_nowait({"type": "websocket.disconnect", "code": 1001})
        await asyncio.wait_for(_endpoint(recorder)(asgi.scope, asgi.receive, asgi.send), 10)
        assert asgi.types() == ["websocket.accept"] and recorder.lost.is_set()

    asyncio.run(scenario())


def test_an_abort_drops_pending_output_and_closes_with_1008() -> None:
    async def scenario() -> None:
        recorder, asgi = Recorder(), Asgi()
        asgi.incoming.put_nowait({"type": "websocket.connect"})
        asgi.send_gate.clear()                        # the accept waits: nothing goes out yet
        task = asyncio.create_task(_endpoint(recorder)(asgi.scope, asgi.receive, asgi.send))
        await asyncio.sleep(0.05)
        asgi.send_gate.set()
        await _until(lambda: recorder.transport is not None)
        recorder.transport.write(b"never sent")
        recorder.transport.abort()                    # the open timeout, missed heartbeats
        await asyncio.wait_for(task, 10)
        assert asgi.types() == ["websocket.accept", "websocket.close"]
        assert asgi.sent[-1]["code"] == 1008

    asyncio.run(scenario())


def test_a_slow_client_pauses_the_writer_and_a_paused_reader_receives_nothing() -> None:
    async def scenario() -> None:
        recorder, asgi = Recorder(), Asgi()
        asgi.incoming.put_nowait({"type": "websocket.connect"})
        task = asyncio.create_task(_endpoint(recorder)(asgi.scope, asgi.receive, asgi.send))
        await _until(lambda: recorder.transport is not None)
        transport = recorder.transport
        transport.set_write_buffer_limits(high=1000)
        asgi.send_gate.clear()                        # the socket is full
        transport.write(b"x" * 600)
        transport.write(b"y" * 600)
        assert recorder.events[-1] == "pause_writing"
        assert transport.get_write_buffer_size() == 1200
        asgi.send_gate.set()                          # it drains
        await _until(lambda: recorder.events[-1] == "resume_writing")
        assert transport.get_write_buffer_size() == 0
        # reading paused (a blocked publisher): the message already asked for is held, and
        # no other is asked for (uvicorn reads no more from the socket meanwhile)
        transport.pause_reading()
        count = asgi.received_count
        asgi.incoming.put_nowait({"type": "websocket.receive", "bytes": b"held"})
        asgi.incoming.put_nowait({"type": "websocket.receive", "bytes": b"waiting"})
        await asyncio.sleep(0.05)
        assert recorder.received == [] and asgi.received_count == count + 1
        assert asgi.incoming.qsize() == 1
        transport.resume_reading()
        await _until(lambda: recorder.received == [b"held", b"waiting"])
        transport.close()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())


@pytest.mark.parametrize("offered", [["mqtt"], []])
def test_an_upgrade_without_the_amqp_subprotocol_gets_http_400(offered: list[str]) -> None:
    async def scenario() -> None:
        recorder, asgi = Recorder(), Asgi({**SCOPE, "subprotocols": offered})
        asgi.incoming.put_nowait({"type": "websocket.connect"})
        await asyncio.wait_for(_endpoint(recorder)(asgi.scope, asgi.receive, asgi.send), 10)
        start, body = asgi.sent
        assert start["type"] == "websocket.http.response.start" and start["status"] == 400
        assert b"amqp" in body["body"] and recorder.events == []

    asyncio.run(scenario())


def test_without_the_http_response_extension_the_refusal_is_a_close() -> None:
    async def scenario() -> None:
        recorder, asgi = Recorder(), Asgi({**SCOPE, "subprotocols": ["mqtt"], "extensions": {}})
        asgi.incoming.put_nowait({"type": "websocket.connect"})
        await asyncio.wait_for(_endpoint(recorder)(asgi.scope, asgi.receive, asgi.send), 10)
        assert asgi.types() == ["websocket.close"]        # uvicorn answers it with 403

    asyncio.run(scenario())


def test_none_offered_is_accepted_without_one_when_not_required() -> None:
    async def scenario() -> None:
        recorder, asgi = Recorder(), Asgi({**SCOPE, "subprotocols": []})
        asgi.incoming.put_nowait({"type": "websocket.connect"})
        asgi.incoming.put_nowait({"type": "websocket.disconnect", "code": 1000})
        await asyncio.wait_for(_endpoint(recorder, required=False)(asgi.scope, asgi.receive,
                                                                   asgi.send), 10)
        assert asgi.sent[0] == {"type": "websocket.accept", "subprotocol": None}

    asyncio.run(scenario())


def test_other_paths_go_to_management_and_plain_http_on_the_path_gets_426() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        endpoint = _endpoint(recorder)
        for path, status in (("/api/latest/queue", 204), ("/amqp", 426)):
            sent: list[dict[str, Any]] = []

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b""}
            await endpoint({"type": "http", "path": path}, receive, send)
            assert sent[0]["status"] == status
        assert (b"upgrade", b"websocket") in sent[0]["headers"]

    asyncio.run(scenario())
