"""The dead-letter processor against a real broker, real pika clients and real Spark.

A ``deltamq serve`` started as a user starts it dead-letters messages that
pika rejects or lets expire into a DLX queue; the job (:mod:`lakehouse.dlq`)
runs over the broker's journal like ``deltamq spark dlq --once`` and must
curate, republish (pika consumes the repaired message from its original
queue), honour the retry cap and backoff, and never republish twice -- not on
a second run, not on a replayed micro-batch, not after a crash between a
publish and its record.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from lakehouse.dlq import DeadLetterJob
from lakehouse.dlq_journal import Progress
from lakehouse.dlq_policy import ATTEMPT_HEADER, REPUBLISH_ID_HEADER, parse_policy
from lakehouse.dlq_republish import Republisher
from tests.integration.conftest import DeltaMQProcess
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as proc:
        yield proc


@pytest.fixture(scope="module")
def spark() -> Any:
    """The shared session (other Spark test modules get the same one from ``getOrCreate``)."""
    from lakehouse.spark import spark_session

    return spark_session()


def connect(broker: DeltaMQProcess) -> Any:
    # no heartbeats: the test's connection sits idle while a Spark job runs, for minutes on a busy machine
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port, heartbeat=0))
    channel = connection.channel()
    channel.confirm_delivery()
    return channel


def declare(channel: Any, p: str) -> None:
    """``p.orders`` (direct) -> ``p.work`` and ``p.short`` (TTL), both dead-lettering into ``p.dlq``."""
    channel.exchange_declare(f"{p}.orders", "direct", durable=True)
    channel.exchange_declare(f"{p}.dlx", "fanout", durable=True)
    channel.queue_declare(f"{p}.dlq", durable=True)
    channel.queue_bind(f"{p}.dlq", f"{p}.dlx", "")
    channel.queue_declare(f"{p}.work", durable=True, arguments={"x-dead-letter-exchange": f"{p}.dlx"})
    channel.queue_bind(f"{p}.work", f"{p}.orders", "work")
    channel.queue_declare(f"{p}.short", durable=True,
                          arguments={"x-dead-letter-exchange": f"{p}.dlx", "x-message-ttl": 50})
    channel.queue_bind(f"{p}.short", f"{p}.orders", "short")


def publish(channel: Any, p: str, key: str, body: bytes, **headers: Any) -> None:
    channel.basic_publish(f"{p}.orders", key, body, pika.BasicProperties(
        delivery_mode=2, content_type="text/plain", message_id=f"id-{body.decode()}",
        correlation_id="corr-1", app_id="shop", headers=headers), mandatory=True)


def reject_all(channel: Any, queue: str, count: int) -> None:
    for _ in range(count):
        method, _, _ = wait_until(lambda: _get(channel, queue), 10, what=f"a message in {queue}")
        channel.basic_reject(method.delivery_tag, requeue=False)


def _get(channel: Any, queue: str) -> Any:
    got = channel.basic_get(queue)
    return got if got[0] is not None else None


def depth(channel: Any, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def policy_text(p: str, table: Path, *, backoff: float = 0, max_attempts: int = 1) -> str:
    return f"""
dead_letter_queues = ["{p}.dlq"]
curated_table = "{table}"
default_action = "park"
[retry]
max_attempts = {max_attempts}
backoff_seconds = {backoff}
backoff_max_seconds = {max(backoff, 1) * 10}
[[rule]]
name = "poison"
match = {{ headers = {{ kind = "poison" }} }}
action = "drop"
[[rule]]
name = "repair"
match = {{ reason = "rejected", source_queue = "{p}.work" }}
action = "republish"
set_headers = {{ repaired = true }}
remove_headers = ["error"]
"""


def make_job(spark: Any, broker: DeltaMQProcess, text: str, checkpoint: Path,
             clock: Callable[[], float] = time.time) -> DeadLetterJob:
    def republisher(vhost: str) -> Republisher:
        publisher = Republisher(f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/")
        publisher.parameters.virtual_host = vhost
        return publisher

    return DeadLetterJob(spark, parse_policy(text), data_dir=broker.dir / "data", node="default",
                         checkpoint=checkpoint, republisher=republisher, clock=clock)


CURATED = ("dead_letter_queue, reason, source_queue, source_exchange, source_routing_key, death_count,"
           " first_death_reason, rule, decision, attempt, state, note, body")


def curated(job: DeadLetterJob, columns: str = CURATED) -> list[tuple[Any, ...]]:
    """The curated table's rows (``columns``), binary values as bytes, in a fixed order."""
    rows = [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r)
            for r in job.curated().selectExpr(*columns.split(", ")).collect()]
    return sorted(rows, key=repr)


def test_dead_letters_are_curated_repaired_republished_and_capped(spark: Any, broker: DeltaMQProcess,
                                                                   tmp_path: Path) -> None:
    channel = connect(broker)
    declare(channel, "a")
    publish(channel, "a", "work", b"fix-me", kind="order", error="bad sku")
    publish(channel, "a", "work", b"poison-pill", kind="poison")
    publish(channel, "a", "short", b"too-late", kind="order")
    reject_all(channel, "a.work", 2)
    wait_until(lambda: depth(channel, "a.dlq") == 3, 30, what="three dead letters in a.dlq")

    text = policy_text("a", tmp_path / "curated")
    job = make_job(spark, broker, text, tmp_path / "checkpoint")
    summary = job.run_once()
    assert (summary.classified, summary.republished, summary.failed) == (
        {"republish": 1, "park": 1, "drop": 1}, 1, 0)
    assert curated(job) == sorted([
        ("a.dlq", "rejected", "a.work", "a.orders", "work", 1, "rejected", "repair", "republish", 1,
         "republished", None, b"fix-me"),
        ("a.dlq", "rejected", "a.work", "a.orders", "work", 1, "rejected", "poison", "drop", 1,
         "dropped", None, None),
        ("a.dlq", "expired", "a.short", "a.orders", "short", 1, "expired", "default", "park", 1,
         "parked", None, b"too-late"),
    ], key=repr)
    [(rid, republished_at)] = [r for r in curated(job, "republish_id, republished_at") if r[0] is not None]
    assert republished_at is not None

    # a crash after a batch's curated commit, before the job saved its checkpoint: the checkpoint
    # is older than the table's Delta transaction, so the next run reads that stretch again; it
    # finds the same three dead letters, and neither curates nor republishes them again
    first_batch = job.batches[0]
    assert first_batch[0] == -1 and first_batch[1] == job.done          # a first run: the whole journal
    saved = Progress.load(tmp_path / "checkpoint")
    assert saved is not None and saved.version == job.done
    Progress(saved.journal_id, -1).save(tmp_path / "checkpoint")
    replay = make_job(spark, broker, text, tmp_path / "checkpoint")
    summary = replay.run_once()
    # (the batches after it hold the journal's newer rows: the republish among them)
    assert replay.batches[0] == first_batch and summary.already_curated == 3
    assert (sum(summary.classified.values()), summary.republished) == (0, 0)
    assert len(curated(replay)) == 3

    # the repaired message is back in its original queue, once, with its properties and the attempt
    assert depth(channel, "a.work") == 1
    method, props, body = wait_until(lambda: _get(channel, "a.work"), 10, what="the republished message")
    assert body == b"fix-me"
    assert (props.delivery_mode, props.content_type, props.message_id, props.correlation_id, props.app_id) == (
        2, "text/plain", "id-fix-me", "corr-1", "shop")
    headers = props.headers
    assert headers[ATTEMPT_HEADER] == 1 and headers["repaired"] is True and "error" not in headers
    assert _text(headers[REPUBLISH_ID_HEADER]) == rid and _text(headers["kind"]) == "order"
    [death] = headers["x-death"]
    assert (_text(death["queue"]), _text(death["reason"]), death["count"]) == ("a.work", "rejected", 1)

    # a second run reads nothing new and republishes nothing
    again = make_job(spark, broker, text, tmp_path / "checkpoint")
    summary = again.run_once()
    assert (sum(summary.classified.values()), summary.already_curated, summary.republished) == (0, 0, 0)
    assert _get(channel, "a.work") is None

    # rejected again: attempt 2 is over the cap of 1, so it parks
    channel.basic_reject(method.delivery_tag, requeue=False)
    wait_until(lambda: depth(channel, "a.dlq") == 4, 30, what="the dead letter's second death")
    capped = make_job(spark, broker, text, tmp_path / "checkpoint")
    summary = capped.run_once()
    assert (summary.classified, summary.republished) == ({"republish": 0, "park": 1, "drop": 0}, 0)
    rows = [r for r in curated(capped, "attempt, death_count, rule, decision, state, note, body")
            if r[0] == 2]
    assert rows == [(2, 2, "repair", "park", "parked", "retry cap: 1 republish(es) already made", b"fix-me")]
    assert _get(channel, "a.work") is None
    channel.connection.close()


def test_a_dead_letter_waits_for_its_backoff_and_is_republished_by_a_later_run(
        spark: Any, broker: DeltaMQProcess, tmp_path: Path) -> None:
    channel = connect(broker)
    declare(channel, "b")
    publish(channel, "b", "work", b"later", kind="order")
    reject_all(channel, "b.work", 1)
    wait_until(lambda: depth(channel, "b.dlq") == 1, 30, what="a dead letter in b.dlq")
    text = policy_text("b", tmp_path / "curated", backoff=600)

    first = make_job(spark, broker, text, tmp_path / "checkpoint")
    summary = first.run_once()
    assert (summary.classified["republish"], summary.republished, first.waiting()) == (1, 0, 1)
    [(state, delay)] = curated(first, "state, unix_seconds(due_at) - unix_seconds(dead_lettered_at)")
    assert (state, delay) == ("pending", 600)
    assert depth(channel, "b.work") == 0

    # a later run, nothing new in the journal, after the backoff: republished
    later = make_job(spark, broker, text, tmp_path / "checkpoint", clock=lambda: time.time() + 601)
    summary = later.run_once()
    assert (sum(summary.classified.values()), summary.republished, later.waiting()) == (0, 1, 0)
    _, props, body = wait_until(lambda: _get(channel, "b.work"), 10, what="the republished message")
    assert (body, props.headers[ATTEMPT_HEADER]) == (b"later", 1)
    channel.connection.close()


def test_a_republish_in_doubt_after_a_crash_is_resolved_from_the_journal(
        spark: Any, broker: DeltaMQProcess, tmp_path: Path) -> None:
    channel = connect(broker)
    declare(channel, "c")
    publish(channel, "c", "work", b"sent", kind="order")
    reject_all(channel, "c.work", 1)
    wait_until(lambda: depth(channel, "c.dlq") == 1, 30, what="a dead letter in c.dlq")
    text = policy_text("c", tmp_path / "curated")
    table = f"delta.`{tmp_path / 'curated'}`"
    job = make_job(spark, broker, text, tmp_path / "checkpoint")
    assert job.run_once().republished == 1
    method, _, _ = wait_until(lambda: _get(channel, "c.work"), 10, what="the republished message")
    channel.basic_ack(method.delivery_tag)

    # a second dead letter, curated but still backing off
    publish(channel, "c", "work", b"unsent", kind="order")
    reject_all(channel, "c.work", 1)
    wait_until(lambda: depth(channel, "c.dlq") == 2, 30, what="a second dead letter in c.dlq")
    backing_off = policy_text("c", tmp_path / "curated", backoff=600)
    make_job(spark, broker, backing_off, tmp_path / "checkpoint").run_once()
    assert sorted(curated(job, "body, state")) == [(b"sent", "republished"), (b"unsent", "pending")]
    # what a crash leaves: "sent" crashed after its publish, before its record (the journal has
    # it, so it must not be sent again); "unsent" crashed before its publish
    spark.sql(f"UPDATE {table} SET state = 'publishing', republished_at = NULL, publishing_at = now()")

    recovered = make_job(spark, broker, backing_off, tmp_path / "checkpoint", clock=lambda: time.time() + 601)
    summary = recovered.run_once()
    assert (summary.recovered, summary.republished) == (1, 1)
    assert sorted(curated(recovered, "body, state")) == [(b"sent", "republished"), (b"unsent", "republished")]
    _, _, body = wait_until(lambda: _get(channel, "c.work"), 10, what="the unsent message")
    assert body == b"unsent"
    assert _get(channel, "c.work") is None                         # "sent" did not come back
    channel.connection.close()


def test_a_republish_the_broker_refuses_is_recorded_as_failed(spark: Any, broker: DeltaMQProcess,
                                                             tmp_path: Path) -> None:
    channel = connect(broker)
    declare(channel, "d")
    publish(channel, "d", "work", b"lost", kind="order")
    reject_all(channel, "d.work", 1)
    wait_until(lambda: depth(channel, "d.dlq") == 1, 30, what="a dead letter in d.dlq")
    text = policy_text("d", tmp_path / "curated").replace('remove_headers = ["error"]',
                                                           'exchange = "d.missing"')
    job = make_job(spark, broker, text, tmp_path / "checkpoint")
    summary = job.run_once()
    assert (summary.republished, summary.failed) == (0, 1)
    [(state, note)] = curated(job, "state, note")
    assert state == "failed" and note.startswith("channel closed by the broker: 404") and "d.missing" in note
    channel.connection.close()


def test_the_continuous_job_curates_dead_letters_as_they_come_and_a_restart_resumes_after_them(
        spark: Any, broker: DeltaMQProcess, tmp_path: Path) -> None:
    """``run(interval)`` (the command without ``--once``) follows the journal; its checkpoint is where a next run starts."""
    channel = connect(broker)
    declare(channel, "f")
    text = policy_text("f", tmp_path / "curated", backoff=3600)
    job = make_job(spark, broker, text, tmp_path / "checkpoint")
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            job.run(0.2, stop)
        except BaseException as exc:        # reported by the test's thread
            failures.append(exc)
    worker = threading.Thread(target=run, name="dlq-job")
    worker.start()
    try:
        wait_until(lambda: failures or job.done >= 0, 300, what="the job's first batch")
        for number, body in enumerate((b"one", b"two", b"three")):
            publish(channel, "f", "work", body, kind="order")
            reject_all(channel, "f.work", 1)
            wait_until(lambda: failures or len(curated(job, "body")) == number + 1, 120,
                       what=f"dead letter {body!r} curated by the running job")
            assert not failures, failures
    finally:
        stop.set()
        worker.join(120)
    assert not worker.is_alive() and not failures, failures
    assert sorted(curated(job, "body, state, rule")) == [
        (b"one", "pending", "repair"), (b"three", "pending", "repair"), (b"two", "pending", "repair")]
    # one stretch after the other, each read once, the first the whole journal (a first run)
    assert job.batches[0][0] == -1 and len(job.batches) >= 3
    assert all(after < upto == later for (after, upto), (later, _) in zip(job.batches, job.batches[1:]))
    assert Progress.load(tmp_path / "checkpoint") == Progress(job._journal_id, job.done)
    # a restart resumes after the last version handled: nothing read or classified twice
    again = make_job(spark, broker, text, tmp_path / "checkpoint")
    summary = again.run_once()
    assert again.batches[:1] in ([], [(job.done, again.done)])
    assert (sum(summary.classified.values()), summary.already_curated) == (0, 0)
    channel.connection.close()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_the_curated_table_schema_is_documented() -> None:
    from lakehouse.dlq import CURATED_SCHEMA

    page = (REPO / "docs" / "dead-letter-processor.md").read_text()
    columns = re.findall(r"(?:^|, )(\w+) [A-Z]", CURATED_SCHEMA)
    assert len(columns) == 31
    for column in columns:
        assert f"`{column}`" in page, column


def test_a_batch_written_twice_adds_its_rows_once(spark: Any, broker: DeltaMQProcess, tmp_path: Path) -> None:
    """The curated table's appends are idempotent Delta writes keyed by the job and the journal version."""
    channel = connect(broker)
    declare(channel, "t")
    publish(channel, "t", "work", b"twice", kind="order")
    reject_all(channel, "t.work", 1)
    wait_until(lambda: depth(channel, "t.dlq") == 1, 30, what="a dead letter in t.dlq")
    channel.connection.close()
    job = make_job(spark, broker, policy_text("t", tmp_path / "curated", backoff=3600), tmp_path / "checkpoint")
    latest = job.start()                     # a first run reads the whole journal: the dead letter is curated
    assert [r[:2] for r in curated(job, "dead_letter_queue, state")] == [("t.dlq", "pending")]
    found = job.journal.read_as_of(latest)
    assert [letter.body for letter in found] == [b"twice"]
    job._curate(found, latest)               # the same journal version again: the transaction skips it
    assert len(curated(job, "dead_letter_queue, state")) == 1
    job._curate(found, latest + 1)           # a later version is written (so the skip above was the key's)
    assert len(curated(job, "dead_letter_queue, state")) == 2


def test_a_checkpoint_of_another_journal_is_refused(spark: Any, broker: DeltaMQProcess, tmp_path: Path) -> None:
    """A data directory made afresh has a new journal table: its versions are not the checkpoint's."""
    from lakehouse.dlq import JobFailed

    text = policy_text("x", tmp_path / "curated")
    job = make_job(spark, broker, text, tmp_path / "checkpoint")
    job.run_once()
    saved = Progress.load(tmp_path / "checkpoint")
    assert saved is not None and saved.version == job.done >= 0
    Progress("another-journal", saved.version).save(tmp_path / "checkpoint")
    with pytest.raises(JobFailed, match="follows another journal table"):
        make_job(spark, broker, text, tmp_path / "checkpoint").run_once()


def test_curated_dead_letters_leave_their_queue_acknowledged_by_the_job(spark: Any, broker: DeltaMQProcess,
                                                                      tmp_path: Path) -> None:
    """Policy ``settle`` (the default): once curated, a dead letter is taken out of its dead-letter queue."""
    import argparse

    import httpx

    from lakehouse.dlq_command import SETTLING_CONSUMER, settler

    channel = connect(broker)
    declare(channel, "s")
    for body in (b"first", b"second"):
        publish(channel, "s", "work", body, kind="order")
    reject_all(channel, "s.work", 2)
    wait_until(lambda: depth(channel, "s.dlq") == 2, 30, what="two dead letters in s.dlq")
    args = argparse.Namespace(url=f"http://127.0.0.1:{broker.http_port}", node="default", username=None,
                              password=None, amqp_url=f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/")
    text = policy_text("s", tmp_path / "curated", backoff=3600)
    job = make_job(spark, broker, text, tmp_path / "checkpoint")
    job._settler = settler(args)
    summary = job.run_once()
    assert sum(summary.classified.values()) == 2
    assert depth(channel, "s.dlq") == 0
    queue = httpx.get(f"{args.url}/api/latest/queue/default/default/s.dlq", auth=("guest", "guest"),
                      timeout=30).json()
    assert queue["statistics"]["queueDepthMessages"] == 0
    # the broker journaled the acknowledgements: its recovery would not bring them back
    from lakehouse.queue_reads import live_messages

    assert live_messages(str(broker.dir / "data" / "default" / "journal"), "s.dlq") == ([], {})
    # a job whose policy says settle = false leaves them (the curated table is then the only record kept)
    publish(channel, "s", "work", b"third", kind="order")
    reject_all(channel, "s.work", 1)
    wait_until(lambda: depth(channel, "s.dlq") == 1, 30, what="a third dead letter")
    keeping = make_job(spark, broker, text + "\n", tmp_path / "checkpoint")
    keeping._settler = None
    assert sum(keeping.run_once().classified.values()) == 1
    assert depth(channel, "s.dlq") == 1
    assert SETTLING_CONSUMER == "deltamq-dlq"
    channel.connection.close()
