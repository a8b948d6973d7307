"""The broker's data directory: one broker at a time, and writable before anything starts.

Two brokers on one directory would both recover the same queues, deliver the
same messages and number new ones from the same journal version.  So
``deltamq serve`` claims the directory before it reads anything from it:

* it creates the directory if needed, and proves it can write there by
  writing, fsyncing and removing a probe file -- a read-only file system, a
  path under a regular file or a file-size limit refuses the start with one
  line naming the directory, not with a traceback halfway through recovery;
* it takes an exclusive ``flock`` on ``<data dir>/.lock`` and writes its
  process id into it.  The lock belongs to the open file, not the process:
  the journal writer and upkeep processes inherit the descriptor
  (:func:`inherited_descriptors`), so a broker that was SIGKILLed still holds
  the directory until its writer has finished its last commit and ended; a
  new start waits up to :data:`ORPHAN_GRACE` for that, then refuses naming
  the process.  The kernel releases the lock when the last holder ends, so a
  lock file left by a dead process never blocks a start.

Readers -- ``deltamq sql``, Spark, notebooks -- read the Delta tables and
take no lock: they work while the broker runs.  A directory given as a URI
(object storage) cannot be locked or probed; the broker says so and starts.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import time
from pathlib import Path

from broker.errors import BrokerError

log = logging.getLogger(__name__)

LOCK_FILE_NAME = ".lock"
#: the lock's descriptor number, for the processes the broker starts (they inherit it)
LOCK_DESCRIPTOR_VARIABLE = "DELTAMQ_DATA_DIR_LOCK_FD"
#: seconds a start waits for the journal processes of a broker that ended (SIGKILL)
ORPHAN_GRACE = 5.0
ORPHAN_POLL = 0.05


class DataDirectoryError(BrokerError):
    """The broker cannot use its data directory (start-up is refused)."""


class DataDirectoryInUse(DataDirectoryError):
    """Another broker (or what is left of one) holds the data directory's lock."""


class DataDirectoryNotWritable(DataDirectoryError):
    """The data directory cannot be written: read-only, not a directory, no space, ..."""


class DataDirectoryLock:
    """The exclusive claim of one broker process on its data directory."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor: int | None = descriptor

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def release(self) -> None:
        """Give the directory up (processes that inherited the lock may still hold it)."""
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        if os.environ.get(LOCK_DESCRIPTOR_VARIABLE) == str(descriptor):
            del os.environ[LOCK_DESCRIPTOR_VARIABLE]
        os.close(descriptor)        # closing our descriptor drops our share of the lock


def claim(location: str, *, orphan_grace: float = ORPHAN_GRACE) -> DataDirectoryLock | None:
    """Check ``location`` is a writable directory and lock it for this process's lifetime.

    A lock held by a live broker is refused at once; one left to the
    processes of a broker that has ended is waited for up to
    ``orphan_grace`` seconds (they end once their last commit is done).

    Returns None for an object storage URI (nothing to lock).  Raises
    :class:`DataDirectoryNotWritable` or :class:`DataDirectoryInUse`, each
    naming the directory (and, for the latter, the process that holds it).
    """
    if "://" in location:
        log.warning("data directory %s is not a local directory: it is not locked against"
                    " a second broker", location)
        return None
    path = Path(location).absolute()
    _check_writable(path)
    lock_path = path / LOCK_FILE_NAME
    try:
        # the lock is held on a read-only descriptor (flock needs no write access), so
        # that the file system can still be remounted read-only under a running broker
        os.close(os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        descriptor = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise _not_writable(path, exc) from None
    try:
        _lock(descriptor, lock_path, orphan_grace)
    except OSError as exc:
        os.close(descriptor)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise _not_writable(path, exc) from None
        raise DataDirectoryInUse(_holder_text(path, lock_path)) from None
    try:
        _record_pid(lock_path)
    except OSError as exc:
        os.close(descriptor)
        raise _not_writable(path, exc) from None
    os.environ[LOCK_DESCRIPTOR_VARIABLE] = str(descriptor)
    return DataDirectoryLock(path, descriptor)


def _lock(descriptor: int, lock_path: Path, orphan_grace: float) -> None:
    """flock ``descriptor``, waiting a little for the processes of a broker that has ended."""
    deadline = time.monotonic() + orphan_grace
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            recorded = _recorded_pid(lock_path)
            if recorded is None or _alive(recorded) or time.monotonic() >= deadline:
                raise
        time.sleep(ORPHAN_POLL)


def inherited_descriptors() -> tuple[int, ...]:
    """The data directory lock's descriptor, for ``pass_fds`` of a process that writes there.

    Empty when this process holds no lock (tests, tools): the journal's
    processes are then started as before.
    """
    text = os.environ.get(LOCK_DESCRIPTOR_VARIABLE, "")
    if not text.isdigit():
        return ()
    descriptor = int(text)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return ()
    except OSError:
        return ()
    return (descriptor,)


def _check_writable(path: Path) -> None:
    """Create ``path`` if needed and write, fsync and remove a file in it."""
    probe = path / f".write-probe-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(descriptor, b"deltamq\n")
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise _not_writable(path, exc) from None


def _not_writable(path: Path, exc: OSError) -> DataDirectoryNotWritable:
    reason = exc.strerror or str(exc)
    if exc.filename is not None and Path(exc.filename) != path:
        reason = f"{reason}: {exc.filename}"
    return DataDirectoryNotWritable(f"data directory {path} is not writable ({reason})")


def _holder_text(path: Path, lock_path: Path) -> str:
    """Who holds the lock, as one sentence for the operator."""
    recorded = _recorded_pid(lock_path)
    if recorded is not None and _alive(recorded):
        return (f"data directory {path} is in use by another broker (pid {recorded});"
                " stop it first, or give this one another --data-dir")
    holders = ", ".join(str(pid) for pid in _processes_holding(lock_path)) or "unknown"
    by = f"process {holders}"
    if recorded is not None:
        by += f", left by broker pid {recorded} which has ended"
    return (f"data directory {path} is still locked by {by} (a journal writer finishing its"
            " last commit); start again once it has ended")


def _record_pid(lock_path: Path) -> None:
    """Write this process's id into the lock file (only its holder does)."""
    descriptor = os.open(lock_path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(descriptor, f"{os.getpid()}\n".encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _recorded_pid(lock_path: Path) -> int | None:
    try:
        text = lock_path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:                                    # a zombie is not alive: its descriptors are closed
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _processes_holding(lock_path: Path) -> list[int]:
    """Processes with ``lock_path`` open (those this user may inspect), from /proc."""
    try:
        target = lock_path.stat()
    except OSError:
        return []
    found: list[int] = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                st = fd.stat()
                if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                    found.append(int(entry.name))
                    break
        except OSError:
            continue
    return sorted(found)
