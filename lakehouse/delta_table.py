"""An append-only Delta table that is durable when ``append`` returns.

The only module that imports ``deltalake`` (delta-rs).  Facts measured on
these machines (../shared/notes/lakehouse-facts.md, and our own profiling)
shape it:

* delta-rs does not fsync.  After each commit we fsync the new data file, the
  commit file and both directories ourselves (~1 ms median), so an appended
  batch survives a power loss once ``append`` returns, not only a crash.
* delta-rs 1.6's write path costs 10-40 ms per commit on a table of a few
  hundred files (it refreshes its snapshot of the whole table on every
  commit, and the cost grows with the files and with the commits since the
  last checkpoint its handle knows of), and up to ~100 ms on the commits that
  also write a checkpoint.  A journal that confirms after every commit cannot
  afford that.  So a blind append -- the only write this class makes -- is
  committed the way the Delta protocol defines it, directly: the batch is
  written as one Parquet file (pyarrow), then the commit file
  ``_delta_log/<version>.json`` (``commitInfo`` + one ``add`` action) is
  created with put-if-absent semantics (``link(2)`` of a fully written,
  fsynced temporary file, which fails if the version exists).  If another
  writer took that version -- delta-rs compacting or checkpointing the same
  table from the maintenance thread -- the winner is checked (a blind append
  conflicts with nothing but a change of schema or protocol) and the next
  version is tried.  ~2-4 ms per commit, flat.
* delta-rs does everything else: creating the table, checkpoints (every
  ``checkpoint_interval`` commits, or by a maintenance thread), compaction,
  vacuum and every read (QueryBuilder; the ``to_pyarrow_*`` readers can abort
  the process at exit: delta-rs issue 2184).
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
import uuid
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from broker import __version__

CHECKPOINT_INTERVAL = 20


class AppendOnlyTable:
    """One Delta table at a local path, appended to by one writer (others may compact it)."""

    def __init__(self, path: str | Path, schema: pa.Schema, *, name: str = "",
                 checkpoint_interval: int = CHECKPOINT_INTERVAL, stats_column: str | None = None,
                 properties: dict[str, str] | None = None) -> None:
        self.path = Path(path)
        self.schema = schema
        self.name = name or self.path.name
        self.checkpoint_interval = checkpoint_interval
        #: a column whose min/max go into each file's stats (Spark skips files with them)
        self.stats_column = stats_column
        #: called instead of checkpointing inline when a checkpoint is due (a maintenance thread)
        self.on_checkpoint_due: Callable[[], None] | None = None
        #: extra table properties set when the table is created
        self.properties = dict(properties or {})
        self._version = -1
        self._commits_since_checkpoint = 0
        self._lock = threading.Lock()

    def open(self) -> None:
        if DeltaTable.is_deltatable(str(self.path)):
            self._version = int(DeltaTable(str(self.path)).version())
            return
        self.path.mkdir(parents=True, exist_ok=True)
        write_deltalake(str(self.path), self.schema.empty_table(), mode="append", name=self.name,
                        configuration={
                            # compaction stays allowed; deletes and updates do not, so a
                            # Spark stream reading the table never meets a data-changing removal
                            "delta.appendOnly": "true",
                            "delta.checkpointInterval": str(self.checkpoint_interval),
                            **self.properties,
                        })
        self._fsync_commit(0)
        self._version = 0

    @property
    def version(self) -> int:
        assert self._version >= 0, "table not open"
        return self._version

    def append(self, rows: pa.Table) -> int:
        """Commit ``rows`` as one Delta commit, fsync it, return the new version."""
        assert self._version >= 0, "table not open"
        if rows.schema != self.schema:
            rows = rows.cast(self.schema)
        # snappy: the cheapest codec to write on the hot path (compaction rewrites with zstd)
        name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
        data = self.path / name
        pq.write_table(rows, data, compression="snappy")
        now_ms = int(time.time() * 1000)
        actions = [
            {"commitInfo": {"timestamp": now_ms, "operation": "WRITE",
                            "operationParameters": {"mode": "Append"}, "isBlindAppend": True,
                            "engineInfo": f"deltamq/{__version__}",
                            "operationMetrics": {"numFiles": "1",
                                                 "numOutputRows": str(rows.num_rows)}}},
            {"add": self.add_action(name, rows, data_change=True, now_ms=now_ms)},
        ]
        version = self.commit_actions(actions, sync_first=(data,))
        self._commits_since_checkpoint += 1
        if self._commits_since_checkpoint >= self.checkpoint_interval:
            self._commits_since_checkpoint = 0
            if self.on_checkpoint_due is not None:
                self.on_checkpoint_due()
            else:
                self.checkpoint()
        return version

    def add_action(self, name: str, rows: pa.Table, *, data_change: bool, now_ms: int) -> dict[str, Any]:
        """The ``add`` action for data file ``name`` (in the table directory) holding ``rows``."""
        stats: dict[str, Any] = {"numRecords": rows.num_rows}
        if self.stats_column is not None and rows.num_rows:
            bounds = pc.min_max(rows.column(self.stats_column))
            stats["minValues"] = {self.stats_column: bounds["min"].as_py()}
            stats["maxValues"] = {self.stats_column: bounds["max"].as_py()}
        return {"path": name, "partitionValues": {}, "size": (self.path / name).stat().st_size,
                "modificationTime": now_ms, "dataChange": data_change,
                "stats": json.dumps(stats, separators=(",", ":"))}

    def commit_actions(self, actions: list[dict[str, Any]], sync_first: tuple[Path, ...] = ()) -> int:
        """Write ``actions`` as the next free version (put-if-absent), fsynced; the version.

        Safe to call from two threads (the appender and the maintenance thread):
        the loser of a race for a version moves on to the next one.  Files in
        ``sync_first`` (the new data files) are fsynced together with the
        commit file's content before it is linked into place, then both
        directories; the fsyncs of each step run in parallel, so the disk can
        serve them with one journal flush.
        """
        log_dir = self.path / "_delta_log"
        temp = log_dir / f".deltamq-{uuid.uuid4()}.json.tmp"
        payload = "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, payload.encode("utf-8"))
        finally:
            os.close(fd)
        _fsync_all((temp, *sync_first))
        with self._lock:
            version = self._version + 1
        try:
            while True:
                target = log_dir / f"{version:020d}.json"
                try:
                    os.link(temp, target)
                    break
                except FileExistsError:
                    self._check_winner(target)
                    version += 1
        finally:
            os.unlink(temp)
        _fsync_all((log_dir, self.path))
        with self._lock:
            self._version = max(self._version, version)
        return version

    def _check_winner(self, commit: Path) -> None:
        """Another writer committed this version first: fine unless it changed schema or protocol."""
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action or "protocol" in action:
                raise RuntimeError(f"{commit.name} changed the table's metadata or protocol while"
                                   f" {self.name} was being appended to; re-open the table")

    def checkpoint(self) -> None:
        """Write a Delta checkpoint of the current version (delta-rs)."""
        DeltaTable(str(self.path)).create_checkpoint()

    def read(self, sql: str = "SELECT * FROM t") -> pa.Table:
        """Run ``sql`` over the table (named ``t``) and return the result."""
        table = DeltaTable(str(self.path))
        reader = QueryBuilder().register("t", table).execute(sql)
        result = pa.table(reader.read_all())
        return result if result.num_columns else self.schema.empty_table()

    def _fsync_commit(self, version: int) -> None:
        log_dir = self.path / "_delta_log"
        commit = log_dir / f"{version:020d}.json"
        for line in commit.read_text().splitlines():
            action: dict[str, Any] = json.loads(line)
            add = action.get("add")
            if add is not None:
                fsync_path(self.path / unquote(add["path"]))   # paths in the log are URL-encoded
        fsync_path(commit)
        fsync_path(log_dir)
        fsync_path(self.path)

    def close(self) -> None:
        self._version = -1


def fsync_path(path: Path) -> None:
    """fsync a file or directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_FSYNC_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fsync")


def _fsync_all(paths: tuple[Path, ...]) -> None:
    """fsync every path, concurrently; raise the first failure."""
    if len(paths) == 1:
        fsync_path(paths[0])
        return
    for future in [_FSYNC_POOL.submit(fsync_path, path) for path in paths]:
        future.result()
