"""Following a node's journal for the dead-letter processor: the dead letters its commits add.

The processor (:mod:`lakehouse.dlq`) needs, from each new stretch of the
journal, only the ``enqueue`` rows of a few dead-letter queues and the rows
storing those messages.  A Spark Delta stream over the journal reads every
row of every commit, one small file per broker group commit (~50 a second
under a steady flow), and plans a Spark job for it: seconds per micro-batch.
Here the stretch is read the way a journal snapshot reads its tail
(:mod:`lakehouse.snapshot`): the commit files ``<after+1>.json ..
<upto>.json`` are opened by name, the data files their appends added
(:func:`lakehouse.log_state.appended_files`, which also follows compaction
and skips ``dataChange=false`` rewrites, as Delta Spark's source does) are
read with pyarrow, filtered while they are read: milliseconds.

:class:`JournalFollower` reads stretches (:meth:`~JournalFollower.read_range`)
and, where the log no longer holds them (log clean-up) or for a first run,
the whole journal as of a version (:meth:`~JournalFollower.read_as_of`,
delta-rs's DataFusion).  :class:`Progress` is the follower's checkpoint: the
last journal version whose dead letters were handled, in a small JSON file.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from lakehouse.delta_versions import query_table, table_filesystem, table_identity
from lakehouse.journal_schema import ENQUEUE, FORMAT_SQL, JOURNAL_SCHEMA, NATIVE_SQL
from lakehouse.log_state import appended_files, read_commits

__all__ = ["ArrivedDeadLetter", "JournalFollower", "Progress", "JournalGone", "PROGRESS_FILE"]

#: the journal columns a dead letter is read from (files of schema 1 lack the last two: read as null)
_COLUMNS: Final = ("vhost", "at", "event", "queue", "message_id", "exchange", "routing_key", "body",
                   "properties", "headers", "properties_raw", "message_format", "native")
_SCHEMA: Final = pa.schema([JOURNAL_SCHEMA.field(name) for name in _COLUMNS])
#: the stored message's columns, as a dead letter carries them
_STORED: Final = ("exchange", "routing_key", "body", "properties", "headers", "message_format", "native")
#: the checkpoint's file, in the checkpoint directory
PROGRESS_FILE: Final = "dlq-progress.json"
#: message ids per query when the message rows are looked up by id
_IDS_PER_QUERY: Final = 5000


class JournalGone(LookupError):
    """A stretch of the journal can no longer be followed: a commit left the log, or a file was vacuumed."""


@dataclass(frozen=True, slots=True)
class ArrivedDeadLetter:
    """A message that reached one of the dead-letter queues, with the journal row that stores it.

    ``dead_letter_queue`` is the first of the policy's queues it reached (by
    name, when a dead-letter exchange fanned it out to several) and
    ``dead_lettered_at`` the earliest of those enqueues.  The stored columns
    are None when the journal holds no body row for it.
    """

    vhost: str
    message_id: int
    dead_letter_queue: str
    dead_lettered_at: datetime.datetime | None
    exchange: str | None = None
    routing_key: str | None = None
    body: bytes | None = None
    properties: list[tuple[str, str]] | None = None
    headers: str | None = None
    message_format: str | None = None
    native: bytes | None = None


def _quoted(values: Iterable[str]) -> str:
    return ", ".join("'" + value.replace("'", "''") + "'" for value in values)


class JournalFollower:
    """The dead letters of ``queues`` (one virtual host's, or all) in the journal at ``location``."""

    def __init__(self, location: Path, queues: Sequence[str], vhost: str | None = None) -> None:
        self.location = location
        self.queues = tuple(queues)
        self.vhost = vhost
        self._filesystem: pafs.FileSystem = table_filesystem(location)

    # -- the log ---------------------------------------------------------------------------

    def identity(self) -> tuple[int, str]:
        """The journal's latest version and its Delta table id (delta-rs reads the log)."""
        return table_identity(self.location)

    def newest_after(self, version: int, limit: int) -> int:
        """The newest version of the journal from ``version`` on, looking at most ``limit`` commits ahead.

        The commit files are probed by name (no listing, no log replay): a
        commit file appears whole (the journal links it into place), so
        one that exists can be read.
        """
        newest = version
        while newest - version < limit:
            info = self._filesystem.get_file_info(f"_delta_log/{newest + 1:020d}.json")
            if info.type == pafs.FileType.NotFound:
                break
            newest += 1
        return newest

    def has_commit(self, version: int) -> bool:
        """Whether the log still holds commit ``version`` (log clean-up drops old ones)."""
        info = self._filesystem.get_file_info(f"_delta_log/{version:020d}.json")
        return info.type != pafs.FileType.NotFound

    # -- reading dead letters --------------------------------------------------------------

    def read_range(self, after: int, upto: int) -> list[ArrivedDeadLetter]:
        """The dead letters the journal's commits ``after+1 .. upto`` added, in (vhost, message id) order.

        Raises :class:`JournalGone` when one of those commits, or a file they
        appended, is no longer there.
        """
        if upto <= after:
            return []
        try:
            commits = read_commits(self._filesystem, after + 1, upto)
        except FileNotFoundError as exc:
            raise JournalGone(f"the journal's log no longer holds every commit after version {after}: {exc}") \
                from None
        names = [unquote(path) for path in appended_files(commits)]
        if any("://" in name or name.startswith("/") for name in names):
            raise JournalGone(f"the journal names a data file outside its directory: {names[0]}")
        if not names:
            return []
        try:
            files = ds.dataset(names, schema=_SCHEMA, format="parquet", filesystem=self._filesystem)
            arrivals = files.to_table(columns=["vhost", "message_id", "queue", "at"], filter=self._arrivals())
            if not arrivals.num_rows:
                return []
            ids = pa.array(sorted(set(arrivals.column("message_id").to_pylist())), pa.int64())
            stored = files.to_table(columns=["vhost", "message_id", "exchange", "routing_key", "body", "properties",
                                             "headers", "message_format", "native", "properties_raw"],
                                    filter=(ds.field("event") == ENQUEUE) & ds.field("body").is_valid()
                                    & ds.field("message_id").isin(ids))
        except FileNotFoundError as exc:
            raise JournalGone(f"a file the journal appended after version {after} is gone (vacuumed): {exc}") \
                from None
        return self._assemble(arrivals.to_pylist(), _resolved(stored).to_pylist(), latest=True)

    def read_as_of(self, version: int) -> list[ArrivedDeadLetter]:
        """Every dead letter in the journal as of ``version`` (a first run, or a log that moved on)."""
        where = f"event = '{ENQUEUE}' AND queue IN ({_quoted(self.queues)})"
        if self.vhost is not None:
            where += f" AND vhost = '{self.vhost.replace(chr(39), chr(39) * 2)}'"
        arrivals = query_table(self.location, f"SELECT vhost, message_id, queue, at FROM t WHERE {where}",
                               version=version).to_pylist()
        return self._assemble(arrivals, [], latest=False, version=version)

    def _arrivals(self) -> ds.Expression:
        condition = (ds.field("event") == ENQUEUE) & ds.field("queue").isin(pa.array(self.queues, pa.string()))
        if self.vhost is not None:
            condition = condition & (ds.field("vhost") == self.vhost)
        return condition

    def _assemble(self, arrivals: list[dict[str, Any]], stored_rows: list[dict[str, Any]], *, latest: bool,
                  version: int | None = None) -> list[ArrivedDeadLetter]:
        first: dict[tuple[str, int], tuple[str, datetime.datetime | None]] = {}
        for row in arrivals:
            key, queue, at = (row["vhost"], row["message_id"]), row["queue"], row["at"]
            if key in first:              # reached several dead-letter queues: the first, the earliest
                known_queue, known_at = first[key]
                first[key] = (min(known_queue, queue), at if known_at is None else
                              known_at if at is None else min(known_at, at))
            else:
                first[key] = (queue, at)
        stored = {(r["vhost"], r["message_id"]): r for r in stored_rows}
        missing = sorted({message_id for (vhost, message_id) in first if (vhost, message_id) not in stored})
        if missing:
            # a message stored in an earlier commit than its dead-letter queue's enqueue (not what
            # the broker writes today), or a whole-journal read: look its row up by id
            for row in self._stored_by_id(missing, None if latest else version):
                stored.setdefault((row["vhost"], row["message_id"]), row)
        found = []
        for (vhost, message_id), (queue, at) in sorted(first.items()):
            message = stored.get((vhost, message_id))
            values = {name: message[name] for name in _STORED} if message is not None else {}
            if values.get("body") is not None:
                values["body"] = bytes(values["body"])
            if values.get("native") is not None:
                values["native"] = bytes(values["native"])
            found.append(ArrivedDeadLetter(vhost=vhost, message_id=message_id, dead_letter_queue=queue,
                                           dead_lettered_at=at, **values))
        return found

    def _stored_by_id(self, ids: list[int], version: int | None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ", ".join(str(int(i)) for i in ids[start:start + _IDS_PER_QUERY])
            rows += query_table(self.location, f"""
                SELECT vhost, message_id, exchange, routing_key, body, properties, headers,
                       {FORMAT_SQL} AS message_format, {NATIVE_SQL} AS native
                FROM t WHERE event = '{ENQUEUE}' AND body IS NOT NULL AND message_id IN ({chunk})""",
                                version=version).to_pylist()
        return rows


def _resolved(stored: pa.Table) -> pa.Table:
    """Body rows with ``message_format`` and ``native`` resolved for rows of journal schema 1."""
    native = pc.coalesce(stored.column("native"), stored.column("properties_raw"))
    tag = pc.coalesce(stored.column("message_format"), pa.scalar("amqp-0-9-1"))
    return (stored.drop_columns(["native", "properties_raw", "message_format"])
            .append_column("message_format", tag).append_column("native", native))


@dataclass(frozen=True, slots=True)
class Progress:
    """The follower's checkpoint: the journal (its table id) and the last version handled."""

    journal_id: str
    version: int

    @classmethod
    def load(cls, directory: Path) -> Progress | None:
        try:
            saved = json.loads((directory / PROGRESS_FILE).read_text())
            return cls(str(saved["journal_id"]), int(saved["version"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{directory / PROGRESS_FILE}: not a checkpoint of the dead-letter processor"
                             f" ({exc})") from None

    def save(self, directory: Path) -> None:
        """Replace the file atomically (a crash leaves the old one or the new one)."""
        directory.mkdir(parents=True, exist_ok=True)
        temp = directory / f".{PROGRESS_FILE}.tmp"
        temp.write_text(json.dumps({"journal_id": self.journal_id, "version": self.version}))
        os.replace(temp, directory / PROGRESS_FILE)
