"""The broker's configuration store: what management does at broker level survives restarts.

Each test starts a broker of its own (``deltamq serve`` over a temporary data
directory), changes it over REST, stops it (SIGTERM, or SIGKILL where the
test is about crash safety) and starts it again over the same data
directory on fresh ports -- so ``--amqp-port``/``--http-port`` must still
apply to a configuration recovered from the store.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from broker.model.system_config import REPOSITORY_CONFIG
from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint

from .conftest import Api, wait_for_http
from .test_ports_live import create_port, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SEEDED = "was empty: seeded from"
RECOVERED = "configuration recovered from the broker's configuration store"


def free_ports() -> tuple[int, int]:
    """Two distinct free loopback ports (two binds in a row may be given the same one)."""
    with socket.socket() as first, socket.socket() as second:
        first.bind(("127.0.0.1", 0))
        second.bind(("127.0.0.1", 0))
        return int(first.getsockname()[1]), int(second.getsockname()[1])


def default_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(REPOSITORY_CONFIG.read_text(encoding="utf-8"))
    return config


def with_spare_provider(name: str = "spare") -> dict[str, Any]:
    """The default configuration plus an Anonymous provider no port uses."""
    config = default_config()
    config["authenticationproviders"].append({"name": name, "type": "Anonymous"})
    return config


class Broker:
    """One broker process over one data directory, restarted at will."""

    def __init__(self, *options: str, config: dict[str, Any] | None = None) -> None:
        self.process = DeltaMQProcess()
        self.base = list(self.process.command)
        self.config_count = 0
        self.options = self._options(config, options)
        self.process.command = self.base + self.options
        self.logs: list[str] = []
        self.api = self._start()

    def _options(self, config: dict[str, Any] | None, options: tuple[str, ...]) -> list[str]:
        if config is None:
            return list(options)
        self.config_count += 1
        path = self.process.dir / f"config-{self.config_count}.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        return ["--config", str(path), *options]

    @property
    def data_dir(self) -> Path:
        return self.process.dir / "data"

    @property
    def amqp(self) -> BrokerEndpoint:
        return BrokerEndpoint(host="127.0.0.1", port=self.process.amqp_port)

    def _start(self) -> Api:
        try:
            self.process.start()
            wait_for_http(self.process)
        except BaseException:
            self.process.stop()
            raise
        return Api(self.process.http_port)

    def log(self) -> str:
        return self.process.log_since(0, limit=200_000)

    def restart(self, *options: str, config: dict[str, Any] | None = None,
                kill: signal.Signals = signal.SIGTERM) -> None:
        """Stop (keeping the data), then start on new ports with these options."""
        self.api.close()
        proc = self.process.proc
        assert proc is not None
        self.logs.append(self.log())
        os.killpg(proc.pid, kill)
        proc.wait(timeout=20)
        self.process.amqp_port, self.process.http_port = free_ports()
        base = self.base
        for option, value in (("--amqp-port", self.process.amqp_port),
                              ("--http-port", self.process.http_port)):
            base[base.index(option) + 1] = str(value)
        self.process.command = base + self._options(config, options)
        self.api = self._start()

    def stop(self) -> None:
        self.api.close()
        self.process.stop()


@pytest.fixture
def started() -> Iterator[list[Broker]]:
    """Brokers a test starts, stopped (and their directories removed) afterwards."""
    brokers: list[Broker] = []
    yield brokers
    for broker in brokers:
        broker.stop()


def start(started: list[Broker], *options: str, config: dict[str, Any] | None = None) -> Broker:
    broker = Broker(*options, config=config)
    started.append(broker)
    return broker


def test_first_start_seeds_the_store_and_later_starts_use_it(started: list[Broker]) -> None:
    broker = start(started)
    assert SEEDED in broker.log() and "the default configuration (conf/config.json)" in broker.log()
    assert (broker.data_dir / "broker" / "config" / "_delta_log").is_dir()
    broker.restart()
    assert RECOVERED in broker.log() and SEEDED not in broker.log()
    # stored as given: the new --amqp-port and --http-port apply
    ports = {p["name"]: p for p in broker.api.ok(broker.api.get("port"))}
    assert ports["AMQP"]["boundPort"] == broker.process.amqp_port
    assert ports["HTTP"]["boundPort"] == broker.process.http_port
    with broker.amqp.pika() as connection:
        assert connection.is_open


def test_a_node_created_over_rest_survives_sigkill_with_its_persistent_messages(
        started: list[Broker]) -> None:
    broker = start(started)
    node, queue = unique("node"), unique("q")
    broker.api.ok(broker.api.put(f"virtualhostnode/{node}", {"type": "delta"}), 201)
    bodies = [f"message {i}".encode() for i in range(5)]
    with broker.amqp.pika(virtual_host=node) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    broker.restart(kill=signal.SIGKILL)
    shown = broker.api.ok(broker.api.get(f"virtualhostnode/{node}"))
    assert shown["state"] == "ACTIVE" and shown["type"] == "delta"
    vhost = broker.api.ok(broker.api.get(f"virtualhost/{node}/{node}"))
    assert vhost["state"] == "ACTIVE"
    got: list[bytes] = []
    with broker.amqp.pika(virtual_host=node) as connection:
        channel = connection.channel()
        while True:
            method, _, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                break
            got.append(body)
    assert got == bodies


def test_what_rest_deletes_or_changes_at_broker_level_stays_so_after_a_restart(
        started: list[Broker]) -> None:
    broker = start(started, config=with_spare_provider())
    api = broker.api
    api.ok(api.put("authenticationprovider/extra", {"type": "Anonymous"}), 201)
    port = unique("amqp")
    create_port(api, port, authenticationProvider="extra")
    api.ok(api.put("broker", {"description": "changed over REST",
                              "context": {"set.over": "rest"}}))
    broker.restart()
    api = broker.api
    assert api.ok(api.get("authenticationprovider/extra"))["type"] == "Anonymous"
    assert api.ok(api.get(f"port/{port}"))["authenticationProvider"] == "extra"
    shown = api.ok(api.get("broker"))
    assert shown["description"] == "changed over REST"
    assert shown["context"] == {"set.over": "rest"}

    api.ok(api.delete(f"port/{port}"))
    api.ok(api.delete("authenticationprovider/extra"))
    api.ok(api.delete("authenticationprovider/spare"))      # one from the file
    api.ok(api.delete("virtualhostnode/default"))           # and the file's node
    broker.restart(kill=signal.SIGKILL)
    api = broker.api
    for path in (f"port/{port}", "authenticationprovider/extra",
                 "authenticationprovider/spare", "virtualhostnode/default"):
        api.ok(api.get(path), 404)
    assert api.ok(api.get("broker"))["description"] == "changed over REST"


def test_overwrite_config_reseeds_the_store_from_the_file_and_keeps_node_data(
        started: list[Broker]) -> None:
    broker = start(started)
    api, port, queue = broker.api, unique("amqp"), unique("q")
    create_port(api, port)
    with broker.amqp.pika() as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        channel.basic_publish("", queue, b"kept", pika.BasicProperties(delivery_mode=2))

    # a different file alone changes nothing: the store is the configuration
    broker.restart(config=with_spare_provider())
    broker.api.ok(broker.api.get(f"port/{port}"))
    broker.api.ok(broker.api.get("authenticationprovider/spare"), 404)

    broker.restart("--overwrite-config", config=with_spare_provider())
    assert "overwritten from" in broker.log()
    api = broker.api
    api.ok(api.get(f"port/{port}"), 404)                    # made over REST: gone
    assert api.ok(api.get("authenticationprovider/spare"))["type"] == "Anonymous"
    with broker.amqp.pika() as connection:                  # the node's own data is kept
        method, _, body = connection.channel().basic_get(queue, auto_ack=True)
        assert body == b"kept"

    broker.restart()                                        # the default file again, no overwrite
    assert RECOVERED in broker.log()
    broker.api.ok(broker.api.get("authenticationprovider/spare"))


def test_store_type_memory_reads_the_file_at_every_start(started: list[Broker]) -> None:
    broker = start(started, "--store-type", "memory")
    assert "(in memory)" in broker.log()
    port = unique("amqp")
    create_port(broker.api, port)
    broker.restart("--store-type", "memory")
    broker.api.ok(broker.api.get(f"port/{port}"), 404)
    assert not (broker.data_dir / "broker").exists()
    assert broker.api.ok(broker.api.get("virtualhost/default/default"))["state"] == "ACTIVE"


def test_a_node_whose_store_path_is_the_broker_store_is_refused(api: Api) -> None:
    response = api.put("virtualhostnode/broker", {"type": "delta"})
    assert response.status_code == 422, response.text
    message = response.json()["errorMessage"]
    assert "VirtualHostNode 'broker': attribute 'storePath'" in message
    assert "the broker's configuration store" in message
    api.ok(api.get("virtualhostnode/broker"), 404)
    # a memory node keeps nothing there: the name alone is no clash
    api.ok(api.put("virtualhostnode/broker", {"type": "memory"}), 201)
    api.ok(api.delete("virtualhostnode/broker"))
