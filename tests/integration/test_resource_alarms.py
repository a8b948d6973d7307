"""The memory and disk alarms, as a publisher meets them (issue 10, items 2 and 3).

The memory alarm used to compare the process's RSS, which does not shrink:
drained queues left publishers blocked for minutes.  It now accounts what the
broker holds (queued bytes, buffers) and clears once that falls; a disk alarm
blocks publishers before the data directory's file system fills.  Both are
seen by pika as connection.blocked / connection.unblocked, and by management
as the broker's statistics.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from tests.mgmt.conftest import start_broker, wait_for_http

from .conftest import DeltaMQProcess
from .support import Publisher, tmpfs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

WATERMARK = 300_000
BODY = 10_000
COUNT = 40                                 # 400 KB of bodies: past the watermark


def _statistics(proc: DeltaMQProcess) -> dict[str, Any]:
    answer = httpx.get(f"http://127.0.0.1:{proc.http_port}/api/latest/broker",
                       auth=("guest", "guest"), timeout=30)
    assert answer.status_code == 200, answer.text
    statistics: dict[str, Any] = answer.json()["statistics"]
    return statistics


def _alarm_lines(proc: DeltaMQProcess, resource: str) -> list[str]:
    return [line.split(f"{resource} alarm ", 1)[1].split(":")[0]
            for line in proc.log_tail(100_000).splitlines() if f" {resource} alarm " in line]


@pytest.fixture
def low_watermark() -> Iterator[DeltaMQProcess]:
    proc = start_broker({"deltamq.memory_high_watermark": f"{WATERMARK}"})
    yield proc
    proc.stop()


def test_memory_alarm_is_set_by_queued_messages_and_clears_when_they_are_consumed(
        low_watermark: DeltaMQProcess) -> None:
    idle = _statistics(low_watermark)
    assert idle["memoryAlarm"] is False and idle["memoryUsed"] < WATERMARK
    assert idle["residentMemorySize"] > idle["memoryUsed"]
    publisher = Publisher(low_watermark)
    queue = publisher.channel.queue_declare("", exclusive=False, auto_delete=False).method.queue
    for n in range(COUNT):
        publisher.channel.basic_publish("", queue, bytes([n]) * BODY)
    publisher.wait_for("blocked: low on memory")
    alarmed = _statistics(low_watermark)
    assert alarmed["memoryAlarm"] is True and alarmed["memoryUsed"] > WATERMARK
    assert alarmed["diskAlarm"] is False

    # a consumer (never blocked) drains the queue; the alarm clears by itself
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1",
                                                                 low_watermark.amqp_port))
    cch = consumer.channel()
    received: list[bytes] = []

    def consume() -> bool:
        while (got := cch.basic_get(queue, auto_ack=True))[0] is not None:
            received.append(got[2])
        return len(received) == COUNT    # publishes held while blocked come once unblocked
    publisher.wait_for("unblocked", timeout=15, meanwhile=consume)
    assert sorted(received) == [bytes([n]) * BODY for n in range(COUNT)]
    cleared = _statistics(low_watermark)
    assert cleared["memoryAlarm"] is False and cleared["memoryUsed"] < WATERMARK
    assert _alarm_lines(low_watermark, "memory") == ["set", "cleared"]
    publisher.channel.basic_publish("", queue, b"publishing again")   # not blocked any more
    publisher.connection.process_data_events(time_limit=0.2)
    assert publisher.events == ["blocked: low on memory", "unblocked"]
    consumer.close()
    publisher.connection.close()


def test_a_replay_waits_while_the_memory_alarm_blocks_publishers(low_watermark: DeltaMQProcess) -> None:
    """A replay publishes: under the alarm it waits like a blocked publisher, and goes on once it clears."""
    import threading
    from datetime import datetime, timezone

    from tests.waiting import wait_until

    start = datetime.now(timezone.utc).isoformat()
    publisher = Publisher(low_watermark)
    channel = publisher.channel
    channel.confirm_delivery()
    for name in ("replay.src", "replay.dst"):
        channel.queue_declare(name, durable=True)
    for body in (b"one", b"two", b"three"):
        channel.basic_publish("", "replay.src", body, pika.BasicProperties(delivery_mode=2))
    while channel.basic_get("replay.src", auto_ack=True)[0] is not None:
        pass
    # the ballast goes on a channel without confirms: a confirmed publish sent after the alarm
    # is never read, so waiting for its confirm would hang the test
    ballast_channel = publisher.connection.channel()
    ballast = ballast_channel.queue_declare("", exclusive=False, auto_delete=False).method.queue
    for n in range(COUNT):
        ballast_channel.basic_publish("", ballast, bytes([n]) * BODY)
    publisher.wait_for("blocked: low on memory")

    api = f"http://127.0.0.1:{low_watermark.http_port}/api/latest/queue/default/default"
    answers: list[httpx.Response] = []
    replay = threading.Thread(target=lambda: answers.append(httpx.post(
        f"{api}/replay.src/replayMessages", json={"fromTime": start, "destination": "replay.dst"},
        auth=("guest", "guest"), timeout=60)))
    replay.start()
    wait_until(lambda: "replay waits after 0 messages: the broker is low on memory" in low_watermark.log_tail(),
               10, what="the replay waiting for the alarm")
    depth = httpx.get(f"{api}/replay.dst", auth=("guest", "guest"), timeout=30).json()["statistics"]
    assert replay.is_alive() and depth["queueDepthMessages"] == 0

    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", low_watermark.amqp_port))
    cch = consumer.channel()
    while cch.basic_get(ballast, auto_ack=True)[0] is not None:
        pass
    replay.join(30)
    assert answers and answers[0].status_code == 200 and answers[0].json()["replayed"] == 3, answers
    got = []
    while (message := cch.basic_get("replay.dst", auto_ack=True))[0] is not None:
        got.append(message[2])
    assert got == [b"one", b"two", b"three"]
    consumer.close()
    publisher.connection.close()


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 64 MiB tmpfs (root with CAP_SYS_ADMIN only)."""
    with tmpfs("64m", "deltamq-disk-") as where:
        yield where


def _free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def test_disk_alarm_blocks_publishers_before_the_disk_fills_and_clears_with_space(
        small_disk: Path) -> None:
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (16 << 20))
    limit = _free(small_disk) - (8 << 20)            # 8 MiB of messages from now on
    proc = DeltaMQProcess()
    at = proc.command.index("--data-dir")
    proc.command[at + 1] = str(small_disk / "data")
    proc.command += ["-D", f"deltamq.disk_free_limit={limit}"]
    proc.start()
    try:
        wait_for_http(proc)
        assert _statistics(proc)["diskAlarm"] is False
        publisher = Publisher(proc)
        publisher.channel.queue_declare("big", durable=True)
        persistent = pika.BasicProperties(delivery_mode=2)
        for _ in range(20):                         # at most 20 MiB: the disk never fills
            publisher.channel.basic_publish("", "big", os.urandom(1 << 20), persistent)
            publisher.connection.process_data_events(time_limit=0.3)
            if publisher.events:
                break
        publisher.wait_for("blocked: low on disk")
        alarmed = _statistics(proc)
        assert alarmed["diskAlarm"] is True and 0 <= alarmed["diskFree"] < limit
        assert alarmed["memoryAlarm"] is False
        ballast.unlink()                            # 16 MiB free again: past limit + 10%
        publisher.wait_for("unblocked")
        cleared = _statistics(proc)
        assert cleared["diskAlarm"] is False and cleared["diskFree"] >= limit * 1.1
        assert _alarm_lines(proc, "disk") == ["set", "cleared"]
        publisher.connection.close()
    finally:
        proc.stop()
