"""One broker per data directory, and a data directory it cannot write (issue 10, items 1 and 2).

Two brokers on one ``--data-dir`` used to recover the same queues and both
deliver the same messages; a broker on a read-only directory failed with a
traceback.  Each test starts real ``deltamq serve`` processes.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from .conftest import REPO, DeltaMQProcess
from .support import tmpfs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)


@pytest.fixture
def first() -> Iterator[DeltaMQProcess]:
    proc = DeltaMQProcess()
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _serve(command: list[str], data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``deltamq serve`` with ``command``'s options on ``data_dir``, run to its end."""
    at = command.index("--data-dir")
    argv = command[:at] + ["--data-dir", str(data_dir)] + command[at + 2:]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)


def _refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused start logs (and nothing else: no traceback)."""
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert "Traceback" not in done.stderr
    assert len(lines) == 1, lines
    return lines[0]


def _params(proc: DeltaMQProcess) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", proc.amqp_port)


def _children(pid: int) -> dict[int, str]:
    """The live child processes of ``pid`` and their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found[int(entry.name)] = cmdline
    return found


def _wait_for_lock_release(lock_file: Path, timeout: float) -> bool:
    """Block until nobody holds ``lock_file`` (then let go of it at once)."""
    fd = os.open(lock_file, os.O_RDWR)
    taken = threading.Event()

    def take() -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        taken.set()
    threading.Thread(target=take, daemon=True).start()
    try:
        return taken.wait(timeout)
    finally:
        os.close(fd)


def test_a_second_broker_on_the_data_directory_exits_naming_the_first(
        first: DeltaMQProcess, tmp_path: Path) -> None:
    data_dir = first.dir / "data"
    conn = pika.BlockingConnection(_params(first))
    ch = conn.channel()
    ch.queue_declare("once-only", durable=True)
    ch.confirm_delivery()
    ch.basic_publish("", "once-only", b"deliver me once",
                     pika.BasicProperties(delivery_mode=2))
    second = DeltaMQProcess()           # other ports, the first one's data directory
    try:
        done = _serve(second.command, data_dir)
    finally:
        second.stop()
    assert done.returncode == 1
    line = _refusal(done)
    assert first.proc is not None
    assert f"data directory {data_dir} is in use by another broker (pid {first.proc.pid})" in line
    # the second broker took nothing: the first still has the message, and serves
    assert ch.queue_declare("once-only", passive=True).method.message_count == 1
    assert ch.basic_get("once-only", auto_ack=True)[2] == b"deliver me once"
    conn.close()
    assert (data_dir / ".lock").read_text() == f"{first.proc.pid}\n"
    assert not list(data_dir.glob(".write-probe-*"))


@pytest.mark.slow
@pytest.mark.timeout(600)                   # Spark's start, as in tests/lakehouse/test_spark.py
def test_deltamq_sql_reads_the_data_directory_while_the_broker_holds_it(
        first: DeltaMQProcess) -> None:
    conn = pika.BlockingConnection(_params(first))
    conn.channel().queue_declare("seen-by-sql", durable=True)
    conn.close()
    query = ("SELECT get_json_object(attributes, '$.name') AS name FROM configuration"
             " WHERE category = 'Queue' AND get_json_object(attributes, '$.name') = 'seen-by-sql'")
    done = subprocess.run([sys.executable, "-m", "broker.cli", "sql", "--data-dir",
                           str(first.dir / "data"), query], cwd=REPO, capture_output=True,
                          text=True, timeout=580, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "| seen-by-sql |" in done.stdout
    assert first.alive()


def test_a_killed_brokers_journal_writer_holds_the_directory_until_it_ends(
        first: DeltaMQProcess) -> None:
    data_dir = first.dir / "data"
    conn = pika.BlockingConnection(_params(first))
    ch = conn.channel()
    ch.queue_declare("survivors", durable=True)
    ch.confirm_delivery()
    for n in range(20):
        ch.basic_publish("", "survivors", f"m{n}".encode(), pika.BasicProperties(delivery_mode=2))
    assert first.proc is not None
    writers = [pid for pid, cmd in _children(first.proc.pid).items() if "journal_writer" in cmd]
    assert len(writers) == 1
    writer = writers[0]
    os.kill(writer, signal.SIGSTOP)      # a writer that has not finished yet
    try:
        first.proc.send_signal(signal.SIGKILL)     # the broker alone, not its group
        first.proc.wait(timeout=10)
        done = _serve(first.command, data_dir)
        assert done.returncode == 1
        line = _refusal(done)
        assert f"data directory {data_dir} is still locked by process {writer}," in line
        assert f"left by broker pid {first.proc.pid} which has ended" in line
    finally:
        os.kill(writer, signal.SIGCONT)  # it reads the end of its input and exits
    assert _wait_for_lock_release(data_dir / ".lock", timeout=60)
    first.start()                        # same command, same directory: recovers
    conn = pika.BlockingConnection(_params(first))
    ch = conn.channel()
    bodies = []
    while (got := ch.basic_get("survivors", auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies == [f"m{n}".encode() for n in range(20)]
    conn.close()


def test_a_data_directory_under_a_regular_file_refuses_the_start(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    proc = DeltaMQProcess()
    try:
        done = _serve(proc.command, tmp_path / "file" / "data")
    finally:
        proc.stop()
    assert done.returncode == 2
    assert (f"cannot start: data directory {tmp_path / 'file' / 'data'} is not writable"
            f" (Not a directory" in _refusal(done))


@pytest.fixture
def read_only_mount() -> Iterator[Path]:
    """A tmpfs remounted read-only (root with CAP_SYS_ADMIN only)."""
    with tmpfs("16m", "deltamq-ro-") as where:
        (where / "data").mkdir()
        (where / "data" / ".lock").write_text("1\n")     # a directory used before
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield where / "data"


def test_a_read_only_data_directory_refuses_the_start_with_one_line(read_only_mount: Path) -> None:
    proc = DeltaMQProcess()
    try:
        done = _serve(proc.command, read_only_mount)
    finally:
        proc.stop()
    assert done.returncode == 2
    assert (f"cannot start: data directory {read_only_mount} is not writable"
            " (Read-only file system" in _refusal(done))
