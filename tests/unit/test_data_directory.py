"""One broker per data directory, which must be writable (broker.data_directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker import data_directory
from broker.data_directory import DataDirectoryInUse, DataDirectoryNotWritable, claim


@pytest.fixture
def claims() -> Iterator[list[data_directory.DataDirectoryLock]]:
    held: list[data_directory.DataDirectoryLock] = []
    yield held
    for lock in held:
        lock.release()


def _claim(path: Path, held: list[data_directory.DataDirectoryLock]) -> None:
    lock = claim(str(path))
    assert lock is not None
    held.append(lock)


def test_a_second_claim_is_refused_naming_the_holder_and_the_directory(
        tmp_path: Path, claims: list[data_directory.DataDirectoryLock]) -> None:
    _claim(tmp_path / "data", claims)
    assert (tmp_path / "data" / ".lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(DataDirectoryInUse) as refused:
        claim(str(tmp_path / "data"))
    assert f"pid {os.getpid()}" in refused.value.text
    assert str(tmp_path / "data") in refused.value.text
    claims.pop().release()
    _claim(tmp_path / "data", claims)            # released: free again


def _dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def test_a_lock_file_left_by_a_dead_process_does_not_block(
        tmp_path: Path, claims: list[data_directory.DataDirectoryLock]) -> None:
    (tmp_path / ".lock").write_text(f"{_dead_pid()}\n")
    _claim(tmp_path, claims)
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"


def test_a_process_started_with_the_lock_holds_it_after_the_broker_let_go(
        tmp_path: Path, claims: list[data_directory.DataDirectoryLock]) -> None:
    # what the journal writer and upkeep processes do: a broker killed while they
    # finish a commit keeps the directory until they have ended
    _claim(tmp_path, claims)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, pass_fds=data_directory.inherited_descriptors())
    try:
        claims.pop().release()
        (tmp_path / ".lock").write_text(f"{_dead_pid()}\n")      # the broker that ended
        with pytest.raises(DataDirectoryInUse) as refused:
            claim(str(tmp_path), orphan_grace=0)
        assert f"process {child.pid}," in refused.value.text
        assert "which has ended" in refused.value.text
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    _claim(tmp_path, claims)


def test_without_a_lock_no_descriptor_is_handed_down(
        tmp_path: Path, claims: list[data_directory.DataDirectoryLock]) -> None:
    assert data_directory.inherited_descriptors() == ()
    _claim(tmp_path, claims)
    (descriptor,) = data_directory.inherited_descriptors()
    assert os.path.samefile(f"/proc/self/fd/{descriptor}", tmp_path / ".lock")
    claims.pop().release()
    assert data_directory.inherited_descriptors() == ()


def test_a_directory_under_a_regular_file_is_not_writable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(DataDirectoryNotWritable) as refused:
        claim(str(tmp_path / "file" / "data"))
    assert refused.value.text.startswith(f"data directory {tmp_path / 'file' / 'data'} is not"
                                         " writable (")


def test_a_file_size_limit_of_zero_makes_the_directory_unwritable(tmp_path: Path) -> None:
    # a write that really fails: the probe file cannot grow (EFBIG, SIGXFSZ ignored)
    script = ("import resource, signal, sys\n"
              "from broker.data_directory import claim, DataDirectoryNotWritable\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))\n"
              "try:\n    claim(sys.argv[1])\n"
              "except DataDirectoryNotWritable as exc:\n    print(exc.text)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.stdout.startswith(f"data directory {tmp_path / 'data'} is not writable"
                                  " (File too large")
    assert not list((tmp_path / "data").glob(".write-probe-*"))     # the probe is removed


def test_an_object_storage_location_is_not_locked() -> None:
    assert claim("s3://bucket/prefix") is None



def test_a_start_waits_a_little_for_the_processes_of_a_broker_that_ended(
        tmp_path: Path, claims: list[data_directory.DataDirectoryLock]) -> None:
    _claim(tmp_path, claims)
    # a journal writer whose input ended (the broker was killed) and that still
    # needs a moment for its last commit
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time; sys.stdin.read(); time.sleep(0.5)"],
                             stdin=subprocess.PIPE, pass_fds=data_directory.inherited_descriptors())
    claims.pop().release()
    (tmp_path / ".lock").write_text(f"{_dead_pid()}\n")
    assert child.stdin is not None
    child.stdin.close()
    try:
        lock = claim(str(tmp_path), orphan_grace=60)   # waited for it rather than refusing
        assert lock is not None
        claims.append(lock)
        assert child.poll() is not None
    finally:
        child.wait()
