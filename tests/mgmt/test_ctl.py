"""``deltamq --version``, ``status``, ``list`` and ``purge`` against a running broker, as a
user runs them: the ``deltamq`` command in a subprocess, talking to the broker's REST API."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pika
import pytest

from broker import __version__
from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]


def deltamq(*argv: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    for variable in ("DELTAMQ_MANAGEMENT_URL", "DELTAMQ_USER", "DELTAMQ_PASSWORD"):
        env.pop(variable, None)
    extra = ["--url", url] if url is not None else []
    return subprocess.run([sys.executable, "-m", "broker.cli", *argv, *extra], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def url(broker_process: DeltaMQProcess) -> str:
    return f"http://127.0.0.1:{broker_process.http_port}"


def rows(output: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in output.splitlines()]


def test_version() -> None:
    done = deltamq("--version")
    assert done.returncode == 0 and done.stdout == f"deltamq {__version__}\n"


def test_status_names_version_uptime_memory_listeners_and_connections(
        url: str, broker_process: DeltaMQProcess, amqp: BrokerEndpoint) -> None:
    with amqp.pika():
        done = deltamq("status", url=url)
    assert done.returncode == 0, done.stderr
    fields = dict(line.split(":", 1) for line in done.stdout.splitlines())
    fields = {key: value.strip() for key, value in fields.items()}
    assert fields["Broker"] == f"deltamq (DeltaMQ {__version__})"
    assert re.fullmatch(r"(\d+d )?\d+h \d\dm \d\ds", fields["Uptime"])
    assert re.fullmatch(r"[0-9.]+ MiB resident", fields["Memory"])
    assert re.fullmatch(r"\d+ open of \d+", fields["Descriptors"])
    assert fields["Alarms"] == "none"
    assert f"AMQP (AMQP) on *:{broker_process.amqp_port}" in fields["Listeners"]
    assert f"HTTP (HTTP) on *:{broker_process.http_port}" in fields["Listeners"]
    assert int(fields["Connections"]) >= 1
    assert fields["Virtual hosts"] == "default"


def test_list_queues_with_chosen_columns_and_visible_bidi_controls(
        url: str, amqp: BrokerEndpoint) -> None:
    queue = f"ctl.\u202eevil.{uuid.uuid4().hex[:8]}"
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        for _ in range(3):
            channel.basic_publish("", queue, b"abc")
        default = deltamq("list", "queues", url=url)
        chosen = deltamq("list", "queues", "name", "messages_ready", "durable", "consumers",
                         "--vhost", "/", url=url)
        channel.queue_delete(queue)
    shown = queue.replace("\u202e", "<U+202E>")
    assert default.returncode == 0, default.stderr
    assert rows(default.stdout)[0] == ["name", "messages"]
    assert [shown, "3"] in rows(default.stdout)
    assert "\u202e" not in default.stdout
    assert rows(chosen.stdout)[0] == ["name", "messages_ready", "durable", "consumers"]
    assert [shown, "3", "true", "0"] in rows(chosen.stdout)


def test_list_connections_exchanges_consumers_users_and_vhosts(
        url: str, amqp: BrokerEndpoint) -> None:
    queue = f"ctl.consumed.{uuid.uuid4().hex[:8]}"
    with amqp.pika(client_properties={"product": "ctl-test"}) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, exclusive=True)
        tag = channel.basic_consume(queue, lambda *args: None)
        connections = deltamq("list", "connections", "name", "user", "client", url=url)
        consumers = deltamq("list", "consumers", url=url)
    exchanges = deltamq("list", "exchanges", url=url)
    users = deltamq("list", "users", "name", url=url)
    vhosts = deltamq("list", "vhosts", "name", "state", "--no-headers", url=url)
    assert any(re.fullmatch(r"\[\d+\] 127\.0\.0\.1:\d+", row[0])
               and row[1:] == ["guest", "ctl-test"]
               for row in rows(connections.stdout)), connections.stdout
    assert any(row[:2] == [queue, tag] and row[-1] == "true" for row in rows(consumers.stdout)), \
        consumers.stdout
    assert ["amq.topic", "topic"] in rows(exchanges.stdout)
    assert ["guest"] in rows(users.stdout)
    assert rows(vhosts.stdout) == [["default", "ACTIVE"]]


def test_purge_removes_ready_messages(url: str, amqp: BrokerEndpoint) -> None:
    queue = f"ctl.purged.{uuid.uuid4().hex[:8]}"
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.confirm_delivery()
        for _ in range(4):
            channel.basic_publish("", queue, b"x", pika.BasicProperties(delivery_mode=2))
        done = deltamq("purge", queue, url=url)
        left = channel.queue_declare(queue, passive=True).method.message_count
        missing = deltamq("purge", queue + ".nope", url=url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"purged 4 messages from queue '{queue}' in virtual host 'default'\n"
    assert left == 0
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and "not found" in missing.stderr


def test_unknown_column_is_refused_naming_the_known_ones(url: str) -> None:
    done = deltamq("list", "queues", "name", "bogus", url=url)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("deltamq: error: unknown column for queues: bogus; known: name,")


def test_an_unreachable_broker_is_one_line_and_exit_69() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    done = deltamq("status", url=f"http://127.0.0.1:{port}")          # nobody listens there
    assert done.returncode == 69 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"deltamq: error: cannot reach the broker's management at"
                                  f" http://127.0.0.1:{port}")
    assert "Traceback" not in done.stderr


def test_wrong_credentials_are_one_line_and_exit_77(url: str) -> None:
    done = deltamq("list", "queues", "--password", "wrong", url=url)
    assert done.returncode == 77 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "refused user 'guest'" in done.stderr


def test_credentials_in_the_url(broker_process: DeltaMQProcess) -> None:
    good = deltamq("list", "vhosts", "name",
                   url=f"http://guest:guest@127.0.0.1:{broker_process.http_port}/")
    bad = deltamq("list", "vhosts", url=f"http://guest:nope@127.0.0.1:{broker_process.http_port}")
    assert good.returncode == 0 and rows(good.stdout) == [["name"], ["default"]]
    assert bad.returncode == 77
