"""An append-only Delta table that is durable when ``append`` returns.

The only module that imports ``deltalake`` (delta-rs).  Two facts measured on
these machines (../shared/notes/lakehouse-facts.md) shape it:

* delta-rs does not fsync.  After each commit we fsync the new data files, the
  commit file and both directories ourselves (~1 ms median), so an appended
  batch survives a power loss once ``append`` returns, not only a crash.
* Commit time grows with the commits since the last checkpoint that the open
  handle knows of, and a handle never notices later checkpoints: the table is
  created with ``delta.checkpointInterval`` and the handle is re-opened after
  every commit that wrote one.

Reads go through delta-rs' QueryBuilder (the ``to_pyarrow_*`` readers can abort
the process at exit: delta-rs issue 2184).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake

CHECKPOINT_INTERVAL = 20


class AppendOnlyTable:
    """One Delta table at a local path, appended to by one writer."""

    def __init__(self, path: str | Path, schema: pa.Schema, *, name: str = "",
                 checkpoint_interval: int = CHECKPOINT_INTERVAL) -> None:
        self.path = Path(path)
        self.schema = schema
        self.name = name or self.path.name
        self.checkpoint_interval = checkpoint_interval
        self._table: DeltaTable | None = None

    def open(self) -> None:
        if DeltaTable.is_deltatable(str(self.path)):
            self._table = DeltaTable(str(self.path))
            return
        self.path.mkdir(parents=True, exist_ok=True)
        write_deltalake(str(self.path), self.schema.empty_table(), mode="append", name=self.name,
                        configuration={
                            # compaction stays allowed; deletes and updates do not, so a
                            # Spark stream reading the table never meets a data-changing removal
                            "delta.appendOnly": "true",
                            "delta.checkpointInterval": str(self.checkpoint_interval),
                        })
        self._fsync_commit(0)
        self._table = DeltaTable(str(self.path))

    @property
    def version(self) -> int:
        assert self._table is not None, "table not open"
        return int(self._table.version())

    def append(self, rows: pa.Table) -> int:
        """Commit ``rows`` as one Delta commit, fsync it, return the new version."""
        assert self._table is not None, "table not open"
        write_deltalake(self._table, rows.cast(self.schema), mode="append")
        self._table.update_incremental()
        version = int(self._table.version())
        self._fsync_commit(version)
        if version % self.checkpoint_interval == 0:
            self._table = DeltaTable(str(self.path))       # see the module docstring
        return version

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
                _fsync(self.path / unquote(add["path"]))   # paths in the log are URL-encoded
        _fsync(commit)
        _fsync(log_dir)
        _fsync(self.path)

    def close(self) -> None:
        self._table = None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
