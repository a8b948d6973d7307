"""A real DeltaMQ for the management tests, started the way a user starts it.

``deltamq serve --amqp-port N --http-port M --data-dir <tmp>`` on free ports
(the integration tests' :class:`DeltaMQProcess`), then waited for until its
HTTP port answers.  :class:`Api` is a small httpx client for
``/api/latest``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.model import SystemConfig, load_system_config
from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint
from tests.waiting import wait_until

STARTUP_TIMEOUT = 30.0
GUEST = ("guest", "guest")


def memory_broker(tmp_path: Path, name: str) -> SystemConfig:
    """A model of our own, in this process: an anonymous AMQP port and one memory virtual
    host ``vh`` (node ``node``), data under ``tmp_path``."""
    config = {"name": name, "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
              "ports": [{"name": "amqp", "port": 0, "authenticationProvider": "anon"}],
              "virtualhostnodes": [{"name": "node", "type": "memory",
                                    "virtualHostInitialConfiguration": {"name": "vh"}}]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_system_config(str(path), {"deltamq.data_dir": str(tmp_path / "data")})


def wait_for_http(process: DeltaMQProcess) -> None:
    def answering() -> bool:
        try:
            httpx.get(f"http://127.0.0.1:{process.http_port}/metrics", timeout=2)
            return True
        except httpx.TransportError:
            if not process.alive():
                raise RuntimeError(f"the broker exited before serving HTTP on {process.http_port}:\n"
                                   f"{process.log_tail()}") from None
            return False
    try:
        wait_until(answering, STARTUP_TIMEOUT, interval=0.1, what="HTTP management")
    except AssertionError:
        raise RuntimeError(f"no HTTP management on {process.http_port}:\n{process.log_tail()}") from None


class Api:
    """``/api/latest`` of one broker, as one user."""

    def __init__(self, http_port: int, auth: tuple[str, str] | None = GUEST) -> None:
        self.base = f"http://127.0.0.1:{http_port}"
        self.client = httpx.Client(base_url=self.base, auth=auth, timeout=30)

    def url(self, path: str) -> str:
        return path if path.startswith("/") else f"/api/latest/{path}"

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.client.get(self.url(path), params=params or None)

    def put(self, path: str, body: Any) -> httpx.Response:
        return self.client.put(self.url(path), json=body)

    def post(self, path: str, body: Any = None) -> httpx.Response:
        return self.client.post(self.url(path), json=body if body is not None else {})

    def delete(self, path: str, **params: Any) -> httpx.Response:
        return self.client.delete(self.url(path), params=params or None)

    def ok(self, response: httpx.Response, status: int = 200) -> Any:
        assert response.status_code == status, (response.status_code, response.text)
        return response.json() if response.content else None

    def close(self) -> None:
        self.client.close()


def start_broker(defines: Mapping[str, str] | None = None) -> DeltaMQProcess:
    """`deltamq serve` (``defines``: ``-D name=value`` options), once its HTTP port answers."""
    process = DeltaMQProcess(defines)
    process.start()
    try:
        wait_for_http(process)
    except BaseException:
        process.stop()
        raise
    return process


@pytest.fixture(scope="session")
def broker_process() -> Iterator[DeltaMQProcess]:
    process = start_broker()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def amqp(broker_process: DeltaMQProcess) -> BrokerEndpoint:
    return BrokerEndpoint(host="127.0.0.1", port=broker_process.amqp_port)


@pytest.fixture
def api(broker_process: DeltaMQProcess) -> Iterator[Api]:
    client = Api(broker_process.http_port)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _broker_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the shared broker, insist it still runs."""
    yield
    if "broker_process" in request.fixturenames:
        process: DeltaMQProcess = request.getfixturevalue("broker_process")
        assert process.alive(), f"the broker died:\n{process.log_tail()}"
