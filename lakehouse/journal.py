"""The message journal: persistent messages on durable queues, group-committed to Delta.

:class:`DeltaMessageJournal` is the :class:`~broker.messaging.journal.MessageJournal`
of a virtual host whose node is of type ``delta``.  It writes the ``journal``
table (schema and meaning: :mod:`lakehouse.journal_schema`).

Group commit
------------
Durable queues report events on the event loop; each becomes a tuple appended
to the *open group* (a few hundred nanoseconds: nothing is converted on the
loop).  When no commit is in flight, the first event schedules a hand-off at
the end of the current loop iteration, so everything processed in that
iteration -- every connection's reads -- joins the group.  While a commit is
in flight the open group keeps growing; when the commit finishes, the next
group is handed off at once.  One writer thread turns a group into an Arrow
table (message bodies, properties decoded to text with a cache) and appends
it as one Delta commit, fsynced (:class:`~lakehouse.delta_table.AppendOnlyTable`).
Then, back on the loop, the group is marked durable and its waiters --
publisher confirms, tx.commit-ok -- run.

A ``deliver`` event settled within the same group is never written: the
``settle`` row already says the message was delivered.

Recovery
--------
:meth:`DeltaMessageJournal.recover` computes the live messages of every queue
with one SQL query over the table (DataFusion, vectorised): ``enqueue`` rows
without a ``settle`` row and not older than the queue's last
``queue_deleted``, joined to the one row holding each message's body, in
message id order.  Messages reached by several queues are rebuilt once and
shared.  Queues that no longer exist get a ``queue_deleted`` row, so their
messages never come back if a queue of that name is declared again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import queue as queue_module
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
import pyarrow.compute as pc

from broker.messaging.message import Message, MessageProperties
from broker.messaging.records import to_json_value
from broker.protocol.amqp0_9_1.properties import CODEC

from .delta_table import AppendOnlyTable, is_uri
from .maintenance import TableMaintenance
from .retention import purge_settled_history
from .journal_schema import DELIVER, ENQUEUE, JOURNAL_SCHEMA, QUEUE_DELETED, REQUEUE, SETTLE, TIMESTAMP

if TYPE_CHECKING:
    from broker.messaging.namespace import Namespace
    from broker.messaging.queue import Queue, QueueEntry

__all__ = ["DeltaMessageJournal", "JournalGroup"]

log = logging.getLogger(__name__)

#: (event, queue, message_id, at, tx_id, delivery_count, outcome, reason, message-or-None)
Row = tuple[str, str, int, float, "int | None", "int | None", "str | None", "str | None", "Message | None"]

_PROPERTY_NAMES = tuple(name for name in MessageProperties.__dataclass_fields__ if name != "headers")
_CACHE_LIMIT = 10_000

#: Delta history kept (time travel, and how far behind a Spark stream may fall), in hours
HISTORY_RETENTION_HOURS = int(os.environ.get("DELTAMQ_JOURNAL_RETENTION_HOURS", "168"))
_RECOVERY_LOG_EVERY = 200_000


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
            self.rows.extend((DELIVER, name, message_id, at, None, count, None, None, None)
                             for (name, message_id), (count, at) in self.delivered.items())
            self.delivered = {}

    def when_durable(self, callback: Callable[[], None]) -> None:
        if self.done:
            callback()
        else:
            self.callbacks.append(callback)

    def __repr__(self) -> str:
        return f"<JournalGroup #{self.number} rows={len(self.rows)} done={self.done}>"


class JournalMaintenance(TableMaintenance):
    """The journal's upkeep: also removes the history of messages settled before the retention."""

    def vacuum(self) -> None:
        if not is_uri(self.table.uri):            # row retention rewrites files locally (not on S3 yet)
            cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=self.retention_hours)
            purge_settled_history(self.table, cutoff)
        super().vacuum()


class DeltaMessageJournal:
    """One virtual host's journal table, written by group commit."""

    def __init__(self, path: str | Path, vhost: str) -> None:
        self.path = path if is_uri(path) else Path(path)
        self.vhost = vhost
        retention = f"interval {HISTORY_RETENTION_HOURS} hours"
        self.table = AppendOnlyTable(self.path, JOURNAL_SCHEMA, name="journal", stats_column="message_id",
                                     properties={"delta.logRetentionDuration": retention,
                                                 "delta.deletedFileRetentionDuration": retention})
        self.maintenance = JournalMaintenance(self.table, retention_hours=HISTORY_RETENTION_HOURS)
        self._group = JournalGroup(1)
        self._busy = False
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handoffs: queue_module.SimpleQueue[JournalGroup | None] = queue_module.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._next_message_id = 1
        self._next_tx_id = 1
        self._tx: int | None = None
        self._wall_offset = time.time() - time.monotonic()   # monotonic arrival -> wall clock
        self._properties_cache: dict[bytes, tuple[list[tuple[str, str]], str | None]] = {}
        # statistics
        self.commits = 0
        self.committed_rows = 0
        self.last_commit_seconds = 0.0

    # -- lifetime ------------------------------------------------------------------

    def open(self) -> None:
        self.table.open()
        highest = self.table.read("SELECT MAX(message_id) AS m, MAX(tx_id) AS t FROM t")
        if highest.num_rows:
            top_message, top_tx = highest.column("m")[0].as_py(), highest.column("t")[0].as_py()
            self._next_message_id = (top_message or 0) + 1
            self._next_tx_id = (top_tx or 0) + 1

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start committing: groups are handed off on ``loop``, which also runs the waiters."""
        self._loop = loop
        self._thread = threading.Thread(target=self._write_groups, name=f"journal-{self.vhost}",
                                        daemon=True)
        self._thread.start()
        self.maintenance.start()
        if self._group:
            self._schedule()

    def close(self) -> None:
        """Commit everything still open, then stop the writer (after the loop has stopped)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._handoffs.put(None)
            thread.join(60)
        self.maintenance.close()
        group = self._group
        if group:
            self._group = JournalGroup(group.number + 1)
            group.seal()
            try:
                self._commit(group)
            except Exception:
                log.exception("journal: final commit of %d rows failed", len(group.rows))
        self.table.close()

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

    def enqueued(self, queue: Queue, message: Message) -> None:
        message_id = message.journal_id
        if message_id:
            self._add((ENQUEUE, queue.name, message_id, time.time(), self._tx, None, None, None, None))
        else:
            message_id = message.journal_id = self._next_message_id
            self._next_message_id = message_id + 1
            self._add((ENQUEUE, queue.name, message_id, time.time(), self._tx, None, None, None, message))

    def delivered(self, entry: QueueEntry) -> None:
        self._group.delivered[(entry.queue.name, entry.message.journal_id)] = (
            entry.delivery_count + 1, time.time())
        self._wake()

    def requeued(self, entry: QueueEntry) -> None:
        name, message_id = entry.queue.name, entry.message.journal_id
        self._group.delivered.pop((name, message_id), None)
        self._add((REQUEUE, name, message_id, time.time(), self._tx, entry.delivery_count,
                   None, None, None))

    def settled(self, queue: Queue, message: Message, outcome: str, reason: str | None = None,
                delivery_count: int = 0) -> None:
        name, message_id = queue.name, message.journal_id
        group = self._group
        if group.delivered:
            group.delivered.pop((name, message_id), None)
        self._add((SETTLE, name, message_id, time.time(), self._tx, delivery_count, outcome, reason, None))

    def queue_deleted(self, queue: Queue) -> None:
        self._mark_deleted(queue.name)

    def _mark_deleted(self, name: str) -> None:
        self._add((QUEUE_DELETED, name, self._next_message_id - 1, time.time(), self._tx,
                   None, None, None, None))

    def _add(self, row: Row) -> None:
        self._group.rows.append(row)
        if not self._scheduled and not self._busy and self._loop is not None:
            self._schedule()

    def _wake(self) -> None:
        if not self._scheduled and not self._busy and self._loop is not None:
            self._schedule()

    def _schedule(self) -> None:
        assert self._loop is not None
        self._scheduled = True
        self._loop.call_soon(self._hand_off)

    def _hand_off(self) -> None:
        self._scheduled = False
        group = self._group
        if self._busy or not group:
            return
        self._group = JournalGroup(group.number + 1)
        group.seal()
        self._busy = True
        self._handoffs.put(group)

    def _committed(self, group: JournalGroup, error: BaseException | None) -> None:
        self._busy = False
        group.done = True
        group.error = error
        callbacks, group.callbacks = group.callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("journal: a durability callback failed")
        if self._group and not self._scheduled:
            self._hand_off()

    # -- the writer thread ------------------------------------------------------------

    def _write_groups(self) -> None:
        loop = self._loop
        assert loop is not None
        while True:
            group = self._handoffs.get()
            if group is None:
                return
            error: BaseException | None = None
            try:
                self._commit(group)
            except Exception as exc:        # every waiter must hear it; the next group is tried anew
                log.exception("journal: commit of %d rows failed", len(group.rows))
                error = exc
            try:
                loop.call_soon_threadsafe(self._committed, group, error)
            except RuntimeError:            # the loop is closed: shutting down
                return

    def _commit(self, group: JournalGroup) -> None:
        started = time.perf_counter()
        rows = group.rows
        self.table.append(self._arrow(rows))
        self.commits += 1
        self.committed_rows += len(rows)
        self.last_commit_seconds = time.perf_counter() - started

    def _arrow(self, rows: list[Row]) -> pa.Table:
        """The group's rows as a table of JOURNAL_SCHEMA (runs on the writer thread)."""
        count = len(rows)
        events, queues, ids, ats, txs, counts, outcomes, reasons, messages = zip(*rows)
        exchanges: list[str | None] = [None] * count
        keys: list[str | None] = [None] * count
        published: list[float | None] = [None] * count
        bodies: list[bytes | None] = [None] * count
        raws: list[bytes | None] = [None] * count
        props: list[list[tuple[str, str]] | None] = [None] * count
        headers: list[str | None] = [None] * count
        offset = self._wall_offset
        for index, message in enumerate(messages):
            if message is None:
                continue
            exchanges[index] = message.exchange
            keys[index] = message.routing_key
            published[index] = message.arrival + offset
            bodies[index] = message.body
            raw = raws[index] = message.encoded_properties_for(CODEC)
            props[index], headers[index] = self._describe(raw)
        columns = [
            pa.array([self.vhost] * count, pa.string()),
            _timestamps(ats),
            pa.array(events, pa.string()),
            pa.array(queues, pa.string()),
            pa.array(ids, pa.int64()),
            pa.array(txs, pa.int64()),
            pa.array(counts, pa.int32()),
            pa.array(outcomes, pa.string()),
            pa.array(reasons, pa.string()),
            pa.array(exchanges, pa.string()),
            pa.array(keys, pa.string()),
            _timestamps(published),
            pa.array(bodies, pa.binary()),
            pa.array(props, JOURNAL_SCHEMA.field("properties").type),
            pa.array(headers, pa.string()),
            pa.array(raws, pa.binary()),
        ]
        return pa.Table.from_arrays(columns, schema=JOURNAL_SCHEMA)

    def _describe(self, raw: bytes) -> tuple[list[tuple[str, str]], str | None]:
        """Properties as text pairs and headers as JSON, cached by their wire form."""
        cache = self._properties_cache
        described = cache.get(raw)
        if described is None:
            decoded = CODEC.decode(raw)
            pairs = [(name, str(value)) for name in _PROPERTY_NAMES
                     if (value := getattr(decoded, name)) is not None]
            header_json = (json.dumps(to_json_value(decoded.headers), ensure_ascii=False, sort_keys=True)
                           if decoded.headers else None)
            described = (pairs, header_json)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[raw] = described
        return described

    # -- recovery ---------------------------------------------------------------------

    def recover(self, namespace: Namespace) -> int:
        """Put every live message back in its queue; the number of messages restored."""
        started = time.perf_counter()
        live = self.table.read(_LIVE_SQL)
        total = live.num_rows
        if total:
            log.info("journal %s: recovering %d messages", self.vhost, total)
        queues = namespace.queues
        missing: set[str] = set()
        properties_cache: dict[bytes, MessageProperties] = {}
        mono_offset = time.monotonic() - time.time()
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
            raws = batch.column("properties_raw").to_pylist()
            for index, name in enumerate(names):
                target = queues.get(name)
                if target is None or not target.durable:
                    missing.add(name)
                    continue
                message_id = ids[index]
                if message_id != previous_id or previous is None:
                    raw = raws[index]
                    properties = properties_cache.get(raw)
                    if properties is None:
                        properties = CODEC.decode(raw)
                        if len(properties_cache) >= _CACHE_LIMIT:
                            properties_cache.clear()
                        properties_cache[raw] = properties
                    previous = Message(exchange=exchanges[index], routing_key=keys[index],
                                       body=bodies[index], properties=properties,
                                       encoded_properties=raw, codec=CODEC,
                                       arrival=published[index] + mono_offset)
                    previous.journal_id = previous_id = message_id
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


def _timestamps(seconds: tuple[float | None, ...] | list[float | None]) -> pa.Array:
    """Epoch seconds (float) as UTC microsecond timestamps."""
    micros = pc.multiply(pa.array(seconds, pa.float64()), 1_000_000.0)
    return pc.cast(micros, pa.int64(), safe=False).cast(TIMESTAMP)


_LIVE_SQL = f"""
WITH deleted AS (
    SELECT queue, MAX(message_id) AS upto FROM t WHERE event = '{QUEUE_DELETED}' GROUP BY queue
), settled AS (
    SELECT DISTINCT queue, message_id FROM t WHERE event = '{SETTLE}'
), delivered AS (
    SELECT queue, message_id, MAX(delivery_count) AS deliveries FROM t
    WHERE event IN ('{DELIVER}', '{REQUEUE}') GROUP BY queue, message_id
), enqueued AS (
    SELECT e.queue, e.message_id FROM t e LEFT JOIN deleted d ON e.queue = d.queue
    WHERE e.event = '{ENQUEUE}' AND (d.upto IS NULL OR e.message_id > d.upto)
), live AS (
    SELECT e.queue, e.message_id FROM enqueued e
    LEFT JOIN settled s ON s.queue = e.queue AND s.message_id = e.message_id
    WHERE s.message_id IS NULL
), bodies AS (
    SELECT message_id, exchange, routing_key, published_at, body, properties_raw FROM t
    WHERE event = '{ENQUEUE}' AND body IS NOT NULL
)
SELECT l.queue, l.message_id, COALESCE(v.deliveries, 0) AS deliveries, b.exchange,
       b.routing_key, b.published_at, b.body, b.properties_raw
FROM live l
JOIN bodies b ON b.message_id = l.message_id
LEFT JOIN delivered v ON v.queue = l.queue AND v.message_id = l.message_id
ORDER BY l.message_id, l.queue
"""

