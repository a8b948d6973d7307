"""Lease consumers over real HTTP: what a Spark job's planner asks of the broker.

Messages go in with pika; what the job is granted is checked against what a
pika consumer on the same queue gets, and settlement against the journal's
Delta table.
"""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

import pika
import pytest

from lakehouse.queue_reads import journal
from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint
from tests.waiting import wait_until

from .conftest import Api, start_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

VHOST = "queue/default/default"


def durable_queue(api: Api) -> str:
    name = f"lease.{uuid.uuid4().hex[:12]}"
    api.ok(api.put(f"{VHOST}/{name}", {"durable": True}), 201)
    return name


def publish(amqp: BrokerEndpoint, queue: str, bodies: list[bytes], persistent: bool = True) -> None:
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2 if persistent else 1))


def consume(amqp: BrokerEndpoint, queue: str, want: int, timeout: float = 10) -> list[tuple[bytes, bool]]:
    """(body, redelivered) of what a pika consumer gets (acked), until ``want`` or the timeout."""
    got: list[tuple[bytes, bool]] = []
    with amqp.pika() as connection:
        channel = connection.channel()
        for method, _, body in channel.consume(queue, inactivity_timeout=timeout):
            if method is None:
                break
            got.append((body, bool(method.redelivered)))
            channel.basic_ack(method.delivery_tag)
            if len(got) >= want:
                break
        channel.cancel()
    return got


def grant(api: Api, queue: str, **body: Any) -> dict[str, Any]:
    return api.ok(api.post(f"{VHOST}/{queue}/grantMessages", {"consumer": "job", "session": "s1", **body}))


def rows(data_dir: str, queue: str) -> list[dict[str, Any]]:
    table = journal(os.path.join(data_dir, "default", "journal"))
    # a range row (a grant or a settlement of many: journal schema 3) as one row per message
    found = table.read(f"""
        SELECT event, message_id, delivery_count, outcome, reason FROM (
            SELECT at, event, unnest(generate_series(COALESCE(first_message_id, message_id), message_id))
                   AS message_id, delivery_count, outcome, reason
            FROM t WHERE queue = '{queue}')
        ORDER BY at, event, message_id""")
    return found.to_pylist()


def test_granted_messages_go_to_no_other_consumer_and_settle_as_acked(
        api: Api, amqp: BrokerEndpoint, broker_process: DeltaMQProcess) -> None:
    queue = durable_queue(api)
    publish(amqp, queue, [b"a", b"b", b"c", b"d"])
    granted = grant(api, queue, max=2, leaseSeconds=60)
    assert granted["count"] == 2 and granted["grant"] == 1 and granted["heldMessages"] == 2
    first, last = granted["messageIds"][0][0], granted["messageIds"][-1][1]
    assert last - first == 1 and granted["journal"].endswith("journal")
    assert consume(amqp, queue, 3, timeout=2) == [(b"c", False), (b"d", False)]   # never a or b
    # the job shows as a consumer of the queue, with its lease
    [shown] = api.ok(api.get(f"consumer/default/default/{queue}"))
    assert shown["name"] == "job" and shown["session"] == "s1"
    assert shown["statistics"]["heldMessages"] == 2 and shown["leaseExpires"] > shown["createdTime"]
    assert api.ok(api.get(f"{VHOST}/{queue}"))["statistics"]["consumerCount"] == 1
    settled = api.ok(api.post(f"{VHOST}/{queue}/settleMessages",
                              {"consumer": "job", "session": "s1", "messageIds": granted["messageIds"]}))
    assert (settled["settled"], settled["unknown"], settled["heldMessages"]) == (2, 0, 0)
    # answered once durable: the settle rows are in the table already
    journaled = rows(str(broker_process.dir / "data"), queue)
    acked = [r for r in journaled if r["event"] == "settle" and r["reason"] == "consumer:job"]
    assert sorted(r["message_id"] for r in acked) == [first, last]
    assert {r["outcome"] for r in acked} == {"acked"}
    again = api.ok(api.post(f"{VHOST}/{queue}/settleMessages",
                            {"consumer": "job", "session": "s1", "messageIds": granted["messageIds"]}))
    assert (again["settled"], again["unknown"]) == (0, 2)


def test_when_the_lease_runs_out_the_messages_come_back_redelivered(
        api: Api, amqp: BrokerEndpoint) -> None:
    queue = durable_queue(api)
    publish(amqp, queue, [b"x", b"y"])
    assert grant(api, queue, max=10, leaseSeconds=1)["count"] == 2
    wait_until(lambda: api.ok(api.get(f"consumer/default/default/{queue}")) == [], timeout=10,
               what="the lease consumer detached when its lease ran out")
    assert consume(amqp, queue, 2) == [(b"x", True), (b"y", True)]


def test_release_and_bad_requests(api: Api, amqp: BrokerEndpoint) -> None:
    queue = durable_queue(api)
    publish(amqp, queue, [b"r"])
    assert grant(api, queue, max=1)["count"] == 1
    released = api.ok(api.post(f"{VHOST}/{queue}/releaseMessages", {"consumer": "job"}))
    assert released == {"consumer": "job", "released": 1}
    assert consume(amqp, queue, 1) == [(b"r", True)]
    publish(amqp, queue, [b"d"])
    assert grant(api, queue, max=1)["count"] == 1
    api.ok(api.delete(f"consumer/default/default/{queue}/job"))     # management deletes the job's consumer
    assert consume(amqp, queue, 1) == [(b"d", True)]
    assert api.ok(api.get(f"consumer/default/default/{queue}")) == []
    plain = f"lease.{uuid.uuid4().hex[:12]}"
    api.ok(api.put(f"{VHOST}/{plain}", {"durable": False}), 201)
    refused = api.post(f"{VHOST}/{plain}/grantMessages", {"consumer": "job"})
    assert refused.status_code == 409 and f"queue '{plain}'" in refused.json()["errorMessage"]
    assert "not durable" in refused.json()["errorMessage"]
    bad = api.post(f"{VHOST}/{queue}/settleMessages", {"consumer": "job", "messageIds": [[3, 1]]})
    assert bad.status_code == 422 and "[3, 1]" in bad.json()["errorMessage"]
    missing = api.post(f"{VHOST}/no.such.queue/grantMessages", {"consumer": "job"})
    assert missing.status_code == 404
    location = api.ok(api.get(f"{VHOST}/{queue}/getJournalLocation"))
    assert location["durable"] is True and location["journal"].endswith(os.path.join("default", "journal"))


def test_a_transient_message_granted_is_journaled_and_never_recovered() -> None:
    broker = start_broker()
    restarted: DeltaMQProcess | None = None
    try:
        api = Api(broker.http_port)
        amqp = BrokerEndpoint(host="127.0.0.1", port=broker.amqp_port)
        queue = durable_queue(api)
        publish(amqp, queue, [b"t1", b"t2"], persistent=False)
        data_dir = str(broker.dir / "data")
        assert rows(data_dir, queue) == []                 # transient: not journaled
        granted = grant(api, queue, max=1)
        [[message_id, _]] = granted["messageIds"]
        body = journal(granted["journal"]).read(
            f"SELECT body FROM t WHERE message_id = {message_id} AND body IS NOT NULL").to_pylist()
        assert body == [{"body": b"t1"}]                   # journaled before the answer
        api.close()
        assert broker.proc is not None
        os.killpg(broker.proc.pid, signal.SIGKILL)
        broker.proc.wait(timeout=10)
        restarted = DeltaMQProcess()
        restarted.command[restarted.command.index("--data-dir") + 1] = data_dir
        restarted.start()
        amqp = BrokerEndpoint(host="127.0.0.1", port=restarted.amqp_port)
        assert consume(amqp, queue, 1, timeout=2) == []   # neither comes back after a restart
        wait_until(lambda: [r for r in rows(data_dir, queue) if r["event"] == "settle"], timeout=10,
                   what="recovery's settle row for the transient message")
        dropped = [r for r in rows(data_dir, queue) if r["event"] == "settle"]
        assert [(r["message_id"], r["outcome"], r["reason"]) for r in dropped] == \
            [(message_id, "dropped", "transient")]
    finally:
        if restarted is not None:
            restarted.stop()
        broker.stop()
