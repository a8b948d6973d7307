"""The broker the integration tests talk to.

By default a real DeltaMQ is started the way a user starts it::

    <venv>/bin/deltamq serve --amqp-port N --http-port M --data-dir <tmp>

(``python -m broker.cli serve ...`` if the console script is not installed),
on free ports, and stopped at the end of the session.

``DELTAMQ_TEST_AMQP_URL=amqp://guest:guest@host:port/`` points the very same
tests at an external broker instead — RabbitMQ, to prove the tests encode real
broker semantics rather than DeltaMQ's.  ``DELTAMQ_TEST_START_RABBITMQ=1``
starts a private RabbitMQ node for the session (``bench.rabbitmq``) and does
the same.

Tests marked ``deltamq_only`` exercise Broker-J extensions that RabbitMQ does
not have; they are skipped when the broker under test says it is RabbitMQ.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
from pamqp import commands

from tests.waiting import wait_until

from .support import PROTOCOL_HEADER_0_9_1, BrokerEndpoint, RawAMQP

REPO = Path(__file__).resolve().parents[2]
URL_ENV = "DELTAMQ_TEST_AMQP_URL"
START_RABBITMQ_ENV = "DELTAMQ_TEST_START_RABBITMQ"
STARTUP_TIMEOUT = 30.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "deltamq_only: a DeltaMQ (Broker-J) extension; skipped against RabbitMQ")


# -- the broker process ---------------------------------------------------------

_HANDED_OUT: set[int] = set()


def _free_port() -> int:
    """A free loopback port never handed out before in this test run: the kernel may give a
    port just released to the next bind, so two calls in a row could otherwise agree."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _serve_command() -> list[str]:
    script = Path(sys.executable).with_name("deltamq")
    if script.exists():
        return [str(script), "serve"]
    return [sys.executable, "-m", "broker.cli", "serve"]


class DeltaMQProcess:
    """`deltamq serve` as a child process with its output captured to a file; ``defines``
    become ``-D name=value`` options (context variables)."""

    def __init__(self, defines: Mapping[str, str] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="deltamq-it-"))
        self.amqp_port = _free_port()
        self.http_port = _free_port()
        self.log_path = self.dir / "broker.log"
        self.command = _serve_command() + [
            "--amqp-port", str(self.amqp_port), "--http-port", str(self.http_port),
            "--data-dir", str(self.dir / "data")]
        for name, value in (defines or {}).items():
            self.command += ["-D", f"{name}={value}"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            wait_until(self._accepting, STARTUP_TIMEOUT, interval=0.1, what="AMQP connections")
        except AssertionError:
            self.stop()
            raise RuntimeError(f"`{' '.join(self.command)}` did not accept AMQP connections on "
                               f"{self.amqp_port} within {STARTUP_TIMEOUT}s:\n{self.log_tail()}") from None

    def _accepting(self) -> bool:
        """True once the broker accepts on its AMQP port; raises if it exited first."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"`{' '.join(self.command)}` exited with {self.proc.returncode}"
                               f" before accepting connections:\n{self.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", self.amqp_port), timeout=1):
                return True
        except OSError:
            return False

    def __enter__(self) -> DeltaMQProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int, limit: int = 20000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return ""
        text = data.decode(errors="replace")
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def log_tail(self, limit: int = 8000) -> str:
        return self.log_since(max(0, self.log_size() - limit), limit)

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Stop the broker with ``sig`` (its data directory kept) and start it again."""
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)
        self.proc.wait(timeout=30)
        self.start()

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)  # its own session: the broker and its children
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(self.dir, ignore_errors=True)


def _server_properties(ep: BrokerEndpoint) -> dict[str, Any]:
    """connection.start's server-properties, read over a bare socket."""
    with RawAMQP(ep.host, ep.port, timeout=10) as raw:
        raw.send(PROTOCOL_HEADER_0_9_1)
        start = raw.expect(commands.Connection.Start)
        return dict(start.server_properties or {})


def _describe(ep: BrokerEndpoint, external: bool) -> BrokerEndpoint:
    try:
        props = _server_properties(ep)
    except Exception as e:  # noqa: BLE001 - a broken broker is reported by the tests
        props = {"error": repr(e)}

    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v or "")

    return BrokerEndpoint(host=ep.host, port=ep.port, user=ep.user, password=ep.password,
                          vhost=ep.vhost, external=external, product=text(props.get("product")),
                          version=text(props.get("version")), server_properties=props)


@pytest.fixture(scope="session")
def broker_process() -> Iterator[DeltaMQProcess | None]:
    """The DeltaMQ child process, or None when the tests use an external broker."""
    if os.environ.get(URL_ENV) or os.environ.get(START_RABBITMQ_ENV):
        yield None
        return
    proc = DeltaMQProcess()
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()


_UNDER_TEST = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    described = config.stash.get(_UNDER_TEST, None)
    if described:
        terminalreporter.write_line(f"integration tests ran against {described}")


def _note(config: pytest.Config, ep: BrokerEndpoint, how: str) -> BrokerEndpoint:
    config.stash[_UNDER_TEST] = (f"{ep.product or 'an unidentified broker'} {ep.version} at "
                                 f"{ep.host}:{ep.port} ({how})")
    return ep


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest,
           broker_process: DeltaMQProcess | None) -> Iterator[BrokerEndpoint]:
    """Host, port, credentials and URL of the broker under test."""
    config = request.config
    url = os.environ.get(URL_ENV)
    if url:
        yield _note(config, _describe(BrokerEndpoint.from_url(url), external=True),
                    f"external, {URL_ENV}")
        return
    if os.environ.get(START_RABBITMQ_ENV):
        sys.path.insert(0, str(REPO))
        from bench.rabbitmq import RabbitMQ  # the benchmark's private-node launcher

        node = RabbitMQ(port=_free_port(), log=lambda *a: None)
        node.start()
        try:
            yield _note(config, _describe(BrokerEndpoint(host=node.host, port=node.port),
                                          external=True), "private node for this run")
        finally:
            node.stop()
        return
    assert broker_process is not None
    yield _note(config, _describe(BrokerEndpoint(host="127.0.0.1", port=broker_process.amqp_port),
                                  external=False), "`" + " ".join(broker_process.command) + "`")


# -- clients of the session broker (one per test) ---------------------------------

@pytest.fixture
def anyio_backend() -> str:
    """The async tests run on asyncio: aio-pika and aiormq need it."""
    return "asyncio"


@pytest.fixture
def conn(broker: BrokerEndpoint) -> Iterator[Any]:
    """A pika BlockingConnection, closed after the test."""
    with broker.pika() as connection:
        yield connection


@pytest.fixture
def ch(conn: Any) -> Any:
    """A channel of :func:`conn`."""
    return conn.channel()


@pytest.fixture
async def aio_conn(broker: BrokerEndpoint) -> AsyncIterator[Any]:
    """An aio-pika connection, closed after the test."""
    import aio_pika

    connection = await aio_pika.connect(broker.url(), timeout=15)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
def kombu_conn(broker: BrokerEndpoint) -> Iterator[Any]:
    """A connected kombu Connection (py-amqp transport), released after the test."""
    with broker.kombu() as connection:
        connection.connect()
        yield connection


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"_report_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def _broker_health(request: pytest.FixtureRequest, broker: BrokerEndpoint,
                   broker_process: DeltaMQProcess | None) -> Iterator[None]:
    """Skip Broker-J-only tests on RabbitMQ; after each test, insist the broker still
    runs, and attach what it logged during a failed test to the report."""
    if request.node.get_closest_marker("deltamq_only") and broker.is_rabbitmq:
        pytest.skip("DeltaMQ/Broker-J extension: RabbitMQ does not implement it")
    offset = broker_process.log_size() if broker_process else 0
    yield
    if broker_process is None:
        return
    call = getattr(request.node, "_report_call", None)
    if call is not None and call.failed:
        request.node.add_report_section("call", "deltamq log", broker_process.log_since(offset))
    if not broker_process.alive():
        code = broker_process.proc.returncode if broker_process.proc else None
        pytest.fail(f"the broker died during this test (exit {code}):\n"
                    f"{broker_process.log_since(offset)}", pytrace=False)
