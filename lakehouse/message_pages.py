"""Reading paged-out messages back from the journal's Delta files, by message id, fast.

A queue that flows to disk keeps only the journal ids of its persistent
messages and asks :class:`MessagePages` for them when they are about to be
delivered: runs of consecutive ids (a consumer working through a backlog),
over and over, from a worker thread.  :class:`~lakehouse.queue_reads.JournalReader`
answers the same question correctly with one DataFusion query per read, but
planning and running a query costs milliseconds; this reader does the
least work a read can do:

* **an index of the live data files by message id**, from the Delta log's
  ``add`` actions and their ``message_id`` statistics (min and max).  On a
  local disk the log is followed by :class:`~lakehouse.log_state.LogState`,
  which reads each new commit file once by name; on object storage by
  delta-rs (:class:`~lakehouse.delta_versions.FollowedTable`).  A file's
  bounds cover *every* row in it, and a commit of acknowledgements of old
  messages has wide bounds but no bodies, so the first time a file is
  looked at its Parquet footer narrows its bounds to the row groups that
  hold bodies (the ``body`` column's null count and the ``event`` column's
  statistics; a file of settlements narrows to nothing) and the index keeps
  the narrowed bounds;
* **reading only what is needed**: the row groups of those files whose
  bounds hold a wanted id, with pyarrow.parquet, and only the columns a
  :class:`StoredMessage` is made of; the rows kept are the ``enqueue`` rows
  with a body (exactly one per message, whatever the fan-out);
* **decoded pages kept**: a decoded row group (a *page*) is kept in a cache
  bounded by bytes (``cache_bytes``, default :data:`DEFAULT_CACHE_BYTES`;
  least recently used pages go first), so the many reads that walk one row
  group decode it once.  A read looks in the kept pages first (found by
  their lowest id), matches all its ids against a page at once (numpy),
  and makes the messages of a run with one slice of each column; a page's
  repeated values (exchange, routing key, format tag, native bytes) are
  Python objects made once per page and shared by its messages;
* **refreshing only when needed**: the index is brought up to date (the new
  commits only) when a read asks for ids beyond it, when ids are not found
  in it, or when one of its files is gone (compaction rewrote it and vacuum
  removed it); then the read is tried again (twice at most).  Pages of
  files removed since stay valid: rows never change, compaction only moves
  them.  A reader whose next commits were cleaned up from the log (it was
  idle past the log retention) starts again from the last checkpoint.

Measured (``python -m bench.page_reads``, 1,000,000 messages of 1 KB, runs
of 1,000 consecutive ids, 64 MiB cache, a 2-core machine at load average
~8): 5.6 us of CPU per message read back from the writer's files (2,000
messages each), 4.4 us from compacted files; :class:`~lakehouse.queue_reads.JournalReader`
took 11.4 and 16.6 us (and hands back Arrow, not Python objects).

Rows of every schema are read: ``message_format`` null (schema 1) is
``amqp-0-9-1`` and ``native`` null is ``properties_raw``
(:data:`~lakehouse.journal_schema.NATIVE_SQL`); range rows (schema 3) are
``deliver``/``settle`` rows and never hold a body.

Memory: the cache holds at most ``cache_bytes`` of decoded columns, plus the
page being read when a single row group is larger (a group commit of the
writer is one row group; compaction writes row groups of 16,384 rows), plus
the index: a few numbers per live data file and per file looked at.  What
the process grows by is more: reading 100,000 messages of 1 KB in runs of
1,000, its RSS grew by ~90 MiB with a 16 MiB cache, ~120 MiB with 32 MiB
(the default) and ~165 MiB with 64 MiB (pyarrow's allocator keeps freed
memory for reuse; the Parquet reader's buffers).  A larger cache only pays
when many queues read back far apart; one consumer needs one page.

Threads: :meth:`MessagePages.read` blocks (disk reads, decoding); call it
from a worker thread, never the event loop.  Reads are serialised by a lock:
one reader thread at a time is what it is made for, more just wait.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Final
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .delta_table import is_uri, local_path
from .delta_versions import FollowedTable, table_filesystem
from .journal_schema import ENQUEUE
from .log_state import LogState, read_last_checkpoint
from .queue_reads import MissingMessages

__all__ = ["StoredMessage", "MessagePages", "PagesMissing", "DEFAULT_CACHE_BYTES", "DEFAULT_FORMAT"]

#: bytes of decoded pages a reader keeps by default
DEFAULT_CACHE_BYTES: Final = 32 << 20
#: the format of rows written before the journal tagged formats (schema 1)
DEFAULT_FORMAT: Final = "amqp-0-9-1"

_LOWEST: Final = -(1 << 63)
_HIGHEST: Final = (1 << 63) - 1
#: the columns a page is read from (those a file has: schema 1 lacks the last two)
_COLUMNS: Final = ("message_id", "event", "exchange", "routing_key", "published_at", "body",
                   "properties_raw", "message_format", "native")

#: how many files' footers are kept for the row-group reads that follow
_FOOTERS_KEPT: Final = 8

Ids = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as the journal stored it: what a queue needs to deliver it again."""

    message_id: int
    exchange: str
    routing_key: str
    published_at: float                 # epoch seconds
    message_format: str                 # the journal's format tag (null in old rows: amqp-0-9-1)
    native: bytes                       # metadata in its protocol's encoding (schema 1: properties_raw)
    body: bytes


class PagesMissing(MissingMessages):
    """Messages the journal holds no body for; :attr:`ids` names them."""

    def __init__(self, location: str, ids: list[int]) -> None:
        shown = ", ".join(map(str, ids[:10])) + (" ..." if len(ids) > 10 else "")
        super().__init__(f"the journal at {location} holds no body for {len(ids)} message(s) ({shown})")
        self.ids = ids


def _stored_message_factory() -> Callable[..., StoredMessage]:
    """A maker of :class:`StoredMessage` that sets its slots directly: the frozen
    dataclass's ``__init__`` (``object.__setattr__`` per field) took ~2x longer."""
    new = object.__new__
    slots = StoredMessage.__dict__
    set_id, set_exchange, set_key, set_time, set_format, set_native, set_body = (
        slots[name].__set__ for name in ("message_id", "exchange", "routing_key", "published_at",
                                          "message_format", "native", "body"))

    def make(message_id: int, exchange: str, routing_key: str, published_at: float, message_format: str,
             native: bytes, body: bytes) -> StoredMessage:
        message = new(StoredMessage)
        set_id(message, message_id)
        set_exchange(message, exchange)
        set_key(message, routing_key)
        set_time(message, published_at)
        set_format(message, message_format)
        set_native(message, native)
        set_body(message, body)
        return message

    return make


_stored_message = _stored_message_factory()


class _Values:
    """A column of few distinct values (exchange, routing key, format tag, native bytes): codes into
    Python objects made once, so the messages of a page share them."""

    __slots__ = ("codes", "values", "nbytes")

    def __init__(self, column: pa.ChunkedArray) -> None:
        encoded = pc.dictionary_encode(column.combine_chunks())
        self.codes = encoded.indices.to_numpy(zero_copy_only=False)
        listed = encoded.dictionary.to_pylist()
        self.values = np.empty(len(listed), dtype=object)
        self.values[:] = listed
        self.nbytes = int(self.codes.nbytes) + int(encoded.dictionary.nbytes) + 64 * len(listed)

    def pick(self, rows: slice | Ids) -> list[Any]:
        return self.values[self.codes[rows]].tolist()  # type: ignore[no-any-return]


class _Page:
    """The enqueue rows with a body of one row group, sorted by id, decoded."""

    __slots__ = ("ids", "low", "high", "values", "published", "bodies", "nbytes")

    def __init__(self, rows: pa.Table) -> None:
        ids = rows.column("message_id").to_numpy()
        if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            order = np.argsort(ids, kind="stable")
            rows = rows.take(pa.array(order))
            ids = ids[order]
        self.ids: Ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.low = int(ids[0]) if ids.size else _HIGHEST
        self.high = int(ids[-1]) if ids.size else _LOWEST
        names = set(rows.column_names)
        count = rows.num_rows

        def constant(value: Any, kind: pa.DataType) -> pa.ChunkedArray:
            return pa.chunked_array([pa.repeat(pa.scalar(value, kind), count)])

        tag = pc.fill_null(rows.column("message_format"), DEFAULT_FORMAT) if "message_format" in names else \
            constant(DEFAULT_FORMAT, pa.string())
        natives = [rows.column(name) for name in ("native", "properties_raw") if name in names]
        native = pc.coalesce(*natives, pa.scalar(b"", pa.binary())) if natives else constant(b"", pa.binary())
        #: exchange, routing key, format tag, native bytes
        self.values = tuple(_Values(column) for column in (
            pc.fill_null(rows.column("exchange"), ""), pc.fill_null(rows.column("routing_key"), ""), tag, native))
        micros = rows.column("published_at").cast(pa.int64()).to_numpy()
        self.published = np.nan_to_num(micros.astype(np.float64) / 1e6)
        self.bodies: pa.ChunkedArray = rows.column("body")
        self.nbytes = (int(self.ids.nbytes) + int(self.published.nbytes) + int(self.bodies.nbytes)
                       + sum(values.nbytes for values in self.values))

    def messages(self, rows: Ids) -> list[StoredMessage]:
        """The messages at positions ``rows`` (ascending)."""
        first, count = int(rows[0]), int(rows.size)
        picked: slice | Ids
        if int(rows[-1]) - first + 1 == count:          # a run: slices
            picked = slice(first, first + count)
            bodies = self.bodies.slice(first, count).to_pylist()
        else:
            picked = rows
            bodies = self.bodies.take(pa.array(rows)).to_pylist()
        exchange, key, tag, native = (values.pick(picked) for values in self.values)
        return list(map(_stored_message, self.ids[picked].tolist(), exchange, key, self.published[picked].tolist(),
                        tag, native, bodies))


@dataclass(frozen=True, slots=True)
class _Group:
    """A row group of a data file that holds bodies, with the bounds of its message ids."""

    path: str
    index: int
    low: int
    high: int


class _FileIndex:
    """The table's live data files with their message-id bounds, narrowed by what their footers say."""

    def __init__(self, location: str | Path, storage_options: dict[str, str] | None) -> None:
        self.remote = is_uri(location)
        self.location = str(location).rstrip("/") if self.remote else str(local_path(location))
        self._root = None if self.remote else local_path(location)
        self._filesystem = table_filesystem(location, storage_options) if self.remote else None
        self._state: LogState | None = None
        self._followed = FollowedTable(location, storage_options) if self.remote else None
        self._live_remote: set[str] = set()
        self.version = -1
        #: path -> (low, high) from the add action's statistics
        self._stats: dict[str, tuple[int, int]] = {}
        #: path -> its row groups with bodies (read from the footer once)
        self._groups: dict[str, tuple[_Group, ...]] = {}
        #: the footers read last (a file's row groups are decoded soon after its footer is read)
        self._footers: dict[str, pq.FileMetaData] = {}
        self._paths: list[str] = []
        self._low: Ids = np.empty(0, np.int64)
        self._high: Ids = np.empty(0, np.int64)
        #: the highest id the statistics of the live files name (ids above: not in the index yet)
        self.high = _LOWEST

    def refresh(self) -> bool:
        """Read the commits made since the last refresh; whether the live files changed."""
        version = self._refresh_remote() if self._followed is not None else self._refresh_local()
        if version == self.version:
            return False
        self.version = version
        self._rebuild()
        return True

    def _refresh_local(self) -> int:
        assert self._root is not None
        state = self._state
        if state is not None:
            state.catch_up()
            last = read_last_checkpoint(state.log_dir)
            if last is not None and int(last["version"]) > state.version:
                state = None            # commits after ours were cleaned up: start from the checkpoint
        if state is None:
            state = LogState(self._root)
            state.load()
            self._state = state
        # a reader needs no tombstones: they would pile up (only a checkpoint writer drops them)
        state.removes.clear()
        state.removed_at.clear()
        stats = self._stats
        for path, add in state.adds.items():
            if path not in stats:
                stats[path] = _bounds(add.get("stats"))
        return state.version

    def _refresh_remote(self) -> int:
        assert self._followed is not None
        self._followed.refresh()
        files = self._followed.add_actions()
        names = set(files.column_names)
        paths = files.column("path").to_pylist()
        lows = files.column("min.message_id").to_pylist() if "min.message_id" in names else [None] * len(paths)
        highs = files.column("max.message_id").to_pylist() if "max.message_id" in names else [None] * len(paths)
        self._live_remote = set(paths)
        for path, low, high in zip(paths, lows, highs):
            self._stats.setdefault(path, (_LOWEST if low is None else int(low), _HIGHEST if high is None else int(high)))
        return self._followed.version

    def _live(self) -> Iterator[str]:
        if self._state is not None:
            return iter(self._state.adds)
        return iter(self._live_remote)

    def _rebuild(self) -> None:
        live = list(self._live())
        keep = set(live)
        self._stats = {path: bounds for path, bounds in self._stats.items() if path in keep}
        self._groups = {path: groups for path, groups in self._groups.items() if path in keep}
        low, high = [], []
        self.high = _LOWEST
        for path in live:
            stat_low, stat_high = self._stats[path]
            self.high = max(self.high, stat_high)
            groups = self._groups.get(path)
            if groups is None:
                low.append(stat_low)
                high.append(stat_high)
            else:
                low.append(min((g.low for g in groups), default=_HIGHEST))
                high.append(max((g.high for g in groups), default=_LOWEST))
        self._paths = live
        self._low = np.array(low, np.int64)
        self._high = np.array(high, np.int64)

    def groups(self, wanted: Ids) -> Iterator[_Group]:
        """The row groups with bodies whose bounds hold one of ``wanted`` (ascending), lowest first.

        FileNotFoundError when a file of the index is gone (refresh, then ask again).
        """
        first, last = int(wanted[0]), int(wanted[-1])
        overlapping = np.nonzero((self._low <= last) & (self._high >= first))[0]
        for position in overlapping[np.argsort(self._low[overlapping], kind="stable")]:
            path = self._paths[int(position)]
            groups = self._groups.get(path)
            if groups is None:
                groups = self._groups[path] = self._read_footer(path)
                self._low[position] = min((g.low for g in groups), default=_HIGHEST)
                self._high[position] = max((g.high for g in groups), default=_LOWEST)
            for group in groups:
                start = int(np.searchsorted(wanted, group.low, side="left"))
                if start < wanted.size and int(wanted[start]) <= group.high:
                    yield group

    def _read_footer(self, path: str) -> tuple[_Group, ...]:
        """The row groups of ``path`` that may hold bodies, bounded by their message-id statistics."""
        metadata = pq.read_metadata(self.open(path))
        self._footers[path] = metadata
        if len(self._footers) > _FOOTERS_KEPT:
            del self._footers[next(iter(self._footers))]
        names = metadata.schema.names
        low, high = self._stats.get(path, (_LOWEST, _HIGHEST))
        found = []
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            if not group.num_rows:
                continue
            columns = {group.column(i).path_in_schema: group.column(i).statistics
                       for i in range(group.num_columns)}
            body = columns.get("body")
            if "body" not in names or (body is not None and body.has_null_count
                                       and body.null_count == group.num_rows):
                continue
            event = columns.get("event")
            if event is not None and event.has_min_max and not (_text(event.min) <= ENQUEUE <= _text(event.max)):
                continue
            ids = columns.get("message_id")
            if ids is not None and ids.has_min_max:
                found.append(_Group(path, index, int(ids.min), int(ids.max)))
            else:
                found.append(_Group(path, index, low, high))
        return tuple(found)

    def parquet_file(self, path: str) -> pq.ParquetFile:
        """The data file ``path`` for reading, its footer parsed again only when not kept."""
        return pq.ParquetFile(self.open(path), metadata=self._footers.get(path))

    def open(self, path: str) -> Any:
        """A readable source for the data file ``path`` (as the log names it)."""
        name = unquote(path)
        if self._filesystem is not None:
            return self._filesystem.open_input_file(name)
        assert self._root is not None
        return str(self._root / name)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bounds(stats: str | None) -> tuple[int, int]:
    """A file's ``message_id`` bounds from its add action's statistics (unbounded without them)."""
    try:
        parsed = json.loads(stats) if stats else {}
        return int(parsed["minValues"]["message_id"]), int(parsed["maxValues"]["message_id"])
    except (ValueError, KeyError, TypeError):
        return _LOWEST, _HIGHEST


class MessagePages:
    """Reads messages of one journal back by id (see the module's docstring).

    ``location``: the journal table (a local path or a URI); ``storage_options``
    as for the journal; ``cache_bytes``: the decoded pages kept.
    """

    def __init__(self, location: str | Path, storage_options: dict[str, str] | None = None, *,
                 cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.location = str(location)
        self.cache_bytes = cache_bytes
        self._index = _FileIndex(location, storage_options)
        #: the decoded pages kept, least recently used first
        self._pages: OrderedDict[tuple[str, int], _Page] = OrderedDict()
        #: the kept pages that hold messages, by their lowest id (two lists in step: bisect)
        self._lows: list[int] = []
        self._low_keys: list[tuple[str, int]] = []
        #: the widest span of ids a page kept so far covered
        self._span = 0
        self._cached = 0
        self._lock = threading.Lock()
        #: figures: pages decoded, refreshes of the index, reads
        self.pages_read = 0
        self.refreshes = 0
        self.reads = 0

    @property
    def version(self) -> int:
        """The journal's version the index of files reads (-1: not read yet)."""
        return self._index.version

    @property
    def cached_bytes(self) -> int:
        """Bytes of decoded pages kept now."""
        return self._cached

    def read(self, ids: Sequence[int]) -> list[StoredMessage]:
        """The messages ``ids`` (ascending), in that order.

        Blocking: for a worker thread.  Raises :class:`PagesMissing` (a
        :class:`~lakehouse.queue_reads.MissingMessages`) naming the ids the
        journal holds no body for.
        """
        if not len(ids):
            return []
        wanted = np.asarray(ids, dtype=np.int64)
        if wanted.size > 1 and not bool(np.all(wanted[1:] > wanted[:-1])):
            raise ValueError("MessagePages.read takes ids in ascending order, each once")
        found: list[StoredMessage | None] = [None] * wanted.size
        with self._lock:
            self.reads += 1
            todo = self._from_pages(wanted, np.arange(wanted.size), found)
            if todo.size:
                todo = self._from_files(wanted, todo, found)
            if todo.size:
                raise PagesMissing(self.location, wanted[todo].tolist())
        return found  # type: ignore[return-value]     # every slot is filled once todo is empty

    def _from_pages(self, wanted: Ids, todo: Ids, found: list[StoredMessage | None]) -> Ids:
        """Fill what the kept pages hold; the positions left.

        The pages are found by their lowest id (kept sorted): those from the
        widest page's span below the first id wanted up to the last one.
        """
        first, last = int(wanted[todo[0]]), int(wanted[todo[-1]])
        lows = self._lows
        start = bisect.bisect_left(lows, first - self._span)
        end = bisect.bisect_right(lows, last)
        used = []
        for key in self._low_keys[start:end]:
            page = self._pages[key]
            if page.high < int(wanted[todo[0]]):
                continue
            left = todo.size
            todo = self._take(page, wanted, todo, found)
            if todo.size != left:
                used.append(key)
            if not todo.size:
                break
        for key in used:
            self._pages.move_to_end(key)
        return todo

    def _from_files(self, wanted: Ids, todo: Ids, found: list[StoredMessage | None]) -> Ids:
        """Fill the rest from the data files; the positions left.

        The index is refreshed first when it was never read or the ids go
        beyond it, then (twice at most) when ids were not found or a file was gone.
        """
        if self._index.version < 0 or int(wanted[todo[-1]]) > self._index.high:
            self._refresh()
        for attempt in range(3):
            try:
                todo = self._from_index(wanted, todo, found)
            except OSError:
                if attempt == 2:
                    raise
                self._refresh()                 # compacted and vacuumed: the new files hold them
                continue
            if not todo.size or attempt == 2 or not self._refresh():
                break                           # found, or the index is as new as the journal
        return todo

    def _from_index(self, wanted: Ids, todo: Ids, found: list[StoredMessage | None]) -> Ids:
        for group in self._index.groups(wanted[todo]):
            left = wanted[todo]
            start = int(np.searchsorted(left, group.low, side="left"))
            if start == left.size or int(left[start]) > group.high:
                continue                        # what it may hold was found in an earlier group
            key = (group.path, group.index)
            page = self._pages.get(key)
            if page is None:
                page = self._load(group)
            else:
                self._pages.move_to_end(key)
            todo = self._take(page, wanted, todo, found)
            if not todo.size:
                break
        return todo

    def _refresh(self) -> bool:
        self.refreshes += 1
        return self._index.refresh()

    def _load(self, group: _Group) -> _Page:
        """Decode row group ``group`` and keep it, dropping the least recently used pages over the bound."""
        source = self._index.parquet_file(group.path)
        present = set(source.schema_arrow.names)
        rows = source.read_row_group(group.index, columns=[name for name in _COLUMNS if name in present],
                                     use_threads=False)
        keep = pc.and_(pc.equal(rows.column("event"), ENQUEUE), pc.is_valid(rows.column("body")))
        if not pc.all(keep).as_py():
            rows = rows.filter(keep)            # (a copy: skipped for the usual row group of enqueues only)
        page = _Page(rows)
        self.pages_read += 1
        key = (group.path, group.index)
        self._keep(key, page)
        return page

    def _keep(self, key: tuple[str, int], page: _Page) -> None:
        self._pages[key] = page
        self._cached += page.nbytes
        if page.ids.size:
            position = bisect.bisect_right(self._lows, page.low)
            self._lows.insert(position, page.low)
            self._low_keys.insert(position, key)
            self._span = max(self._span, page.high - page.low)
        while self._cached > self.cache_bytes and len(self._pages) > 1:
            oldest = next(iter(self._pages))
            if oldest == key:
                break
            self._drop(oldest)

    def _drop(self, key: tuple[str, int]) -> None:
        page = self._pages.pop(key)
        self._cached -= page.nbytes
        if page.ids.size:
            position = bisect.bisect_left(self._lows, page.low)
            while self._low_keys[position] != key:
                position += 1
            del self._lows[position]
            del self._low_keys[position]

    @staticmethod
    def _take(page: _Page, wanted: Ids, todo: Ids, found: list[StoredMessage | None]) -> Ids:
        """Fill the positions ``todo`` whose ids ``page`` holds; the positions left."""
        if not page.ids.size:
            return todo
        ids = wanted[todo]
        rows = np.searchsorted(page.ids, ids)
        np.minimum(rows, page.ids.size - 1, out=rows)
        hit = page.ids[rows] == ids
        if not bool(hit.any()):
            return todo
        positions = todo[hit]
        for position, message in zip(positions.tolist(), page.messages(rows[hit])):
            found[position] = message
        return todo[~hit]
