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
  version is tried.  ~2-4 ms per commit, flat.  That half of the class, which
  fsyncs are made and why, is :mod:`lakehouse.log_commit`.
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

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import unquote, urlsplit

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.schema import Field as DeltaField
from deltalake.transaction import CommitProperties, PostCommitHookProperties, Transaction

# the local commit path (imported here too by those who knew it here)
from .log_commit import PARQUET_OPTIONS, CommittedUnsynced, LogCommits, StagedAppend, fsync_path  # noqa: F401
from .checksum_writer import ChecksumWriter
from .data_file_pool import DataFilePool
from .log_state import LogState
from .table_features import UnsupportedTable, check_table
from .version_checksum import TableChecksum

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL = 20

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

class AppendOnlyTable(LogCommits):
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
        #: how appended batches are written (pyarrow.parquet.write_table's options)
        self.parquet_options = dict(PARQUET_OPTIONS)
        self._version = -1
        self._commits_since_checkpoint = 0
        self._lock = threading.Lock()
        #: object storage only: the appender's delta-rs handle (re-opened after checkpoints)
        self._handle: DeltaTable | None = None
        #: local tables: the figures of the newest version's checksum file (None: none written)
        self._checksum: TableChecksum | None = None
        self._checksum_lock = threading.Lock()
        self._deferred_checksum: tuple[int, list[dict[str, Any]]] | None = None
        #: the thread writing deferred checksum files, and the pool of data files (journal writer)
        self._checksum_writer: ChecksumWriter | None = None
        self._data_files: DataFilePool | None = None
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
        whoever waits for the commit) rather than before this returns.  It is
        :meth:`stage` then :meth:`publish` (see :mod:`lakehouse.log_commit`).
        """
        return self.publish(self.stage(rows), defer_checksum=defer_checksum)

    def conformed(self, rows: pa.Table) -> pa.Table:
        """``rows`` as the table's schema (cast when they differ)."""
        assert self._version >= 0, "table not open"
        return rows if rows.schema == self.schema else rows.cast(self.schema)

    def stage(self, rows: pa.Table) -> StagedAppend | pa.Table:
        """The first half of :meth:`append`: on a local table :meth:`stage_append` (written and
        fsynced, not yet in the log); on object storage the rows, all written by :meth:`publish`."""
        rows = self.conformed(rows)
        return rows if self.remote else self.stage_append(rows)

    def publish(self, staged: StagedAppend | pa.Table, *, defer_checksum: bool = False) -> int:
        """The second half of :meth:`append`: the staged commit put in the log, durable; the version."""
        if isinstance(staged, pa.Table):
            return self._append_remote(staged)
        version = super().publish(staged, defer_checksum=defer_checksum)
        self._count_commit()
        return version

    def _count_commit(self) -> None:
        """One more commit: ask for a checkpoint every :attr:`checkpoint_interval` of them."""
        self._commits_since_checkpoint += 1
        if self._commits_since_checkpoint >= self.checkpoint_interval:
            self._commits_since_checkpoint = 0
            # object storage: a handle replays every commit since the last checkpoint it knows
            # of: re-open it, so it picks up the checkpoint about to be written (lakehouse-facts.md)
            self._handle = None
            if self.on_checkpoint_due is not None:
                self.on_checkpoint_due()
            else:
                self.checkpoint()

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
        self._count_commit()
        return version

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

    def snapshot(self) -> "TableSnapshot":
        """One delta-rs handle on the latest version, for several queries (:class:`TableSnapshot`)."""
        return TableSnapshot(self.delta_table(), self.schema)

    def stats_columns(self) -> list[str]:
        """The columns whose min/max an ``add`` action's statistics carry."""
        return [name for name in (self.stats_column, self.time_stats_column) if name is not None]

    def read_batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        """As :meth:`read`, batch by batch: a large result is never held whole."""
        for batch in QueryBuilder().register("t", self.delta_table()).execute(sql):
            yield pa.record_batch(batch)

    def close(self) -> None:
        self.close_background()
        self._version = -1
        self._handle = None


class TableSnapshot:
    """Queries of one version of a table through one delta-rs handle.

    Each :meth:`AppendOnlyTable.read` opens the table afresh: it reads the
    log and every live file's statistics again.  A round of the journal's
    upkeep asks a few dozen questions (one or two per window of message ids):
    one handle serves them all, and they all see the same version.
    """

    def __init__(self, handle: DeltaTable, schema: pa.Schema) -> None:
        self.handle = handle
        self.schema = schema
        self._queries = QueryBuilder().register("t", handle)

    @property
    def version(self) -> int:
        return int(self.handle.version())

    def read(self, sql: str) -> pa.Table:
        """Run ``sql`` over this version (the table is named ``t``) and return the result."""
        result = pa.table(self._queries.execute(sql).read_all())
        return result if result.num_columns else self.schema.empty_table()


def table_files(location: Location, storage_options: dict[str, str] | None = None) -> int:
    """How many data files the current snapshot of the table at ``location`` references."""
    return len(open_delta(str(location), storage_options=storage_options).file_uris())


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
