"""Spark reads queues: ``readStream.format("deltamq")`` consumes one, ``read`` browses one.

Consuming (Structured Streaming)
--------------------------------
The stream's planner (one Python process Spark starts per query) is a lease
consumer of the queue (:mod:`broker.messaging.leases`), talking to the
broker over REST (:mod:`lakehouse.lease_client`):

* ``latestOffset`` asks for a grant of up to ``maxMessagesPerBatch``
  messages; the offset it returns *is* the grant -- its message ids as
  ranges, and the earlier deliveries of the redelivered ones.  Spark writes
  it to its offset log before the batch runs, so the batch is a durable list
  of messages;
* ``partitions(start, end)`` cuts ``end``'s ranges into slices of about as
  many ids; the executors read each slice's messages from the journal's
  Delta files (:class:`lakehouse.queue_reads.JournalReader`, kept by each
  Python worker with the journal's snapshot), in parallel, never through
  the broker.  A batch from another planner process (Spark replaying
  what it logged but did not commit) is first *claimed*: the broker holds
  its messages for this process again (adopting them from the earlier one,
  or taking them back from the queue), and the executors read exactly the
  logged ids;
* a batch's messages are settled once the sink has committed it (the
  broker acks them and journals ``settle`` rows, outcome ``acked``, reason
  ``consumer:<name>``): Spark asks ``latestOffset`` for the next batch only
  then, so that call settles the batches served before it -- on a
  background thread, while Spark runs the next batch -- and ``commit(end)``
  -- which Spark calls only when a further batch starts -- settles a batch
  an earlier process served.  Settling is idempotent, so Spark's commit of
  the last committed batch at a restart is harmless;
* with a backlog (a grant came back full) the next grant is asked for at
  once, on a background thread, while Spark runs the batch; ``latestOffset``
  then returns it.  Until Spark takes it, it counts among the held batches
  (a broker restart reclaims it); a stopping query releases it;
* a thread renews the lease every third of ``leaseSeconds`` while the
  planner lives.  When the job dies, or stops and is not restarted within
  the lease, what it held goes back to the queue, redelivered.

When the broker does not answer (restarting), ``latestOffset`` reports no
new messages and ``commit`` retries for up to ``brokerTimeoutSeconds``; once
the broker answers again, the planner first claims the messages of batches
it has not committed yet (the restarted broker recovered them into the
queue), so they are not granted twice.

Browsing (batch)
----------------
``spark.read.format("deltamq")`` reads the queue's live messages as the
journal has them -- persistent messages enqueued and not settled, in id
order, with their deliveries so far -- without consuming anything and
without the broker (given ``path``).

Options: see :class:`QueueOptions`; columns: :data:`lakehouse.queue_reads.MESSAGE_COLUMNS`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from broker.messaging import id_ranges as ranges_of
from lakehouse.lease_client import BrokerUnavailable, LeaseClient, expand
from lakehouse.queue_reads import journal_reader, live_messages, range_slices

__all__ = ["QueueOptions", "QueueStreamReader", "QueueBrowseReader", "MessageSlice", "INITIAL_OFFSET"]

log = logging.getLogger(__name__)

#: how long an empty grant keeps the planner from asking again (Spark polls every 10 ms when idle)
IDLE_POLL_SECONDS = 0.1

#: how long stopping waits for a settlement or a grant ahead under way
STOP_WAIT_SECONDS = 15.0

#: where a grant asked for ahead waits among the held batches until Spark takes it
AHEAD = ("", -1)

#: the offset before the first grant
INITIAL_OFFSET: dict[str, Any] = {"grant": 0, "session": "", "messageIds": [], "redelivered": []}


def _integer(options: Mapping[str, str], name: str, default: int, least: int) -> int:
    text = options.get(name)
    if text is None:
        return default
    try:
        value = int(str(text))
    except ValueError:
        raise ValueError(f"deltamq: option '{name}' must be an integer, not {text!r}") from None
    if value < least:
        raise ValueError(f"deltamq: option '{name}' must be at least {least}, not {value}")
    return value


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"deltamq: option '{name}' must be true or false, not {text!r}")
    return value == "true"


@dataclass(frozen=True)
class QueueOptions:
    """The options of ``format("deltamq")`` readers (names as given to ``.option``)."""

    #: ``queue`` (mandatory): the queue to consume or browse
    queue: str
    #: ``vhost``: its virtual host (default ``default``)
    vhost: str
    #: ``node``: the virtual host node (default: the virtual host's name)
    node: str
    #: ``url``: the broker's HTTP management (default ``http://127.0.0.1:8080``)
    url: str
    #: ``user`` / ``password``: management credentials (default guest / guest)
    user: str
    password: str
    #: ``consumer``: the lease consumer's name (default ``spark-<queue>``); one per query
    consumer: str
    #: ``maxMessagesPerBatch``: at most this many messages per micro-batch (default 10000)
    max_messages: int
    #: ``leaseSeconds``: how long the broker holds a dead job's messages (default 60)
    lease_seconds: int
    #: ``path``: the journal table (a path or URI); default: where the broker says it is
    path: str | None
    #: ``numPartitions``: at most this many tasks per batch (default 4; 1,000 messages at least each)
    partitions: int
    #: ``brokerTimeoutSeconds``: how long ``commit`` retries while the broker does not answer (default 120)
    broker_timeout: int
    #: ``grantAhead``: while a full batch runs, ask for the next one (default true)
    grant_ahead: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> QueueOptions:
        queue = options.get("queue")
        if not queue:
            raise ValueError("deltamq: the option 'queue' is required: .option(\"queue\", \"<name>\")")
        vhost = options.get("vhost") or "default"
        return cls(queue=str(queue), vhost=str(vhost), node=str(options.get("node") or vhost),
                   url=str(options.get("url") or "http://127.0.0.1:8080"),
                   user=str(options.get("user") or "guest"), password=str(options.get("password") or "guest"),
                   consumer=str(options.get("consumer") or f"spark-{queue}"),
                   max_messages=_integer(options, "maxMessagesPerBatch", 10_000, 1),
                   lease_seconds=_integer(options, "leaseSeconds", 60, 1),
                   path=str(options["path"]) if options.get("path") else None,
                   partitions=_integer(options, "numPartitions", 4, 1),
                   broker_timeout=_integer(options, "brokerTimeoutSeconds", 120, 0),
                   grant_ahead=_boolean(options, "grantAhead", True))

    def client(self, session: str) -> LeaseClient:
        return LeaseClient(self.url, self.node, self.vhost, self.queue, self.consumer, session,
                           self.user, self.password, self.lease_seconds)

    def journal(self, told: str | None) -> str:
        """The journal to read: the option ``path``, else what the broker ``told``."""
        location = self.path or told
        if not location:
            raise ValueError(f"deltamq: the broker keeps no journal for queue '{self.queue}' in virtual host"
                             f" '{self.vhost}' (its node is not of type 'delta'); give the option 'path'")
        return location


class MessageSlice(InputPartition):
    """Message ids of one queue (``[first, last]`` ranges), read by one task from the journal at ``location``."""

    def __init__(self, location: str, queue: str, ranges: list[list[int]], deliveries: dict[int, int]) -> None:
        super().__init__(len(ranges))
        self.location = location
        self.queue = queue
        self.ranges = ranges
        self.deliveries = deliveries


#: rows per Arrow batch handed to Spark (fewer, larger batches cost the JVM less per row)
ARROW_BATCH_ROWS = 32_768


def read_slice(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """An executor's task: the slice's messages, read with the Python worker's kept journal reader."""
    assert isinstance(partition, MessageSlice)
    if not partition.ranges:
        return
    table = journal_reader(partition.location).read(partition.queue, partition.ranges, partition.deliveries)
    yield from table.to_batches(max_chunksize=ARROW_BATCH_ROWS)


def _slices(location: str, queue: str, ranges: list[list[int]], deliveries: dict[int, int],
            parts: int) -> list[MessageSlice]:
    # the slices follow each other in id order: a slice's deliveries are those within its bounds
    return [MessageSlice(location, queue, part,
                         {i: n for i, n in deliveries.items() if part[0][0] <= i <= part[-1][1]})
            for part in range_slices(ranges, parts)]


class QueueStreamReader(DataSourceStreamReader):
    """The streaming reader: a lease consumer of the queue (see the module)."""

    def __init__(self, options: QueueOptions) -> None:
        # Spark also builds this reader where it only needs ``read``: nothing here talks
        # to the broker and no thread starts; the planner's first call does
        self.options = options
        self._client: LeaseClient | None = None
        self._latest: dict[str, Any] = INITIAL_OFFSET
        self._journal: str | None = None
        self._outstanding: dict[tuple[str, int], list[list[int]]] = {}
        self._broker_lost = False
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        # batches served by partitions() and not yet settled; the last ones settled early
        self._served: list[tuple[str, int]] = []
        self._settled: deque[tuple[str, int]] = deque(maxlen=64)
        self._idle_until = 0.0
        self._workers: ThreadPoolExecutor | None = None
        #: the settlement running in the background (of the batches it names)
        self._settling: Future[None] | None = None
        self._settling_keys: tuple[tuple[str, int], ...] = ()
        #: the next grant, asked for while the batch before it runs (a backlog)
        self._ahead: Future[dict[str, Any]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # pickled for the executors, which only call read(): the planner's state stays here
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- the planner -------------------------------------------------------------------

    def _planner(self) -> LeaseClient:
        if self._client is None:
            self._client = self.options.client(uuid.uuid4().hex)
            threading.Thread(target=self._renew, name="deltamq-lease", daemon=True).start()
        return self._client

    def _background(self) -> ThreadPoolExecutor:
        """Two threads: one settles served batches, one asks for the next grant ahead."""
        if self._workers is None:
            self._workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="deltamq-planner")
        return self._workers

    def _renew(self) -> None:
        period = max(self.options.lease_seconds / 3, 0.5)
        while not self._stopped.wait(period):
            try:
                self._call(lambda client: client.grant(0))
            except Exception as exc:           # the next call tries again; Spark's calls report
                log.warning("deltamq: renewing the lease of consumer '%s' failed: %s",
                            self.options.consumer, exc)

    def _call(self, action: Any) -> dict[str, Any]:
        """Call the broker; the first call that succeeds after it was unreachable reclaims.

        Spark's thread, the renewing thread and the background ones call at
        once (each call is a request of its own); only reclaiming is one at a time.
        """
        client = self._planner()
        try:
            with self._lock:
                if self._broker_lost:
                    for ranges in list(self._outstanding.values()):
                        client.claim(ranges)
                    self._broker_lost = False
            answer: dict[str, Any] = action(client)
        except BrokerUnavailable:
            with self._lock:
                self._broker_lost = True
            raise
        if answer.get("journal"):
            self._journal = str(answer["journal"])
        return answer

    @staticmethod
    def _key(offset: Mapping[str, Any]) -> tuple[str, int]:
        return str(offset.get("session", "")), int(offset.get("grant", 0))

    def _observe(self, offset: Mapping[str, Any]) -> None:
        """An offset Spark handed back: grants this process makes are numbered after it."""
        if int(offset.get("grant", 0)) > int(self._latest.get("grant", 0)):
            self._latest = dict(offset)

    def initialOffset(self) -> dict[str, Any]:
        return dict(INITIAL_OFFSET)

    def latestOffset(self) -> dict[str, Any]:
        try:
            self._settle_served()
            answer = self._take_ahead()
            if answer is None:
                if self._idle_until > time.monotonic():
                    return self._latest
                answer = self._call(lambda client: client.grant(self.options.max_messages))
        except BrokerUnavailable as exc:
            log.warning("deltamq: %s; no new messages this time", exc)
            return self._latest
        count = int(answer.get("count") or 0)
        if not count:
            self._idle_until = time.monotonic() + IDLE_POLL_SECONDS
            return self._latest
        assert self._client is not None
        offset = {"grant": int(self._latest.get("grant", 0)) + 1, "session": self._client.session,
                  "messageIds": answer["messageIds"], "redelivered": answer.get("redelivered", [])}
        self._latest = offset
        self._outstanding[self._key(offset)] = offset["messageIds"]
        if self.options.grant_ahead and count >= self.options.max_messages and not self._stopped.is_set():
            # a backlog: the broker grants the next batch while Spark runs this one
            self._ahead = self._background().submit(self._grant_ahead)
        return offset

    def _grant_ahead(self) -> dict[str, Any]:
        answer = self._call(lambda client: client.grant(self.options.max_messages))
        if answer.get("count"):
            # held like a logged batch until Spark takes it: a broker restart meanwhile reclaims it
            self._outstanding[AHEAD] = answer["messageIds"]
        return answer

    def _take_ahead(self) -> dict[str, Any] | None:
        """The grant asked for ahead, if any (waiting for it); None when there is none."""
        future, self._ahead = self._ahead, None
        if future is None:
            return None
        try:
            return future.result()
        finally:
            self._outstanding.pop(AHEAD, None)

    def _release_quietly(self, ranges: list[list[int]]) -> None:
        try:
            self._call(lambda client: client.release(ranges))
        except Exception as exc:               # they go back when the lease runs out
            log.warning("deltamq: releasing %d messages granted ahead failed: %s", len(expand(ranges)), exc)

    def _settle_served(self) -> None:
        """Settle the batches served so far, in the background: they are in the sink.

        Micro-batch execution runs one batch at a time and constructs the
        next one (asking ``latestOffset``) only after the sink committed the
        last; Spark's own ``commit`` of a batch comes later, when the batch
        after it starts -- never, while the queue stays empty.  So the
        messages of an idle stream's last batch are settled here, not held
        until more messages come.  The settlement runs while Spark plans and
        runs the next batch; one that failed (the broker did not answer)
        leaves its batches served, to be settled next time.
        """
        running = self._settling
        if running is not None and not running.done():
            return
        if running is not None:
            try:
                running.result()
            except Exception as exc:           # tried again below
                log.warning("deltamq: settling batches %s failed: %s; trying again", self._settling_keys, exc)
        self._settling = None
        keys = tuple(self._served)
        if not keys:
            return
        self._settling_keys = keys
        self._settling = self._background().submit(self._settle_keys, keys)

    def _settle_keys(self, keys: tuple[tuple[str, int], ...]) -> None:
        for key in keys:
            ranges = self._outstanding.get(key)
            if ranges:
                self._call(lambda client: client.settle(ranges))
            self._done(key)

    def _done(self, key: tuple[str, int]) -> None:
        """Batch ``key`` is settled."""
        with self._lock:
            self._outstanding.pop(key, None)
            if key in self._served:
                self._served.remove(key)
            if key not in self._settled:
                self._settled.append(key)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._observe(end)
        ranges = end.get("messageIds") or []
        if not ranges:                           # an offset without messages: one empty task
            return [MessageSlice("", self.options.queue, [], {})]
        key = self._key(end)
        if key not in self._served:
            self._served.append(key)
        if key not in self._outstanding and key not in self._settled:
            # a batch an earlier process logged: hold it again
            answer = self._call(lambda client: client.claim(ranges))
            self._outstanding[key] = ranges
            if answer.get("missing"):
                log.warning("deltamq: replaying batch %s of consumer '%s': %d messages were settled or"
                            " taken by another consumer meanwhile (read again from the journal)",
                            key, self.options.consumer, len(expand(answer["missing"])))
        location = self.options.journal(self._journal or self._told_journal())
        deliveries = {int(i): int(n) for i, n in end.get("redelivered") or []}
        return _slices(location, self.options.queue, ranges, deliveries, self.options.partitions)

    def _told_journal(self) -> str | None:
        if self.options.path:
            return self.options.path
        return self._call(lambda client: client.journal_location()).get("journal")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_slice(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._observe(end)
        ranges = end.get("messageIds") or []
        key = self._key(end)
        if key in self._served:
            return                              # served here: latestOffset's settlement has it
        if ranges and key not in self._settled:
            deadline = time.monotonic() + self.options.broker_timeout
            while True:
                try:
                    self._call(lambda client: client.settle(ranges))
                    break
                except BrokerUnavailable as exc:
                    if time.monotonic() >= deadline:
                        raise
                    log.warning("deltamq: settling batch %s: %s; trying again", self._key(end), exc)
                    time.sleep(1.0)
        self._done(key)

    def stop(self) -> None:
        """The query stops: finish settling, give back a grant made ahead, stop renewing.

        What is still held (a batch logged but not committed) goes back when the lease runs out.
        """
        self._stopped.set()
        settling, ahead = self._settling, self._ahead
        self._ahead = None
        for future in (settling, ahead):
            if future is None:
                continue
            try:
                result = future.result(timeout=STOP_WAIT_SECONDS)
            except Exception as exc:           # what it held goes back when the lease runs out
                log.warning("deltamq: stopping: %s", exc)
                continue
            if future is ahead and result and result.get("count"):
                self._outstanding.pop(AHEAD, None)
                self._release_quietly(result["messageIds"])
        if self._workers is not None:
            self._workers.shutdown(wait=False)


class QueueBrowseReader(DataSourceReader):
    """The batch reader: the queue's live messages, from the journal (see the module)."""

    def __init__(self, options: QueueOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        told = None
        if not self.options.path:
            told = self.options.client("").journal_location().get("journal")
        location = self.options.journal(told)
        ids, deliveries = live_messages(location, self.options.queue)
        ranges = [list(r) for r in ranges_of.id_ranges(ids)]
        return _slices(location, self.options.queue, ranges, deliveries, self.options.partitions) \
            or [MessageSlice(location, self.options.queue, [], {})]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_slice(partition)
