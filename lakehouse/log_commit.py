"""Committing to a local Delta table's log: data files and put-if-absent commit files, fsynced.

The half of :class:`~lakehouse.delta_table.AppendOnlyTable` that writes a
local table without delta-rs (it imports no ``deltalake``): an append, a
compaction's or a retention rewrite's commit, the version checksum files,
the probe of a failing disk.

An append is two steps, so a writer can prepare one commit while the one
before it is being published (:mod:`lakehouse.journal_writer` does):

1. :meth:`LogCommits.stage_append` -- the rows become a Parquet file in
   memory (pyarrow), written to a data file in the table's directory; the
   commit's actions (``commitInfo`` and one ``add``) to a temporary file in
   ``_delta_log``.  Both files are fsynced together (in parallel: the file
   system serves them with one journal flush), with the table directory when
   the data file was created here.  Nothing a reader sees has changed.
2. :meth:`LogCommits.publish` -- the temporary file is linked as
   ``_delta_log/<version>.json`` (``link(2)`` fails if that version exists:
   put-if-absent; another writer's version is checked and the next one
   tried), then ``_delta_log`` is fsynced.  Only then is the version durable,
   and only then does ``publish`` return.

With :meth:`LogCommits.pool_data_files` (the journal's writer process) the
data file is one created ahead, empty, by a
:class:`~lakehouse.data_file_pool.DataFilePool`, whose name was made durable
(an fsync of the table directory for a batch of them) before it was handed
out; the append opens it by name without creating it.

Which fsyncs a commit makes, and why a confirmed commit survives a power loss:

* the data file's name (fsync of the table directory: the pool's, before
  the file is handed out, or the append's own, in its first round) and its
  content and size (fsync of its descriptor): the ``add`` action names a
  file that is there, whole, after a power loss;
* the commit's content (fsync of the temporary file): the name linked in
  step 2 never points at a partly written commit;
* the commit's name (fsync of ``_delta_log`` after the link): without it a
  power loss could drop the version that was confirmed.

All but the last are done before the link and the last one round after it:
the link must not reach the disk before the content it names, and nothing
can be confirmed before the link is on disk.  The checksum file written
after a commit is not fsynced (:mod:`lakehouse.version_checksum`); a commit
whose checksum is deferred has it written by a thread of its own, at most
every 100 ms (:mod:`lakehouse.checksum_writer`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker import __version__

from .checksum_writer import ChecksumWriter
from .data_file_pool import BATCH as POOL_BATCH
from .data_file_pool import MAX_AGE as POOL_MAX_AGE
from .data_file_pool import DataFilePool, data_file_name
from .log_state import LogState, commit_file, read_commit
from .table_features import check_table
from .version_checksum import ChecksumFigures, TableChecksum
from .writer_priority import apply_to_thread

__all__ = ["LogCommits", "StagedAppend", "CommittedUnsynced", "fsync_path", "PROBE_BYTES",
           "PARQUET_OPTIONS", "ROUNDS"]

log = logging.getLogger(__name__)

#: bytes :meth:`LogCommits.probe` writes: about what a small commit needs
PROBE_BYTES = 64 * 1024

#: how an appended batch is written (``pyarrow.parquet.write_table``'s options).  Snappy is
#: the cheapest codec to write on the hot path (compaction rewrites with zstd).  A journal
#: group is small (tens to hundreds of rows): dictionaries for every column and statistics
#: for every column cost a quarter of the write's CPU (1.0 -> 0.75 ms for 80 rows) and made
#: the file larger, not smaller.  A table's own ``stats_column`` and ``time_stats_column``
#: keep their Parquet statistics (readers skip row groups by them); see :meth:`LogCommits.writer_options`.
PARQUET_OPTIONS: dict[str, Any] = {"compression": "snappy", "use_dictionary": False}


class _Rounds:
    """When the last fsync rounds of an append began and ended (monotonic seconds; for tracing)."""

    stage: tuple[float, float] | None = None
    publish: tuple[float, float] | None = None


ROUNDS = _Rounds()


class CommittedUnsynced(OSError):
    """The commit file is in the log (readers see it) but fsyncing its directory failed."""

    def __init__(self, version: int, cause: OSError) -> None:
        super().__init__(cause.errno, f"version {version} committed but not synced: {cause}")
        self.version = version


@dataclass(slots=True)
class StagedAppend:
    """An append written and fsynced but not yet in the log (:meth:`LogCommits.publish` puts it there)."""

    #: the data file, in the table's directory
    data: Path
    #: the commit's content, in ``_delta_log`` under a temporary name
    temp: Path
    actions: list[dict[str, Any]]
    rows: int

    def discard(self) -> None:
        """Remove both files (the append will not be published)."""
        for path in (self.temp, self.data):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass


class LogCommits:
    """Writes to a local table's log; mixed into :class:`~lakehouse.delta_table.AppendOnlyTable`."""

    # set by AppendOnlyTable
    remote: bool
    schema: pa.Schema
    name: str
    uri: str
    stats_column: str | None
    time_stats_column: str | None
    parquet_options: dict[str, Any]
    _version: int
    _lock: threading.Lock
    _checksum: TableChecksum | None
    _checksum_lock: threading.Lock
    _deferred_checksum: tuple[int, list[dict[str, Any]]] | None
    _checksum_writer: ChecksumWriter | None
    _data_files: DataFilePool | None
    _protocol: dict[str, Any] | None
    _metadata: dict[str, Any] | None

    @property
    def path(self) -> Path:
        raise NotImplementedError

    def add_action(self, name: str, rows: pa.Table, *, data_change: bool, now_ms: int,
                   size: int | None = None) -> dict[str, Any]:
        """The ``add`` action for data file ``name`` (in the table directory) holding ``rows``.

        ``size``: the file's size in bytes when the caller knows it (else it is looked up).
        """
        stats: dict[str, Any] = {"numRecords": rows.num_rows}
        if self.stats_column is not None and rows.num_rows:
            bounds = pc.min_max(rows.column(self.stats_column))
            stats["minValues"] = {self.stats_column: bounds["min"].as_py()}
            stats["maxValues"] = {self.stats_column: bounds["max"].as_py()}
        if self.time_stats_column is not None and rows.num_rows:
            low, high = millisecond_bounds(rows.column(self.time_stats_column))
            stats.setdefault("minValues", {})[self.time_stats_column] = low
            stats.setdefault("maxValues", {})[self.time_stats_column] = high
        if "minValues" in stats:
            # Delta Spark skips a file by min/max only when the null count is there too
            stats["nullCount"] = {name: rows.column(name).null_count for name in stats["minValues"]}
        if size is None:
            size = (self.path / name).stat().st_size
        return {"path": name, "partitionValues": {}, "size": size,
                "modificationTime": now_ms, "dataChange": data_change,
                "stats": json.dumps(stats, separators=(",", ":"))}

    # -- appends -------------------------------------------------------------------------

    def writer_options(self) -> dict[str, Any]:
        """:attr:`parquet_options`, with statistics for the stats columns only unless they say otherwise."""
        options = self.parquet_options
        if "write_statistics" not in options:
            columns = [name for name in (self.stats_column, self.time_stats_column) if name is not None]
            options = {**options, "write_statistics": columns or False}
        return options

    def stage_append(self, rows: pa.Table) -> StagedAppend:
        """Write ``rows`` as a data file and the commit that adds it, both fsynced, not yet in the log."""
        sink = pa.BufferOutputStream()
        pq.write_table(rows, sink, **self.writer_options())
        content = sink.getvalue()
        # a pooled file (its name durable already) or one of its own, whose name the round fsyncs
        data, name = self._open_pooled()
        descriptors: list[int] = [] if data is None else [data]
        try:
            staged = self._staged(rows, name or data_file_name(), content.size)
            try:
                if data is None:
                    data = _create(staged.data)
                    descriptors.append(data)
                    descriptors.append(os.open(self.path, os.O_RDONLY))
                _write_all(data, content, staged.data)
                descriptors.append(_create(staged.temp))
                _write_all(descriptors[-1], _lines(staged.actions), staged.temp)
                # the file's content, the commit's content (and the file's name), in one round
                started = time.monotonic()
                fsync_together(descriptors)
                ROUNDS.stage = (started, time.monotonic())
            except BaseException:
                staged.discard()
                raise
        finally:
            for fd in descriptors:
                os.close(fd)
        return staged

    def _staged(self, rows: pa.Table, name: str, size: int) -> StagedAppend:
        """The append of ``rows`` as data file ``name`` (``size`` bytes): its paths and actions."""
        now_ms = int(time.time() * 1000)
        actions = [
            {"commitInfo": {"timestamp": now_ms, "operation": "WRITE",
                            "operationParameters": {"mode": "Append"}, "isBlindAppend": True,
                            "engineInfo": f"deltamq/{__version__}",
                            "operationMetrics": {"numFiles": "1", "numOutputRows": str(rows.num_rows)}}},
            {"add": self.add_action(name, rows, data_change=True, now_ms=now_ms, size=size)},
        ]
        return StagedAppend(self.path / name, self._temp_commit(), actions, rows.num_rows)

    def _open_pooled(self) -> tuple[int | None, str]:
        """A pooled data file, opened for writing, and its name; (None, "") when there is none."""
        pooled = self._data_files.take() if self._data_files is not None else None
        if pooled is None:
            return None, ""
        try:
            return os.open(pooled, os.O_WRONLY), pooled.name    # no O_CREAT: it must be ours, still there
        except OSError:
            return None, ""

    def publish(self, staged: StagedAppend, *, defer_checksum: bool = False) -> int:
        """Put ``staged`` in the log as the next free version, fsynced; the version.

        Raises :class:`CommittedUnsynced` when the version is in the log but
        its name could not be fsynced (its data file must then stay); any
        other failure removes the staged files.
        """
        try:
            version = self._link(staged.temp)
        except CommittedUnsynced:
            raise                               # in the log: the file must stay
        except BaseException:
            staged.discard()                    # not committed: free the space a retry needs
            raise
        self._committed(version, staged.actions, defer_checksum)
        return version

    # -- any commit ----------------------------------------------------------------------

    def commit_actions(self, actions: list[dict[str, Any]], sync_first: tuple[Path, ...] = (), *,
                       defer_checksum: bool = False) -> int:
        """Write ``actions`` as the next free version (put-if-absent), fsynced; the version.

        Safe to call from two threads (the appender and the maintenance thread):
        the loser of a race for a version moves on to the next one.  Files in
        ``sync_first`` (the new data files) are fsynced together with the
        commit file's content and the table directory before it is linked
        into place, then the log directory.
        """
        temp = self._temp_commit()
        try:
            fd = _create(temp)
            try:
                _write_all(fd, _lines(actions), temp)
            finally:
                os.close(fd)
            _fsync_all((temp, *sync_first, self.path))
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        version = self._link(temp)
        self._committed(version, actions, defer_checksum)
        return version

    def _temp_commit(self) -> Path:
        return self.path / "_delta_log" / f".deltamq-{uuid.uuid4()}.json.tmp"

    def _link(self, temp: Path) -> int:
        """Link the fsynced commit ``temp`` as the next free version and fsync the log; the version."""
        log_dir = temp.parent
        with self._lock:
            version = self._version + 1
        try:
            while True:
                try:
                    os.link(temp, commit_file(log_dir, version))
                    break
                except FileExistsError:
                    self._check_winner(version)
                    version += 1
        finally:
            os.unlink(temp)
        try:
            started = time.monotonic()
            fsync_path(log_dir)                 # the commit file's name
            ROUNDS.publish = (started, time.monotonic())
        except OSError as exc:
            raise CommittedUnsynced(version, exc) from exc
        return version

    def _committed(self, version: int, actions: list[dict[str, Any]], defer_checksum: bool) -> None:
        with self._lock:
            self._version = max(self._version, version)
        if defer_checksum:
            self._deferred_checksum = (version, actions)
        else:
            self._write_checksum(version, actions)

    def write_deferred_checksum(self) -> None:
        """Bring the checksum figures up to the commit :meth:`append` deferred them for, if any.

        The file itself is written by the table's :class:`~lakehouse.checksum_writer.ChecksumWriter`
        thread, at normal priority and at most every
        :data:`~lakehouse.checksum_writer.INTERVAL` (always for the newest version).
        """
        deferred, self._deferred_checksum = self._deferred_checksum, None
        if deferred is None:
            return
        figures = self._advance_checksum(*deferred)
        if figures is None:
            return
        if self._checksum_writer is None:
            self._checksum_writer = ChecksumWriter(self.name)
        self._checksum_writer.hand(figures)

    def flush_checksums(self) -> int | None:
        """Write the newest deferred checksum now; the version of the last one written (None: none)."""
        return self._checksum_writer.flush() if self._checksum_writer is not None else None

    def pool_data_files(self, *, batch: int = POOL_BATCH, max_age: float = POOL_MAX_AGE) -> None:
        """Create appends' data files ahead of them (:mod:`lakehouse.data_file_pool`); local tables only."""
        if not self.remote and self._data_files is None:
            self._data_files = DataFilePool(self.path, batch=batch, max_age=max_age)

    def close_background(self) -> None:
        """Write the pending checksum file, delete the pooled data files no append took."""
        writer, self._checksum_writer = self._checksum_writer, None
        if writer is not None:
            writer.close()
        pool, self._data_files = self._data_files, None
        if pool is not None:
            pool.close()

    def _start_checksums(self, state: LogState) -> None:
        """Write a checksum file with each commit from now on, starting from ``state``."""
        self._checksum = TableChecksum.of(state)

    def _write_checksum(self, version: int, actions: list[dict[str, Any]]) -> None:
        """Write ``<version>.crc`` (see :mod:`lakehouse.version_checksum`); never fails a commit."""
        figures = self._advance_checksum(version, actions)
        if figures is None:
            return
        try:
            figures.write()
        except OSError as exc:
            log.warning("%s: checksum file of version %d not written (%s)", self.name, version, exc)

    def _advance_checksum(self, version: int, actions: list[dict[str, Any]]) -> ChecksumFigures | None:
        """The figures of ``version`` (``actions`` its commit's); None when there are none to write."""
        with self._checksum_lock:
            checksum = self._checksum
            if checksum is None or version <= checksum.version:
                return None                     # a later commit of another thread got there first
            try:
                checksum.advance(version, actions)
            except (OSError, ValueError, KeyError) as exc:
                # the figures may be half updated: stop rather than ever write a wrong one
                log.warning("%s: stopped writing checksum files at version %d (%s)", self.name,
                            version, exc)
                self._checksum = None
                return None
            return checksum.figures()

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
        if self.remote:
            return
        probe = self.path / f".deltamq-probe-{uuid.uuid4()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _write_all(fd, bytes(size), probe)
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            try:
                probe.unlink(missing_ok=True)
            except OSError:
                pass

    def _fsync_commit(self, version: int) -> None:
        """fsync what commit ``version`` (written by delta-rs) added, the commit and both directories."""
        log_dir = self.path / "_delta_log"
        for action in read_commit(log_dir, version):
            add = action.get("add")
            if add is not None:
                fsync_path(self.path / unquote(add["path"]))   # paths in the log are URL-encoded
        fsync_path(commit_file(log_dir, version))
        fsync_path(log_dir)
        fsync_path(self.path)


def _lines(actions: list[dict[str, Any]]) -> bytes:
    """A commit file's content: one JSON action per line."""
    return "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions).encode("utf-8")


def _create(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)


def _write_all(fd: int, data: Any, path: Path) -> None:
    """Write all of ``data`` (bytes or a buffer) to ``fd``; a write that takes nothing is ENOSPC."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        view = view[written:]


def millisecond_bounds(column: pa.ChunkedArray) -> tuple[str, str]:
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


# in the journal's writer process, its threads run ahead of normal work (lakehouse.writer_priority)
_FSYNC_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fsync", initializer=apply_to_thread)


def fsync_together(descriptors: list[int]) -> None:
    """fsync every descriptor at once (the last in this thread); raise the first failure."""
    _concurrently(os.fsync, descriptors)


def _fsync_all(paths: tuple[Path, ...]) -> None:
    """fsync every path, concurrently; raise the first failure."""
    _concurrently(fsync_path, list(paths))


def _concurrently(sync: Callable[[Any], None], targets: list[Any]) -> None:
    futures = [_FSYNC_POOL.submit(sync, target) for target in targets[:-1]]
    failure: BaseException | None = None
    try:
        sync(targets[-1])
    except BaseException as exc:
        failure = exc
    for future in futures:
        try:
            future.result()
        except BaseException as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
