"""The dead-letter processor: a Structured Streaming job over a node's journal.

``deltamq spark dlq`` (:mod:`lakehouse.dlq_command`) runs :class:`DeadLetterJob`.
It reads the journal as a Delta stream (append-only, so every row once per
checkpoint) and, in each micro-batch (``foreachBatch``):

1. finds the dead letters: ``enqueue`` rows of the policy's dead-letter
   queues, joined to the row that stores the message (its body, properties,
   and headers -- ``x-death`` among them; a dead-lettered copy is a new message,
   stored with its first enqueue, in the same journal commit);
2. classifies each (:mod:`lakehouse.dlq_policy`) and appends one row per dead
   letter into the *curated* Delta table, keyed by (node, vhost, message_id):
   a replayed micro-batch inserts nothing;
3. republishes the curated rows whose decision is ``republish`` and whose
   backoff has passed (the *due pass*), whatever batch they came from.

The due pass also runs after the stream in ``--once`` mode and every
interval in continuous mode, so a dead letter still backing off is
republished by a later trigger or run, without new journal rows.

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
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from broker.messaging.message_format import format_for
from broker.messaging.records import from_json_value, to_json_value
from lakehouse.dlq_policy import (DROP, PARK, REPUBLISH, REPUBLISH_ID_HEADER, Decision, Policy,
                                  classify, decide)
from lakehouse.dlq_republish import Republisher, RepublishRefused, basic_properties
from lakehouse.journal_schema import ENQUEUE, FORMAT_SQL, NATIVE_SQL
from lakehouse.spark import stream_journal

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["DeadLetterJob", "CURATED_SCHEMA", "RunSummary", "STATES"]

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

_UTC = datetime.timezone.utc


def _moment(micros: int | None) -> datetime.datetime | None:
    return None if micros is None else datetime.datetime.fromtimestamp(micros / 1e6, _UTC)


def republish_id(node: str, vhost: str, message_id: int) -> str:
    """The deterministic id of the republish of dead letter ``message_id`` (a UUID, as text)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"deltamq-dlq:{node}:{vhost}:{message_id}"))


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
        self.checkpoint = str(checkpoint)
        self.table_path = str(policy.curated_table if "://" in str(policy.curated_table)
                              else Path(policy.curated_table).resolve())
        self._make_republisher = republisher
        #: takes dead letters (journal ids) out of a dead-letter queue: (vhost, queue, ids); None: never
        self._settler = settler if policy.settle else None
        #: curated dead letters still to take out of their queue (the broker did not answer yet)
        self._unsettled: dict[tuple[str, str], set[int]] = {}
        self._republishers: dict[str, Republisher] = {}
        self.clock = clock
        self.summary = RunSummary()
        self._lock = threading.Lock()        # the stream's thread and the due pass's share the table
        self._in_doubt_checked = False
        #: when the earliest pending row is due (epoch s; inf: none pending), None: not known
        self._next_due: float | None = None
        #: the Delta transaction id of the query's appends to the curated table (see _curate)
        self._app_id: str | None = None
        self._started = threading.Event()
        self._batches_run = 0
        #: the micro-batches this job processed (replays included), by Spark's batch id
        self.batch_ids: list[int] = []

    # -- running -----------------------------------------------------------------------

    def run_once(self) -> RunSummary:
        """Process every journal row not yet processed (``availableNow``), then the due pass; stop."""
        try:
            query = self.start(availableNow=True)
            query.awaitTermination()
            with self._lock:
                if self._unsettled:
                    self.settle_curated()
                self.republish_due()
        finally:
            self.close()
        return self.summary

    def run(self, interval: float, stop: threading.Event) -> RunSummary:
        """Process the journal as it grows, and republish what is due every ``interval`` s, until ``stop``."""
        query = self.start(processingTime=f"{interval} seconds")
        try:
            while query.isActive and not stop.wait(interval):
                with self._lock:
                    if self._unsettled:
                        self.settle_curated()
                    self.republish_due()
            if not query.isActive:
                query.awaitTermination()       # raises the query's failure
        finally:
            query.stop()
            self.close()
        return self.summary

    def start(self, **trigger: Any) -> StreamingQuery:
        """The streaming query over the journal (``trigger``: DataStreamWriter.trigger's arguments)."""
        self.ensure_table()
        self._started.clear()
        query = (stream_journal(self.spark, self.data_dir, self.node).writeStream
                 .foreachBatch(self.process_batch).queryName(f"deltamq-dlq-{self.node}")
                 .option("checkpointLocation", self.checkpoint).trigger(**trigger).start())
        # the query's id is kept in its checkpoint: the same across restarts, new with a new checkpoint
        self._app_id = f"deltamq-dlq:{query.id}"
        self._batches_run = 0
        self._started.set()
        return query

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
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{self.table_path}` ({CURATED_SCHEMA}) USING delta")

    def curated(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.table_path)

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """``foreachBatch``: curate the batch's dead letters, then republish what is due."""
        self._started.wait(60)
        with self._lock:
            self.batch_ids.append(batch_id)
            found = self._dead_letters(batch)
            # only a run's first batch can be one an earlier run began (Spark replays the last
            # batch it logged and did not commit): later ones hold journal rows no batch saw
            rows = self._not_curated(found) if self._batches_run == 0 else found
            self._batches_run += 1
            self.summary.already_curated += len(found) - len(rows)
            if rows:
                self._curate(rows, batch_id)
                log.info("batch %d: %d dead letter(s) curated", batch_id, len(rows))
            if self._settler is not None:
                for row in found:                  # replayed ones too: a settle is idempotent
                    self._unsettled.setdefault((row.vhost, row.dead_letter_queue), set()).add(row.message_id)
                self.settle_curated()
            self.republish_due()

    def _not_curated(self, rows: list[Row]) -> list[Row]:
        """``rows`` less those the table has (a replayed batch): not classified or counted again."""
        from pyspark.sql import functions as F

        if not rows:
            return rows
        known = {(r.vhost, r.message_id) for r in self.curated()
                 .where((F.col("node") == self.node) & F.col("message_id").isin(sorted({r.message_id for r in rows})))
                 .select("vhost", "message_id").collect()}
        return [r for r in rows if (r.vhost, r.message_id) not in known]

    def _dead_letters(self, batch: DataFrame) -> list[Row]:
        """The batch's dead letters in the policy's queues, with their stored message.

        Two plain scans of the batch, no shuffle: its dead-letter queues' enqueue
        rows (few), then the rows storing those messages (a dead-lettered copy
        is stored in the same journal commit as its first enqueue).
        """
        from pyspark.sql import Row as SparkRow
        from pyspark.sql import functions as F

        journal = batch
        if self.policy.vhost is not None:
            journal = journal.where(F.col("vhost") == self.policy.vhost)
        arrivals: dict[tuple[str, int], tuple[str, int | None]] = {}
        for r in (journal.where((F.col("event") == ENQUEUE) & F.col("queue").isin(list(self.policy.dead_letter_queues)))
                  .select("vhost", "message_id", "queue", F.unix_micros("at").alias("at")).collect()):
            key = (r.vhost, r.message_id)
            if key in arrivals:             # reached several dead-letter queues: the first, the earliest
                queue, at = arrivals[key]
                arrivals[key] = (min(queue, r.queue), at if r.at is None else r.at if at is None else min(at, r.at))
            else:
                arrivals[key] = (r.queue, r.at)
        if not arrivals:
            return []
        ids = sorted({message_id for _, message_id in arrivals})
        stored = {(r.vhost, r.message_id): r for r in self._messages(journal)
                  .where(F.col("message_id").isin(ids)).collect()}
        missing = sorted({message_id for (vhost, message_id) in arrivals if (vhost, message_id) not in stored})
        if missing:
            # a message stored in an earlier commit than its dead-letter queue's enqueue (not
            # what the broker writes today, but cheap to get right): read it from the table
            stored.update({(r.vhost, r.message_id): r for r in self._messages(self._journal_table())
                           .where(F.col("message_id").isin(missing)).collect()
                           if (r.vhost, r.message_id) in arrivals})
        empty = dict.fromkeys(("exchange", "routing_key", "body", "properties", "headers", "message_format",
                               "native"))
        found = []
        for (vhost, message_id), (queue, at) in sorted(arrivals.items()):
            message = stored.get((vhost, message_id))
            values = {**empty, **({k: v for k, v in message.asDict().items() if k not in ("vhost", "message_id")}
                                  if message is not None else {})}
            found.append(SparkRow(vhost=vhost, message_id=message_id, dead_letter_queue=queue,
                                  dead_lettered_at=at, **values))
        return found

    def _journal_table(self) -> DataFrame:
        return self.spark.read.format("delta").load(str((self.data_dir / self.node / "journal").resolve()))

    @staticmethod
    def _messages(journal: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        return (journal.where((F.col("event") == ENQUEUE) & F.col("body").isNotNull())
                .select("vhost", "message_id", "exchange", "routing_key", "body", "properties", "headers",
                        F.expr(FORMAT_SQL).alias("message_format"), F.expr(NATIVE_SQL).alias("native")))

    def _curate(self, rows: Iterable[Row], batch_id: int) -> None:
        """Append the rows: an idempotent Delta write, keyed by the query and its batch id.

        Delta records (``txnAppId``, ``txnVersion``) in the commit and skips a
        later write of the same or an older version, so a batch Spark replays
        after a crash between this commit and its own adds nothing (and
        :meth:`_not_curated` keeps it out of the counts).  An append, not a
        MERGE: a batch's dead letters are new rows (the stream gives each
        journal row once), and an append does not read the table first.
        """
        now = datetime.datetime.fromtimestamp(self.clock(), _UTC)
        records = [self._curated_row(row, now) for row in rows]
        for record in records:
            if record["state"] == PENDING and self._next_due is not None:
                self._next_due = min(self._next_due, record["due_at"].timestamp())
        source = self.spark.createDataFrame(records, CURATED_SCHEMA)
        assert self._app_id is not None
        (source.write.format("delta").mode("append").option("txnAppId", self._app_id)
         .option("txnVersion", batch_id).save(self.table_path))

    def _curated_row(self, row: Row, now: datetime.datetime) -> dict[str, Any]:
        dead_lettered_at = _moment(row.dead_lettered_at) or now
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
        if self._next_due is not None and now < self._next_due:
            return 0                           # nothing pending is due yet: no query
        pending = self.curated().where((F.col("node") == self.node) & (F.col("state") == PENDING))
        due = (pending.where(F.col("due_at") <= F.timestamp_micros(F.lit(int(now * 1e6))))
               .orderBy("due_at", "vhost", "message_id").collect())
        if not due:
            earliest = pending.agg(F.min(F.unix_micros("due_at")).alias("at")).collect()[0].at
            self._next_due = float("inf") if earliest is None else earliest / 1e6
            return 0
        self._next_due = None                  # known again after the next pass's query
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
        (DeltaTable.forPath(self.spark, self.table_path).alias("t")
         .merge(source.alias("s"), "t.republish_id = s.republish_id")
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
