"""Recovering a backlog without loading it: paged queues come back as journal ids.

:meth:`DeltaMessageJournal.recover <lakehouse.journal.DeltaMessageJournal.recover>`
reads every live message with its body.  When flow to disk could page the
backlog -- a durable queue is lazy (``x-queue-mode: lazy``), or the journal's
data files are larger than the broker's ``broker.flowToDiskThreshold`` --
:func:`recover_paged` recovers instead from the live messages *without the
body column* (:data:`LIVE_IDS_SQL`: queue, id, deliveries, body size,
persistence, priority), read batch by batch:

* the fresh persistent messages of every queue that can page
  (:func:`~broker.messaging.flow_to_disk.page_reader_of`) are restored as
  journal ids and sizes into its segments (:meth:`PagedStorage.restore_paged
  <broker.messaging.paged_storage.PagedStorage.restore_paged>`; a priority
  queue's by the ``priority`` property): 12 bytes each, read back when
  consumers reach them;
* the others -- messages of queues that cannot page (sorted, last-value)
  and messages delivered before (they come back marked
  redelivered, as entries) -- are read with their bodies by id
  (:class:`lakehouse.message_pages.MessagePages`) and restored as usual.

Transient messages (journaled only for a lease consumer's grant) and queues
that no longer exist are settled and marked as the full recovery does.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from broker.messaging.flow_to_disk import page_reader_of
from broker.messaging.journal import DROPPED
from broker.messaging.paged_queue import start_paging
from broker.messaging.paged_storage import PagedStorage

from .journal_schema import ENQUEUE, SETTLE, TRANSIENT
from .journal_writer import LIVE_CTES, journal_sql, read_watermark
from .page_reads import MessageRebuilder

if TYPE_CHECKING:
    from broker.messaging.namespace import Namespace
    from broker.messaging.queue import Queue

    from .journal import DeltaMessageJournal

__all__ = ["LIVE_IDS_SQL", "recover_paged", "wants_paged_recovery"]

log = logging.getLogger(__name__)

#: the live messages without their bodies, in restore order
LIVE_IDS_SQL: Final = LIVE_CTES + f"""
, sizes AS (
    SELECT message_id, length(encode(body, 'hex')) / 2 AS size,
           COALESCE(element_at(properties, 'delivery_mode')[1] = '2', false) AS persistent,
           element_at(properties, 'priority')[1] AS priority
    FROM j WHERE event = '{ENQUEUE}' AND body IS NOT NULL
)
SELECT l.queue, l.message_id, COALESCE(v.deliveries, 0) AS deliveries, s.size, s.persistent, s.priority
FROM live l
JOIN sizes s ON s.message_id = l.message_id
LEFT JOIN delivered v ON v.queue = l.queue AND v.message_id = l.message_id
ORDER BY l.message_id, l.queue"""

#: messages read with their bodies at once (queues that cannot page, redelivered messages)
_READ_BATCH: Final = 8192


def _data_bytes(location: object) -> int | None:
    """Bytes of the table's data files (a local table; None when remote or unreadable)."""
    if not isinstance(location, Path):
        return None
    total = 0
    try:
        for entry in os.scandir(location):
            if entry.name.endswith(".parquet") and entry.is_file():
                total += entry.stat().st_size
    except OSError:
        return None
    return total


def wants_paged_recovery(journal: DeltaMessageJournal, namespace: Namespace) -> bool:
    """True when some durable queue is lazy, or the journal's data may exceed the threshold."""
    for queue in namespace.queues.values():
        if queue.settings.lazy and page_reader_of(queue) is not None:
            return True
    threshold = journal.page_threshold
    if threshold <= 0:
        return False
    size = _data_bytes(journal.path)
    return size is None or size > threshold


def recover_paged(journal: DeltaMessageJournal, namespace: Namespace) -> int:
    """Restore every live message, paged where its queue can page; the number restored."""
    started = time.perf_counter()
    queues = namespace.queues
    sql = journal_sql(LIVE_IDS_SQL, read_watermark(journal.path))
    missing: set[str] = set()
    pageable: dict[str, PagedStorage | None] = {}
    # (message id, [(queue, deliveries)]): to read with bodies, in id order
    loaded: list[tuple[int, list[tuple[Queue, int]]]] = []
    restored = paged = 0
    for batch in journal.table.read_batches(sql):
        names = batch.column("queue").to_pylist()
        ids = batch.column("message_id").to_pylist()
        deliveries = batch.column("deliveries").to_pylist()
        sizes = batch.column("size").to_pylist()
        persistent = batch.column("persistent").to_pylist()
        priorities = batch.column("priority").to_pylist()
        run_queue: PagedStorage | None = None
        run_ids: list[int] = []
        run_sizes: list[int] = []
        run_priorities: list[int] = []
        for index, (name, message_id) in enumerate(zip(names, ids)):
            if (target := queues.get(name)) is None or not target.durable:
                missing.add(name)                # deleted while the broker was down
                continue
            if not persistent[index]:            # journaled only for a lease consumer's grant
                journal._add((SETTLE, name, message_id, time.time(), None, deliveries[index], DROPPED, TRANSIENT,
                              None, None))
                continue
            restored += 1
            pager = pageable[name] if name in pageable else _pager(pageable, name, target)
            if pager is not None and not deliveries[index]:
                if pager is not run_queue:
                    _flush(run_queue, run_ids, run_sizes, run_priorities)
                    run_queue, run_ids, run_sizes, run_priorities = pager, [], [], []
                run_ids.append(message_id)
                run_sizes.append(sizes[index])
                run_priorities.append(_priority(priorities[index]))
                paged += 1
                continue
            _flush(run_queue, run_ids, run_sizes, run_priorities)
            run_queue, run_ids, run_sizes, run_priorities = None, [], [], []
            if loaded and loaded[-1][0] == message_id:
                loaded[-1][1].append((target, deliveries[index]))
            else:
                loaded.append((message_id, [(target, deliveries[index])]))
        _flush(run_queue, run_ids, run_sizes, run_priorities)
    _restore_loaded(journal, loaded)
    for name in sorted(missing):                 # their queue was deleted: never again
        journal._mark_deleted(name)
    if restored:
        log.info("journal %s: %d messages recovered (%d paged, bodies left on disk) in %.2f s", journal.vhost,
                 restored, paged, time.perf_counter() - started)
    return restored


def _pager(pageable: dict[str, PagedStorage | None], name: str, queue: Queue) -> PagedStorage | None:
    """``queue`` paging (started now if needed), or None when it cannot page; remembered by name."""
    found: PagedStorage | None = None
    if start_paging(queue, lazy=queue.settings.lazy):
        assert isinstance(queue, PagedStorage)
        found = queue
    pageable[name] = found
    return found


def _priority(text: str | None) -> int:
    """The ``priority`` property as the journal's properties map holds it (text; absent: 0)."""
    try:
        value = int(text) if text else 0
    except ValueError:
        return 0
    return value if value > 0 else 0


def _flush(queue: PagedStorage | None, ids: list[int], sizes: list[int], priorities: list[int]) -> None:
    if queue is not None and ids:
        queue.restore_paged(ids, sizes, priorities if queue.type == "priority" else None)


def _restore_loaded(journal: DeltaMessageJournal, loaded: list[tuple[int, list[tuple[Queue, int]]]]) -> None:
    """Read the messages that stay in memory with their bodies, and restore them in order."""
    if not loaded:
        return
    from .message_pages import MessagePages

    pages = MessagePages(journal.table.uri, journal.table.storage_options)
    rebuild = MessageRebuilder().from_stored
    for start in range(0, len(loaded), _READ_BATCH):
        chunk = loaded[start:start + _READ_BATCH]
        stored = pages.read([message_id for message_id, _ in chunk])
        for (_, holders), item in zip(chunk, stored):
            message = rebuild(item)
            for queue, deliveries in holders:
                queue.restore(message, deliveries)

