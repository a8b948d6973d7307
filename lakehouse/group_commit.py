"""Group commit: many submitters, one Delta commit at a time, durable before told.

Records from every connection accumulate while the previous commit is in
flight; when it finishes, one commit carries everything that accumulated.  A
submitter's ``on_durable`` callback runs only after the commit holding its
records is fsynced (:class:`~lakehouse.delta_table.AppendOnlyTable` does the
fsync), so a publisher confirm, a tx.commit-ok or the effect of an ack can
wait for it.  Commits run on one worker thread (blocking work never runs on
the broker's event loop); callbacks are handed to ``dispatch`` — for the
broker, ``loop.call_soon_threadsafe`` — so they run where the broker's state
lives.

A failed commit fails every submission in it: ``on_durable`` gets the
exception, and the writer goes on with the next group.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .delta_table import AppendOnlyTable

log = logging.getLogger(__name__)

Row = dict[str, Any]
Durable = Callable[[BaseException | None], None]
Dispatch = Callable[[Callable[[], None]], Any]


class GroupCommitWriter:
    """Appends rows to one table in groups, on a thread of its own."""

    def __init__(self, table: AppendOnlyTable, dispatch: Dispatch) -> None:
        self.table = table
        self.dispatch = dispatch
        self._lock = threading.Condition()
        self._rows: list[Row] = []
        self._callbacks: list[Durable] = []
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"group-commit-{table.name}", daemon=True)
        self.commits = 0                 # statistics: commits made
        self.committed_rows = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, rows: list[Row], on_durable: Durable | None = None) -> None:
        """Queue ``rows`` for the next commit; ``on_durable(None)`` once they are on disk."""
        with self._lock:
            if self._closing:
                raise RuntimeError("the journal writer is closed")
            self._rows.extend(rows)
            if on_durable is not None:
                self._callbacks.append(on_durable)
            self._lock.notify()

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is queued, then stop the thread."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._rows and not self._callbacks and not self._closing:
                    self._lock.wait()
                rows, self._rows = self._rows, []
                callbacks, self._callbacks = self._callbacks, []
                closing = self._closing
            if rows or callbacks:
                self._commit(rows, callbacks)
            if closing and not rows and not callbacks:
                return

    def _commit(self, rows: list[Row], callbacks: list[Durable]) -> None:
        error: BaseException | None = None
        if rows:
            try:
                self.table.append(pa.Table.from_pylist(rows, schema=self.table.schema))
                self.commits += 1
                self.committed_rows += len(rows)
            except Exception as exc:          # the disk, the table: every waiter must hear it
                log.exception("journal commit of %d rows failed", len(rows))
                error = exc
        for callback in callbacks:
            self.dispatch(functools.partial(callback, error))
