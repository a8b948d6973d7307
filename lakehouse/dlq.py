"""The dead-letter processor: a micro-batch job that follows a node's journal.

``deltamq spark dlq`` (:mod:`lakehouse.dlq_command`) runs :class:`DeadLetterJob`.
Every ``--interval`` it takes the journal's new commits (or, with
``--once``, every commit not yet handled) as one micro-batch:

1. finds the dead letters: ``enqueue`` rows of the policy's dead-letter
   queues, with the row that stores the message (its body, properties, and
   headers -- ``x-death`` among them; a dead-lettered copy is a new message,
   stored with its first enqueue, in the same journal commit).  The commits
   are read with pyarrow from the files they appended
   (:mod:`lakehouse.dlq_journal`): a micro-batch costs milliseconds, not the
   seconds of a Spark job over one small file per broker commit;
2. classifies each (:mod:`lakehouse.dlq_policy`) and appends one row per dead
   letter into the *curated* Delta table, keyed by (node, vhost, message_id),
   with delta-rs, in one commit that also records the Delta transaction
   (``deltamq-dlq:<node>:<journal id>``, the batch's last journal version):
   the rows and the job's progress are committed together;
3. takes them out of their dead-letter queues (policy ``settle``) and saves
   its progress in the checkpoint directory.

The *due pass* republishes the curated rows whose decision is ``republish``
and whose backoff has passed, whatever batch they came from (Spark SQL over
the curated table, and a Delta ``MERGE`` for each change of state): after
``--once``'s batches, and every interval in continuous mode, in a thread of
its own so that its Spark work never holds up a batch.  A dead letter still
backing off is republished by a later pass or run, without new journal rows.

Restarts neither miss nor duplicate a dead letter.  A run resumes after the
version its checkpoint saved.  A crash after a batch's curated commit and
before its checkpoint is saved leaves the table's transaction version ahead
of the checkpoint: that stretch is read again, its dead letters counted as
already curated (not classified again) and settled.  Without a checkpoint
the table's transaction version is the start; without either (a first run,
or a table an older job wrote), the whole journal is read and checked
against the table by (vhost, message_id), as is a stretch whose commits the
journal's log no longer holds.

Republishing is idempotent across restarts.  Each curated row has a
deterministic ``republish_id`` (node, vhost, the dead letter's journal id:
one per message and attempt, since every attempt that dies again is a new
dead letter), and a state: ``pending`` -> ``publishing`` (committed to the
table *before* the publish) -> ``republished`` or ``failed``.  Only
``pending`` rows are ever published, so neither a replayed batch nor a second
run publishes again.  A crash between the publish and the table's update
leaves ``publishing`` rows: at its next start the job looks for their
``republish_id`` header in the journal (a confirmed publish to a durable
queue is there before the confirm) and marks the ones found republished; the
others go back to ``pending`` and are published again -- so a message routed
only to non-durable queues, or published without ``delivery_mode`` 2, can be
republished twice after such a crash (at-least-once there).  One job per
curated table.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from broker.messaging.message_format import format_for
from broker.messaging.records import from_json_value, to_json_value
from lakehouse.delta_table import append_once, transaction_version
from lakehouse.delta_versions import query_table
from lakehouse.dlq_journal import ArrivedDeadLetter, JournalFollower, JournalGone, Progress
from lakehouse.dlq_policy import (DROP, PARK, REPUBLISH, REPUBLISH_ID_HEADER, Decision, Policy,
                                  classify, decide)
from lakehouse.dlq_republish import Republisher, RepublishRefused, basic_properties
from lakehouse.journal_schema import ENQUEUE, TIMESTAMP

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession

__all__ = ["DeadLetterJob", "CURATED_SCHEMA", "CURATED_ARROW_SCHEMA", "RunSummary", "STATES", "JobFailed"]

log = logging.getLogger(__name__)

PENDING: Final = "pending"
PUBLISHING: Final = "publishing"
REPUBLISHED: Final = "republished"
FAILED: Final = "failed"
PARKED: Final = "parked"
DROPPED: Final = "dropped"
#: a curated row's ``state``
STATES: Final = (PENDING, PUBLISHING, REPUBLISHED, FAILED, PARKED, DROPPED)
_STATE_OF = {PARK: PARKED, DROP: DROPPED, REPUBLISH: PENDING}

#: the curated table's columns (docs/dead-letter-processor.md says what each means)
CURATED_SCHEMA: Final = ", ".join([
    "node STRING NOT NULL", "vhost STRING NOT NULL", "message_id BIGINT NOT NULL",
    "dead_letter_queue STRING", "dead_lettered_at TIMESTAMP",
    "reason STRING", "source_queue STRING", "source_exchange STRING", "source_routing_key STRING",
    "death_count INT", "first_death_reason STRING",
    "exchange STRING", "routing_key STRING", "headers STRING", "properties MAP<STRING, STRING>",
    "body BINARY", "message_format STRING", "native BINARY",
    "rule STRING", "decision STRING", "note STRING", "attempt INT",
    "target_exchange STRING", "target_routing_key STRING", "republish_headers STRING",
    "republish_id STRING", "due_at TIMESTAMP", "state STRING", "handled_at TIMESTAMP",
    "publishing_at TIMESTAMP", "republished_at TIMESTAMP",
])

_ARROW_TYPES: Final = {"STRING": pa.string(), "BIGINT": pa.int64(), "INT": pa.int32(), "BINARY": pa.binary(),
                       "TIMESTAMP": TIMESTAMP, "MAP<STRING, STRING>": pa.map_(pa.string(), pa.string())}
#: the same in Arrow: what delta-rs appends
CURATED_ARROW_SCHEMA: Final = pa.schema([
    pa.field(name, _ARROW_TYPES[kind.removesuffix(" NOT NULL")], nullable=not kind.endswith(" NOT NULL"))
    for name, kind in (column.split(" ", 1) for column in re.split(r", (?![^<]*>)", CURATED_SCHEMA))
])

#: how long a stopping job waits for a due pass in progress (then leaves it: the rows stay in doubt)
_DUE_PASS_STOP_SECONDS: Final = 120
#: journal commits read per micro-batch at most (a long backlog is taken in several)
MAX_COMMITS_PER_BATCH: Final = 2000

_UTC = datetime.timezone.utc


def _moment(micros: int | None) -> datetime.datetime | None:
    return None if micros is None else datetime.datetime.fromtimestamp(micros / 1e6, _UTC)


def republish_id(node: str, vhost: str, message_id: int) -> str:
    """The deterministic id of the republish of dead letter ``message_id`` (a UUID, as text)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"deltamq-dlq:{node}:{vhost}:{message_id}"))


class JobFailed(RuntimeError):
    """The job cannot go on; the message says why and what to do."""


@dataclass
class RunSummary:
    """What the job did since it started (the CLI prints it)."""

    classified: dict[str, int] = field(default_factory=lambda: {REPUBLISH: 0, PARK: 0, DROP: 0})
    republished: int = 0
    failed: int = 0
    recovered: int = 0
    already_curated: int = 0

    def line(self, waiting: int) -> str:
        decided = ", ".join(f"{count} {action}" for action, count in self.classified.items())
        total = sum(self.classified.values())
        return (f"{total} dead letter(s) classified ({decided}); {self.republished} republished,"
                f" {self.failed} refused by the broker, {waiting} waiting for their backoff")


class DeadLetterJob:
    """The dead-letter processor over ``<data_dir>/<node>/journal`` (see the module's docstring).

    ``republisher`` makes the AMQP publisher for a virtual host (each dead
    letter goes back to its own); ``clock`` (epoch seconds) decides which
    backoffs have passed.
    """

    def __init__(self, spark: SparkSession, policy: Policy, *, data_dir: str | Path, node: str,
                 checkpoint: str | Path, republisher: Callable[[str], Republisher],
                 clock: Callable[[], float] = time.time,
                 settler: Callable[[str, str, list[int]], None] | None = None) -> None:
        self.spark = spark
        self.policy = policy
        self.data_dir = Path(data_dir)
        self.node = node
        self.checkpoint = Path(checkpoint)
        self.table_path = str(policy.curated_table if "://" in str(policy.curated_table)
                              else Path(policy.curated_table).resolve())
        self.journal = JournalFollower((self.data_dir / node / "journal").resolve(), policy.dead_letter_queues,
                                       policy.vhost)
        self._make_republisher = republisher
        #: takes dead letters (journal ids) out of a dead-letter queue: (vhost, queue, ids); None: never
        self._settler = settler if policy.settle else None
        #: curated dead letters still to take out of their queue (the broker did not answer yet)
        self._unsettled: dict[tuple[str, str], set[int]] = {}
        self._republishers: dict[str, Republisher] = {}
        self.clock = clock
        self.summary = RunSummary()
        self._in_doubt_checked = False
        #: when the earliest pending row is due (epoch s; inf: none pending), None: not known
        self._next_due: float | None = None
        #: pending rows curated so far (a due pass that saw fewer must look at the table again)
        self._pending_curated = 0
        self._due_lock = threading.Lock()
        #: held by every write to the curated table: the batches' appends and the due pass's MERGEs
        #: (a MERGE that met a concurrent append would fail: delta-rs commits are not marked blind)
        self._write_lock = threading.Lock()
        #: the Delta transaction id of the job's appends to the curated table (set by start())
        self.app_id: str | None = None
        self._journal_id = ""
        #: the last journal version whose dead letters were handled (-1: none yet)
        self.done = -1
        #: the newest journal version the curated table says is curated (its transaction version)
        self._curated_upto = -1
        #: the journal stretches (after, upto] this job processed, replays included, in order
        self.batches: list[tuple[int, int]] = []

    # -- running -----------------------------------------------------------------------

    def run_once(self) -> RunSummary:
        """Process every journal commit not yet processed, then the due pass; stop."""
        try:
            latest = self.start()
            self.catch_up(latest)
            if self._unsettled:
                self.settle_curated()
            self.republish_due()
        finally:
            self.close()
        return self.summary

    def run(self, interval: float, stop: threading.Event) -> RunSummary:
        """Process the journal as it grows, and republish what is due, every ``interval`` s until ``stop``.

        The due pass runs in a thread of its own: its Spark queries and
        MERGEs (seconds each on a small machine, a minute for the first ones
        on a busy one) never hold up the batches, only its MERGEs wait for
        an append in progress (and an append for a MERGE).
        """
        finished = threading.Event()
        failures: list[BaseException] = []

        def due_passes() -> None:
            try:
                while not (stop.is_set() or finished.is_set()):
                    self.republish_due()
                    finished.wait(interval)
            except BaseException as exc:           # the job's failure: reported by run()
                failures.append(exc)
                finished.set()

        due = threading.Thread(target=due_passes, name="deltamq-dlq-due-pass", daemon=True)
        try:
            self.start()
            due.start()
            while not (stop.is_set() or finished.is_set()):
                began = time.monotonic()
                self.catch_up(self.journal.newest_after(self.done, 10 * MAX_COMMITS_PER_BATCH))
                if self._unsettled:
                    self.settle_curated()
                stop.wait(max(0.0, interval - (time.monotonic() - began)))
        finally:
            finished.set()
            if due.is_alive():
                due.join(_DUE_PASS_STOP_SECONDS)
            self.close()
        if failures:
            raise failures[0]
        return self.summary

    def start(self) -> int:
        """Create the curated table if need be and find where to resume; the journal's latest version."""
        self.ensure_table()
        latest, self._journal_id = self.journal.identity()
        # one id per node and journal table: a journal made afresh at the same path starts afresh
        self.app_id = f"deltamq-dlq:{self.node}:{self._journal_id}"
        try:
            saved = Progress.load(self.checkpoint)
        except ValueError as exc:
            raise JobFailed(f"{exc}: give another --checkpoint") from None
        if saved is not None and saved.journal_id != self._journal_id:
            raise JobFailed(f"the checkpoint {self.checkpoint} follows another journal table (id"
                            f" {saved.journal_id}; the journal at {self.journal.location} is"
                            f" {self._journal_id}): give another --checkpoint")
        curated = transaction_version(self.table_path, self.app_id)
        self._curated_upto = -1 if curated is None else curated
        resume = saved.version if saved is not None else curated
        if resume is None:
            log.info("no checkpoint: reading the whole journal (version %d)", latest)
            self._process_whole(latest)
        elif resume < latest and not self.journal.has_commit(resume + 1):
            log.warning("the journal's log no longer holds version %d (log retention): reading the whole"
                        " journal (version %d); dead letters already curated are skipped", resume + 1, latest)
            self._process_whole(latest)
        else:
            self.done = resume
        return latest

    def catch_up(self, upto: int) -> None:
        """Process the journal's commits after the last one done up to ``upto``, in micro-batches."""
        while self.done < upto:
            end = min(upto, self.done + MAX_COMMITS_PER_BATCH)
            if self.done < self._curated_upto:
                end = min(end, self._curated_upto)   # a stretch curated before a crash: on its own
            try:
                found = self.journal.read_range(self.done, end)
            except JournalGone as exc:
                log.warning("%s: reading the whole journal (version %d); dead letters already curated are"
                            " skipped", exc, end)
                self._process_whole(end)
                continue
            self.process_batch(found, self.done, end)

    def _process_whole(self, version: int) -> None:
        self.process_batch(self.journal.read_as_of(version), -1, version, check_table=True)

    def _journal_table(self) -> DataFrame:
        return self.spark.read.format("delta").load(str(self.journal.location))

    def close(self) -> None:
        for publisher in self._republishers.values():
            publisher.close()
        self._republishers.clear()

    def waiting(self) -> int:
        """Curated rows still waiting for their backoff."""
        from pyspark.sql import functions as F

        return int(self.curated().where((F.col("node") == self.node) & (F.col("state") == PENDING)).count())

    # -- the curated table ---------------------------------------------------------------

    def ensure_table(self) -> None:
        # delta-rs appends: it checkpoints every delta.checkpointInterval commits (its own default: 100)
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{self.table_path}` ({CURATED_SCHEMA}) USING delta"
                       " TBLPROPERTIES ('delta.checkpointInterval' = '10')")

    def curated(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.table_path)

    def process_batch(self, found: list[ArrivedDeadLetter], after: int, upto: int, *,
                      check_table: bool = False) -> None:
        """The dead letters of journal versions ``after+1 .. upto``: curate, settle, save the checkpoint.

        ``check_table``: some may be in the table already (a whole-journal
        read): those are not curated again.
        """
        self.batches.append((after, upto))
        if upto <= self._curated_upto:
            rows = []                            # curated by a run that stopped before saving its progress
        elif check_table:
            rows = self._not_curated(found)
        else:
            rows = found
        self.summary.already_curated += len(found) - len(rows)
        if rows:
            self._curate(rows, upto)
            log.info("journal versions %d-%d: %d dead letter(s) curated", after + 1, upto, len(rows))
        if self._settler is not None:
            for letter in found:                  # already curated ones too: a settle is idempotent
                self._unsettled.setdefault((letter.vhost, letter.dead_letter_queue), set()).add(letter.message_id)
            self.settle_curated()
        self.done = upto
        Progress(self._journal_id, upto).save(self.checkpoint)

    def _not_curated(self, found: list[ArrivedDeadLetter]) -> list[ArrivedDeadLetter]:
        """``found`` less those the table has: not classified or counted again."""
        known: set[tuple[str, int]] = set()
        ids = sorted({letter.message_id for letter in found})
        node = self.node.replace("'", "''")
        for start in range(0, len(ids), 5000):
            chunk = ", ".join(str(i) for i in ids[start:start + 5000])
            known.update((r["vhost"], r["message_id"]) for r in query_table(
                self.table_path, f"SELECT vhost, message_id FROM t WHERE node = '{node}'"
                                 f" AND message_id IN ({chunk})").to_pylist())
        return [letter for letter in found if (letter.vhost, letter.message_id) not in known]

    def _curate(self, rows: list[ArrivedDeadLetter], upto: int) -> None:
        """Append the rows in one delta-rs commit recording (app id, ``upto``): an idempotent write.

        The table records the Delta transaction with the rows, so the job's
        progress and its rows are committed together, and a batch written
        again (a run that resumed from an older checkpoint) adds nothing.
        An append, not a MERGE: a batch's dead letters are new rows (each
        journal commit is read once), and an append does not read the table.
        """
        now = datetime.datetime.fromtimestamp(self.clock(), _UTC)
        records = [self._curated_row(row, now) for row in rows]
        assert self.app_id is not None
        with self._write_lock:
            append_once(self.table_path, pa.Table.from_pylist(records, CURATED_ARROW_SCHEMA), self.app_id, upto)
        self._curated_upto = max(self._curated_upto, upto)
        pending = [record["due_at"].timestamp() for record in records if record["state"] == PENDING]
        if pending:
            with self._due_lock:
                self._pending_curated += len(pending)
                if self._next_due is not None:
                    self._next_due = min(self._next_due, *pending)

    def _curated_row(self, row: ArrivedDeadLetter, now: datetime.datetime) -> dict[str, Any]:
        dead_lettered_at = row.dead_lettered_at or now
        headers, problem = _decoded_headers(row.message_format, row.native)
        letter = classify(headers, row.dead_letter_queue)
        decision = (decide(self.policy, letter) if problem is None
                    else Decision(action=PARK, rule="undecodable", attempt=letter.attempt, note=problem))
        self.summary.classified[decision.action] += 1
        republishing = decision.action == REPUBLISH
        rid = republish_id(self.node, row.vhost, row.message_id)
        return {
            "node": self.node, "vhost": row.vhost, "message_id": row.message_id,
            "dead_letter_queue": row.dead_letter_queue, "dead_lettered_at": dead_lettered_at,
            "reason": letter.reason, "source_queue": letter.source_queue,
            "source_exchange": letter.source_exchange, "source_routing_key": letter.source_routing_key,
            "death_count": letter.death_count, "first_death_reason": letter.first_death_reason,
            "exchange": row.exchange, "routing_key": row.routing_key, "headers": row.headers,
            "properties": row.properties, "body": None if decision.action == DROP else row.body,
            "message_format": row.message_format, "native": row.native,
            "rule": decision.rule, "decision": decision.action, "note": decision.note,
            "attempt": decision.attempt,
            "target_exchange": decision.exchange, "target_routing_key": decision.routing_key,
            "republish_headers": (json.dumps(to_json_value({**(decision.headers or {}), REPUBLISH_ID_HEADER: rid}),
                                             sort_keys=True) if republishing else None),
            "republish_id": rid if republishing else None,
            "due_at": (dead_lettered_at + datetime.timedelta(seconds=decision.delay_seconds)
                       if republishing else None),
            "state": _STATE_OF[decision.action], "handled_at": now,
            "publishing_at": None, "republished_at": None,
        }

    def settle_curated(self) -> int:
        """Take the curated dead letters out of their dead-letter queues; the number handed over.

        Once a dead letter's row is committed to the curated table, the broker
        may forget it: the job acknowledges it as a consumer of the queue
        would (journaled ``settle`` rows, outcome ``acked``). A dead letter no
        longer in the queue (consumed, purged, expired) is skipped. When the
        broker does not answer, the ids are kept and tried again after the
        next batch; a stopped job forgets them (the queue keeps its copy).
        """
        assert self._settler is not None
        handed = 0
        for (vhost, queue), ids in list(self._unsettled.items()):
            try:
                self._settler(vhost, queue, sorted(ids))
            except Exception as exc:               # the broker is down or refuses: try again later
                log.warning("dead letters of queue '%s' in virtual host '%s' not taken out of it: %s (trying"
                            " again after the next batch)", queue, vhost, exc)
                continue
            handed += len(ids)
            del self._unsettled[(vhost, queue)]
        return handed

    # -- republishing --------------------------------------------------------------------

    def republish_due(self) -> int:
        """Republish every pending row whose backoff has passed; the number republished."""
        from pyspark.sql import functions as F

        if not self._in_doubt_checked:
            self._resolve_in_doubt()
            self._in_doubt_checked = True
        now = self.clock()
        with self._due_lock:
            if self._next_due is not None and now < self._next_due:
                return 0                       # nothing pending is due yet: no query
            seen = self._pending_curated
        pending = self.curated().where((F.col("node") == self.node) & (F.col("state") == PENDING))
        due = (pending.where(F.col("due_at") <= F.timestamp_micros(F.lit(int(now * 1e6))))
               .orderBy("due_at", "vhost", "message_id").collect())
        if not due:
            earliest = pending.agg(F.min(F.unix_micros("due_at")).alias("at")).collect()[0].at
            with self._due_lock:               # rows curated since the query: not known, look again
                self._next_due = None if self._pending_curated != seen else \
                    float("inf") if earliest is None else earliest / 1e6
            return 0
        with self._due_lock:
            self._next_due = None              # known again after the next pass's query
        started = datetime.datetime.fromtimestamp(now, _UTC)
        # committed before any publish: a crash from here on leaves the rows in doubt, never pending
        self._update({row.republish_id: {"state": PUBLISHING, "publishing_at": started} for row in due})
        outcomes: dict[str, dict[str, Any]] = {}
        try:
            for row in due:
                outcomes[row.republish_id] = self._republish(row)
        finally:
            self.close()                      # not kept open between passes: no idle connection to lose
            if outcomes:
                self._update(outcomes)
        republished = sum(1 for o in outcomes.values() if o["state"] == REPUBLISHED)
        self.summary.republished += republished
        self.summary.failed += len(outcomes) - republished
        log.info("%d dead letter(s) republished, %d refused", republished, len(outcomes) - republished)
        return republished

    def _republish(self, row: Row) -> dict[str, Any]:
        view = format_for(row.message_format).decode(bytes(row.native))
        headers = from_json_value(json.loads(row.republish_headers))
        publisher = self._republishers.get(row.vhost)
        if publisher is None:
            publisher = self._republishers[row.vhost] = self._make_republisher(row.vhost)
        try:
            publisher.publish(row.target_exchange, row.target_routing_key, bytes(row.body or b""),
                              basic_properties(view, headers))
        except RepublishRefused as exc:
            log.warning("dead letter %s/%d not republished: %s", row.vhost, row.message_id, exc)
            return {"state": FAILED, "note": str(exc)}
        return {"state": REPUBLISHED, "republished_at": datetime.datetime.fromtimestamp(self.clock(), _UTC)}

    def _update(self, changes: Mapping[str, Mapping[str, Any]]) -> None:
        """Set columns of the rows with these republish ids, in one commit."""
        from delta.tables import DeltaTable

        columns = ("state", "note", "publishing_at", "republished_at")
        records = [{"republish_id": rid, **{c: change.get(c) for c in columns},
                    "sets": sorted(change)} for rid, change in changes.items()]
        source = self.spark.createDataFrame(
            records, "republish_id STRING, state STRING, note STRING, publishing_at TIMESTAMP,"
                     " republished_at TIMESTAMP, sets ARRAY<STRING>")
        assignments: dict[str, str | Column] = {c: f"CASE WHEN array_contains(s.sets, '{c}') THEN s.{c} ELSE t.{c} END"
                       for c in columns}
        with self._write_lock:
            (DeltaTable.forPath(self.spark, self.table_path).alias("t")
             # only pending and publishing rows ever change: the condition lets Delta skip the files
             # whose rows are all settled (parked, dropped, republished, failed) by their statistics
             .merge(source.alias("s"), f"t.state IN ('{PENDING}', '{PUBLISHING}') AND t.republish_id = s.republish_id")
             .whenMatchedUpdate(set=assignments).execute())

    def _resolve_in_doubt(self) -> None:
        """Rows a crash left ``publishing``: republished if the journal holds their publish, else pending."""
        from pyspark.sql import functions as F

        doubtful = (self.curated().where((F.col("node") == self.node) & (F.col("state") == PUBLISHING))
                    .select("republish_id", F.unix_micros("dead_lettered_at").alias("since")).collect())
        if not doubtful:
            return
        # a republish comes after its dead letter reached the dead-letter queue (both broker time)
        since = min(_moment(r.since) or datetime.datetime.fromtimestamp(0, _UTC) for r in doubtful)
        ids = [r.republish_id for r in doubtful]
        header = F.get_json_object("headers", f"$['{REPUBLISH_ID_HEADER}']")
        published = {r.rid: r.at for r in self._journal_table()
                     .where((F.col("event") == ENQUEUE) & F.col("body").isNotNull()
                            & (F.col("at") >= F.lit(since)) & header.isin(ids))
                     .groupBy(header.alias("rid")).agg(F.min(F.unix_micros("at")).alias("at")).collect()}
        self._update({rid: ({"state": REPUBLISHED, "republished_at": _moment(published[rid])}
                            if rid in published else {"state": PENDING}) for rid in ids})
        with self._due_lock:
            self._next_due = None
        self.summary.recovered += len(published)
        log.warning("%d republish(es) were in doubt after a stop: %d found in the journal, %d to publish"
                    " again", len(ids), len(published), len(ids) - len(published))


def _decoded_headers(tag: str | None, native: bytes | None) -> tuple[dict[str, Any], str | None]:
    """The message's headers from its native metadata; or an explanation of why not."""
    if native is None:
        return {}, "the message is not in the journal (its body row was not found)"
    try:
        view = format_for(tag or "amqp-0-9-1").decode(bytes(native))
    except (LookupError, ValueError) as exc:
        return {}, f"cannot decode its {tag} metadata: {exc}"
    return dict(view.headers or {}), None
