"""Background upkeep of an append-only table: checkpoints, compaction, vacuum, log clean-up.

Group commit writes one small Parquet file and one log entry per commit --
hundreds a minute under load.  Left alone, every reader (recovery, Spark)
would list and open all of them, and every snapshot would replay a long log.
:class:`TableMaintenance` runs on a thread of its own, never on the writer's
(the journal runs it in a process of its own: :mod:`lakehouse.journal_upkeep`),
so publishing never waits for it:

* **checkpoints** -- when the writer has made ``checkpoint_interval`` commits
  (it calls :meth:`TableMaintenance.checkpoint_due`), a checkpoint is
  written -- at most one per ``min_checkpoint_interval`` -- so a snapshot
  replays few log entries.  On a local table it is written from a
  :class:`~lakehouse.log_state.LogState` that reads each commit once (a few
  ms), not by delta-rs, which re-reads the table each time;
* **compaction** -- in two tiers, so no byte is rewritten over and over: once
  ``compact_min_files`` files under ``small_file_size`` (one per commit) have
  piled up, they are rewritten as one; once ``merge_min_files`` such
  compacted files are there, they are merged, up to ``target_file_size``.
  At most ``max_files_per_round`` files a round.  The rows are streamed
  from the old files to the new one a row group at a time, each
  fdatasync'ed as it is written (:mod:`lakehouse.file_rewrite`): a round
  holds one row group, not the files it merges.
  Each swap is one commit whose ``remove`` and ``add`` actions carry
  ``dataChange=false``.  Delta Spark's streaming source skips such commits,
  so a stream reading the journal sees every row exactly once, before and
  after compaction.  The commit goes through the same put-if-absent path as
  appends (:meth:`~lakehouse.delta_table.AppendOnlyTable.commit_actions`);
  appends and compaction never conflict, since appends remove nothing;
* **vacuum and log clean-up** -- every ``vacuum_interval`` seconds, files
  removed more than ``retention`` ago are deleted (delta-rs vacuum) and log
  entries older than the table's ``delta.logRetentionDuration`` are dropped.
  A Spark stream must not fall further behind than ``retention``.

On object storage (a table at an ``s3://`` URI) the same rounds run through
delta-rs: checkpoints and vacuum as above, and compaction with delta-rs's own
``optimize.compact()`` (its commit also carries ``dataChange=false``).

Why not delta-rs on a local disk too
------------------------------------
Log clean-up is delta-rs's (``cleanup_metadata``), as are all rounds on
object storage.  The rest stays hand-written because delta-rs 1.6 gives
another result or costs far more; measured with ``python -m
bench.delta_maintenance`` (both ways on identical tables, interleaved, 7
rounds, 2 shared cores):

* **checkpoints**: delta-rs's ``create_checkpoint`` loads the table first,
  and that lists the whole ``_delta_log`` directory, which holds every commit
  of the log retention (tens of thousands for a busy journal).  With 20,896
  entries there and 20 commits since the last checkpoint: 1,906 ms median
  (1,750-3,190) for delta-rs on a fresh handle, 2,302 ms on a kept handle
  after ``update_incremental``, 45 ms (28-97) from the
  :class:`~lakehouse.log_state.LogState`, which opens the new commits by name.
  With 896 entries the three are alike (33, 39 and 37 ms); with 200 commits
  since the last checkpoint and 4,201 live files, 438 / 431 / 271 ms.  The
  checkpoint holds the same actions either way.
* **compaction**: ``optimize.compact(target_size)`` bins every file under
  the target size, so it rewrites the merged files of earlier rounds again
  and again: on 8 merged + 40 small files it rewrote 48 files, 1,938 KiB, in
  215 ms median (202-269); :meth:`TableMaintenance.compact` rewrote the 40
  small ones, 276 KiB, in 63 ms (59-77).  delta-rs also does not fsync the
  new file before its commit: after a power loss the table could name a file
  that never reached the disk in place of files that did.
* **vacuum**: files written 3 h ago, retention 2 h, removed 1 min (R), 30 min
  (H) and 3 h (O) ago, the tombstones of H and O already left out of the
  checkpoint (the journal keeps tombstones 5 minutes).  ``vacuum()`` kept all
  three (O stays on disk for good: delta-rs only deletes files it has a
  tombstone for); ``vacuum(full=True)`` deleted H and O, though H was
  removed well within the retention (a query of a version 30 minutes old
  still reads it); :meth:`TableMaintenance.vacuum_local` deleted only O.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa

from broker.cpu_placement import released

from .delta_table import AppendOnlyTable, table_files
from .file_rewrite import read_batches, write_batches_synced
from .log_state import LogState, read_last_checkpoint
from .table_features import UnsupportedTable
from .version_checksum import checksum_file

__all__ = ["TableMaintenance", "prune_checksum_files", "table_files", "FRESH_FILES_KEPT"]

#: seconds: an unreferenced data file written more recently is never vacuumed, whatever the retention
FRESH_FILES_KEPT = 600.0

log = logging.getLogger(__name__)


class TableMaintenance:
    """One thread keeping one :class:`AppendOnlyTable` fit to read."""

    def __init__(self, table: AppendOnlyTable, *, compact_min_files: int = 32,
                 small_file_size: int = 1 << 20, merge_min_files: int = 8,
                 target_file_size: int = 64 << 20, poll_interval: float = 5.0,
                 min_checkpoint_interval: float = 1.0,
                 vacuum_interval: float = 600.0, retention_hours: int = 2,
                 max_files_per_round: int = 400) -> None:
        self.table = table
        self.compact_min_files = compact_min_files
        self.small_file_size = small_file_size
        self.merge_min_files = merge_min_files
        self.target_file_size = target_file_size
        #: a bound on one round's work, so each round (and its fsyncs) stays short
        self.max_files_per_round = max_files_per_round
        self._state: LogState | None = None
        self.min_checkpoint_interval = min_checkpoint_interval
        self._last_checkpoint = 0.0
        self.poll_interval = poll_interval
        self.vacuum_interval = vacuum_interval
        self.retention_hours = retention_hours
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._checkpoint_due = False
        self._thread: threading.Thread | None = None
        self._last_vacuum = time.monotonic()
        #: the refusal the last round met ("" when it ran): logged once, not every round
        self._refused = ""
        # statistics
        self.checkpoints = 0
        self.compactions = 0
        self.files_compacted = 0

    def start(self) -> None:
        self.table.on_checkpoint_due = self.checkpoint_due
        self._thread = threading.Thread(target=released(self._run), name=f"maintenance-{self.table.name}",
                                        daemon=True)
        self._thread.start()

    def checkpoint_due(self) -> None:
        """Called by the writer (any thread): a checkpoint should be written soon."""
        self._checkpoint_due = True
        self._wake.set()

    def close(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.table.on_checkpoint_due = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except UnsupportedTable as exc:    # until someone puts the table right: say so once
                if str(exc) != self._refused:
                    log.error("maintenance of %s stopped: %s", self.table.uri, exc)
                self._refused = str(exc)
            except Exception:              # maintenance must never take the broker down
                log.exception("maintenance of %s failed; retrying later", self.table.uri)
            else:
                if self._refused:
                    log.info("maintenance of %s resumed", self.table.uri)
                self._refused = ""
            if self._checkpoint_due:       # held back by the interval: come back for it
                self._stop.wait(self.min_checkpoint_interval)

    def run_once(self) -> None:
        """One round: compact if worthwhile, checkpoint if due, vacuum if its time has come."""
        compacted = self.compact()
        if ((self._checkpoint_due or compacted)
                and time.monotonic() - self._last_checkpoint >= self.min_checkpoint_interval):
            self._checkpoint_due = False
            self.checkpoint()
            self._last_checkpoint = time.monotonic()
            self.checkpoints += 1
        if time.monotonic() - self._last_vacuum >= self.vacuum_interval:
            self._last_vacuum = time.monotonic()
            self.vacuum()

    def log_state(self) -> LogState:
        """The local table's state, brought up to date (read in full the first time).

        Raises :class:`~lakehouse.table_features.UnsupportedTable` once another
        writer has turned the table into one DeltaMQ does not write correctly:
        no round then touches it (the round is logged as failed and retried).
        """
        if self._state is None:
            self._state = LogState(self.table.path)
            self._state.load()
        else:
            self._state.catch_up()
        self.table.check(self._state)
        self.table.observe(self._state.version)     # the appender may be another process
        return self._state

    def checkpoint(self) -> None:
        """Write a checkpoint of the latest version (from the log state; delta-rs on object storage)."""
        if self.table.remote:
            self.table.checkpoint()
            return
        state = self.log_state()
        if state.version > state.checkpoint_version:
            previous = state.checkpoint_version
            written = state.write_checkpoint()
            # a reader of a version before the checkpoint is a time-travel read, which
            # does without a checksum file: drop theirs, by name (no listing of the log)
            for version in range(max(previous, 0), written):
                with contextlib.suppress(FileNotFoundError):
                    checksum_file(state.log_dir, version).unlink()

    def _choose(self, files: pa.Table) -> list[tuple[str, int]]:
        """The files worth rewriting now, in two tiers so no byte is rewritten over and over.

        First the small files a commit each writes (under ``small_file_size``),
        once ``compact_min_files`` of them are there; else the medium files
        earlier compactions wrote, once ``merge_min_files`` of them are there.
        At most ``target_file_size`` bytes either way.
        """
        names, sizes = files.column("path").to_pylist(), files.column("size_bytes").to_pylist()
        small = [(n, s) for n, s in zip(names, sizes) if s < self.small_file_size]
        medium = [(n, s) for n, s in zip(names, sizes)
                  if self.small_file_size <= s < self.target_file_size // 2]
        for tier, needed in ((small, self.compact_min_files), (medium, self.merge_min_files)):
            if len(tier) < needed:
                continue
            chosen: list[tuple[str, int]] = []
            total = 0
            for name, size in tier:
                if total + size > self.target_file_size and len(chosen) >= 2:
                    break
                chosen.append((name, size))
                total += size
            return chosen
        return []

    def compact(self) -> int:
        """Rewrite small files as one; the number of files replaced (0 when not worth it)."""
        if self.table.remote:
            return self._compact_remote() if self._choose(self.table.remote_files()) else 0
        state = self.log_state()
        files = pa.table({"path": list(state.adds), "size_bytes": [a["size"] for a in state.adds.values()]},
                         schema=pa.schema([("path", pa.string()), ("size_bytes", pa.int64())]))
        chosen = self._choose(files)[:self.max_files_per_round]
        if len(chosen) < 2:
            return 0
        path = self.table.path
        new_name = f"part-{uuid.uuid4()}-c000.zstd.parquet"
        schema = self.table.schema
        batches = (batch for name, _ in chosen for batch in read_batches(path / unquote(name), schema))
        written = write_batches_synced(batches, path / new_name, schema, compression="zstd",
                                       keep=self.table.stats_columns())
        now_ms = int(time.time() * 1000)
        actions = [{"commitInfo": {"timestamp": now_ms, "operation": "OPTIMIZE",
                                   "operationParameters": {"targetSize": str(self.target_file_size)},
                                   "isBlindAppend": False,
                                   "operationMetrics": {"numRemovedFiles": str(len(chosen)),
                                                        "numAddedFiles": "1"}}},
                   {"add": written.add_action(self.table, new_name, now_ms=now_ms)}]
        actions += [{"remove": {"path": name, "deletionTimestamp": now_ms, "dataChange": False,
                                "extendedFileMetadata": True, "partitionValues": {}, "size": size}}
                    for name, size in chosen]
        self.table.commit_actions(actions)
        state.catch_up()
        self.compactions += 1
        self.files_compacted += len(chosen)
        log.debug("compacted %d files (%d rows) of %s", len(chosen), written.rows, path)
        return len(chosen)

    def _compact_remote(self) -> int:
        """``compact`` on object storage: delta-rs's ``optimize.compact()`` (one commit)."""
        removed = self.table.compact_remote(self.target_file_size)
        if removed:
            self.compactions += 1
            self.files_compacted += removed
            log.debug("compacted %d files of %s (delta-rs optimize)", removed, self.table.uri)
        return removed

    def vacuum(self) -> None:
        """Delete files removed more than the retention ago, and expired log entries."""
        if self.table.remote:
            self.table.vacuum_remote(self.retention_hours)
        else:
            self.vacuum_local()
        self.table.cleanup_log()
        if not self.table.remote:
            prune_checksum_files(self.table.path / "_delta_log")

    def vacuum_local(self) -> int:
        """Delete the data files of a local table no reader can need any more; how many.

        A file goes once it is not live, was removed more than the retention
        ago, and was written more than the retention ago.  delta-rs's vacuum
        only deletes files whose tombstones are still in the table's state, and
        checkpoints keep tombstones for ``delta.deletedFileRetentionDuration``
        only, which for the journal is shorter than the retention (each
        tombstone costs every Spark query a little).  So removals are
        remembered here (:attr:`LogState.removed_at`) for as long as their
        files stay.  A file no longer known at all -- removed before this
        process last started, so over the tombstone retention ago -- is judged
        by when it was written: a Spark stream that has fallen behind by less
        than the retention only reads files written after where it stands.
        """
        state = self.log_state()
        now_ms = int(time.time() * 1000)
        cutoff_ms = now_ms - int(self.retention_hours * 3_600_000)
        # however short the retention, a file the log never named that was written lately may be
        # an append's not yet committed, or one created ahead for an append (lakehouse.data_file_pool)
        fresh_ms = now_ms - int(FRESH_FILES_KEPT * 1000)
        live = {unquote(path) for path in state.adds}
        removed_at = {unquote(path): when for path, when in state.removed_at.items()}
        deleted = 0
        for entry in os.scandir(self.table.path):
            name = entry.name
            if not name.endswith(".parquet") or name in live or not entry.is_file():
                continue
            if removed_at.get(name, 0) > cutoff_ms:
                continue
            try:
                written_ms = entry.stat().st_mtime * 1000
                if written_ms > cutoff_ms or (name not in removed_at and written_ms > fresh_ms):
                    continue                   # new: maybe a commit's file not committed yet
                os.unlink(entry.path)
                deleted += 1
            except FileNotFoundError:
                pass
        gone = [path for path in state.removed_at if not (self.table.path / unquote(path)).exists()]
        for path in gone:
            del state.removed_at[path]
        return deleted


def prune_checksum_files(log_dir: Path) -> int:
    """Delete the checksum files of versions before the last checkpoint; how many.

    delta-rs's log clean-up leaves ``.crc`` files behind; the checkpoint round
    drops those it passes by name, this catches any it missed (one listing).
    """
    found = read_last_checkpoint(log_dir)
    if found is None:
        return 0
    last = int(found["version"])
    removed = 0
    for entry in os.scandir(log_dir):
        name = entry.name
        if name.endswith(".crc") and name[:20].isdigit() and int(name[:20]) < last:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed += 1
    return removed
