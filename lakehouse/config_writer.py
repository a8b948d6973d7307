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

* ``process`` (the default): in a child process, ``python -m
  lakehouse.config_writer`` (:class:`WriterProcess`), one for all the
  configuration stores of the broker, as the journal's writer
  (:mod:`lakehouse.journal_writer`); the thread only pickles the group onto a
  pipe and waits for the answer (``>I`` length + pickled ``("commit", table
  location, changes)`` or ``("release", table location)``; answer
  ``>BI`` status and length, then the error's ``errno`` and text when it
  failed).  The child writes the table's checkpoints in a thread of its
  own per table, beside the commits (:class:`Checkpointer`).
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

from broker.cpu_placement import release_this_process, released
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
            self._thread = threading.Thread(target=released(self._run), name=self._name, daemon=True)
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
    """The child process that commits for every :class:`ConfigurationWriter` of this broker.

    One child serves all configuration stores of the process (the broker's own
    and one per virtual host node) and the nodes' link termini stores: a second interpreter with pyarrow and
    delta-rs loaded costs about 100 MB of memory, too much to pay per store,
    and configuration commits are few, so they can take turns.  Each request
    names its table; the child opens a table on its first request and drops it
    when its store is closed (:meth:`release`).

    Started at once (it imports pyarrow and delta-rs meanwhile); the first
    commit waits for it.  Called from the stores' writer threads, one request
    at a time.  A child found dead is started again; a commit whose child
    dies under it fails (EIO), though the child may have made it durable
    first: as with a crash, a change is taken for stored only once it was
    answered.
    """

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._child is None or self._child.poll() is not None:
                self._start()

    def _start(self) -> None:
        self._child = subprocess.Popen(
            [sys.executable, "-m", "lakehouse.config_writer"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            pass_fds=inherited_descriptors())   # it holds the data directory while it lives

    def commit(self, location: str, changes: list[Change]) -> None:
        """Commit ``changes`` to the table at ``location``; returns once durable, else raises."""
        with self._lock:
            self._request(("commit", location, changes))

    def release(self, location: str) -> None:
        """The store of ``location`` closed: the child closes the table (a dead child has nothing open)."""
        with self._lock:
            child = self._child
            if child is not None and child.poll() is None:
                try:
                    self._request(("release", location))
                except OSError:
                    pass                       # it died: it holds nothing any more

    def _request(self, request: tuple[Any, ...]) -> None:
        child = self._child
        if child is None or child.poll() is not None:
            self._start()
            child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
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
        with self._lock:
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


_shared: WriterProcess | None = None
_sharing: set[str] = set()
_shared_lock = threading.Lock()


def shared_writer_process(location: str) -> WriterProcess:
    """The process-wide writer child, started for its first store (``location``: that store's table)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WriterProcess()
        _sharing.add(location)
        process = _shared
    process.start()
    return process


def release_writer_process(location: str) -> None:
    """The store of ``location`` closed: its table is dropped, and the child stopped after the last."""
    global _shared
    with _shared_lock:
        process = _shared
        if process is None:
            return
        _sharing.discard(location)
        last = not _sharing
        if last:
            _shared = None
    if last:
        process.stop()
    else:
        process.release(location)


class WrittenInBackground:
    """A store over a change log (``self.log``) whose commits a :class:`ConfigurationWriter` makes.

    The configuration store and the link termini store both are: each calls
    :meth:`_init_writer` once its log exists, :meth:`_start_writer` once the
    log is open (with :data:`MODE`), hands changes to ``self.writer.submit`` and calls
    :meth:`_stop_writer` on close.  Commits run in the writer process
    (:data:`MODE` ``process``, one for all stores of the broker) or in the
    writer thread, which then also writes the table's checkpoints.
    """

    log: Any

    def _init_writer(self, name: str) -> None:
        #: commits in a child process (MODE "process") or in the writer thread ("thread")
        self.process: WriterProcess | None = None
        self.writer = ConfigurationWriter(self._commit, self.log.table.checkpoint, name=name)

    @property
    def _location(self) -> str:
        return str(self.log.table.uri)

    def _start_writer(self, mode: str) -> None:
        """Start committing, in ``mode`` (:data:`MODE`, as the store's module reads it)."""
        if mode == "process":
            # checkpoints are the process's; one process serves every store of the broker
            self.process = shared_writer_process(self._location)
        else:
            # checkpoints are the writer thread's, written after it answered the group's waiters
            self.log.table.on_checkpoint_due = self.writer.checkpoint_due
        self.writer.start()

    def _commit(self, changes: list[Change]) -> None:
        """One group commit (the writer thread): in the writer process, or here."""
        if self.process is None:
            self.log.change(changes)
            return
        self.process.commit(self._location, changes)
        self.log.fold(changes)                # what the store answers from now on

    def _stop_writer(self) -> None:
        """Commit what was submitted, then end the thread (and leave the process)."""
        self.writer.stop()
        if self.process is not None:
            self.process = None
            release_writer_process(self._location)


def _read(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the configuration writer process ended")
        data += chunk
    return data


def serve(handle: Callable[[tuple[Any, ...]], None], requests: IO[bytes], replies: IO[bytes]) -> None:
    """The child's loop: carry out each request and answer it, until the end of the requests."""
    while True:
        try:
            header = _read(requests, REQUEST.size)
        except EOFError:
            return
        request = pickle.loads(_read(requests, REQUEST.unpack(header)[0]))
        try:
            handle(request)
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
        self._thread = threading.Thread(target=released(self._run), name="config-checkpoints", daemon=True)
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


class Tables:
    """The child's open tables, by location: each with its change log and checkpoint thread."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[Any, Checkpointer]] = {}

    def handle(self, request: tuple[Any, ...]) -> None:
        kind, location = request[0], request[1]
        if kind == "release":
            self._close(location)
            return
        opened = self._open.get(location)
        if opened is None:
            from .config_store import config_change_log
            from .termini_store import TABLE, termini_change_log

            # the table's name says whose it is: a node's link termini, or a configuration
            if location.rstrip("/").rsplit("/", 1)[-1] == TABLE:
                change_log = termini_change_log(location)
            else:
                change_log = config_change_log(location)
            change_log.open()
            checkpoints = Checkpointer(change_log.table.checkpoint)
            change_log.table.on_checkpoint_due = checkpoints.due
            opened = self._open[location] = (change_log, checkpoints)
        opened[0].change(request[2])

    def _close(self, location: str) -> None:
        opened = self._open.pop(location, None)
        if opened is not None:
            change_log, checkpoints = opened
            checkpoints.stop()
            change_log.close()

    def close(self) -> None:
        for location in list(self._open):
            self._close(location)


def main(argv: list[str] | None = None) -> int:
    """``python -m lakehouse.config_writer``: commit what the broker sends, to the tables it names."""
    # the broker ends this process (the end of its input), not Ctrl-C to the process group
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    release_this_process()          # not on the event loop's CPUs alone (broker.cpu_placement)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s config-writer: %(message)s")
    tables = Tables()
    try:
        serve(tables.handle, sys.stdin.buffer, sys.stdout.buffer)
    finally:
        tables.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
