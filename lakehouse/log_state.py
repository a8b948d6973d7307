"""The state of a local Delta table, kept up to date by reading each commit once; its checkpoints.

Maintenance needs the table's live files (to choose what to compact) and
writes checkpoints.  With delta-rs, each round opened a fresh snapshot --
the last checkpoint plus every commit after it -- and each checkpoint did
the same again.  Under load (a commit every ~10 ms) maintenance fell behind,
so the replays grew (3,000 commits, 2 s for one checkpoint), and it ended up
busy all the time, taking CPU and disk from the commits it was meant to
serve.

:class:`LogState` reads the table once (its last checkpoint, then the
commits after it), then only the new commit files: ``<version>.json`` is
opened by name, version after version, until one does not exist -- no
listing of ``_delta_log``.  :meth:`LogState.write_checkpoint` writes the
Delta checkpoint of the current version from that state with pyarrow: a
Parquet file of the protocol, metadata, transaction, live ``add`` and
unexpired ``remove`` actions (tombstones younger than the table's
``delta.deletedFileRetentionDuration``), in the column layout delta-rs and
Delta Spark write and read, then ``_last_checkpoint``.  Single-file
checkpoints only (what delta-rs and this module write).

This module is the one reader of a local table's ``_delta_log``: everything
else that needs a commit's actions (:func:`read_commit`: the appender
checking a concurrent writer's commit, the checksum files following other
writers) or the last checkpoint (:func:`read_last_checkpoint`) asks it.
The table's protocol and features are checked (:mod:`lakehouse.table_features`)
from the :attr:`LogState.protocol`, :attr:`LogState.metadata` and
:attr:`LogState.deletion_vectors` it reads.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow.fs import FileSystem

__all__ = ["LogState", "CHECKPOINT_SCHEMA", "parse_interval_ms", "commit_file", "read_commit",
           "read_last_checkpoint", "LAST_CHECKPOINT", "appended_files", "read_commits"]

#: the file naming a table's newest checkpoint, in ``_delta_log``
LAST_CHECKPOINT = "_last_checkpoint"

_STRING_MAP = pa.map_(pa.string(), pa.string())
_DELETION_VECTOR = pa.struct([
    pa.field("storageType", pa.string(), nullable=False),
    pa.field("pathOrInlineDv", pa.string(), nullable=False),
    pa.field("offset", pa.int32()),
    pa.field("sizeInBytes", pa.int32(), nullable=False),
    pa.field("cardinality", pa.int64(), nullable=False),
])
_FEATURES = pa.list_(pa.field("element", pa.string(), nullable=False))

#: the columns of a checkpoint (as delta-rs 1.6 writes them; Delta Spark reads them by name)
CHECKPOINT_SCHEMA = pa.schema([
    pa.field("add", pa.struct([
        pa.field("path", pa.string(), nullable=False),
        pa.field("partitionValues", _STRING_MAP, nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("modificationTime", pa.int64(), nullable=False),
        pa.field("dataChange", pa.bool_(), nullable=False),
        pa.field("stats", pa.string()),
        pa.field("tags", _STRING_MAP),
        pa.field("deletionVector", _DELETION_VECTOR),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("clusteringProvider", pa.string()),
    ])),
    pa.field("remove", pa.struct([
        pa.field("path", pa.string(), nullable=False),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_(), nullable=False),
        pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", _STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("stats", pa.string()),
        pa.field("tags", _STRING_MAP),
        pa.field("deletionVector", _DELETION_VECTOR),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
    ])),
    pa.field("metaData", pa.struct([
        pa.field("id", pa.string(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field("format", pa.struct([
            pa.field("provider", pa.string(), nullable=False),
            pa.field("options", _STRING_MAP, nullable=False),
        ]), nullable=False),
        pa.field("schemaString", pa.string(), nullable=False),
        pa.field("partitionColumns", _FEATURES, nullable=False),
        pa.field("createdTime", pa.int64()),
        pa.field("configuration", _STRING_MAP, nullable=False),
    ])),
    pa.field("protocol", pa.struct([
        pa.field("minReaderVersion", pa.int32(), nullable=False),
        pa.field("minWriterVersion", pa.int32(), nullable=False),
        pa.field("readerFeatures", _FEATURES),
        pa.field("writerFeatures", _FEATURES),
    ])),
    pa.field("txn", pa.struct([
        pa.field("appId", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("lastUpdated", pa.int64()),
    ])),
])

_ADD_FIELDS = tuple(f.name for f in CHECKPOINT_SCHEMA.field("add").type)
_REMOVE_FIELDS = tuple(f.name for f in CHECKPOINT_SCHEMA.field("remove").type)
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(\w+?)s?\s*$", re.IGNORECASE)
_UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000,
            "day": 86_400_000, "week": 604_800_000}
#: Delta's default ``delta.deletedFileRetentionDuration``
DEFAULT_TOMBSTONE_RETENTION = "interval 1 week"


def parse_interval_ms(text: str) -> int:
    """A Delta duration property (``interval 1 hours``) in milliseconds."""
    match = _INTERVAL.match(text)
    if match is None or match.group(2).lower() not in _UNIT_MS:
        raise ValueError(f"not a Delta interval: {text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2).lower()]


def commit_file(log_dir: Path, version: int) -> Path:
    """The commit file of ``version`` in the log directory ``log_dir``."""
    return log_dir / f"{version:020d}.json"


def read_commit(log_dir: Path, version: int) -> list[dict[str, Any]]:
    """The actions of commit ``version``, in order; FileNotFoundError when there is none."""
    text = commit_file(log_dir, version).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def read_commits(filesystem: FileSystem, first: int, last: int) -> list[list[dict[str, Any]]]:
    """The actions of commits ``first`` .. ``last``, one list per commit, from a file system rooted at the table.

    Any table, local or on object storage
    (:func:`lakehouse.delta_table.table_filesystem`).  FileNotFoundError when
    one of them is no longer in the log (log clean-up drops the commits older
    than ``delta.logRetentionDuration`` that a checkpoint covers).
    """
    commits = []
    for version in range(first, last + 1):
        name = f"_delta_log/{version:020d}.json"
        try:
            with filesystem.open_input_stream(name) as stream:
                text = stream.read().decode("utf-8")
        except OSError as exc:                  # an object store's "not found" may be a plain OSError
            raise FileNotFoundError(f"{name}: {exc}") from exc
        commits.append([json.loads(line) for line in text.splitlines() if line.strip()])
    return commits


def read_last_checkpoint(log_dir: Path) -> dict[str, Any] | None:
    """``_last_checkpoint`` (``version``, ``size``, ``parts``, ...); None when absent or unreadable."""
    try:
        last = json.loads((log_dir / LAST_CHECKPOINT).read_text())
        int(last["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return last if isinstance(last, dict) else None


def appended_files(commits: list[list[dict[str, Any]]]) -> list[str]:
    """The data files holding the rows a run of commits appended, and only those.

    What a reader following the table from one version to a later one must
    read: the files of ``add`` actions with ``dataChange=true``.  Other
    ``dataChange=false`` rewrites (history retention) are skipped, as Delta
    Spark's streaming source skips them, and the files they replaced are
    read (vacuum keeps them for the log retention).  A compaction
    (``OPTIMIZE``) whose every source file is one of those already chosen
    holds exactly their rows: its output is read instead of them, so a long
    run of commits is read from the few files compaction made of it.  A
    commit that removes data (a ``remove`` with ``dataChange=true``: a delete
    or an update) raises ValueError: following the appends no longer gives
    the table's rows.
    """
    files: dict[str, None] = {}                 # an ordered set
    for actions in commits:
        operation = None
        rewritten: list[str] = []
        sources: list[str] = []
        for entry in actions:
            add, remove, info = entry.get("add"), entry.get("remove"), entry.get("commitInfo")
            if info is not None:
                operation = info.get("operation")
            elif add is not None:
                if add.get("dataChange", True):
                    files[add["path"]] = None
                else:
                    rewritten.append(add["path"])
            elif remove is not None:
                if remove.get("dataChange", True):
                    raise ValueError(f"a commit removed data file {remove.get('path')} (a delete or an update)")
                sources.append(remove["path"])
        if operation == "OPTIMIZE" and rewritten and sources and all(path in files for path in sources):
            for path in sources:
                del files[path]
            files.update(dict.fromkeys(rewritten))
    return list(files)


def _pick(action: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: action.get(name) for name in fields}


class LogState:
    """What the log of the local Delta table at ``path`` says, as of :attr:`version`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.log_dir = path / "_delta_log"
        self.version = -1
        #: the live data files: path -> add action (as in the log)
        self.adds: dict[str, dict[str, Any]] = {}
        #: files removed: path -> remove action (the tombstones: dropped once expired)
        self.removes: dict[str, dict[str, Any]] = {}
        #: files removed and maybe still on disk: path -> when (ms), kept past the tombstone's
        #: expiry until vacuum deletes the file (it keeps files longer than the tombstones)
        self.removed_at: dict[str, int] = {}
        self.metadata: dict[str, Any] | None = None
        self.protocol: dict[str, Any] | None = None
        self.txns: dict[str, dict[str, Any]] = {}
        self.checkpoint_version = -1
        #: live files that carry a deletion vector (rows deleted without rewriting the file)
        self.deletion_vectors = 0

    # -- reading --------------------------------------------------------------------------

    def load(self) -> None:
        """Read the table from its last checkpoint (if any) and the commits after it."""
        start = 0
        last = read_last_checkpoint(self.log_dir)
        if last is not None and not last.get("parts"):
            checkpoint = self.log_dir / f"{int(last['version']):020d}.checkpoint.parquet"
            if checkpoint.exists():
                self._read_checkpoint(checkpoint)
                self.version = self.checkpoint_version = int(last["version"])
                start = self.version + 1
        self.version = start - 1
        self.catch_up()
        if self.metadata is None:
            raise ValueError(f"{self.path}: no Delta table metadata found")

    def _read_checkpoint(self, checkpoint: Path) -> None:
        table = pq.read_table(checkpoint)
        names = set(table.column_names)
        for column in ("add", "remove", "metaData", "protocol", "txn"):
            if column not in names:
                continue
            for value in table.column(column).to_pylist():
                if value is not None:
                    self._apply(column, _from_arrow(value))

    def catch_up(self) -> int:
        """Apply every commit after :attr:`version`; how many there were."""
        applied = 0
        while True:
            try:
                actions = read_commit(self.log_dir, self.version + 1)
            except FileNotFoundError:
                return applied
            for entry in actions:
                for kind, action in entry.items():
                    self._apply(kind, action)
            self.version += 1
            applied += 1

    def _apply(self, kind: str, action: dict[str, Any]) -> None:
        if kind == "add":
            self._forget_deletion_vector(action["path"])
            self.adds[action["path"]] = action
            if action.get("deletionVector"):
                self.deletion_vectors += 1
            self.removes.pop(action["path"], None)
            self.removed_at.pop(action["path"], None)
        elif kind == "remove":
            self._forget_deletion_vector(action["path"])
            self.adds.pop(action["path"], None)
            self.removes[action["path"]] = action
            self.removed_at[action["path"]] = int(action.get("deletionTimestamp") or 0)
        elif kind == "metaData":
            self.metadata = action
        elif kind == "protocol":
            self.protocol = action
        elif kind == "txn":
            self.txns[action["appId"]] = action

    def _forget_deletion_vector(self, path: str) -> None:
        previous = self.adds.get(path)
        if previous is not None and previous.get("deletionVector"):
            self.deletion_vectors -= 1

    @property
    def tombstone_retention_ms(self) -> int:
        configuration = (self.metadata or {}).get("configuration") or {}
        return parse_interval_ms(configuration.get("delta.deletedFileRetentionDuration",
                                                   DEFAULT_TOMBSTONE_RETENTION))

    # -- writing --------------------------------------------------------------------------

    def write_checkpoint(self) -> int:
        """Write the checkpoint of :attr:`version` and point ``_last_checkpoint`` at it.

        Not delta-rs's ``create_checkpoint``: it lists the whole ``_delta_log``
        first, which took 1.9 s median with 20,896 entries there, against 45 ms
        here (figures in :mod:`lakehouse.maintenance`).
        """
        assert self.metadata is not None and self.protocol is not None, "load() first"
        cutoff = int(time.time() * 1000) - self.tombstone_retention_ms
        rows: list[dict[str, Any]] = [{"protocol": self.protocol}, {"metaData": _to_arrow_metadata(self.metadata)}]
        rows += ({"txn": txn} for txn in self.txns.values())
        rows += ({"add": _to_arrow_file(add, _ADD_FIELDS)} for add in self.adds.values())
        expired = [path for path, remove in self.removes.items()
                   if (remove.get("deletionTimestamp") or 0) < cutoff]
        for path in expired:
            del self.removes[path]
        rows += ({"remove": _to_arrow_file(remove, _REMOVE_FIELDS)} for remove in self.removes.values())
        table = pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA)
        version = self.version
        target = self.log_dir / f"{version:020d}.checkpoint.parquet"
        temp = self.log_dir / f".deltamq-{uuid.uuid4()}.checkpoint.parquet.tmp"
        pq.write_table(table, temp)
        os.replace(temp, target)
        last = {"version": version, "size": table.num_rows, "sizeInBytes": target.stat().st_size,
                "numOfAddFiles": len(self.adds)}
        temp = self.log_dir / f".deltamq-{uuid.uuid4()}.last_checkpoint.tmp"
        temp.write_text(json.dumps(last, separators=(",", ":")))
        os.replace(temp, self.log_dir / LAST_CHECKPOINT)
        self.checkpoint_version = version
        return version


def _from_arrow(value: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint row's action (maps read as lists of pairs) in the log's JSON form."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        if item is None:
            continue
        if key in ("partitionValues", "tags", "configuration", "options") and isinstance(item, list):
            item = dict(item)
        elif isinstance(item, dict):
            item = _from_arrow(item)
        out[key] = item
    return out


def _to_arrow_file(action: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    row = _pick(action, fields)
    if row.get("partitionValues") is None:
        row["partitionValues"] = {}
    return row


def _to_arrow_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    row = dict(metadata)
    row.setdefault("format", {"provider": "parquet", "options": {}})
    row["format"] = {"provider": row["format"].get("provider", "parquet"),
                     "options": row["format"].get("options") or {}}
    row.setdefault("partitionColumns", [])
    row["configuration"] = row.get("configuration") or {}
    return row
