"""A broker whose data directory fills up or turns read-only (issue 10, item 2).

The data directory is a small tmpfs mounted for the test (skipped where
mounting is not allowed): the disk really fills and the writes really fail
with ENOSPC / EROFS.  Whatever the broker refused -- a publish it nacked, a
durable queue it did not create -- never shows, neither before nor after a
restart; an acknowledgement given while the disk was full holds once the disk
has room again; the log says so once, without tracebacks.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest

from tests.mgmt.conftest import wait_for_http

from .conftest import DeltaMQProcess
from .support import mount_tmpfs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

PERSISTENT = pika.BasicProperties(delivery_mode=2)
FILLER = "filler"


def _remount(directory: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(directory)], check=True, timeout=30)


@pytest.fixture
def small_disk() -> Iterator[DeltaMQProcess]:
    """A broker whose data directory is a 24 MiB tmpfs, with the disk alarm off: the
    alarm would block the publishers long before the disk fills, and these tests
    are about what happens when it fills all the same."""
    proc = DeltaMQProcess({"deltamq.disk_free_limit": "0"})
    data = proc.dir / "data"
    if not mount_tmpfs(data, "24m"):
        shutil.rmtree(proc.dir, ignore_errors=True)
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        proc.start()
        yield proc
    finally:
        dir_ = proc.dir
        proc.dir = Path(str(dir_) + "-kept")      # stop() removes its dir: not while mounted
        proc.stop()
        subprocess.run(["umount", "-l", str(data)], capture_output=True, timeout=30)
        shutil.rmtree(dir_, ignore_errors=True)


def fill(proc: DeltaMQProcess) -> None:
    """Fill the data directory's file system to the last byte."""
    with open(proc.dir / "data" / FILLER, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            try:
                while True:
                    f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC


def make_room(proc: DeltaMQProcess) -> None:
    (proc.dir / "data" / FILLER).unlink()


def connect(proc: DeltaMQProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))


def restart(proc: DeltaMQProcess) -> None:
    proc.restart(signal.SIGKILL)
    wait_for_http(proc)


def management(proc: DeltaMQProcess) -> httpx.Client:
    wait_for_http(proc)
    return httpx.Client(base_url=f"http://127.0.0.1:{proc.http_port}/api/latest/",
                        auth=("guest", "guest"), timeout=30)


def browse(proc: DeltaMQProcess, queue: str) -> list[tuple[bytes, bool]]:
    conn = connect(proc)
    ch = conn.channel()
    seen = []
    while True:
        method, _props, body = ch.basic_get(queue)
        if method is None:
            conn.close()
            return seen
        seen.append((body, method.redelivered))


def test_nacked_publishes_never_arrive_and_acks_given_while_full_hold(small_disk: DeltaMQProcess) -> None:
    log_start = small_disk.log_size()
    conn = connect(small_disk)
    publisher = conn.channel()
    publisher.confirm_delivery()
    publisher.queue_declare("orders", durable=True)
    for body in (b"acked-while-full", b"unacked"):
        publisher.basic_publish("", "orders", body, PERSISTENT)
    consumer = conn.channel()
    first, _p, body1 = consumer.basic_get("orders")
    second, _p, body2 = consumer.basic_get("orders")
    assert (body1, body2) == (b"acked-while-full", b"unacked")

    fill(small_disk)
    for attempt in range(3):
        with pytest.raises(pika.exceptions.NackError):
            publisher.basic_publish("", "orders", b"nacked-%d" % attempt, PERSISTENT)
    consumer.basic_ack(first.delivery_tag)
    watcher = conn.channel()                     # nothing the broker nacked reaches anyone
    assert watcher.basic_get("orders", auto_ack=True) == (None, None, None)

    make_room(small_disk)
    publisher.basic_publish("", "orders", b"after", PERSISTENT)   # confirmed: the ack's row is in too
    assert [b for b, _ in browse(small_disk, "orders")] == [b"after"]
    conn.close()                                 # "unacked" goes back to the queue
    log = small_disk.log_since(log_start)
    assert log.count("commits failing") == 1 and "No space left on device" in log
    assert log.count("commits succeed again") == 1
    assert "Traceback" not in log

    restart(small_disk)
    assert sorted(b for b, _ in browse(small_disk, "orders")) == [b"after", b"unacked"]


@pytest.mark.parametrize("failure", ["full", "read-only"])
def test_a_durable_queue_the_store_cannot_keep_is_refused(small_disk: DeltaMQProcess, failure: str) -> None:
    api = management(small_disk)
    data = small_disk.dir / "data"
    name = f"q-{uuid.uuid4().hex[:8]}"
    assert api.post("queue/default/default", json={"name": name + "-kept", "durable": True}).status_code == 201
    if failure == "full":
        fill(small_disk)
    else:
        _remount(data, "ro")
    try:
        created = api.post("queue/default/default", json={"name": name, "durable": True})
        assert created.status_code == 503, created.text
        text = created.json()["errorMessage"]
        assert f"queue '{name}'" in text
        assert ("No space left on device" if failure == "full" else "Read-only file system") in text
        assert api.get(f"queue/default/default/{name}").status_code == 404
        refused = api.delete(f"queue/default/default/{name}-kept")
        assert refused.status_code == 503 and "cannot delete queue" in refused.json()["errorMessage"]
        assert api.get(f"queue/default/default/{name}-kept").status_code == 200
        conn = connect(small_disk)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare(name + "-amqp", durable=True)
        assert info.value.reply_code == 541 and "configuration store failed" in info.value.reply_text
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare(name + "-amqp", passive=True)
        assert info.value.reply_code == 404
        conn.channel().queue_declare(name + "-transient")     # nothing to store: still served
        conn.close()
    finally:
        if failure == "full":
            make_room(small_disk)
        else:
            _remount(data, "rw")
    restart(small_disk)
    api = management(small_disk)
    assert api.get(f"queue/default/default/{name}").status_code == 404
    assert api.get(f"queue/default/default/{name}-amqp").status_code == 404
    assert api.get(f"queue/default/default/{name}-kept").status_code == 200
