"""Clients in other languages, unmodified: Node's amqplib (from npm).

The client's own package manager installs it into this directory's
node_modules (npm is part of the machine set-up; nothing is installed by hand).
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
