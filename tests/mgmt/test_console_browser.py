"""The web console in a real browser: Debian's headless Chromium, driven by playwright-core.

``tests/browser/console-check.mjs`` (run with ``node``) uses the page as a
person would -- logs in through the form, creates queues, publishes, browses
and moves a message, deletes a queue, binds, sees a queue's consumers, closes
a connection, takes a screenshot; it also checks that a request with the
session cookie and no CSRF token is refused.  At its checkpoints this test checks over AMQP (pika) that what
the page showed really happened in the broker, then lets it go on.

What it needs -- ``chromium`` from Debian, ``node``, and playwright-core in
``tests/browser/node_modules`` -- is installed by ``tools/ensure-browser``,
which ``make test`` runs first.  When something is missing the test fails and
says what; ``DELTAMQ_SKIP_BROWSER=1`` makes it skip instead.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pika
import pika.exceptions
import pytest

from broker import __version__
from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint

from .conftest import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
CONSOLE_FILES = REPO / "mgmt" / "console" / "static"
BROWSER_DIR = REPO / "tests" / "browser"
SCRIPT = BROWSER_DIR / "console-check.mjs"
SKIP_ENV = "DELTAMQ_SKIP_BROWSER"
CHROMIUM_ENV = "DELTAMQ_CHROMIUM"
#: the whole script; each of its steps waits at most 15 s
RUN_TIMEOUT = 180.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chromium_path() -> str | None:
    explicit = os.environ.get(CHROMIUM_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing_tools() -> list[str]:
    missing = []
    if chromium_path() is None:
        missing.append("Chromium (Debian package `chromium`; or set DELTAMQ_CHROMIUM)")
    if shutil.which("node") is None:
        missing.append("Node.js (`node`)")
    if not (BROWSER_DIR / "node_modules" / "playwright-core" / "package.json").is_file():
        missing.append("playwright-core (`npm ci` in tests/browser)")
    return missing


def require_browser_tools() -> None:
    """Fail, saying what is missing -- or skip, when DELTAMQ_SKIP_BROWSER=1 says so."""
    missing = missing_tools()
    if not missing:
        return
    reason = ("the web console's browser test needs " + ", ".join(missing)
              + ": run tools/ensure-browser (as root it installs them; `make test` runs it)")
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: {reason}")
    pytest.fail(f"{reason}, or set {SKIP_ENV}=1 to skip this test", pytrace=False)


class ConsoleScript:
    """The Node script as a child process, read line by line, answered at checkpoints."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            ["node", str(SCRIPT), json.dumps(config)], cwd=BROWSER_DIR,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1)
        self.output: list[str] = []
        self.lines: queue.Queue[str | None] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def events(self, deadline: float) -> Iterator[tuple[str, dict[str, Any]]]:
        """("checkpoint" | "result", data) as the script reports them."""
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the browser script took more than {RUN_TIMEOUT}s:\n"
                                     + self.transcript()) from None
            if line is None:
                return
            self.output.append(line)
            if line.startswith("@@"):
                kind, _, payload = line[2:].partition(" ")
                yield kind, json.loads(payload)

    def answer(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def transcript(self) -> str:
        return "\n".join(self.output[-60:])

    def stop(self) -> int:
        """Wait for the script; SIGTERM makes playwright close Chromium before exiting."""
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                return self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        finally:
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass


def message_count(amqp: BrokerEndpoint, name: str) -> int:
    """The queue's ready messages, as an AMQP client learns them (passive declare)."""
    with amqp.pika() as connection:
        declared = connection.channel().queue_declare(name, passive=True)
        return int(declared.method.message_count)


def queue_exists(amqp: BrokerEndpoint, name: str) -> bool:
    try:
        message_count(amqp, name)
        return True
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404, exc
        return False


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE, data[:16]
    assert data[12:16] == b"IHDR", data[:32]
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def drive(config: dict[str, Any], checks: dict[str, Callable[[], None]]
          ) -> tuple[dict[str, Any], list[str]]:
    """Run the browser script to its end, running ``checks[name]`` at each checkpoint; its
    result (which must say ok) and the checkpoints passed."""
    script = ConsoleScript(config)
    seen: list[str] = []
    result: dict[str, Any] | None = None
    try:
        for kind, data in script.events(time.monotonic() + RUN_TIMEOUT):
            if kind == "checkpoint":
                name = str(data["name"])
                try:
                    checks[name]()
                except BaseException as exc:
                    script.answer(f"failed: {exc}")
                    raise AssertionError(f"checkpoint {name}: {exc}\n{script.transcript()}") \
                        from exc
                seen.append(name)
                script.answer("ok")
            elif kind == "result":
                result = data
    finally:
        returncode = script.stop()
    assert result is not None, f"the browser script gave no result:\n{script.transcript()}"
    assert result["ok"], (f"step {result.get('step')!r} failed: {result.get('error')}\n"
                          f"notices: {result.get('notices')}\n{script.transcript()}")
    assert returncode == 0, script.transcript()
    return result, seen


# -- without a browser: what the page is served with ------------------------------------

def test_console_page_and_files_are_served_without_login(api: Api) -> None:
    anonymous = httpx.Client(base_url=api.base, timeout=30)
    try:
        page = anonymous.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert 'id="login-form"' in page.text
        for asset, media_type in (("console.js", "javascript"), ("console.css", "text/css")):
            assert f'"/console/{asset}"' in page.text
            served = anonymous.get(f"/console/{asset}")
            assert served.status_code == 200, (asset, served.text)
            assert media_type in served.headers["content-type"]
            assert served.text == (CONSOLE_FILES / asset).read_text()
        missing = anonymous.get("/console/__init__.py")
        assert missing.status_code == 404 and "errorMessage" in missing.json()
    finally:
        anonymous.close()


def test_console_files_load_nothing_from_elsewhere() -> None:
    for path in CONSOLE_FILES.iterdir():
        text = path.read_text()
        assert not re.search(r"https?://|(?:src|href)\s*=\s*[\"']?//", text), path
        assert "@import" not in text, path


def test_scripted_requests_get_no_basic_challenge(api: Api) -> None:
    """A 401 to the console's fetch() must not make the browser pop up its password dialog."""
    plain = httpx.get(f"{api.base}/api/latest/broker", timeout=30)
    assert plain.status_code == 401 and plain.headers["www-authenticate"].startswith("Basic")
    scripted = httpx.get(f"{api.base}/api/latest/broker", timeout=30,
                         headers={"X-Requested-With": "XMLHttpRequest"})
    assert scripted.status_code == 401 and "www-authenticate" not in scripted.headers
    assert scripted.json()["errorMessage"]


# -- in a browser --------------------------------------------------------------------------

@pytest.mark.slow
def test_console_in_a_real_browser(broker_process: DeltaMQProcess, amqp: BrokerEndpoint,
                                   tmp_path: Path) -> None:
    require_browser_tools()
    tag = uuid.uuid4().hex[:10]
    first, second = f"console.q.{tag}", f"console.moved.{tag}"
    exchange, client_name = f"console.x.{tag}", f"console-client-{tag}"
    consumed, consumer_tag = f"console.consumed.{tag}", f"console-ctag-{tag}"
    body = f"hello from the console {tag}"
    screenshot = tmp_path / "console.png"

    # the client whose connection the page closes; no heartbeats while it waits
    client = pika.BlockingConnection(amqp.pika_params(
        heartbeat=0, client_properties={"connection_name": client_name}))
    # ... and consumes from a queue of its own (which goes with the connection)
    client_channel = client.channel()
    client_channel.queue_declare(consumed, exclusive=True)
    client_channel.basic_consume(consumed, lambda *args: None, consumer_tag=consumer_tag)
    closed_with: list[int] = []

    def client_was_closed() -> None:
        with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
            for _ in range(10):
                client.process_data_events(time_limit=1)
        closed_with.append(closed.value.reply_code)
        assert closed.value.reply_code == 320, closed.value

    checks: dict[str, Callable[[], None]] = {
        # the page said depth 1: an AMQP client sees the message too
        "published": lambda: _expect(message_count(amqp, first), 1, f"messages in {first}"),
        # moved: gone from the first queue, in the second
        "moved": lambda: _expect((message_count(amqp, first), message_count(amqp, second)),
                                 (0, 1), "messages in the two queues"),
        "deleted": lambda: _expect(queue_exists(amqp, first), False, f"{first} exists"),
        "closed": client_was_closed,
    }
    config = {
        "url": f"http://127.0.0.1:{broker_process.http_port}",
        "user": amqp.user, "password": amqp.password,
        "chromium": chromium_path(), "screenshot": str(screenshot),
        "failureScreenshot": str(tmp_path / "failure.png"),
        "queue": first, "target": second, "exchange": exchange,
        "connectionName": client_name, "consumedQueue": consumed, "consumerTag": consumer_tag,
        "body": body, "timeoutMs": 15000,
    }
    try:
        result, seen = drive(config, checks)
    finally:
        if client.is_open:
            client.close()
    assert seen == ["published", "moved", "deleted", "closed"], seen
    assert closed_with == [320]
    assert result["problems"] == []
    # the page asked before deleting the queue and the exchange and closing the connection
    assert [d.split(" ")[:2] for d in result["dialogs"]] == \
        [["Delete", "queue"], ["Delete", "exchange"], ["Close", "connection"]], result["dialogs"]

    # what the page left behind, seen over AMQP: the moved message, then the routed one
    with amqp.pika() as connection:
        channel = connection.channel()
        got = [channel.basic_get(second, auto_ack=True) for _ in range(3)]
        assert [(m[2] if m[0] else None) for m in got] == \
            [body.encode(), b"routed by the console", None]
        channel.queue_delete(second)

    png = screenshot.read_bytes()
    width, height = png_size(png)
    assert width == 1280 and height >= 600, (width, height)
    assert len(png) > 20_000, len(png)        # a rendered page, not a blank image


def _expect(actual: object, expected: object, what: str) -> None:
    if actual != expected:
        raise AssertionError(f"{what}: {actual!r}, expected {expected!r}")


@pytest.mark.slow
def test_console_operator_pages_in_a_real_browser(broker_process: DeltaMQProcess,
                                                  amqp: BrokerEndpoint, tmp_path: Path) -> None:
    """Credentials in the address, charts, node health, users, virtual hosts, ports, and
    bidirectional-control characters shown as markers."""
    require_browser_tools()
    tag = uuid.uuid4().hex[:10]
    bidi_queue = f"ops.\u202eevil.{tag}"
    body = "amount: \u2066100\u2069 \u200fEUR"
    new_user, new_password, new_vhost = f"ops-user-{tag}", f"pw-{tag}", f"ops-vhost-{tag}"
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(bidi_queue, durable=True)
        channel.confirm_delivery()
        for _ in range(3):
            channel.basic_publish("", bidi_queue, body.encode(),
                                  pika.BasicProperties(delivery_mode=2, content_type="text/plain"))
    publishing = threading.Event()

    def publish_steadily() -> None:
        """Messages at a steady pace while the page waits for its rate chart to rise."""
        with amqp.pika() as connection:
            channel = connection.channel()
            queue_name = channel.queue_declare("", exclusive=True).method.queue
            while publishing.is_set():
                channel.basic_publish("", queue_name, b"tick")
                connection.sleep(0.05)

    publisher = threading.Thread(target=publish_steadily, daemon=True)

    def start_traffic() -> None:
        publishing.set()
        publisher.start()

    def stop_traffic() -> None:
        publishing.clear()
        publisher.join(10)

    def user_can_log_in() -> None:
        with amqp.pika(credentials=pika.PlainCredentials(new_user, new_password)) as connection:
            assert connection.is_open

    def user_cannot_log_in() -> None:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            amqp.pika(credentials=pika.PlainCredentials(new_user, new_password))

    def vhost_opens() -> None:
        with amqp.pika(virtual_host=new_vhost) as connection:
            connection.channel().queue_declare("in-the-new-vhost")

    checks: dict[str, Callable[[], None]] = {
        "traffic": start_traffic, "charted": stop_traffic, "user-added": user_can_log_in,
        "user-deleted": user_cannot_log_in, "vhost-added": vhost_opens,
    }
    shown = {"\u202e": "<U+202E>", "\u2066": "<U+2066>", "\u2069": "<U+2069>", "\u200f": "<U+200F>"}

    def visible(text: str) -> str:
        for control, marker in shown.items():
            text = text.replace(control, marker)
        return text

    config = {
        "mode": "operations", "url": f"http://127.0.0.1:{broker_process.http_port}",
        "user": amqp.user, "password": amqp.password, "chromium": chromium_path(),
        "screenshot": str(tmp_path / "operations.png"),
        "chartsScreenshot": str(tmp_path / "charts.png"),
        "healthScreenshot": str(tmp_path / "health.png"),
        "failureScreenshot": str(tmp_path / "failure.png"), "timeoutMs": 15000,
        "tag": tag, "bidiQueue": bidi_queue, "bidiShown": visible(bidi_queue),
        "bodyShown": visible(body), "depth": 3, "version": __version__,
        "newUser": new_user, "newPassword": new_password, "newVhost": new_vhost,
        "amqpPort": broker_process.amqp_port,
    }
    try:
        result, seen = drive(config, checks)
    finally:
        if publishing.is_set():
            stop_traffic()
        with amqp.pika() as connection:
            connection.channel().queue_delete(bidi_queue)
    assert seen == ["traffic", "charted", "user-added", "user-deleted", "vhost-added"], seen
    assert result["problems"] == []
    assert [d.split(" ")[:2] for d in result["dialogs"]] == [["Delete", "user"],
                                                             ["Delete", "virtual"]]
    for name in ("operations.png", "charts.png", "health.png"):
        width, _ = png_size((tmp_path / name).read_bytes())
        assert width == 1280
