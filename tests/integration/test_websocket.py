"""AMQP over WebSocket against `deltamq serve`: on the WebSocket port and on the HTTP port's path.

The broker is started as a user starts it, with its WebSocket port on a free
number (``-D deltamq.ws_port=N``) and a 1 MiB message bound.  The clients
are unmodified:

- the ``websockets`` package speaks WebSocket to the broker directly (the
  upgrade, subprotocols, text messages, the size bound, ping, close);
- pika (0-9-1) and python-qpid-proton (1.0), which have no WebSocket
  transport, go through :class:`~.websocket_support.WebSocketRelay`, a
  relay that carries their bytes in the ``websockets`` client's binary
  messages;
- rhea (1.0) with its own WebSocket support, over the ``ws`` npm package
  (``tests/amqp1_0_clients/rhea_websocket.js``).

The browser clients are in ``tests/mgmt/test_websocket_browser.py``.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import struct
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect

from tests.waiting import wait_until

from .support import closed_by_broker
from .websocket_support import MAX_MESSAGE, WebSocketBroker, WebSocketRelay

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL") or os.environ.get("DELTAMQ_TEST_START_RABBITMQ"):
    pytest.skip("WebSocket is DeltaMQ's own broker's here", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "tests" / "amqp1_0_clients"
HEADER_0_9_1 = b"AMQP\x00\x00\x09\x01"
HEADER_1_0_SASL = b"AMQP\x03\x01\x00\x00"
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"        # 0-9-1 spec 4.2.7


@pytest.fixture(scope="module")
def ws_broker() -> Iterator[WebSocketBroker]:
    with WebSocketBroker() as proc:
        yield proc


@pytest.fixture(params=["port", "path"])
def url(request: pytest.FixtureRequest, ws_broker: WebSocketBroker) -> str:
    """The WebSocket port, and the HTTP port's /amqp path: every test runs on both."""
    return ws_broker.ws_url if request.param == "port" else ws_broker.path_url


# -- the WebSocket itself, with the websockets client ------------------------------------------

def test_the_amqp_subprotocol_is_accepted_and_amqp_flows_in_binary_messages(url: str) -> None:
    with connect(url, subprotocols=["amqp"], open_timeout=10) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "amqp"
        ws.send(HEADER_0_9_1[:5])                  # the header across two messages
        ws.send(HEADER_0_9_1[5:])
        data = b""
        while len(data) < 7 or len(data) < 8 + struct.unpack_from(">I", data, 3)[0]:
            message = ws.recv(timeout=10)
            assert isinstance(message, bytes)
            data += message
        frame_type, channel, size = struct.unpack_from(">BHI", data)
        assert (frame_type, channel) == (1, 0)
        assert data[7:11] == b"\x00\x0a\x00\x0a"      # connection.start


def test_an_amqp_1_0_header_is_answered_in_a_binary_message(url: str) -> None:
    with connect(url, subprotocols=["amqp"], open_timeout=10) as ws:  # type: ignore[list-item]
        ws.send(HEADER_1_0_SASL)
        message = ws.recv(timeout=10)
        assert isinstance(message, bytes) and message.startswith(HEADER_1_0_SASL)


@pytest.mark.parametrize("subprotocols", [["mqtt"], None])
def test_an_upgrade_without_the_amqp_subprotocol_is_refused_with_400(
        url: str, subprotocols: list[str] | None) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(url, subprotocols=subprotocols, open_timeout=10)  # type: ignore[arg-type]
    response = refused.value.response
    assert response.status_code == 400
    assert b"amqp" in response.body


def test_a_plain_http_request_is_not_an_upgrade(ws_broker: WebSocketBroker) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", ws_broker.ws_port, timeout=10)
    conn.request("GET", "/")
    assert conn.getresponse().status == 400
    conn.close()
    answer = httpx.get(f"http://127.0.0.1:{ws_broker.http_port}/amqp", timeout=10)
    assert answer.status_code == 426 and answer.headers["upgrade"] == "websocket"


def test_a_text_message_closes_the_websocket_with_1003(url: str) -> None:
    with connect(url, subprotocols=["amqp"], open_timeout=10) as ws:  # type: ignore[list-item]
        ws.send("AMQP as text")
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003


def test_a_message_over_the_bound_closes_the_websocket_with_1009(url: str) -> None:
    with connect(url, subprotocols=["amqp"], open_timeout=10,  # type: ignore[list-item]
                 max_size=None) as ws:
        ws.send(HEADER_0_9_1)
        # heartbeat frames are valid at any time: the engine reads them all, and only the
        # WebSocket's bound is crossed
        ws.send(HEARTBEAT * (MAX_MESSAGE // len(HEARTBEAT) + 1))
        with pytest.raises(ConnectionClosedError) as closed:
            while True:
                ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_a_ping_is_answered_with_a_pong(url: str) -> None:
    with connect(url, subprotocols=["amqp"], open_timeout=10) as ws:  # type: ignore[list-item]
        assert ws.ping(b"deltamq").wait(10)


def test_the_client_closing_the_websocket_gets_the_close_answered(url: str) -> None:
    with connect(url, subprotocols=["amqp"], open_timeout=10) as ws:  # type: ignore[list-item]
        ws.send(HEADER_0_9_1)
        ws.recv(timeout=10)
        ws.close(1000, "done")
        assert ws.close_code == 1000                # the broker's answer, not a timeout's 1006


# -- real AMQP clients through a WebSocket relay -----------------------------------------------

def _declare(ws_broker: WebSocketBroker, name: str) -> None:
    params = pika.ConnectionParameters("127.0.0.1", ws_broker.amqp_port,
                                       credentials=pika.PlainCredentials("guest", "guest"))
    with pika.BlockingConnection(params) as conn:
        conn.channel().queue_declare(name)


def test_pika_publishes_and_consumes_over_websocket(url: str) -> None:
    queue = f"ws-pika-{uuid.uuid4().hex[:8]}"
    bodies = [f"message {i}".encode() * (i + 1) for i in range(50)] + [os.urandom(300_000)]
    with WebSocketRelay(url) as relay:
        params = pika.ConnectionParameters("127.0.0.1", relay.port, heartbeat=0,
                                           credentials=pika.PlainCredentials("guest", "guest"),
                                           client_properties={"connection_name": "over-ws"})
        with pika.BlockingConnection(params) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare(queue)
            for body in bodies:
                ch.basic_publish("", queue, body)          # confirmed: raises if nacked
            got = []
            for method, _props, body in ch.consume(queue, inactivity_timeout=10):
                assert method is not None, f"only {len(got)} of {len(bodies)} delivered"
                ch.basic_ack(method.delivery_tag)
                got.append(body)
                if len(got) == len(bodies):
                    break
            ch.cancel()
            assert got == bodies
        assert relay.relayed == 1 and relay.subprotocols_chosen == ["amqp"]


def test_the_connection_shows_transport_ws_in_management(ws_broker: WebSocketBroker,
                                                         url: str) -> None:
    with WebSocketRelay(url) as relay:
        params = pika.ConnectionParameters("127.0.0.1", relay.port, heartbeat=0,
                                           credentials=pika.PlainCredentials("guest", "guest"),
                                           client_properties={"connection_name": "shown"})
        with pika.BlockingConnection(params):
            def connections() -> list[dict[str, Any]]:
                answer = httpx.get(f"http://127.0.0.1:{ws_broker.http_port}/api/latest/connection",
                                   auth=("guest", "guest"), timeout=10)
                assert answer.status_code == 200, answer.text
                return [c for c in answer.json() if c.get("clientId") == "shown"]
            shown = wait_until(connections, 20, what="the connection in management")
            assert shown[0]["transport"] == "WS"


def test_proton_sends_and_receives_over_websocket(ws_broker: WebSocketBroker, url: str) -> None:
    proton = pytest.importorskip("proton")
    from proton.utils import BlockingConnection

    queue = f"ws-proton-{uuid.uuid4().hex[:8]}"
    _declare(ws_broker, queue)
    with WebSocketRelay(url) as relay:
        conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{relay.port}", timeout=20)
        try:
            sender = conn.create_sender(queue)
            for i in range(20):
                sender.send(proton.Message(body=f"hello {i}"))
            receiver = conn.create_receiver(queue, credit=20)
            got = []
            for _ in range(20):
                message = receiver.receive(timeout=20)
                got.append(message.body)
                receiver.accept()
            assert got == [f"hello {i}" for i in range(20)]
        finally:
            conn.close()
    assert relay.subprotocols_chosen == ["amqp"]


# -- rhea with its own WebSocket support (the ws package) --------------------------------------

def test_rhea_sends_and_receives_over_websocket(ws_broker: WebSocketBroker, url: str) -> None:
    script = CLIENTS / "rhea_websocket.js"
    if not (CLIENTS / "node_modules" / "ws" / "package.json").is_file() or not shutil.which("node"):
        if os.environ.get("DELTAMQ_SKIP_AMQP1_CLIENTS") == "1":
            pytest.skip("rhea and ws are not fetched (DELTAMQ_SKIP_AMQP1_CLIENTS=1)")
        pytest.fail("rhea and ws are missing: run tools/ensure-amqp1-clients", pytrace=False)
    queue = f"ws-rhea-{uuid.uuid4().hex[:8]}"
    _declare(ws_broker, queue)
    run = subprocess.run(["node", str(script), json.dumps({"url": url, "address": queue,
                                                           "count": 25})],
                         cwd=CLIENTS, capture_output=True, text=True, timeout=120)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.returncode == 0 and lines and lines[-1].get("ok"), run.stdout + run.stderr
    result = lines[-1]
    assert result["protocol"] == "amqp" and result["accepted"] == 25
    assert result["received"] == [f"rhea {i}" for i in range(25)]


# -- shutdown ------------------------------------------------------------------------------------

def test_sigterm_closes_websocket_clients_with_connection_forced() -> None:
    """Both the WebSocket port's and the HTTP path's clients get 320 before the broker stops
    (the path's before management stops serving)."""
    with WebSocketBroker() as broker, WebSocketRelay(broker.ws_url) as on_port, \
            WebSocketRelay(broker.path_url) as on_path:
        connections = []
        for relay in (on_port, on_path):
            params = pika.ConnectionParameters("127.0.0.1", relay.port, heartbeat=0,
                                               credentials=pika.PlainCredentials("guest", "guest"))
            connections.append(pika.BlockingConnection(params))
            connections[-1].channel()
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
        for conn in connections:
            assert closed_by_broker(conn, 15) == 320
        assert broker.proc.wait(timeout=15) == 0
