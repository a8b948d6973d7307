"""Ports, the start-up log and ``deltamq serve --help`` advertise only implemented protocols.

The engine registry decides what is implemented (AMQP 0-8, 0-9, 0-9-1 and 1.0
today).  A configuration naming another (0-10) refuses the start with one line;
a client sending such a header is answered with the 0-9-1 header; pika
connects as always, and a 1.0 client on the same socket.  Each test starts real ``deltamq serve`` processes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from .conftest import REPO, DeltaMQProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

IMPLEMENTED = "AMQP_0_8, AMQP_0_9, AMQP_0_9_1, AMQP_1_0"
HEADER_0_9_1 = b"AMQP\x00\x00\x09\x01"


def _run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def _config(tmp_path: Path, protocols: object) -> Path:
    """The embedded default configuration with the AMQP port's ``protocols`` replaced."""
    config = json.loads((REPO / "conf" / "config.json").read_text(encoding="utf-8"))
    [amqp] = [p for p in config["ports"] if p["name"] == "AMQP"]
    amqp["protocols"] = protocols
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_serve_help_names_only_implemented_versions() -> None:
    done = _run(["serve", "--help"])
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "listens for AMQP 0-8, 0-9, 0-9-1, 1.0 on 5672" in text
    assert "0-10" not in text


def test_the_start_up_log_lists_only_implemented_protocols_and_pika_connects() -> None:
    with DeltaMQProcess() as broker:
        log = broker.log_tail()
        listening = [line for line in log.splitlines() if "AMQP port 'AMQP' listening" in line]
        assert listening and listening[0].endswith(f"({IMPLEMENTED})"), log
        assert "AMQP_0_10" not in log
        params = pika.ConnectionParameters("127.0.0.1", broker.amqp_port)
        with pika.BlockingConnection(params) as connection:
            assert connection.is_open
        with socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=10) as raw:
            raw.sendall(b"AMQP\x01\x01\x00\x0a")            # 0-10: not implemented
            answer = b""
            while chunk := raw.recv(64):
                answer += chunk
            assert answer == HEADER_0_9_1
        with socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=10) as raw:
            raw.sendall(b"AMQP\x03\x01\x00\x00")            # 1.0 SASL: served on the same socket
            assert raw.recv(8) == b"AMQP\x03\x01\x00\x00"


@pytest.mark.parametrize(("protocols", "defines", "named"), [
    (["AMQP_0_9_1", "AMQP_0_10"], [], "names AMQP_0_10, which is not implemented"),
    (["AMQP_0_10"], [], "names AMQP_0_10, which is not implemented"),
    ("${test.protocols}", ["-D", 'test.protocols=["AMQP_1_0", "AMQP_0_10"]'],
     "names AMQP_0_10, which is not implemented"),
], ids=["file-0-9-1-and-0-10", "file-0-10", "context-variable"])
def test_a_port_configured_with_an_unimplemented_protocol_refuses_the_start(
        tmp_path: Path, protocols: object, defines: list[str], named: str) -> None:
    config = _config(tmp_path, protocols)
    done = _run(["serve", "--config", str(config), "--store-type", "memory", "--amqp-port", "0",
                 "--http-port", "0", "--data-dir", str(tmp_path / "data"), *defines])
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Traceback" not in output
    assert f"Port 'AMQP': attribute 'protocols' {named}; this broker implements {IMPLEMENTED}" in output
