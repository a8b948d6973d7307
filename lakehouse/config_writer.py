"""The configuration store's writer: group commits to the ``config`` table, off the event loop.

A durable declare used to commit to Delta on the event loop: 1.8 ms at the
median, and 28-32 ms every 20th time, when the commit also wrote a Delta
checkpoint -- and every connection of the broker waited meanwhile.  Here the
loop only hands a change over (:meth:`ConfigurationWriter.submit`) and gets a
:class:`concurrent.futures.Future` back, resolved once the change is durable
(fsynced) or has failed.  A thread does the commits:

* changes that arrive while a commit is in flight are grouped into the next
  commit (one Delta commit, one fsync, for all of them), in the order they
  were submitted, and every waiter of the group hears the same outcome: None
  when durable, the exception when the commit failed (disk full, read-only),
  so nothing of a failed group is taken for stored;
* a checkpoint of the table, when one is due, is written by the same thread
  *after* the group's waiters were answered, never on the loop.

Where the commit runs (``DELTAMQ_CONFIG_WRITER``):

* ``process`` (the default): in a child process of its own,
  ``python -m lakehouse.config_writer <table location>``
  (:class:`WriterProcess`), as the journal's writer
  (:mod:`lakehouse.journal_writer`); the thread only pickles the group onto a
  pipe and waits for the answer (``>I`` length + pickled changes; answer
  ``>BI`` status and length, then the error's ``errno`` and text when it
  failed).  The child writes the table's checkpoints in a thread of its
  own, beside the commits (:class:`Checkpointer`).
* ``thread``: in the thread itself.  Measured: a commit costs about 5 ms of
  CPU, much of it holding Python's interpreter lock (pyarrow's writer set-up,
  the commit's JSON, the checksum), and each time the broker's event loop
  wants the lock back it may wait up to the 5 ms switch interval; with
  commits back to back the loop ran late by more than 5 ms on 6-9% of its
  10 ms ticks (0-1% without), up to 14-29 ms on this 2-core machine.  Fine
  for a broker whose configuration rarely changes, and it needs no second
  interpreter (~100 MB).
"""

from __future__ import annotations

import errno as errnos
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import IO, Any

from broker.data_directory import inherited_descriptors

log = logging.getLogger(__name__)

#: one change: ("save", row) or ("remove", key), as :meth:`ChangeLog.change` takes them
Change = tuple[str, Any]


class ConfigurationWriter:
    """Commits submitted changes with ``commit`` in a thread of its own, grouped.

    ``commit(changes)`` writes a list of changes as one durable commit (or
    raises); ``checkpoint()`` writes a checkpoint; it is called when
    :meth:`checkpoint_due` was called since the last one.
    """

    def __init__(self, commit: Callable[[list[Change]], None], checkpoint: Callable[[], None], *,
                 name: str = "config-writer") -> None:
        self._commit = commit
        self._checkpoint = checkpoint
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: list[tuple[list[Change], Future[None]]] = []
        self._checkpoint_due = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: figures: commits made, and changes they carried
        self.commits = 0
        self.changes = 0

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def submit(self, changes: list[Change]) -> Future[None]:
        """Hand ``changes`` over; the future is done once they are durable (or failed)."""
        future: Future[None] = Future()
        with self._lock:
            if self._thread is None:
                future.set_exception(RuntimeError("the configuration writer is not running"))
                return future
            self._pending.append((changes, future))
            self._wake.notify()
        return future

    def checkpoint_due(self) -> None:
        """Called from a commit (the writer thread): checkpoint once the waiters were answered."""
        self._checkpoint_due = True

    def stop(self) -> None:
        """Commit what was submitted, then end the thread."""
        thread = self._thread
        if thread is None:
            return
        with self._lock:
            self._stopping = True
            self._wake.notify()
        thread.join()
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stopping:
                    self._wake.wait()
                group, self._pending = self._pending, []
                if not group and self._stopping:
                    return
            self._commit_group(group)
            if self._checkpoint_due:
                self._checkpoint_due = False
                try:
                    self._checkpoint()
                except Exception:   # a missed checkpoint only makes reads slower: the next one comes
                    log.warning("%s: checkpoint failed", self._name, exc_info=True)

    def _commit_group(self, group: list[tuple[list[Change], Future[None]]]) -> None:
        changes = [change for submitted, _ in group for change in submitted]
        error: BaseException | None = None
        try:
            if changes:
                self._commit(changes)
        except BaseException as exc:    # every waiter hears it; the thread keeps serving
            error = exc
        else:
            self.commits += 1
            self.changes += len(changes)
        for _, future in group:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


#: where commits run: ``process`` (a child process) or ``thread`` (the writer thread itself)
MODE = os.environ.get("DELTAMQ_CONFIG_WRITER", "process")

REQUEST = struct.Struct(">I")          # length of the pickled list of changes that follows
REPLY = struct.Struct(">BI")           # status (0 durable, 1 failed), length of the error that follows
FAILURE = struct.Struct(">i")          # the error's errno (0: none), before its text


class WriterProcess:
    """The child process that commits for a :class:`ConfigurationWriter` (its ``commit``).

    Started at once (it imports pyarrow and delta-rs meanwhile); the first
    commit waits for it.  Called from the writer thread only.  A child found
    dead is started again; a commit whose child dies under it fails (EIO),
    though the child may have made it durable first: as with a crash, a
    change is taken for stored only once it was answered.
    """

    def __init__(self, location: str) -> None:
        self.location = location
        self._child: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._child = subprocess.Popen(
            [sys.executable, "-m", "lakehouse.config_writer", self.location],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            pass_fds=inherited_descriptors())   # it holds the data directory while it lives

    def commit(self, changes: list[Change]) -> None:
        child = self._child
        if child is None or child.poll() is not None:
            self.start()
            child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        data = pickle.dumps(changes, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            child.stdin.write(REQUEST.pack(len(data)) + data)
            status, length = REPLY.unpack(_read(child.stdout, REPLY.size))
            error = _read(child.stdout, length) if length else b""
        except (OSError, EOFError, ValueError) as exc:     # ValueError: a pipe already closed
            self._child = None
            raise OSError(errnos.EIO, f"the configuration writer process failed: {exc}") from exc
        if status:
            code = FAILURE.unpack_from(error)[0]
            text = error[FAILURE.size:].decode("utf-8", "replace")
            raise OSError(code, text) if code else RuntimeError(text)

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.close()                # the end of its input: it finishes and exits
        except OSError:
            pass
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()


def _read(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the configuration writer process ended")
        data += chunk
    return data


def serve(commit: Callable[[list[Change]], None], requests: IO[bytes], replies: IO[bytes]) -> None:
    """The child's loop: commit each request and answer it, until the end of the requests."""
    while True:
        try:
            header = _read(requests, REQUEST.size)
        except EOFError:
            return
        changes = pickle.loads(_read(requests, REQUEST.unpack(header)[0]))
        try:
            commit(changes)
        except Exception as exc:
            code = exc.errno if isinstance(exc, OSError) and exc.errno else 0
            text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or repr(exc)
            error = FAILURE.pack(code) + text.encode("utf-8")
            replies.write(REPLY.pack(1, len(error)) + error)
        else:
            replies.write(REPLY.pack(0, 0))
        replies.flush()


class Checkpointer:
    """The child's checkpoint thread: a due checkpoint is written beside the commits, not before them.

    A checkpoint takes 30-100 ms; written between two commits, it made every
    20th declare wait that long.  Commits are blind appends committed
    put-if-absent, so they and delta-rs's checkpoint of an earlier version do
    not conflict (:mod:`lakehouse.delta_table`).  This process has no event
    loop to disturb: its interpreter lock is the commits' and the checkpoints'.
    """

    def __init__(self, checkpoint: Callable[[], None]) -> None:
        self._checkpoint = checkpoint
        self._due = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="config-checkpoints", daemon=True)
        self._thread.start()

    def due(self) -> None:
        self._due.set()

    def stop(self) -> None:
        self._stopping = True
        self._due.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            if self._stopping:
                return
            try:
                self._checkpoint()
            except Exception:   # a missed checkpoint only makes reads slower: the next one comes
                log.warning("checkpoint failed", exc_info=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m lakehouse.config_writer <table location>``: commit what the broker sends."""
    location = (sys.argv[1:] if argv is None else argv)[0]
    # the broker ends this process (the end of its input), not Ctrl-C to the process group
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s config-writer: %(message)s")
    from .config_store import config_change_log

    change_log = config_change_log(location)
    change_log.open()
    checkpoints = Checkpointer(change_log.table.checkpoint)
    change_log.table.on_checkpoint_due = checkpoints.due
    try:
        serve(change_log.change, sys.stdin.buffer, sys.stdout.buffer)
    finally:
        checkpoints.stop()
        change_log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
