"""An append-only Delta table that is durable when ``append`` returns.

The only module that imports ``deltalake`` (delta-rs).  Facts measured on
these machines (delta-rs and Delta Spark measurements, and our own profiling)
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

Before the first write, and whenever another writer commits a change of the
table's protocol or metadata, the table's protocol version and features are
checked against those DeltaMQ writes correctly
(:mod:`lakehouse.table_features`): a table Delta Spark has upgraded (deletion
vectors, column mapping, constraints, ...) raises
:class:`~lakehouse.table_features.UnsupportedTable` and is left untouched.
On a local disk the log is read by :class:`~lakehouse.log_state.LogState`
(the one reader of a local ``_delta_log``), on object storage by delta-rs.

This module is the only one that imports ``deltalake`` (a test walks the
sources to keep it so): maintenance and retention reach delta-rs through
:class:`AppendOnlyTable` (:meth:`~AppendOnlyTable.compact_remote`,
:meth:`~AppendOnlyTable.vacuum_remote`, :meth:`~AppendOnlyTable.cleanup_log`,
:meth:`~AppendOnlyTable.remote_files`) and :func:`table_files`.  Reading a table as
of any version (replay's time travel, the journal's snapshots) is
:mod:`lakehouse.delta_versions`, the adapter's other half.

Object storage
--------------
A table's location may also be a URI (``s3://bucket/prefix/table``; any
scheme delta-rs knows), with ``storage_options`` for delta-rs.  Without them
delta-rs reads the standard environment variables itself (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, ...).  There every write goes
through delta-rs (an append is ``write_deltalake(mode="append")`` on a handle
kept open between appends), and nothing is fsynced: a PUT that object
storage has acknowledged is durable, so ``append`` is durable once it
returns, as on a local disk.

Concurrent writers on S3 (the appender and the maintenance thread's
compaction and checkpoints, or another process) need a commit that fails if
its version exists.  delta-rs 1.6 writes each commit file with a
*conditional PUT* (``If-None-Match: *``) by default, which AWS S3 (since
2024), MinIO, Cloudflare R2 and moto honour, so neither a DynamoDB locking
provider nor ``AWS_S3_ALLOW_UNSAFE_RENAME`` is needed; the loser of a race is
retried at the next version by delta-rs.  A store that ignores conditional
PUTs needs ``AWS_S3_LOCKING_PROVIDER=dynamodb`` (passed through unchanged).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.schema import Field as DeltaField
from deltalake.transaction import CommitProperties, PostCommitHookProperties, Transaction

from broker import __version__

from .log_state import LogState, commit_file, read_commit
from .table_features import UnsupportedTable, check_table
from .version_checksum import TableChecksum

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL = 20
#: bytes :meth:`AppendOnlyTable.probe` writes: about what a small commit needs
PROBE_BYTES = 64 * 1024

#: a location: a local path, or a URI string (``s3://bucket/prefix``)
Location = str | Path

#: what ``Path("s3://bucket/x")`` leaves of a URI: ``s3:/bucket/x``
_MANGLED_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/[^/]")


def is_uri(location: Location) -> bool:
    """Whether ``location`` names object storage (a URI with a scheme), not a local path.

    ``file://`` URIs and Windows drive letters count as local paths.
    """
    if isinstance(location, Path):
        return False
    scheme = urlsplit(location).scheme
    return len(scheme) > 1 and scheme != "file" and "://" in location


def local_path(location: Location) -> Path:
    """A local location as a :class:`~pathlib.Path` (``file://`` URIs included)."""
    if isinstance(location, str) and location.startswith("file://"):
        return Path(unquote(urlsplit(location).path))
    return Path(location)


def child_location(location: Location, *names: str) -> Location:
    """``location`` joined with ``names``: a Path for local paths, a URI string otherwise.

    Never ``Path(uri)``: it turns ``s3://bucket`` into ``s3:/bucket``.
    """
    if is_uri(location):
        return "/".join([str(location).rstrip("/"), *names])
    return local_path(location).joinpath(*names)



#: how often :func:`open_delta` tries again when it listed the log while a commit was being written
LISTING_RACE_RETRIES = 50
#: delta-rs's errors for a log listed mid-change: a checksum before its commit, a commit missing
#: between two others (seen while the broker committed and cleaned up its log under heavy load)
LISTING_RACES = ("is newer than log segment version", "Expected contiguous commit files")


def open_delta(uri: str, *, version: int | None = None,
               storage_options: dict[str, str] | None = None) -> DeltaTable:
    """``DeltaTable(uri, version, storage_options)``, tolerating a log listed mid-commit.

    A reader that lists ``_delta_log`` while a writer adds a commit and its
    version checksum (``N.json``, then ``N.crc``; the journal commits every
    few milliseconds) may see the newest ``.crc`` but not yet its ``.json``.
    delta-rs (its kernel) then refuses the listing ("CRC file version N is
    newer than log segment version M"); listing again a moment later sees
    both.  Any other error is raised at once.
    """
    for attempt in range(LISTING_RACE_RETRIES + 1):
        try:
            return DeltaTable(uri, version=version, storage_options=storage_options)
        except DeltaError as exc:
            if not any(race in str(exc) for race in LISTING_RACES) or attempt == LISTING_RACE_RETRIES:
                raise
            time.sleep(0.002 * (attempt + 1))
    raise AssertionError("unreachable")

class CommittedUnsynced(OSError):
    """The commit file is in the log (readers see it) but fsyncing its directory failed."""

    def __init__(self, version: int, cause: OSError) -> None:
        super().__init__(cause.errno, f"version {version} committed but not synced: {cause}")
        self.version = version


class AppendOnlyTable:
    """One Delta table, appended to by one writer (others may compact it).

    At a local path (or ``file://`` URI) or on object storage (a URI such as
    ``s3://bucket/prefix/table``; see the module's docstring).
    """

    def __init__(self, path: Location, schema: pa.Schema, *, name: str = "",
                 checkpoint_interval: int = CHECKPOINT_INTERVAL, stats_column: str | None = None,
                 time_stats_column: str | None = None,
                 properties: dict[str, str] | None = None,
                 storage_options: dict[str, str] | None = None) -> None:
        if isinstance(path, Path) and _MANGLED_URI.match(str(path)):
            raise ValueError(f"{path}: a URI turned into a Path (which drops a slash of '://');"
                             " pass object storage locations as strings")
        #: true when the table is on object storage, not a local file system
        self.remote = is_uri(path)
        self._path = None if self.remote else local_path(path)
        #: where the table is, as delta-rs takes it: a local path or a URI
        self.uri = str(path).rstrip("/") if self.remote else str(self._path)
        #: options for delta-rs's object store (None: its defaults and the environment)
        self.storage_options = dict(storage_options) if storage_options else None
        self.schema = schema
        self.name = name or self.uri.rsplit("/", 1)[-1]
        self.checkpoint_interval = checkpoint_interval
        #: a column whose min/max go into each file's stats (Spark skips files with them)
        self.stats_column = stats_column
        #: a timestamp column whose min/max (to the millisecond, widened) go into the stats too
        self.time_stats_column = time_stats_column
        #: called instead of checkpointing inline when a checkpoint is due (a maintenance thread)
        self.on_checkpoint_due: Callable[[], None] | None = None
        #: extra table properties set when the table is created
        self.properties = dict(properties or {})
        self._version = -1
        self._commits_since_checkpoint = 0
        self._lock = threading.Lock()
        #: object storage only: the appender's delta-rs handle (re-opened after checkpoints)
        self._handle: DeltaTable | None = None
        #: local tables: the figures of the newest version's checksum file (None: none written)
        self._checksum: TableChecksum | None = None
        self._checksum_lock = threading.Lock()
        self._deferred_checksum: tuple[int, list[dict[str, Any]]] | None = None
        #: the table's protocol and metaData actions as last checked (None: not yet)
        self._protocol: dict[str, Any] | None = None
        self._metadata: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        """The table's directory (local tables only)."""
        if self._path is None:
            raise ValueError(f"table {self.name} is on object storage ({self.uri}), not a local path")
        return self._path

    def delta_table(self) -> DeltaTable:
        """A fresh delta-rs handle on the table's latest version."""
        return open_delta(self.uri, storage_options=self.storage_options)

    def open(self) -> None:
        """Open the table (creating it if there is none), after checking DeltaMQ may write it.

        Raises :class:`~lakehouse.table_features.UnsupportedTable` (and writes
        nothing) for a table whose protocol or features DeltaMQ does not honour.
        """
        if self.remote:
            # not DeltaTable.is_deltatable: in delta-rs 1.6 it holds the GIL during its I/O,
            # stalling every other thread (the event loop) for a round trip to the store
            try:
                handle = self.delta_table()
            except TableNotFoundError:
                pass
            else:
                self._check_with_delta_rs(handle)
                self._version = int(handle.version())
                return
        elif DeltaTable.is_deltatable(self.uri):
            try:
                state = self._local_state()
            except UnsupportedTable:
                raise
            except (OSError, ValueError) as exc:
                # a log LogState cannot read (a multi-part checkpoint): delta-rs reads it
                log.warning("%s: no checksum files will be written (%s)", self.name, exc)
                handle = self.delta_table()
                self._check_with_delta_rs(handle)
                self._version = int(handle.version())
                self._checksum = None
                return
            self._version = state.version
            self._start_checksums(state)
            return
        if self._path is not None:
            self._path.mkdir(parents=True, exist_ok=True)
        write_deltalake(self.uri, self.schema.empty_table(), mode="append", name=self.name,
                        storage_options=self.storage_options,
                        configuration={
                            # compaction stays allowed; deletes and updates do not, so a
                            # Spark stream reading the table never meets a data-changing removal
                            "delta.appendOnly": "true",
                            "delta.checkpointInterval": str(self.checkpoint_interval),
                            **self.properties,
                        })
        if self._path is not None:
            self._fsync_commit(0)
            self._start_checksums(self._local_state())
        self._version = 0

    def _local_state(self) -> LogState:
        """The local table's log, read in full, its protocol and features checked."""
        state = LogState(self.path)
        state.load()
        self.check(state)
        return state

    def check(self, state: LogState) -> None:
        """Raise :class:`UnsupportedTable` unless DeltaMQ writes the table ``state`` read correctly.

        Cheap when nothing changed: the protocol and metadata are only checked
        again when they are other actions than those last checked.
        """
        if state.deletion_vectors or state.protocol is not self._protocol \
                or state.metadata is not self._metadata:
            check_table(self.name, self.uri, state.protocol, state.metadata,
                        deletion_vectors=state.deletion_vectors > 0)
            self._protocol, self._metadata = state.protocol, state.metadata

    def _check_with_delta_rs(self, handle: DeltaTable) -> None:
        """:meth:`check` from what delta-rs read (object storage, or a log LogState cannot read)."""
        versions = handle.protocol()
        protocol: dict[str, Any] = {"minReaderVersion": versions.min_reader_version,
                                    "minWriterVersion": versions.min_writer_version,
                                    "readerFeatures": versions.reader_features,
                                    "writerFeatures": versions.writer_features}
        metadata = {"configuration": dict(handle.metadata().configuration),
                    "schemaString": handle.schema().to_json()}
        features = set(versions.reader_features or ()) | set(versions.writer_features or ())
        # only a table that allows deletion vectors can have them: read them only then
        with_vectors = "deletionVectors" in features and \
            pa.table(handle.deletion_vectors()).num_rows > 0
        check_table(self.name, self.uri, protocol, metadata, deletion_vectors=with_vectors)

    @property
    def version(self) -> int:
        assert self._version >= 0, "table not open"
        return self._version

    def observe(self, version: int) -> None:
        """Another process committed up to ``version``: commit after it (no race to lose first)."""
        with self._lock:
            self._version = max(self._version, version)

    def append(self, rows: pa.Table, *, defer_checksum: bool = False) -> int:
        """Commit ``rows`` as one Delta commit, fsync it, return the new version.

        With ``defer_checksum`` the commit's checksum file is written by the
        next :meth:`write_deferred_checksum` (after the caller has answered
        whoever waits for the commit) rather than before this returns.
        """
        assert self._version >= 0, "table not open"
        if rows.schema != self.schema:
            rows = rows.cast(self.schema)
        if self.remote:
            return self._append_remote(rows)
        # snappy: the cheapest codec to write on the hot path (compaction rewrites with zstd)
        name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
        data = self.path / name
        try:
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
            version = self.commit_actions(actions, sync_first=(data,), defer_checksum=defer_checksum)
        except CommittedUnsynced:
            raise                               # in the log: the file must stay
        except BaseException:
            # not committed: a half-written file must not eat the space a retry needs
            data.unlink(missing_ok=True)
            raise
        self._commits_since_checkpoint += 1
        if self._commits_since_checkpoint >= self.checkpoint_interval:
            self._commits_since_checkpoint = 0
            if self.on_checkpoint_due is not None:
                self.on_checkpoint_due()
            else:
                self.checkpoint()
        return version

    def _append_remote(self, rows: pa.Table) -> int:
        """``append`` on object storage: one delta-rs commit (a conditional PUT), no fsync."""
        handle = self._handle
        if handle is None:
            handle = self._handle = self.delta_table()
        # checkpoints are written on the schedule below, not by delta-rs on the writer's time
        write_deltalake(handle, rows, mode="append",
                        post_commithook_properties=PostCommitHookProperties(
                            create_checkpoint=False, cleanup_expired_logs=False))
        version = int(handle.version())
        with self._lock:
            self._version = max(self._version, version)
        self._commits_since_checkpoint += 1
        if self._commits_since_checkpoint >= self.checkpoint_interval:
            self._commits_since_checkpoint = 0
            # a handle replays every commit since the last checkpoint it knows of: re-open
            # it, so it picks up the checkpoint about to be written (lakehouse-facts.md)
            self._handle = None
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
        if self.time_stats_column is not None and rows.num_rows:
            low, high = _millisecond_bounds(rows.column(self.time_stats_column))
            stats.setdefault("minValues", {})[self.time_stats_column] = low
            stats.setdefault("maxValues", {})[self.time_stats_column] = high
        if "minValues" in stats:
            # Delta Spark skips a file by min/max only when the null count is there too
            stats["nullCount"] = {name: rows.column(name).null_count for name in stats["minValues"]}
        return {"path": name, "partitionValues": {}, "size": (self.path / name).stat().st_size,
                "modificationTime": now_ms, "dataChange": data_change,
                "stats": json.dumps(stats, separators=(",", ":"))}

    def commit_actions(self, actions: list[dict[str, Any]], sync_first: tuple[Path, ...] = (), *,
                       defer_checksum: bool = False) -> int:
        """Write ``actions`` as the next free version (put-if-absent), fsynced; the version.

        Safe to call from two threads (the appender and the maintenance thread):
        the loser of a race for a version moves on to the next one.  Files in
        ``sync_first`` (the new data files) are fsynced together with the
        commit file's content and the table directory before it is linked
        into place (in parallel, so the disk can serve them with one journal
        flush), then the log directory.
        """
        log_dir = self.path / "_delta_log"
        temp = log_dir / f".deltamq-{uuid.uuid4()}.json.tmp"
        payload = "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                encoded = payload.encode("utf-8")
                if os.write(fd, encoded) != len(encoded):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(temp))
            finally:
                os.close(fd)
            # the data files, the commit's content and the table directory (their names) in one round
            _fsync_all((temp, *sync_first, self.path))
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        with self._lock:
            version = self._version + 1
        try:
            while True:
                target = commit_file(log_dir, version)
                try:
                    os.link(temp, target)
                    break
                except FileExistsError:
                    self._check_winner(version)
                    version += 1
        finally:
            os.unlink(temp)
        try:
            fsync_path(log_dir)                 # the commit file's name
        except OSError as exc:
            raise CommittedUnsynced(version, exc) from exc
        with self._lock:
            self._version = max(self._version, version)
        if defer_checksum:
            self._deferred_checksum = (version, actions)
        else:
            self._write_checksum(version, actions)
        return version

    def write_deferred_checksum(self) -> None:
        """Write the checksum file of the commit :meth:`append` deferred it for, if any."""
        deferred, self._deferred_checksum = self._deferred_checksum, None
        if deferred is not None:
            self._write_checksum(*deferred)

    def _start_checksums(self, state: LogState) -> None:
        """Write a checksum file with each commit from now on, starting from ``state``."""
        self._checksum = TableChecksum.of(state)

    def _write_checksum(self, version: int, actions: list[dict[str, Any]]) -> None:
        """Write ``<version>.crc`` (see :mod:`lakehouse.version_checksum`); never fails a commit."""
        with self._checksum_lock:
            checksum = self._checksum
            if checksum is None or version <= checksum.version:
                return                          # a later commit of another thread got there first
            try:
                checksum.advance(version, actions)
                checksum.write()
            except (OSError, ValueError, KeyError) as exc:
                # the figures may be half updated: stop rather than ever write a wrong one
                log.warning("%s: stopped writing checksum files at version %d (%s)", self.name,
                            version, exc)
                self._checksum = None

    def _check_winner(self, version: int) -> None:
        """Another writer committed ``version`` first: fine unless it changed the table under us.

        A blind append conflicts with nothing but a change of protocol or
        metadata.  One DeltaMQ does not write correctly (deletion vectors
        enabled, a constraint added, ...) raises :class:`UnsupportedTable`; one
        that drops or renames a column this table writes raises RuntimeError.
        Anything else (a property changed, a nullable column added) is taken in.
        """
        protocol, metadata = self._protocol, self._metadata
        vectors = False
        for action in read_commit(self.path / "_delta_log", version):
            protocol = action.get("protocol", protocol)
            metadata = action.get("metaData", metadata)
            vectors = vectors or bool((action.get("add") or {}).get("deletionVector"))
        if protocol is self._protocol and metadata is self._metadata and not vectors:
            return
        check_table(self.name, self.uri, protocol, metadata, deletion_vectors=vectors)
        if metadata is not self._metadata and metadata is not None:
            fields = json.loads(metadata.get("schemaString") or "{}").get("fields") or ()
            missing = set(self.schema.names) - {field.get("name") for field in fields}
            if missing:
                raise RuntimeError(f"version {version} of table {self.name} dropped or renamed"
                                   f" column {', '.join(sorted(missing))} while it was being"
                                   " appended to; re-open the table")
        self._protocol, self._metadata = protocol, metadata

    def probe(self, size: int = PROBE_BYTES) -> None:
        """Write and fsync ``size`` bytes in the table's directory, then remove them.

        Raises what a commit would meet (ENOSPC, EROFS, EFBIG); object storage is not probed.
        """
        if self._path is None:
            return
        probe = self._path / f".deltamq-probe-{uuid.uuid4()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                if os.write(fd, bytes(size)) != size:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(probe))
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            try:
                probe.unlink(missing_ok=True)
            except OSError:
                pass

    def checkpoint(self) -> None:
        """Write a Delta checkpoint of the current version (delta-rs)."""
        self.delta_table().create_checkpoint()

    # -- delta-rs's own table operations, for maintenance on object storage ---------------

    def remote_files(self) -> pa.Table:
        """The live files of the latest version (``path``, ``size_bytes``), as delta-rs reads them."""
        snapshot = self.delta_table()
        self._check_with_delta_rs(snapshot)
        return pa.table(snapshot.get_add_actions(flatten=True)).select(["path", "size_bytes"])

    def compact_remote(self, target_size: int) -> int:
        """delta-rs's ``optimize.compact()`` (one commit, ``dataChange=false``); files removed."""
        snapshot = self.delta_table()
        self._check_with_delta_rs(snapshot)
        metrics = snapshot.optimize.compact(
            target_size=target_size,
            post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                cleanup_expired_logs=False))
        return int(metrics.get("numFilesRemoved", 0))

    def vacuum_remote(self, retention_hours: int) -> None:
        """delta-rs's vacuum: delete the files removed more than ``retention_hours`` ago."""
        snapshot = self.delta_table()
        self._check_with_delta_rs(snapshot)
        snapshot.vacuum(retention_hours=retention_hours, dry_run=False,
                        enforce_retention_duration=False)

    def cleanup_log(self) -> None:
        """delta-rs's log clean-up: drop commits older than ``delta.logRetentionDuration``.

        Only those before a checkpoint go, so every version still in the log stays readable.
        """
        self.delta_table().cleanup_metadata()

    def read(self, sql: str = "SELECT * FROM t") -> pa.Table:
        """Run ``sql`` over the table (named ``t``) and return the result."""
        table = self.delta_table()
        reader = QueryBuilder().register("t", table).execute(sql)
        result = pa.table(reader.read_all())
        return result if result.num_columns else self.schema.empty_table()

    def read_batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        """As :meth:`read`, batch by batch: a large result is never held whole."""
        for batch in QueryBuilder().register("t", self.delta_table()).execute(sql):
            yield pa.record_batch(batch)

    def _fsync_commit(self, version: int) -> None:
        log_dir = self.path / "_delta_log"
        for action in read_commit(log_dir, version):
            add = action.get("add")
            if add is not None:
                fsync_path(self.path / unquote(add["path"]))   # paths in the log are URL-encoded
        fsync_path(commit_file(log_dir, version))
        fsync_path(log_dir)
        fsync_path(self.path)

    def close(self) -> None:
        self._version = -1
        self._handle = None


def table_files(location: Location, storage_options: dict[str, str] | None = None) -> int:
    """How many data files the current snapshot of the table at ``location`` references."""
    return len(open_delta(str(location), storage_options=storage_options).file_uris())


def _millisecond_bounds(column: pa.ChunkedArray) -> tuple[str, str]:
    """A UTC microsecond timestamp column's min and max as Delta stats: ISO text in milliseconds.

    Delta keeps timestamp statistics to the millisecond; the minimum is
    rounded down and the maximum up, so a reader skipping files by them
    never skips one holding a matching row.
    """
    micros = pc.min_max(column.cast(pa.int64()))
    low, high = micros["min"].as_py(), micros["max"].as_py()
    low_ms, high_ms = low // 1000, -(-high // 1000)

    def text(ms: int) -> str:
        seconds, rest = divmod(ms, 1000)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest:03d}Z"

    return text(low_ms), text(high_ms)


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


def add_missing_columns(table: AppendOnlyTable) -> list[str]:
    """Add to an open ``table`` the nullable columns of its schema that the Delta table lacks.

    Schema evolution by one metadata-only commit (delta-rs's ADD COLUMN), so a
    table created by an older release takes the columns a newer one writes;
    rows already written read those columns as null.  Returns the names
    added (none: no commit).  A missing column that is not nullable cannot be
    added this way: ValueError.
    """
    handle = table.delta_table()
    present = {field.name for field in handle.schema().fields}
    missing = [field for field in table.schema if field.name not in present]
    if not missing:
        return []
    required = [field.name for field in missing if not field.nullable]
    if required:
        raise ValueError(f"table {table.name}: cannot add required columns {', '.join(required)}")
    handle.alter.add_columns([DeltaField.from_arrow(field) for field in missing])
    table.open()                                # re-read the version the commit made
    return [field.name for field in missing]


def append_once(location: Location, rows: pa.Table, app_id: str, version: int, *,
                storage_options: dict[str, str] | None = None) -> bool:
    """Append ``rows`` in one commit recording the transaction (``app_id``, ``version``); whether it did.

    Delta's idempotent writes, as Delta Spark's ``txnAppId``/``txnVersion``
    make them: nothing is written when the table already records ``version``
    or a later one for ``app_id`` (delta-rs records the ``txn`` action but does
    not check it: this does, so one writer per ``app_id``).  Any Delta table
    delta-rs writes, not only the broker's; its checkpoints follow the table's
    ``delta.checkpointInterval`` (delta-rs's post-commit hook).
    """
    handle = open_delta(str(location), storage_options=storage_options)
    done = handle.transaction_version(app_id)
    if done is not None and done >= version:
        return False
    write_deltalake(handle, rows, mode="append", commit_properties=CommitProperties(
        app_transactions=[Transaction(app_id, version, int(time.time() * 1000))]))
    return True


def transaction_version(location: Location, app_id: str, *,
                        storage_options: dict[str, str] | None = None) -> int | None:
    """The latest version the Delta table at ``location`` records for transaction ``app_id`` (None: none)."""
    version = open_delta(str(location), storage_options=storage_options).transaction_version(app_id)
    return None if version is None else int(version)
