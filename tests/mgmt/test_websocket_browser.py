"""AMQP over WebSocket from a real browser: headless Chromium running rhea and amqp-client.

``tests/browser/websocket-check.mjs`` loads a page in Debian's Chromium (through
playwright-core) that runs two unmodified browser clients with the browser's own
WebSocket: rhea's browser build (AMQP 1.0) and @cloudamqp/amqp-client's
AMQPWebSocketClient (AMQP 0-9-1).  On the WebSocket port and on the HTTP
port's ``/amqp`` path each client sends a message and receives it back, and
leaves one more in a queue that this test then reads with pika.

amqp-client offers no WebSocket subprotocol, so this broker accepts upgrades
that offer none (``deltamq.websocket_subprotocol_required=false``); rhea
offers ``amqp`` and the test checks the broker chose it.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pika
import pytest

from tests.integration.websocket_support import WebSocketBroker

from .test_console_browser import BROWSER_DIR, chromium_path, require_browser_tools

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = BROWSER_DIR / "websocket-check.mjs"
RHEA = REPO / "tests" / "amqp1_0_clients" / "node_modules" / "rhea" / "dist" / "rhea-umd.js"
AMQP_CLIENT = BROWSER_DIR / "node_modules" / "@cloudamqp" / "amqp-client" / "dist" / \
    "amqp-websocket-client.mjs"


def test_browser_clients_send_and_receive_over_websocket() -> None:
    require_browser_tools()
    for library in (RHEA, AMQP_CLIENT):
        if not library.is_file():
            pytest.fail(f"{library.relative_to(REPO)} is missing: run tools/ensure-browser and"
                        " tools/ensure-amqp1-clients", pytrace=False)
    with WebSocketBroker(**{"deltamq.websocket_subprotocol_required": "false"}) as broker:
        urls = {"port": broker.ws_url, "path": broker.path_url}
        queues = {name: {kind: f"browser-{name}-{kind}-{uuid.uuid4().hex[:6]}"
                         for kind in ("rhea", "rheaLeft", "amqp091", "amqp091Left")}
                  for name in urls}
        params = pika.ConnectionParameters("127.0.0.1", broker.amqp_port,
                                           credentials=pika.PlainCredentials("guest", "guest"))
        with pika.BlockingConnection(params) as conn:
            ch = conn.channel()
            for names in queues.values():
                for queue in names.values():
                    ch.queue_declare(queue)
        config = {"chromium": chromium_path(), "rhea": str(RHEA), "amqpClient": str(AMQP_CLIENT),
                  "urls": [{"name": name, "url": url} for name, url in urls.items()],
                  "queues": queues, "user": "guest", "password": "guest"}
        run = subprocess.run(["node", str(SCRIPT), json.dumps(config)], cwd=BROWSER_DIR,
                             capture_output=True, text=True, timeout=180)
        lines = [line for line in run.stdout.splitlines() if line.startswith("@@result ")]
        assert lines, run.stdout + run.stderr
        result = json.loads(lines[-1].removeprefix("@@result "))
        assert result["ok"] and run.returncode == 0, run.stdout + run.stderr
        for name in urls:
            found = result["results"][name]
            assert found["rhea"] == {"body": f"rhea via {name}", "protocol": "amqp"}
            assert found["amqp091"] == {"body": f"amqp-client via {name}"}
        # what the browser left is in the broker, read over plain AMQP
        with pika.BlockingConnection(params) as conn:
            ch = conn.channel()
            for name, names in queues.items():
                for kind, expected in (("rheaLeft", f"left by rhea via {name}"),
                                       ("amqp091Left", f"left by amqp-client via {name}")):
                    method, _props, body = ch.basic_get(names[kind], auto_ack=True)
                    assert method is not None, f"nothing in {names[kind]}"
                    assert body == expected.encode() or expected in body.decode(errors="replace")
