"""Lease consumers: queue consumers that take messages only when they ask (Spark jobs).

A Spark Structured Streaming job consumes a queue without an AMQP
connection: its planner asks the broker for messages (a *grant*), Spark's
executors read the bodies from the journal's Delta files in parallel, and
once the micro-batch is committed the planner *settles* the messages.  The
broker only grants and settles; the bytes never pass through it.

A :class:`LeaseConsumer` is that job as the queue sees it: a consumer named
by the job (``consumer``), registered on the queue like any other (it counts
in ``consumerCount``, keeps an auto-delete queue alive, is the active one of
a single-active-consumer queue when it came first), but never pushed to:
messages go to it only by :meth:`Leases.grant`, which takes up to ``max``
ready messages from the head exactly as basic.get would -- acquired,
journaled as delivered, their delivery count kept -- and holds them for the
consumer.  No other consumer sees a held message.

The lease
---------
Every call of the job renews its lease (``lease_seconds``, given by the job).
When it runs out -- the job died, or stopped and was not restarted in time --
the virtual host's timer (:meth:`Leases.run_due`, driven through
:meth:`~broker.messaging.namespace.Namespace.run_due`) returns everything the
consumer holds to the queue (requeued at its place, redelivered, delivery
count + 1) and detaches the consumer; the job's next call attaches it again.

Sessions
--------
Each planner process names itself with a *session* (any string, new per
process).  Holdings belong to the consumer name, so a restarted job (a new
session of the same consumer) can settle what its previous run was granted:
Spark calls ``commit`` for the last batch the previous run committed before
it does anything else, and then replays the batch it logged but did not
commit.  What the old session holds becomes *orphaned* when the new session
first calls; an orphan stays held (no other consumer gets it) for one more
lease, during which the new session may settle it or :meth:`Leases.claim` it
(a replayed batch claims its messages: adopted when orphaned, acquired again
when they went back to the queue).  Orphans still unclaimed after that lease
-- messages granted for a batch Spark never logged -- return to the queue.

Settling (:meth:`Leases.settle`) is idempotent: a message already settled,
or held by no one, is counted as ``unknown`` and skipped; one that went back
to the queue is taken out and acknowledged (a restarted job settling a batch
whose lease had run out).  A message some other consumer took meanwhile is
that consumer's: the job had it too (at-least-once).  Acks are journaled as
``settle`` rows, outcome ``acked``, reason ``consumer:<name>``.

Runs
----
A grant takes the fresh messages at a standard queue's head as one
:class:`~broker.messaging.entry_runs.EntryRun` (no entry per message; one
journal row per range of consecutive ids), and a settlement naming every
message of a held run acknowledges it whole (one ``settle`` row per range):
the loop's work per grant and per settlement follows the number of ranges,
not of messages.  Whatever must be handled one message at a time -- a claim,
a release, a settlement naming only part of a run, a lease running out --
first splits the runs it touches into their entries.

Transient messages
------------------
The job reads bodies from the journal, which holds only persistent messages
of durable queues.  So a lease consumer only consumes durable queues of a
virtual host with a journal (:class:`~broker.errors.PreconditionFailed`
otherwise, naming the queue), and a transient message it is granted is
journaled there and then (an ``enqueue`` row with its body and a ``deliver``
row, in the grant's group commit: the grant is answered once it is durable).
Its settlement, requeue and release are journaled too; recovery never brings
a transient message back (it is settled as ``dropped``, reason
``transient``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from broker.errors import ConfigurationError, PreconditionFailed
from broker.messaging import id_ranges as ranges_of
from broker.messaging.entry_runs import EntryRun
from broker.messaging.id_ranges import Range
from broker.messaging.journal import ACKED
from broker.messaging.queue_entry import ACQUIRED, QueueEntry

if TYPE_CHECKING:
    from broker.messaging.queue import Queue

__all__ = ["LeaseConsumer", "Leases", "Grant", "Settlement", "id_ranges", "ids_in", "ranges_in", "SETTLED_BY_PREFIX"]

log = logging.getLogger(__name__)

#: how the journal's ``reason`` of an ack names the lease consumer that made it
SETTLED_BY_PREFIX = "consumer:"
#: the longest lease a consumer may ask for (seconds)
MAX_LEASE_SECONDS = 24 * 3600
#: the most ids one call may name (ranges expanded)
MAX_IDS = 1_000_000


def id_ranges(ids: Iterable[int]) -> list[list[int]]:
    """``ids`` as sorted, merged ``[first, last]`` ranges (both included), as JSON has them."""
    return [[first, last] for first, last in ranges_of.id_ranges(ids)]


def ranges_in(ranges: object, what: str = "messageIds") -> list[Range]:
    """``[first, last]`` ranges (JSON), checked and merged; ConfigurationError naming ``what``."""
    if not isinstance(ranges, list):
        raise ConfigurationError(f"parameter '{what}' must be a list of [first, last] id ranges")
    total = 0
    for item in ranges:
        if (not isinstance(item, list) or len(item) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
                or item[0] < 1 or item[1] < item[0]):
            raise ConfigurationError(f"parameter '{what}': {item!r} is not a [first, last] range"
                                     " of message ids (1 <= first <= last)")
        total += item[1] - item[0] + 1
        if total > MAX_IDS:
            raise ConfigurationError(f"parameter '{what}' names more than {MAX_IDS} messages")
    return ranges_of.merge(ranges)


def ids_in(ranges: object, what: str = "messageIds") -> list[int]:
    """The ids of ``[first, last]`` ranges (JSON), checked; ConfigurationError naming ``what``."""
    return ranges_of.expand(ranges_in(ranges, what))


@dataclass(slots=True)
class Grant:
    """What one grant or claim handed to a lease consumer."""

    #: the consumer's grant count (1 for its first)
    number: int
    #: journal ids of the messages now held, as normal ranges
    ranges: list[Range]
    #: how many messages
    count: int = 0
    #: how often the messages delivered before had been delivered from this queue (before this grant)
    redelivered: dict[int, int] = field(default_factory=dict)
    #: ids asked for (claims) that the consumer does not hold and could not take
    missing: list[int] = field(default_factory=list)
    #: the ids in grant order: single ids and the ranges of runs
    order: list[int | Range] = field(default_factory=list)

    @property
    def message_ids(self) -> list[int]:
        """Journal ids of the messages now held, in grant order."""
        ids: list[int] = []
        for part in self.order:
            if isinstance(part, int):
                ids.append(part)
            else:
                ids.extend(range(part[0], part[1] + 1))
        return ids


@dataclass(slots=True)
class Settlement:
    settled: int = 0
    #: ids settled before, or held by no one (nothing done)
    unknown: int = 0


class LeaseConsumer:
    """A consumer of one queue that takes messages only when granted (see the module)."""

    no_ack = False
    priority = 0

    def __init__(self, leases: Leases, queue: Queue, name: str, session: str,
                 lease_seconds: float, now: float) -> None:
        self.leases = leases
        self.queue = queue
        self.tag = name
        self.name = name
        self.session = session
        self.lease_seconds = lease_seconds
        #: when the lease runs out (broker clock)
        self.deadline = now + lease_seconds
        #: messages held for the current session, by journal id; and in runs
        self.held: dict[int, QueueEntry] = {}
        self.runs: list[EntryRun] = []
        #: messages an earlier session of this consumer holds (alone, in runs), and when they go back
        self.orphans: dict[int, QueueEntry] = {}
        self.orphan_runs: list[EntryRun] = []
        self.orphan_deadline: float | None = None
        self.grants = 0
        self.settled = 0
        #: called once when the consumer detaches (management removes its view)
        self.on_detach: Callable[[], None] | None = None

    @property
    def held_count(self) -> int:
        return (len(self.held) + len(self.orphans) + sum(len(run) for run in self.runs)
                + sum(len(run) for run in self.orphan_runs))

    def held_ids(self) -> list[int]:
        """The ids held for the current session, ascending."""
        return sorted([*self.held, *ranges_of.expand(r for run in self.runs for r in run.ranges)])

    def orphan_ids(self) -> list[int]:
        """The ids an earlier session holds, ascending."""
        return sorted([*self.orphans, *ranges_of.expand(r for run in self.orphan_runs for r in run.ranges)])

    def split(self, runs: list[EntryRun], into: dict[int, QueueEntry]) -> None:
        """Hold the messages of ``runs`` (taken out of its run lists) one by one, in ``into``."""
        for run in runs:
            for entry in self.queue.split_run(run):
                into[entry.message.journal_id] = entry
        self.runs = [run for run in self.runs if run not in runs]
        self.orphan_runs = [run for run in self.orphan_runs if run not in runs]

    def split_all(self) -> None:
        self.split(list(self.runs), self.held)
        self.split(list(self.orphan_runs), self.orphans)

    def split_touching(self, wanted: list[Range]) -> None:
        """Split the runs holding any id of ``wanted``."""
        for runs, into in ((self.runs, self.held), (self.orphan_runs, self.orphans)):
            touched = [run for run in runs if ranges_of.overlaps(run.ranges, wanted)]
            if touched:
                self.split(touched, into)

    # -- Consumer: what the queue asks of it ---------------------------------------------

    def can_deliver(self, entry: QueueEntry) -> bool:
        return False                            # never pushed to: it takes by grant

    def deliver(self, entry: QueueEntry) -> None:  # pragma: no cover - can_deliver refuses all
        raise AssertionError("a lease consumer is never delivered to")

    def queue_deleted(self, queue: Queue) -> None:
        self.held.clear()
        self.orphans.clear()
        self.runs, self.orphan_runs = [], []
        self.leases.forget(self)

    def __repr__(self) -> str:
        return (f"<LeaseConsumer {self.name!r} on {self.queue.name!r} held={self.held_count}"
                f" session={self.session!r}>")


class Leases:
    """The lease consumers of one virtual host, and the clock of their leases."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._consumers: dict[tuple[str, str], LeaseConsumer] = {}
        # (queue, journal id) of transient messages journaled for a grant
        self._journaled: set[tuple[str, int]] = set()

    def consumers(self, queue: Queue | None = None) -> list[LeaseConsumer]:
        return [c for c in self._consumers.values() if queue is None or c.queue is queue]

    def find(self, queue: Queue, name: str) -> LeaseConsumer | None:
        consumer = self._consumers.get((queue.name, name))
        return consumer if consumer is not None and consumer.queue is queue else None

    # -- what a job asks -----------------------------------------------------------------

    def attach(self, queue: Queue, name: str, session: str, lease_seconds: float) -> LeaseConsumer:
        """The consumer ``name`` of ``queue``, attached if it was not, its lease renewed.

        A call from another ``session`` than the consumer's orphans what the
        earlier session holds (see the module).
        """
        if not name:
            raise ConfigurationError("parameter 'consumer' must name the consumer")
        if not 0 < lease_seconds <= MAX_LEASE_SECONDS:
            raise ConfigurationError(f"parameter 'leaseSeconds' must be between 1 and {MAX_LEASE_SECONDS}")
        now = self.clock()
        consumer = self.find(queue, name)
        if consumer is None:
            self._check_queue(queue)
            consumer = LeaseConsumer(self, queue, name, session, lease_seconds, now)
            queue.add_consumer(consumer)        # AccessRefused: an exclusive consumer is there
            self._consumers[(queue.name, name)] = consumer
            log.info("lease consumer '%s' attached to queue '%s' in vhost '%s' (lease %ss)",
                     name, queue.name, queue.vhost, lease_seconds)
        elif session != consumer.session:
            if consumer.held or consumer.runs:
                consumer.orphans.update(consumer.held)
                consumer.orphan_runs.extend(consumer.runs)
                consumer.held, consumer.runs = {}, []
                consumer.orphan_deadline = now + consumer.lease_seconds
                log.info("lease consumer '%s' of queue '%s': new session; %d messages of the last"
                         " one held for %ss more", name, queue.name, consumer.held_count,
                         consumer.lease_seconds)
            consumer.session = session
        consumer.lease_seconds = lease_seconds
        consumer.deadline = now + lease_seconds
        return consumer

    def grant(self, queue: Queue, name: str, session: str, max_messages: int,
              lease_seconds: float) -> Grant:
        """Take up to ``max_messages`` ready messages from the head for consumer ``name``.

        ``max_messages`` 0 only renews the lease.
        """
        if max_messages < 0:
            raise ConfigurationError("parameter 'max' must not be negative")
        consumer = self.attach(queue, name, session, lease_seconds)
        taken: list[QueueEntry] = []
        runs: list[EntryRun] = []
        order: list[int | Range] = []
        wanted = max_messages
        while wanted > 0:
            run = queue.take_run(wanted)        # fresh persistent messages at the head, at once
            if run is not None:
                runs.append(run)
                order.extend(run.ranges)
                wanted -= len(run)
                continue
            entry = queue.get()
            if entry is None:
                break
            self._journal_transient(queue, entry)
            taken.append(entry)
            order.append(entry.message.journal_id)
            wanted -= 1
        consumer.runs.extend(runs)
        grant = self._with_runs(self._hold(consumer, taken), runs)
        grant.order = order
        return grant

    def claim(self, queue: Queue, name: str, session: str, ids: list[int],
              lease_seconds: float) -> Grant:
        """Hold exactly ``ids`` for consumer ``name`` (a replayed batch): adopt, or take again.

        Ids held by an earlier session are adopted; ids back in the queue are
        acquired again (delivery count + 1); the others -- settled, or taken by
        another consumer -- are reported ``missing``.
        """
        consumer = self.attach(queue, name, session, lease_seconds)
        remaining = ranges_of.id_ranges(ids)
        adopted: list[EntryRun] = []            # runs named whole stay runs
        for runs in (consumer.orphan_runs, consumer.runs):
            for run in [run for run in runs if ranges_of.contains(remaining, run.ranges)]:
                runs.remove(run)
                adopted.append(run)
                remaining = ranges_of.subtract(remaining, run.ranges)
        consumer.runs.extend(adopted)
        consumer.split_touching(remaining)
        wanted: set[int] = set()
        kept: list[QueueEntry] = []
        for message_id in ranges_of.expand(remaining):
            entry = consumer.orphans.pop(message_id, None) or consumer.held.get(message_id)
            if entry is not None:
                kept.append(entry)
            else:
                wanted.add(message_id)
        if not (consumer.orphans or consumer.orphan_runs):
            consumer.orphan_deadline = None
        taken = queue.acquire(lambda e: e.message.journal_id in wanted, len(wanted)) if wanted else []
        for entry in taken:
            self._journal_transient(queue, entry)
        grant = self._with_runs(self._hold(consumer, kept + taken), adopted)
        grant.missing = sorted(wanted - {entry.message.journal_id for entry in taken})
        return grant

    def settle(self, queue: Queue, name: str, session: str, ids: list[int],
               lease_seconds: float) -> Settlement:
        """Acknowledge ``ids`` for consumer ``name`` (idempotent; see the module)."""
        return self.settle_ranges(queue, name, session, ranges_of.id_ranges(ids), lease_seconds)

    def settle_ranges(self, queue: Queue, name: str, session: str, wanted: list[Range],
                      lease_seconds: float) -> Settlement:
        """Acknowledge the ids of ``wanted`` (normal ranges) for consumer ``name``.

        Held runs whose every message is named are settled whole (one journal
        row per range); the runs named in part are split, and the rest is
        settled message by message.
        """
        consumer = self.attach(queue, name, session, lease_seconds)
        result = Settlement()
        by = SETTLED_BY_PREFIX + name
        for runs in (consumer.runs, consumer.orphan_runs):
            whole = [run for run in runs if ranges_of.contains(wanted, run.ranges)]
            for run in whole:
                result.settled += queue.settle_run(run, by)
                wanted = ranges_of.subtract(wanted, run.ranges)
                runs.remove(run)
        consumer.split_touching(wanted)
        back: set[int] = set()
        for message_id in ranges_of.expand(wanted):
            entry = consumer.held.pop(message_id, None) or consumer.orphans.pop(message_id, None)
            if entry is None:
                back.add(message_id)
            elif self._ack(queue, entry, by):
                result.settled += 1
        if back:        # gone back to the queue (a lease ran out): take them out, acked
            for entry in queue.acquire(lambda e: e.message.journal_id in back, len(back)):
                self._journal_transient(queue, entry)
                back.discard(entry.message.journal_id)
                if self._ack(queue, entry, by):
                    result.settled += 1
        result.unknown = len(back)
        if not (consumer.orphans or consumer.orphan_runs):
            consumer.orphan_deadline = None
        consumer.settled += result.settled
        return result

    def release(self, queue: Queue, name: str, ids: list[int] | None) -> int:
        """Return ``ids`` (None: everything) the consumer holds to the queue; how many went back.

        Releasing everything also detaches the consumer.
        """
        consumer = self.find(queue, name)
        if consumer is None:
            return 0
        if ids is None:
            count = consumer.held_count
            self._detach(consumer)
            return count
        consumer.split_touching(ranges_of.id_ranges(ids))
        entries = [entry for message_id in ids
                   if (entry := consumer.held.pop(message_id, None) or consumer.orphans.pop(message_id, None))]
        self._requeue(queue, entries)
        return len(entries)

    # -- time ---------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        earliest: float | None = None
        for consumer in self._consumers.values():
            for deadline in (consumer.deadline, consumer.orphan_deadline):
                if deadline is not None and (earliest is None or deadline < earliest):
                    earliest = deadline
        return earliest

    def run_due(self, now: float) -> None:
        """Leases run out: return what their consumers hold, and detach them."""
        for consumer in list(self._consumers.values()):
            if consumer.deadline <= now:
                log.info("lease of consumer '%s' on queue '%s' in vhost '%s' ran out: %d messages"
                         " go back", consumer.name, consumer.queue.name, consumer.queue.vhost,
                         consumer.held_count)
                self._detach(consumer)
            elif consumer.orphan_deadline is not None and consumer.orphan_deadline <= now:
                consumer.split(list(consumer.orphan_runs), consumer.orphans)
                orphans, consumer.orphans = consumer.orphans, {}
                consumer.orphan_deadline = None
                log.info("consumer '%s' on queue '%s': %d messages of an earlier session go back",
                         consumer.name, consumer.queue.name, len(orphans))
                self._requeue(consumer.queue, list(orphans.values()))

    # -- inside -----------------------------------------------------------------------------

    def forget(self, consumer: LeaseConsumer) -> None:
        """``consumer`` is gone (detached, or its queue was deleted)."""
        if self._consumers.get((consumer.queue.name, consumer.name)) is consumer:
            del self._consumers[(consumer.queue.name, consumer.name)]
        callback, consumer.on_detach = consumer.on_detach, None
        if callback is not None:
            callback()

    def _detach(self, consumer: LeaseConsumer) -> None:
        consumer.split_all()
        entries = [*consumer.orphans.values(), *consumer.held.values()]
        consumer.held, consumer.orphans, consumer.orphan_deadline = {}, {}, None
        queue = consumer.queue
        self.forget(consumer)
        queue.remove_consumer(consumer)         # may delete an auto-delete queue: after the requeue
        self._requeue(queue, entries)

    def _requeue(self, queue: Queue, entries: list[QueueEntry]) -> None:
        entries.sort()                          # back in queue order
        queue.release_many(entries)
        journal = queue.journal
        if journal is None:
            return
        for entry in entries:
            if not entry.message.persistent and (queue.name, entry.message.journal_id) in self._journaled:
                journal.requeued(entry)

    def _check_queue(self, queue: Queue) -> None:
        where = f"queue '{queue.name}' in vhost '{queue.vhost}'"
        if queue.deleted:
            raise PreconditionFailed(f"{where} has been deleted")
        if not queue.durable:
            raise PreconditionFailed(f"{where} is not durable: a Spark consumer reads messages from the"
                                     " journal, which keeps durable queues only; declare it durable")
        if queue.exclusive:
            raise PreconditionFailed(f"{where} is exclusive to a connection")
        if queue.journal is None:
            raise PreconditionFailed(f"{where} has no message journal (its virtual host node is not"
                                     " of type 'delta'): a Spark consumer reads messages from it")

    def _hold(self, consumer: LeaseConsumer, entries: list[QueueEntry]) -> Grant:
        """Hold ``entries`` (acquired) for ``consumer``: a grant of them."""
        consumer.grants += 1
        grant = Grant(consumer.grants, [], len(entries))
        ids = []
        for entry in entries:
            message_id = entry.message.journal_id
            consumer.held[message_id] = entry
            ids.append(message_id)
            if entry.delivery_count:
                grant.redelivered[message_id] = entry.delivery_count
        grant.ranges = ranges_of.id_ranges(ids)
        grant.order.extend(ids)
        return grant

    @staticmethod
    def _with_runs(grant: Grant, runs: list[EntryRun]) -> Grant:
        """``grant`` with the messages of ``runs`` (held already) in it too."""
        if runs:
            grant.ranges = ranges_of.merge([*grant.ranges, *(r for run in runs for r in run.ranges)])
            grant.count += sum(len(run) for run in runs)
            grant.order.extend(r for run in runs for r in run.ranges)
        return grant

    def _journal_transient(self, queue: Queue, entry: QueueEntry) -> None:
        """Journal a transient message being granted: its body must be in the journal (see the module)."""
        message = entry.message
        journal = queue.journal
        if message.persistent or journal is None:
            return
        if not message.journal_id or (queue.name, message.journal_id) not in self._journaled:
            journal.enqueued(queue, message)   # numbers it when no queue journaled it yet
            self._journaled.add((queue.name, message.journal_id))
        journal.delivered(entry)

    def _ack(self, queue: Queue, entry: QueueEntry, by: str) -> bool:
        if entry.state != ACQUIRED:
            return False
        queue.settle(entry, by=by)
        message = entry.message
        key = (queue.name, message.journal_id)
        if not message.persistent and key in self._journaled:
            self._journaled.discard(key)
            journal = queue.journal
            if journal is not None:
                journal.settled(queue, message, ACKED, by, entry.delivery_count + 1)
        return True
