"""The console's replay form in a real browser (the browser script's ``replay`` mode).

As the other console tests: Debian's headless Chromium driven by playwright-core
(``tests/browser/console-check.mjs``), a broker started as a user starts it, and at each
checkpoint pika checks what the page did.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pika
import pytest
from deltalake import DeltaTable

from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint

from .test_console_browser import chromium_path, drive, png_size, require_browser_tools
from .test_replay import consume_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def bodies_and_headers(amqp: BrokerEndpoint, queue: str) -> list[tuple[bytes, dict[str, object]]]:
    return [(body, dict(properties.headers or {})) for _, properties, body in consume_all(amqp, queue)]


@pytest.mark.slow
def test_console_replays_a_queue_by_time_and_by_version(
        broker_process: DeltaMQProcess, amqp: BrokerEndpoint, tmp_path: Path) -> None:
    require_browser_tools()
    tag = uuid.uuid4().hex[:10]
    queue, target, routed, key = (f"replay.src.{tag}", f"replay.dst.{tag}",
                                  f"replay.routed.{tag}", f"replay.key.{tag}")
    journal = str(broker_process.dir / "data" / "default" / "journal")
    with amqp.pika() as connection:
        channel = connection.channel()
        for name in (queue, target, routed):
            channel.queue_declare(name, durable=True)
        channel.queue_bind(routed, "amq.direct", key)
        channel.confirm_delivery()
        persistent = pika.BasicProperties(delivery_mode=2, headers={"tag": tag})
        channel.basic_publish("", queue, b"before", persistent)
        start = datetime.now(timezone.utc).isoformat()
        channel.basic_publish("", queue, b"first", persistent)
        channel.basic_publish("", queue, b"second", persistent)
        end = datetime.now(timezone.utc).isoformat()
        version = int(DeltaTable(journal).version())
        channel.basic_publish("", queue, b"last", persistent)
        while channel.basic_get(queue, auto_ack=True)[0] is not None:
            pass                                # all consumed: the history is what is replayed

    def replayed_by_time() -> None:
        got = bodies_and_headers(amqp, target)
        assert [body for body, _ in got] == [b"first", b"second"], got
        assert all(h["x-replayed-from"] == queue and h["tag"] == tag for _, h in got), got

    def replayed_by_version() -> None:
        got = bodies_and_headers(amqp, routed)
        assert [body for body, _ in got] == [b"last"], got

    checks: dict[str, Callable[[], None]] = {"replayed-by-time": replayed_by_time,
                                             "replayed-by-version": replayed_by_version}
    config = {
        "mode": "replay", "url": f"http://127.0.0.1:{broker_process.http_port}",
        "user": amqp.user, "password": amqp.password, "chromium": chromium_path(),
        "screenshot": str(tmp_path / "replay.png"),
        "failureScreenshot": str(tmp_path / "failure.png"), "timeoutMs": 15000,
        "queue": queue, "target": target, "fromTime": start, "toTime": end, "expected": 2,
        "fromVersion": version + 1, "exchange": "amq.direct", "routingKey": key,
        "expectedByVersion": 1,
    }
    result, seen = drive(config, checks)
    assert seen == ["replayed-by-time", "replayed-by-version"], seen
    assert result["problems"] == []
    width, _ = png_size((tmp_path / "replay.png").read_bytes())
    assert width == 1280
