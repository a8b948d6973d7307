"""Replay when its journal commit fails: a broker whose data directory turns read-only (a
tmpfs remounted; skipped where mounting is not allowed).  The journal still reads, so the
replay publishes its page, whose commit fails: nothing of the page may reach the queue."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pika

from tests.integration.conftest import DeltaMQProcess
from tests.integration.test_disk_full import _remount, connect, management, small_disk

__all__ = ["small_disk"]                  # the fixture, used by name


def test_a_page_whose_commit_fails_is_not_replayed_at_all(small_disk: DeltaMQProcess) -> None:
    source, target = f"replay.src.{uuid.uuid4().hex[:8]}", f"replay.dst.{uuid.uuid4().hex[:8]}"
    connection = connect(small_disk)
    channel = connection.channel()
    channel.confirm_delivery()
    for name in (source, target):
        channel.queue_declare(name, durable=True)
    start = datetime.now(timezone.utc).isoformat()
    for body in (b"one", b"two", b"three"):
        channel.basic_publish("", source, body, pika.BasicProperties(delivery_mode=2))
    while channel.basic_get(source, auto_ack=True)[0] is not None:
        pass
    channel.queue_declare(target, passive=True)      # a round trip: the acks were taken
    connection.close()
    api = management(small_disk)
    path = f"queue/default/default/{source}/replayMessages"
    data = small_disk.dir / "data"

    _remount(data, "ro")
    try:
        failed = api.post(path, json={"fromTime": start, "destination": target})
        assert failed.status_code == 503, failed.text
        assert "replay stopped after 0 messages: the journal could not commit the next 3" \
            " (none of them was replayed)" in failed.json()["errorMessage"]
        depth = api.get(f"queue/default/default/{target}").json()["statistics"]
        assert depth["queueDepthMessages"] == 0, depth
    finally:
        _remount(data, "rw")

    connection = connect(small_disk)
    assert connection.channel().queue_declare(target, passive=True).method.message_count == 0
    connection.close()
    done = api.post(path, json={"fromTime": start, "destination": target})
    assert done.status_code == 200 and done.json()["replayed"] == 3, done.text
    connection = connect(small_disk)
    channel = connection.channel()
    got = []
    while (message := channel.basic_get(target, auto_ack=True))[0] is not None:
        got.append(message[2])
    connection.close()
    api.close()
    assert got == [b"one", b"two", b"three"]
