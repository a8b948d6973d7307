"""REST values as Broker-J gives them: times in milliseconds since the epoch, durations in
milliseconds, booleans as JSON booleans (never "true"/"false" strings)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.support import BrokerEndpoint

from .conftest import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def walk(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair of a JSON document, nested ones included."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield name, item
            yield from walk(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item, key)


def test_every_time_is_integer_epoch_milliseconds_and_no_boolean_is_text(
        api: Api, amqp: BrokerEndpoint) -> None:
    queue = f"mgmt.times.{uuid.uuid4().hex[:8]}"
    before = int(time.time() * 1000)
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.basic_consume(queue, lambda *args: None)
        channel.basic_publish("", queue, b"x")
        after = int(time.time() * 1000)
        documents = [api.ok(api.get("broker", depth=10)), api.ok(api.get("connection", depth=2)),
                     api.ok(api.get(f"queue/default/default/{queue}", depth=1)),
                     api.ok(api.get("virtualhost/default/default/getConnections"))]
    times = [(key, item) for document in documents for key, item in walk(document)
             if key.endswith("Time")]
    assert {key for key, _ in times} >= {"createdTime"}
    for key, item in times:
        assert type(item) is int and 10**12 < item < 10**14, (key, item)
    connection_created = [c["createdTime"] for c in documents[3]]
    assert any(before - 1000 <= created <= after + 1000 for created in connection_created)
    queue_shown = documents[2]
    assert before - 1000 <= queue_shown["createdTime"] <= after + 1000
    assert before - 1000 <= queue_shown["consumers"][0]["createdTime"] <= after + 1000
    texts = [(key, item) for document in documents for key, item in walk(document)
             if isinstance(item, str) and item.lower() in ("true", "false")]
    assert texts == []
    assert queue_shown["durable"] is False and queue_shown["exclusive"] is False


def process_age(pid: int) -> float:
    """Seconds since process ``pid`` started (proc(5): stat's starttime, uptime)."""
    with open(f"/proc/{pid}/stat") as stat:
        started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as uptime:
        return float(uptime.read().split()[0]) - started


def test_uptime_is_integer_milliseconds(api: Api) -> None:
    statistics = api.ok(api.get("broker"))["statistics"]
    age = process_age(statistics["processPid"])
    uptime = statistics["uptime"]
    assert type(uptime) is int
    # the broker counts from when its model was built, a little after the process began
    assert (age - 30) * 1000 < uptime <= (age + 1) * 1000, (uptime, age)
