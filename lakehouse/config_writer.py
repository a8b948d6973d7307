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

Why a thread and not a process like the journal's writer
(:mod:`lakehouse.journal_writer`)?  Configuration changes are rare next to
messages -- a burst of declares, then nothing -- and small; a commit spends
most of its time in system calls (Parquet write, fsyncs, link) and in
delta-rs, which release the interpreter lock.  Measured with
``python -m bench.declare_stall`` (1,000 durable declares beside a steady
publish flow), the loop's longest stall stays under the target with the
thread; a process would add a pipe protocol and a second interpreter for no
measured gain.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

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
