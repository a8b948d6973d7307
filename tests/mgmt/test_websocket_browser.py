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

import functools
import http.server
import json
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pika
import pytest

from tests.integration.websocket_support import WebSocketBroker

from .test_console_browser import BROWSER_DIR, chromium_path, require_browser_tools

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = BROWSER_DIR / "websocket-check.mjs"
PAGE = BROWSER_DIR / "websocket-page.html"
RHEA = REPO / "tests" / "amqp1_0_clients" / "node_modules" / "rhea" / "dist" / "rhea-umd.js"
AMQP_CLIENT = BROWSER_DIR / "node_modules" / "@cloudamqp" / "amqp-client" / "dist" / \
    "amqp-websocket-client.mjs"


@contextmanager
def serving_the_page(directory: Path) -> Iterator[str]:
    """The page and both libraries from a loopback web server (Chromium lets a page reach
    loopback WebSockets only from a loopback origin); yields the page's URL."""
    shutil.copy(PAGE, directory / "index.html")
    shutil.copy(RHEA, directory / "rhea-umd.js")
    shutil.copy(AMQP_CLIENT, directory / "amqp-websocket-client.mjs")

    class Files(http.server.SimpleHTTPRequestHandler):
        extensions_map = {".html": "text/html", ".js": "text/javascript",
                          ".mjs": "text/javascript"}

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Files, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_browser_clients_send_and_receive_over_websocket(tmp_path: Path) -> None:
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
        with serving_the_page(tmp_path) as page:
            config = {"chromium": chromium_path(), "page": page,
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
                # rhea's string body is an amqp-value section: 0-9-1 gets its encoding
                # (str8-utf8), marked as RabbitMQ 4 marks it (docs/amqp-1-0-conversion.md)
                text = f"left by rhea via {name}".encode()
                method, props, body = ch.basic_get(names["rheaLeft"], auto_ack=True)
                assert method is not None, f"nothing in {names['rheaLeft']}"
                assert body == b"\x00Sw\xa1" + bytes([len(text)]) + text
                assert props.content_type == "message/vnd.rabbitmq.amqp"
                method, _props, body = ch.basic_get(names["amqp091Left"], auto_ack=True)
                assert method is not None, f"nothing in {names['amqp091Left']}"
                assert body == f"left by amqp-client via {name}".encode()
