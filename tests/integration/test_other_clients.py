"""Clients in other languages, unmodified: Node's amqplib (from npm) and the
RabbitMQ Java client (from Maven Central).

Each client's own package manager fetches it — npm into clients/node/node_modules,
Maven into ~/.m2 — so nothing is installed by hand (Node.js, npm, a JDK and Maven
are part of the documented machine set-up).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .support import BrokerEndpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NODE_DIR = Path(__file__).parent / "clients" / "node"
JAVA_DIR = Path(__file__).parent / "clients" / "java"
JAVA_ARTIFACTS = [("com.rabbitmq", "amqp-client", "5.21.0"), ("org.slf4j", "slf4j-api", "1.7.36")]


@pytest.fixture(scope="module")
def amqplib() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("Node.js and npm are part of the documented machine set-up, but are missing")
    if not (NODE_DIR / "node_modules" / "amqplib").exists():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=NODE_DIR, check=True, timeout=240)
    return NODE_DIR


def test_node_amqplib(amqplib: Path, broker: BrokerEndpoint) -> None:
    url = f"amqp://{broker.user}:{broker.password}@{broker.host}:{broker.port}/"
    out = subprocess.run(["node", "check.js", url], cwd=amqplib, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["count"] == 100 and seen["bodiesInOrder"] is True
    assert seen["returned"] == "NO_ROUTE"
    assert seen["passiveMissing"] == 404 and seen["stillUsable"] is True


@pytest.fixture(scope="module")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is part of the documented machine set-up, but is missing")
    repo = Path.home() / ".m2" / "repository"
    jars = []
    for group, artifact, version in JAVA_ARTIFACTS:
        jar = repo.joinpath(*group.split("."), artifact, version, f"{artifact}-{version}.jar")
        if not jar.exists():
            subprocess.run(["mvn", "-q", "dependency:get", f"-Dartifact={group}:{artifact}:{version}"],
                           check=True, timeout=240)
        jars.append(str(jar))
    build = tmp_path_factory.mktemp("java-client")
    subprocess.run(["javac", "-cp", ":".join(jars), "-d", str(build), str(JAVA_DIR / "Check.java")],
                   check=True, timeout=120)
    return ["java", "-cp", ":".join([str(build), *jars]), "Check"]


def test_rabbitmq_java_client(java_client: list[str], broker: BrokerEndpoint) -> None:
    url = f"amqp://{broker.user}:{broker.password}@{broker.host}:{broker.port}/%2F"
    out = subprocess.run([*java_client, url], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["confirmed"] is True and seen["allDelivered"] is True
    assert seen["highFirst"] is True
    assert seen["returned"] == "NO_ROUTE"
    assert seen["passiveMissing"] == 404 and seen["stillUsable"] is True


def test_node_amqplib_close_with_publishes_still_queued(amqplib: Path, broker: BrokerEndpoint) -> None:
    """amqplib's close goes out before a channel's queued publishes: after close-ok the
    broker must read on until the client closes, or amqplib meets EPIPE and its close
    never completes (RabbitMQ reads on too)."""
    url = f"amqp://{broker.user}:{broker.password}@{broker.host}:{broker.port}/"
    out = subprocess.run(["node", "close_with_queued_publishes.js", url, "300", "65536"],
                         cwd=amqplib, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["publishesBuffered"] > 0                 # the scenario happened
    assert seen["errors"] == [] and seen["closeResolved"] is True
    assert seen["closeEventError"] is None
