"""Reading Delta tables as of any version: the table adapter's other half.

:mod:`lakehouse.delta_table` writes the broker's tables (the hot path) and
reads their latest state; this module reads any Delta table, the broker's or
not, as of a chosen version, with delta-rs's DataFusion: replay's time travel
(:class:`TableVersions`) and the journal's snapshots (:func:`query_table`,
:func:`table_identity`, :func:`table_filesystem`).  The two are the only
modules that import ``deltalake``.  Every function blocks: for worker
threads and child processes, never the event loop.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from .delta_table import Location, is_uri, local_path, open_delta

__all__ = ["FollowedTable", "TableReadFailed", "TableVersions", "VersionUnavailable", "query_table", "table_filesystem",
           "table_identity"]


# -- time travel (replay) ---------------------------------------------------------------------

class VersionUnavailable(ValueError):
    """A version delta-rs cannot load: not committed yet, or its log entries cleaned up."""


class TableReadFailed(OSError):
    """Reading the table failed (a file vacuumed away, the store unreachable, ...)."""


class TableVersions:
    """A Delta table as of chosen versions (time travel), queried with SQL (DataFusion).

    Each name :meth:`pin` ned stands for the table at one version; the
    handles are kept, so a reader paging through a range loads each
    version's log once.  Blocking: for worker threads, never the event loop.
    """

    def __init__(self, location: Location, storage_options: dict[str, str] | None = None) -> None:
        self.remote = is_uri(location)
        self.uri = str(location).rstrip("/") if self.remote else str(local_path(location))
        self.storage_options = dict(storage_options) if storage_options else None
        self._pinned: dict[str, DeltaTable] = {}

    def _load(self, version: int | None) -> DeltaTable:
        return open_delta(self.uri, version=version, storage_options=self.storage_options)

    def latest_version(self) -> int:
        try:
            return int(self._load(None).version())
        except DeltaError as exc:
            raise TableReadFailed(f"{self.uri}: {exc}") from None

    def pin(self, name: str, version: int) -> None:
        """``name`` is the table as of ``version`` from now on (else :class:`VersionUnavailable`)."""
        try:
            self._pinned[name] = self._load(version)
        except DeltaError as exc:
            raise VersionUnavailable(f"version {version}: {exc}") from None

    def query(self, sql: str) -> pa.Table:
        """The whole result of ``sql`` over the pinned names (page it to keep it small)."""
        builder = QueryBuilder()
        for name, table in self._pinned.items():
            builder.register(name, table)
        try:
            return pa.table(builder.execute(sql).read_all())
        except Exception as exc:        # DataFusion's and the object store's errors, of many classes
            raise TableReadFailed(f"{self.uri}: {exc}") from exc

    def remote_commit_time_ms(self, version: int) -> int | None:
        """``commitInfo.timestamp`` of ``version`` from delta-rs's history (object storage)."""
        try:
            handle = self._load(None)
            commits = handle.history(limit=max(1, int(handle.version()) - version + 1))
        except DeltaError:
            return None
        times = [c.get("timestamp") for c in commits if c.get("version") == version]
        return times[0] if times and isinstance(times[0], int) else None


# -- following a table's latest version (the Spark consumer's executors) ----------------------


class FollowedTable:
    """A Delta table's latest version whose handle is kept between queries and brought up to date on demand.

    Opening a table replays its log from the last checkpoint (every file the
    snapshot holds); a kept handle skips that, and :meth:`refresh` reads only
    the commits made since.  The caller decides when its snapshot is too old
    (rows it wants are missing, a file is gone) and refreshes.  Blocking.
    """

    def __init__(self, location: Location, storage_options: dict[str, str] | None = None) -> None:
        self.uri = str(location).rstrip("/") if is_uri(location) else str(local_path(location))
        self.storage_options = dict(storage_options) if storage_options else None
        self._handle: DeltaTable | None = None

    @property
    def version(self) -> int:
        """The version the kept handle reads (-1: none opened yet)."""
        return -1 if self._handle is None else int(self._handle.version())

    def refresh(self) -> None:
        """Bring the kept handle to the latest version (opening the table when it has none).

        The commits after the kept version are read one by one; when delta-rs
        refuses what it listed (a log listed while the broker commits and
        cleans it up: a gap between commits) the table is opened afresh, from
        its latest checkpoint, listing again while that race lasts.
        """
        if self._handle is not None:
            try:
                self._handle.update_incremental()
                return
            except DeltaError:
                self._handle = None
        self._handle = open_delta(self.uri, storage_options=self.storage_options)

    def query(self, sql: str) -> pa.Table:
        """``sql`` over the kept version (named ``t``); opened first if it never was."""
        if self._handle is None:
            self.refresh()
        assert self._handle is not None
        try:
            return pa.table(QueryBuilder().register("t", self._handle).execute(sql).read_all())
        except Exception as exc:        # DataFusion's and the object store's errors, of many classes
            raise TableReadFailed(f"{self.uri}: {exc}") from exc

    def add_actions(self) -> pa.Table:
        """The kept version's live data files: ``path`` and their statistics flattened (``min.<column>``, ...)."""
        if self._handle is None:
            self.refresh()
        assert self._handle is not None
        return pa.table(self._handle.get_add_actions(flatten=True))


# -- reading any Delta table: what the journal's snapshots need ---------------------------------


def query_table(location: Location, sql: str, *, version: int | None = None,
                storage_options: dict[str, str] | None = None) -> pa.Table:
    """Run ``sql`` over the Delta table at ``location`` (named ``t``), as of ``version`` (None: latest).

    A table that does not exist raises FileNotFoundError.
    """
    try:
        handle = open_delta(str(location), version=version, storage_options=storage_options)
    except TableNotFoundError as exc:
        raise FileNotFoundError(f"no Delta table at {location}") from exc
    return pa.table(QueryBuilder().register("t", handle).execute(sql).read_all())


def table_identity(location: Location, storage_options: dict[str, str] | None = None) -> tuple[int, str]:
    """The latest version of the Delta table at ``location`` and its id (``metaData.id``, set at creation)."""
    try:
        handle = open_delta(str(location), storage_options=storage_options)
    except TableNotFoundError as exc:
        raise FileNotFoundError(f"no Delta table at {location}") from exc
    return int(handle.version()), str(handle.metadata().id)


def table_filesystem(location: Location, storage_options: dict[str, str] | None = None) -> pafs.FileSystem:
    """A pyarrow file system rooted at the table: its ``_delta_log`` and data files by relative path.

    Object storage is reached through delta-rs's object store (its options, credentials, endpoint).
    """
    if is_uri(location):
        from deltalake.fs import DeltaStorageHandler

        return pafs.PyFileSystem(DeltaStorageHandler(str(location).rstrip("/"), storage_options))
    return pafs.SubTreeFileSystem(str(local_path(location).resolve()), pafs.LocalFileSystem())
