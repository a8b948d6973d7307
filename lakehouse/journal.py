"""The message journal: persistent messages on durable queues, group-committed to Delta.

:class:`DeltaMessageJournal` is the :class:`~broker.messaging.journal.MessageJournal`
of a virtual host whose node is of type ``delta``.  It writes the ``journal``
table (schema and meaning: :mod:`lakehouse.journal_schema`).

Group commit
------------
Durable queues report events on the event loop; each becomes a tuple appended
to the *open group* (a few hundred nanoseconds: nothing is converted on the
loop).  When the writer is free for a group, the first event schedules a
hand-off at the end of the current loop iteration, so everything processed
in that iteration -- every connection's reads -- joins the group.  The
hand-off pickles the group's rows as plain values and writes them to the
journal's writer *process* (:mod:`lakehouse.journal_writer`, which explains
why a process and not a thread, through :mod:`lakehouse.writer_channel`); it
builds the Arrow table (properties decoded to text with a cache) and appends
it as one Delta commit, fsynced, in two stages (:mod:`lakehouse.commit_pipeline`):
it *stages* the group (Parquet file and commit content written and fsynced)
and says so, then *publishes* it (linked into the log, the log fsynced) and
answers that it is durable.  The writer is free for the next group once it
has staged the last one and has fewer than two groups: the next group is
handed off as the *staged* answer arrives, so the writer stages it while the
one before is published, and the open group keeps growing until then.  The
answers arrive on the loop like any socket read; at a commit's answer the
next group is handed off first (when the writer is free), then the group is
marked durable and its waiters -- publisher confirms, tx.commit-ok, held
arrivals -- run while the writer commits the next.  Commits are published in
the order the groups were handed off, and each group is durable only once its
own commit is.  If the writer process dies, the groups it had fail (their
publishers are nacked) and a new writer is started.

When a commit fails
-------------------
(disk full, read-only file system, the writer died): the group's waiters see
its :attr:`JournalGroup.error` -- publishers are nacked, tx.commit fails, and
the messages it would have enqueued are dropped by their queues, which held
them until the commit (see :mod:`broker.messaging.queue`).  Settlements are
not given up: the group's ``settle``, ``requeue`` and ``queue_deleted`` rows
outside transactions are kept (one per queue, message and event, so memory
stays bounded by the messages the broker holds anyway) and re-committed with
the next group until a commit succeeds, so once the disk has room again a
restart never brings back an acknowledged message.  Should the broker stop
before that, those messages come back at the next start, redelivered (AMQP's
at-least-once; nothing is lost).  Rows of transactions are not kept: their
engine undoes the transaction (0-9-1: tx.commit fails, the acknowledged
messages return to their queues).  ``deliver`` rows are dropped: they only
decide the redelivered flag after a restart.

While commits fail, the journal does not send the writer every message that
arrives: at most every :data:`RETRY_DELAY` it tries the settlements it kept
(a small commit), or, when it keeps none, a *probe* (a small fsynced write in
the table's directory); what arrived meanwhile waits for that attempt and
fails with it.  Once an attempt succeeds, the open group is committed as
usual.  So a full disk costs a few small writes a second, and memory holds at
most what arrives between two attempts, whatever the publishers send (the
original report: 4.7 GB after the writer was handed ever larger groups of
messages that stayed enqueued).  The journal logs once when commits start
failing and once when they succeed again, not once per failure.

Before the loop is attached (start-up, tests) and after it is gone
(shut-down), open groups are committed in-process, synchronously.

A ``deliver`` event settled within the same group is never written: the
``settle`` row already says the message was delivered.  A lease consumer's
grants and settlements arrive as id ranges: one *range row* each (:mod:`lakehouse.journal_schema`).

Recovery
--------
:meth:`DeltaMessageJournal.recover` computes the live messages of every queue
with one SQL query over the table (DataFusion, vectorised): ``enqueue`` rows
without a ``settle`` row and not older than the queue's last
``queue_deleted``, joined to the one row holding each message's body, in
message id order.  Messages reached by several queues are rebuilt once and
shared.  Queues that no longer exist get a ``queue_deleted`` row, so their
messages never come back if a queue of that name is declared again.

A transaction of an exactly-once producer adds a ``producer_sequence`` row to
its group; :meth:`DeltaMessageJournal.open` reads each producer's highest
sequence and :meth:`~DeltaMessageJournal.recover` hands them to the namespace
(:mod:`lakehouse.producer_rows`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
import pyarrow.compute as pc

from broker.messaging.journal import DROPPED
from broker.messaging.journal_figures import JournalFigures
from broker.messaging.message import Message

from .commit_pipeline import PIPELINE_DEPTH, STAGED
from .commit_trace import arrivals, loop_trace
from .delta_table import add_missing_columns, is_uri
from .journal_writer import PlainRow, RowEncoder, journal_sql, journal_table, read_watermark
from .journal_schema import DELIVER, ENQUEUE, QUEUE_DELETED, REQUEUE, SETTLE, TRANSIENT, upgrade_note
from .page_reads import JournalPageReader, MessageRebuilder
from .paged_recovery import recover_paged, wants_paged_recovery
from .producer_rows import producer_row, read_producer_sequences
from .replay import JournalHistory
from .snapshot import LIVE_MESSAGES_SQL, UnusableSnapshot, recover_live
from .writer_channel import WriterChannel

if TYPE_CHECKING:
    import subprocess

    from broker.messaging.namespace import Namespace
    from broker.messaging.queue import Queue, QueueEntry

__all__ = ["DeltaMessageJournal", "JournalGroup"]

log = logging.getLogger(__name__)

#: (event, queue, message_id, at, tx_id, delivery_count, outcome, reason, message, range's first id)
Row = tuple[str, str, int, float, "int | None", "int | None", "str | None", "str | None", "Message | None",
            "int | None"]

#: rows of messages that ended this long ago (hours) are removed from the journal
HISTORY_RETENTION_HOURS = int(os.environ.get("DELTAMQ_JOURNAL_RETENTION_HOURS", "168"))
#: Delta's own history of the journal (time travel; how far a Spark stream may fall behind), hours
LOG_RETENTION_HOURS = int(os.environ.get("DELTAMQ_JOURNAL_LOG_RETENTION_HOURS", "1"))
_RECOVERY_LOG_EVERY = 200_000
#: recover from the newest snapshot and the journal's tail when there is one (DELTAMQ_JOURNAL_SNAPSHOTS=0: never)
USE_SNAPSHOTS = os.environ.get("DELTAMQ_JOURNAL_SNAPSHOTS", "1") != "0"
#: seconds between commit attempts while commits fail (DELTAMQ_JOURNAL_RETRY_MS)
RETRY_DELAY = float(os.environ.get("DELTAMQ_JOURNAL_RETRY_MS", "250")) / 1000
#: the events a failed commit keeps for the next one (outside transactions)
_KEPT_EVENTS = frozenset((SETTLE, REQUEUE, QUEUE_DELETED))


class JournalGroup:
    """Events committed together; a :class:`~broker.messaging.journal.Durability`."""

    __slots__ = ("rows", "delivered", "callbacks", "done", "error", "number")

    def __init__(self, number: int) -> None:
        self.number = number
        self.rows: list[Row] = []
        # (queue, message_id) -> (delivery count, at): written unless settled in this group
        self.delivered: dict[tuple[str, int], tuple[int, float]] = {}
        self.callbacks: list[Callable[[], None]] = []
        self.done = False
        self.error: BaseException | None = None

    def __bool__(self) -> bool:
        return bool(self.rows or self.delivered)

    def seal(self) -> None:
        """Turn the deliveries still unsettled into ``deliver`` rows: the group is about to be written."""
        if self.delivered:
            self.rows.extend((DELIVER, name, message_id, at, None, count, None, None, None, None)
                             for (name, message_id), (count, at) in self.delivered.items())
            self.delivered = {}

    def when_durable(self, callback: Callable[[], None]) -> None:
        if self.done:
            callback()
        else:
            self.callbacks.append(callback)

    def __repr__(self) -> str:
        return f"<JournalGroup #{self.number} rows={len(self.rows)} done={self.done}>"


class DeltaMessageJournal:
    """One virtual host's journal table, written by group commit."""

    def __init__(self, path: str | Path, vhost: str) -> None:
        self.path = path if is_uri(path) else Path(path)
        self.vhost = vhost
        self.table = journal_table(str(self.path), LOG_RETENTION_HOURS)
        #: recovery starts from the newest snapshot when one is usable (lakehouse.snapshot)
        self.use_snapshots = USE_SNAPSHOTS
        self._numbered = 1
        self._group = JournalGroup(1)
        # groups handed to the writer and not yet answered, oldest first (it answers in order)
        self._sent: deque[JournalGroup] = deque()
        # the group sent last, until the writer says it is staged (or answers it): only then
        # does the next group go, so it holds everything that arrived meanwhile
        self._unstaged: JournalGroup | None = None
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channel: WriterChannel | None = None
        self._next_message_id = 1
        self._next_tx_id = 1
        self._tx: int | None = None
        self._wall_offset = time.time() - time.monotonic()   # monotonic arrival -> wall clock
        self._encoder = RowEncoder(vhost)     # for commits made in this process
        # rows of failed commits to commit again: (event, queue, message id, range's first id) -> row
        self._kept: dict[tuple[str, str, int, int | None], Row] = {}
        # (queue, message id) of enqueues the broker made itself (dead letters): kept too
        self._kept_enqueues: set[tuple[str, int]] = set()
        #: why commits fail, from the first failure until one succeeds again (None: they succeed)
        self.failure: BaseException | None = None
        self._failed_in_a_row = 0
        self._probed = False                   # while failing: a probe found room, try a real commit
        # statistics
        self.commits = 0
        self.committed_rows = 0
        self.failed_commits = 0
        self.sent_rows = 0                      # rows handed to the writer (committed or not)
        self.figures = JournalFigures()        # latency, group sizes, bytes: for management
        #: each exactly-once producer's highest committed sequence, as read by :meth:`open`
        self.producer_sequences: dict[str, int] = {}
        #: flow to disk: paged queues wait for commits and read messages back through it
        self.page_reader = JournalPageReader(self)
        #: broker.flowToDiskThreshold (bytes; 0: off): recovery pages a backlog larger than this
        self.page_threshold = 0
        self._trace = loop_trace()             # DELTAMQ_JOURNAL_TRACE: each commit's timestamps

    # -- lifetime ------------------------------------------------------------------

    def open(self) -> None:
        self.table.open()
        added = add_missing_columns(self.table)      # a table of an older journal schema
        if added:
            log.info("journal %s: %s", self.vhost, upgrade_note(added))
        highest = self.table.read("SELECT MAX(message_id) AS m, MAX(tx_id) AS t FROM t")
        if highest.num_rows:
            top_message, top_tx = highest.column("m")[0].as_py(), highest.column("t")[0].as_py()
            self._next_message_id = (top_message or 0) + 1
            self._next_tx_id = (top_tx or 0) + 1
        self.producer_sequences = read_producer_sequences(self.table)

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the writer process: groups are handed off on ``loop``, which also runs the waiters.

        Called again with the same loop, it does nothing.
        """
        if self._loop is loop:
            return
        self._loop = loop
        self._start_writer()
        if self._group:
            self._schedule()

    def _start_writer(self) -> None:
        assert self._loop is not None
        self._channel = WriterChannel(self._loop, [str(self.path), str(HISTORY_RETENTION_HOURS),
                                                   str(LOG_RETENTION_HOURS), self.vhost],
                                      self._answered, self._writer_died)
        self._unstaged = None

    @property
    def _writer(self) -> subprocess.Popen[bytes] | None:
        """The writer process, while there is one."""
        return self._channel.process if self._channel is not None else None

    @property
    def _in_flight(self) -> JournalGroup | None:
        """The group handed to the writer last and not yet answered (the others are older)."""
        return self._sent[-1] if self._sent else None

    def close(self) -> None:
        """Commit everything still open, then stop the writer (after the loop has stopped)."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()                     # the groups it has are committed (or not) first
            self.table.open()                   # the writer moved the table on: catch up
        self.page_reader.close()
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        self._loop = None
        group = self._group
        if group or self._kept:
            self._group = self._next_group()
            group.seal()
            self._take_kept(group)
            try:
                self._commit(group)
            except Exception as exc:
                log.error("journal of virtual host '%s': the final commit of %d rows failed: %s",
                          self.vhost, len(group.rows), exc)
        self.table.close()

    @property
    def kept_rows(self) -> int:
        """Rows of failed commits waiting to be committed again (settlements)."""
        return len(self._kept)

    # -- figures for management (event loop) ---------------------------------------

    @property
    def pending_rows(self) -> int:
        """Rows not yet durable: the open group's (deliveries included) and the one in flight's."""
        group = self._group
        return len(group.rows) + len(group.delivered) + sum(len(sent.rows) for sent in self._sent)

    def last_checkpoint_time(self) -> float | None:
        """When Delta last checkpointed the table (seconds since the epoch); None: never, or remote."""
        if not isinstance(self.path, Path):
            return None
        try:
            return (self.path / "_delta_log" / "_last_checkpoint").stat().st_mtime
        except OSError:
            return None

    def history(self) -> JournalHistory:
        """The table's history, for replay (:mod:`lakehouse.replay`): its readers run in a
        child process; call them from a worker thread, never the event loop."""
        return JournalHistory(self.table.uri, self.table.storage_options, separate_process=True)

    # -- MessageJournal (event loop) ------------------------------------------------

    @property
    def pending(self) -> JournalGroup | None:
        group = self._group
        return group if group.rows or group.delivered else None

    def begin_transaction(self) -> None:
        self._tx = self._next_tx_id
        self._next_tx_id += 1

    def end_transaction(self) -> None:
        self._tx = None

    def enqueued(self, queue: Queue, message: Message, keep: bool = False) -> bool:
        message_id = message.journal_id
        if message_id:
            self._add((ENQUEUE, queue.name, message_id, time.time(), self._tx, None, None, None, None, None))
        else:
            message_id = message.journal_id = self._next_message_id
            self._next_message_id = message_id + 1
            self._add((ENQUEUE, queue.name, message_id, time.time(), self._tx, None, None, None, message, None))
        if keep and self._tx is None:
            self._kept_enqueues.add((queue.name, message_id))
            return True
        return self._loop is None               # committed in-process later: nothing waits

    def delivered(self, entry: QueueEntry) -> None:
        self._group.delivered[(entry.queue.name, entry.message.journal_id)] = (
            entry.delivery_count + 1, time.time())
        self._wake()

    def requeued(self, entry: QueueEntry) -> None:
        name, message_id = entry.queue.name, entry.message.journal_id
        self._group.delivered.pop((name, message_id), None)
        self._add((REQUEUE, name, message_id, time.time(), self._tx, entry.delivery_count,
                   None, None, None, None))

    def settled(self, queue: Queue, message: Message, outcome: str, reason: str | None = None,
                delivery_count: int = 0) -> None:
        name, message_id = queue.name, message.journal_id
        group = self._group
        if group.delivered:
            group.delivered.pop((name, message_id), None)
        self._add((SETTLE, name, message_id, time.time(), self._tx, delivery_count, outcome, reason, None, None))

    def delivered_ranges(self, queue: Queue, ranges: list[tuple[int, int]], delivery_count: int) -> None:
        for first, last in ranges:
            self._add((DELIVER, queue.name, last, time.time(), self._tx, delivery_count, None, None, None, first))

    def settled_ranges(self, queue: Queue, ranges: list[tuple[int, int]], outcome: str, reason: str | None,
                       count: int) -> None:
        for first, last in ranges:
            self._add((SETTLE, queue.name, last, time.time(), self._tx, count, outcome, reason, None, first))

    def queue_deleted(self, queue: Queue) -> None:
        self._mark_deleted(queue.name)

    def producer_committed(self, producer: str, sequence: int) -> None:
        self._add(producer_row(producer, sequence, self._next_message_id - 1, self._tx))

    def _mark_deleted(self, name: str) -> None:
        self._add((QUEUE_DELETED, name, self._next_message_id - 1, time.time(), self._tx,
                   None, None, None, None, None))

    def _add(self, row: Row) -> None:
        self._group.rows.append(row)
        if not self._scheduled and self._unstaged is None and self._loop is not None:
            self._schedule()

    def _wake(self) -> None:
        if not self._scheduled and self._unstaged is None and self._loop is not None:
            self._schedule()

    def _writer_free(self) -> bool:
        """Whether the writer takes a group now: it staged the last one and has room for another.

        While commits fail, one attempt at a time.
        """
        return (self._channel is not None and self._unstaged is None
                and len(self._sent) < (1 if self.failure is not None else PIPELINE_DEPTH))

    def _schedule(self) -> None:
        assert self._loop is not None
        self._scheduled = True
        self._loop.call_soon(self._hand_off)

    def _next_group(self) -> JournalGroup:
        self._numbered += 1
        return JournalGroup(self._numbered)

    def _hand_off(self) -> None:
        self._scheduled = False
        if not self._writer_free():
            return
        if self.failure is not None and not self._probed:
            # commits fail: try the settlements kept, or a probe, while the open group
            # waits for the outcome (so a full disk is not sent every message again)
            if not (self._group or self._kept):
                return                          # nothing waits: the next event tries
            attempt = self._next_group()
        else:
            attempt = self._group
            if not (attempt or self._kept):
                return
            self._group = self._next_group()
            attempt.seal()
        self._probed = False
        self._take_kept(attempt)
        self._sent.append(attempt)
        self._unstaged = attempt
        self.sent_rows += len(attempt.rows)
        # the writer process builds the Arrow table: the loop only pickles plain values;
        # no rows: a probe (can the table's directory take a write again?)
        payload = (pickle.dumps(self._plain(attempt.rows), protocol=pickle.HIGHEST_PROTOCOL)
                   if attempt.rows else b"")
        if attempt.rows:
            self.figures.handed_off(len(attempt.rows), len(payload), time.monotonic())
            if self._trace is not None:
                self._trace.sent(attempt.number, arrivals(attempt.rows), len(attempt.rows), len(payload))
        assert self._channel is not None
        self._channel.send(attempt.number, payload)

    def _answered(self, number: int, status: int, error: BaseException | None) -> None:
        """The writer's answer for group ``number``: staged, or its commit durable or failed."""
        if self._trace is not None:
            (self._trace.staged if status == STAGED else self._trace.durable)(number)
        if status == STAGED:
            unstaged = self._unstaged
            if unstaged is not None and unstaged.number == number:
                self._unstaged = None           # the writer takes the next group now
                if self.failure is None and (self._group or self._kept):
                    self._hand_off()
            return
        if not self._sent or self._sent[0].number != number:
            return                              # not ours (answers come in the order groups went)
        group = self._sent.popleft()
        if self._unstaged is group:
            self._unstaged = None
        self._committed(group, error)

    def _writer_died(self, code: int) -> None:
        """The writer process is gone: fail the groups it had and start another writer."""
        log.error("journal %s: the writer process exited (%s); starting another", self.vhost, code)
        lost = list(self._sent)
        self._sent.clear()
        self._start_writer()
        for group in lost:
            self._committed(group, OSError(f"the journal writer process exited ({code})"
                                           " before the commit was confirmed"))

    def _committed(self, group: JournalGroup, error: BaseException | None) -> None:
        """The writer answered for ``group`` (a commit, or a probe when it has no rows)."""
        if group.rows:
            self.figures.committed(time.monotonic(), error is None)
        probe = error is None and not group.rows
        if probe:
            group.done = True                   # a probe found room: the next commit is a real one
            self._probed = True
        waiters = [] if probe else self._finish(group, error)
        if error is not None and self.failure is not None and self._group:
            # still failing: what waited for this attempt fails with it (and is not sent)
            waiting, self._group = self._group, self._next_group()
            waiting.seal()
            waiters += self._finish(waiting, error)
        if self._loop is not None:
            if self.failure is None or (self._probed and not self._scheduled):
                if self._group or self._kept:
                    self._hand_off()
            elif not self._scheduled:           # at most one attempt per RETRY_DELAY
                self._scheduled = True
                self._loop.call_later(RETRY_DELAY, self._hand_off)
        for callback in waiters:
            try:
                callback()
            except Exception:
                log.exception("journal: a durability callback failed")
        if self._trace is not None:
            self._trace.waiters_done(group.number, self._loop)

    def _finish(self, group: JournalGroup, error: BaseException | None) -> list[Callable[[], None]]:
        """``group`` is durable, or failed with ``error``: count, keep, log; its waiters, to be run."""
        group.done = True
        group.error = error
        if error is None:
            self.commits += 1
            self.committed_rows += len(group.rows)
            if self._kept_enqueues:
                self._kept_enqueues.difference_update(
                    (row[1], row[2]) for row in group.rows if row[0] == ENQUEUE)
            if self.failure is not None:
                log.warning("journal of virtual host '%s': commits succeed again (%d failed)",
                            self.vhost, self._failed_in_a_row)
                self.failure = None
                self._failed_in_a_row = 0
        else:
            self._keep(group)
            self.failed_commits += 1
            self._failed_in_a_row += 1
            if self.failure is None:
                self.failure = error
                log.error("journal of virtual host '%s': commits failing: %s", self.vhost, error)
        callbacks, group.callbacks = group.callbacks, []
        return callbacks

    def _keep(self, group: JournalGroup) -> None:
        """Keep the settlements of a failed group (not of transactions) for the next commit."""
        kept, enqueues = self._kept, self._kept_enqueues
        for row in group.rows:
            event = row[0]
            if (event in _KEPT_EVENTS and row[4] is None) or (
                    event == ENQUEUE and enqueues and (row[1], row[2]) in enqueues):
                kept[(event, row[1], row[2], row[9])] = row

    def _take_kept(self, group: JournalGroup) -> None:
        """Add the rows kept from failed commits to ``group`` (it is about to be committed)."""
        if self._kept:
            group.rows.extend(self._kept.values())
            self._kept = {}

    def _commit(self, group: JournalGroup) -> None:
        """Commit ``group`` in this process (no loop attached: start-up, shut-down, tests)."""
        rows = self._encoder.table(self._plain(group.rows))
        self.figures.handed_off(len(group.rows), rows.nbytes, time.monotonic())
        try:
            self.table.append(rows)
        except BaseException:
            self.figures.committed(time.monotonic(), succeeded=False)
            raise
        self.figures.committed(time.monotonic(), succeeded=True)
        self.commits += 1
        self.committed_rows += len(group.rows)

    def _plain(self, rows: list[Row]) -> list[PlainRow]:
        """The rows with each message reduced to plain values (cheap to pickle)."""
        offset = self._wall_offset
        plain: list[PlainRow] = []
        append = plain.append
        for row in rows:
            message = row[8]
            if message is None:
                append(row)  # type: ignore[arg-type]
            else:
                tag, native = message.native()
                append((*row[:8], (message.exchange, message.routing_key, message.arrival + offset,
                                   message.body, tag, native), row[9]))  # type: ignore[arg-type]
        return plain

    # -- recovery ---------------------------------------------------------------------

    def live_messages(self) -> pa.Table:
        """Every live message (lakehouse.snapshot.LIVE_SCHEMA's columns), in restore order.

        From the newest snapshot plus the journal's tail when there is a usable
        one, else from the whole journal (saying why, once).
        """
        if self.use_snapshots:
            try:
                found = recover_live(self.table)
            except FileNotFoundError:
                log.info("journal %s: no snapshot (deltamq spark snapshot writes them): reading the whole"
                         " journal", self.vhost)
            except UnusableSnapshot as exc:
                log.warning("journal %s: snapshot not used, reading the whole journal: %s", self.vhost, exc)
            except Exception as exc:            # whatever went wrong there, the journal itself decides
                log.warning("journal %s: snapshot not used, reading the whole journal: %s: %s", self.vhost,
                            type(exc).__name__, exc)
            else:
                log.info("journal %s: %d live messages from the snapshot of version %d and %d later"
                         " commits (%d rows in %d files)", self.vhost, found.live.num_rows, found.header.version,
                         found.journal_version - found.header.version, found.tail_rows, found.tail_files)
                return found.live
        return self.table.read(journal_sql(_LIVE_SQL, read_watermark(self.path)))

    def recover(self, namespace: Namespace) -> int:
        """Put every live message back in its queue; the number of messages restored."""
        namespace.producers.restore(self.producer_sequences)   # exactly-once producers
        if wants_paged_recovery(self, namespace):               # flow to disk: bodies stay on disk
            return recover_paged(self, namespace)
        started = time.perf_counter()
        live = self.live_messages()
        total = live.num_rows
        if total:
            log.info("journal %s: recovering %d messages", self.vhost, total)
        queues = namespace.queues
        missing: set[str] = set()
        rebuild = MessageRebuilder().build
        restored = 0
        previous_id = 0
        previous: Message | None = None
        for batch in live.to_batches(max_chunksize=65_536):
            names = batch.column("queue").to_pylist()
            ids = batch.column("message_id").to_pylist()
            deliveries = batch.column("deliveries").to_pylist()
            exchanges = batch.column("exchange").to_pylist()
            keys = batch.column("routing_key").to_pylist()
            published = pc.divide(batch.column("published_at").cast(pa.int64()), 1e6).to_pylist()
            bodies = batch.column("body").to_pylist()
            tags = batch.column("message_format").to_pylist()
            raws = batch.column("native").to_pylist()
            for index, name in enumerate(names):
                target = queues.get(name)
                if target is None or not target.durable:
                    missing.add(name)
                    continue
                message_id = ids[index]
                if message_id != previous_id or previous is None:
                    previous = rebuild(message_id, exchanges[index], keys[index], published[index], tags[index],
                                       raws[index], bodies[index])
                    previous_id = message_id
                if not previous.persistent:     # journaled only for a lease consumer's grant
                    self._add((SETTLE, name, message_id, time.time(), None, deliveries[index],
                               DROPPED, TRANSIENT, None, None))
                    continue
                target.restore(previous, deliveries[index])
                restored += 1
                if restored % _RECOVERY_LOG_EVERY == 0:
                    log.info("journal %s: %d of %d messages recovered", self.vhost, restored, total)
        for name in sorted(missing):            # their queue was deleted: never again
            self._mark_deleted(name)
        if total:
            log.info("journal %s: %d messages recovered into %d queues in %.2f s", self.vhost,
                     restored, len({n for n in queues if queues[n].message_count}),
                     time.perf_counter() - started)
        return restored


#: the full recovery's query: every live message, in restore order
_LIVE_SQL = LIVE_MESSAGES_SQL + "\nORDER BY l.message_id, l.queue"
