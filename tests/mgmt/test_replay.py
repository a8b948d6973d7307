"""Time-travel replay against a broker started as a user starts it: the Queue operation
``replayMessages`` over real HTTP and ``deltamq replay``, with pika publishing before and
consuming after, so every check is what a client sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pika
import pytest
from deltalake import DeltaTable

from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint

from .conftest import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
VHOST = "queue/default/default"
#: every property a 0-9-1 publisher can set (with headers of several types)
RICH = dict(content_type="application/json", content_encoding="identity", delivery_mode=2,
            priority=4, correlation_id="corr-1", reply_to="replies", expiration="600000",
            message_id="msg-1", timestamp=1_700_000_000, type="order", user_id="guest",
            app_id="replay-test", headers={"n": 7, "s": "text", "nested": {"a": [1, "b"]}})


def unique(kind: str) -> str:
    return f"replay.{kind}.{uuid.uuid4().hex[:10]}"


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


def publish(channel: Any, exchange: str, key: str, body: bytes, **properties: Any) -> None:
    properties.setdefault("delivery_mode", 2)
    channel.basic_publish(exchange, key, body, pika.BasicProperties(**properties))


def consume_all(amqp: BrokerEndpoint, queue: str) -> list[tuple[Any, Any, bytes]]:
    """Every ready message of ``queue`` (acknowledged): (method, properties, body)."""
    got = []
    with amqp.pika() as connection:
        channel = connection.channel()
        while True:
            method, properties, body = channel.basic_get(queue)
            if method is None:
                return got
            channel.basic_ack(method.delivery_tag)
            got.append((method, properties, body))


def journal_version(process: DeltaMQProcess) -> int:
    return int(DeltaTable(str(process.dir / "data" / "default" / "journal")).version())


def body_queue(process: DeltaMQProcess, queues: tuple[str, str]) -> str:
    """Which of two queues holds the body row of the one message they share."""
    table = DeltaTable(str(process.dir / "data" / "default" / "journal"))
    from deltalake import QueryBuilder

    names = ", ".join(f"'{q}'" for q in queues)
    rows = QueryBuilder().register("t", table).execute(
        f"SELECT queue FROM t WHERE body IS NOT NULL AND queue IN ({names})"
        " AND message_id IN (SELECT message_id FROM t WHERE queue IN"
        f" ({names}) GROUP BY message_id HAVING count(DISTINCT queue) = 2)").read_all()
    found = set(rows.column("queue").to_pylist())
    assert len(found) == 1, found
    return str(found.pop())


def replay(api: Api, queue: str, **arguments: Any) -> Any:
    return api.ok(api.post(f"{VHOST}/{queue}/replayMessages", arguments))


@pytest.fixture
def history(api: Api, amqp: BrokerEndpoint, broker_process: DeltaMQProcess) -> dict[str, Any]:
    """Two durable queues fed by a fanout exchange and directly, in three periods; all consumed.

    The middle period has a message with every property, a fanned-out one (whose body is on
    the other queue's row, for the queue replayed) and a transient one (never journaled).
    """
    first, second, fanout = unique("a"), unique("b"), unique("fan")
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.exchange_declare(fanout, "fanout", durable=True)
        for queue in (first, second):
            channel.queue_declare(queue, durable=True)
            channel.queue_bind(queue, fanout)
        channel.confirm_delivery()
        publish(channel, fanout, "k0", b"before")
        start = now()
        publish(channel, fanout, "k1", b"fanned out", headers={"fan": True})
    # the queue whose journal rows do not hold the fanned-out message's body
    source = first if body_queue(broker_process, (first, second)) == second else second
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        publish(channel, "", source, b"rich", **RICH)
        publish(channel, "", source, b"transient", delivery_mode=1)
        publish(channel, "", source, b"third")
        end = now()
        publish(channel, "", source, b"after")
    for queue in (first, second):
        consume_all(amqp, queue)                # settled: replay takes history, not live messages
    return {"source": source, "other": second if source == first else first, "fanout": fanout,
            "start": start, "end": end}


def test_a_time_range_replayed_into_another_queue_is_exactly_that_range(
        api: Api, amqp: BrokerEndpoint, history: dict[str, Any]) -> None:
    source, target = history["source"], unique("target")
    api.ok(api.post(VHOST, {"name": target, "durable": True}), 201)
    answer = replay(api, source, fromTime=history["start"], toTime=history["end"],
                    destination=target)
    assert answer["replayed"] == 3 and len(answer["messageIds"]) == 3, answer
    assert answer["unroutable"] == answer["refused"] == answer["missing"] == []
    assert isinstance(answer["journalVersion"], int) and answer["journalVersionTime"].endswith("Z")
    got = consume_all(amqp, target)
    assert [body for _, _, body in got] == [b"fanned out", b"rich", b"third"]

    fanned, rich, third = got
    # straight into the queue: each keeps the exchange and routing key it was published with
    assert (fanned[0].exchange, fanned[0].routing_key) == (history["fanout"], "k1")
    assert (rich[0].exchange, rich[0].routing_key) == ("", source)
    # properties intact, plus the two replay headers
    properties = rich[1]
    for name, value in RICH.items():
        if name != "headers":
            assert getattr(properties, name) == value, name
    assert properties.headers == {**RICH["headers"], "x-replay-of": answer["messageIds"][1],
                                  "x-replayed-from": source}
    assert fanned[1].headers == {"fan": True, "x-replay-of": answer["messageIds"][0],
                                 "x-replayed-from": source}
    assert third[1].delivery_mode == 2
    assert answer["messageIds"] == sorted(answer["messageIds"])


def test_versions_replayed_through_each_messages_own_exchange(
        api: Api, amqp: BrokerEndpoint, broker_process: DeltaMQProcess) -> None:
    queue, fanout = unique("v"), unique("vfan")
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.exchange_declare(fanout, "fanout", durable=True)
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, fanout)
        channel.confirm_delivery()
        publish(channel, fanout, "", b"old")
        before = journal_version(broker_process)
        publish(channel, fanout, "", b"new 1")
        publish(channel, "", queue, b"new 2")
        upto = journal_version(broker_process)
        publish(channel, fanout, "", b"newer")
    consume_all(amqp, queue)
    answer = replay(api, queue, fromVersion=before + 1, toVersion=upto)
    assert answer["replayed"] == 2 and answer["journalVersion"] == upto, answer
    # through their own exchanges: the fanout (bound to the queue) and the default exchange
    got = consume_all(amqp, queue)
    assert [(m.exchange, body) for m, _, body in got] == [(fanout, b"new 1"), ("", b"new 2")]


def test_replay_through_another_exchange_with_a_routing_key(
        api: Api, amqp: BrokerEndpoint, history: dict[str, Any]) -> None:
    target, key = unique("routed"), unique("key")
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(target, durable=True)
        channel.queue_bind(target, "amq.direct", key)
    answer = replay(api, history["source"], fromTime=history["start"], toTime=history["end"],
                    exchange="amq.direct", routingKey=key, limit=2)
    assert answer["replayed"] == 2
    got = consume_all(amqp, target)
    assert [(m.exchange, m.routing_key, body) for m, _, body in got] == \
        [("amq.direct", key, b"fanned out"), ("amq.direct", key, b"rich")]
    nowhere = replay(api, history["source"], fromTime=history["start"], toTime=history["end"],
                     exchange="amq.direct", routingKey=unique("unbound"))
    assert nowhere["replayed"] == 3 and nowhere["unroutable"] == nowhere["messageIds"]


def test_a_page_with_a_message_whose_exchange_is_gone_is_not_replayed_at_all(
        api: Api, amqp: BrokerEndpoint) -> None:
    queue, exchange = unique("page"), unique("gone")
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.exchange_declare(exchange, "direct", durable=True)
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, exchange, "k")
        channel.confirm_delivery()
        start = now()
        publish(channel, "", queue, b"direct")          # the default exchange stays
        publish(channel, exchange, "k", b"routed")
        channel.exchange_delete(exchange)
    consume_all(amqp, queue)
    response = api.post(f"{VHOST}/{queue}/replayMessages", {"fromTime": start})
    assert response.status_code == 404, response.text
    text = response.json()["errorMessage"]
    assert "replay stopped after 0 messages: message" in text and f"exchange '{exchange}'" in text
    assert consume_all(amqp, queue) == []             # not even the page's first message
    answer = replay(api, queue, fromTime=start, destination=queue)   # elsewhere, it goes
    assert answer["replayed"] == 2
    assert [body for _, _, body in consume_all(amqp, queue)] == [b"direct", b"routed"]


@pytest.mark.parametrize("arguments, status, text", [
    ({}, 422, "at least one bound"),
    ({"fromTime": "yesterday"}, 422, "parameter 'fromTime': 'yesterday' is not an ISO 8601 time"),
    ({"fromTime": "2026-01-02T00:00:00Z", "toTime": "2026-01-01T00:00:00Z"}, 422,
     "parameter 'toTime'"),
    ({"fromVersion": 5, "toVersion": 4}, 422, "parameter 'toVersion': 4 is before fromVersion 5"),
    ({"toVersion": 10 ** 9}, 422, "parameter 'toVersion': version 1000000000 is not committed yet"),
    ({"fromVersion": "x"}, 422, "'fromVersion'"),
    ({"fromVersion": 0, "exchange": "no-such-exchange"}, 422,
     "parameter 'exchange': no exchange 'no-such-exchange' in vhost 'default'"),
    ({"fromVersion": 0, "destination": "no-such-queue"}, 422,
     "parameter 'destination': no queue 'no-such-queue'"),
    ({"fromVersion": 0, "destination": "x", "exchange": "amq.direct"}, 422, "not both"),
    ({"fromVersion": 0, "limit": 0}, 422, "parameter 'limit'"),
    ({"fromVersion": 0, "upTo": 3}, 422, "unknown parameter 'upTo'"),
])
def test_bad_bounds_and_targets_are_4xx_naming_the_parameter(
        api: Api, arguments: dict[str, Any], status: int, text: str) -> None:
    queue = unique("bad")
    api.ok(api.post(VHOST, {"name": queue, "durable": True}), 201)
    response = api.post(f"{VHOST}/{queue}/replayMessages", arguments)
    assert response.status_code == status, response.text
    assert text in response.json()["errorMessage"], response.text
    # an operation that changes the broker: not with GET
    assert api.get(f"{VHOST}/{queue}/replayMessages", fromVersion=0).status_code == 405


def test_an_unknown_queue_is_404_and_a_memory_node_is_409(api: Api) -> None:
    response = api.post(f"{VHOST}/{unique('missing')}/replayMessages", {"fromVersion": 0})
    assert response.status_code == 404, response.text
    node = unique("mem")
    api.ok(api.post("virtualhostnode", {"name": node, "type": "memory"}), 201)
    try:
        queue = unique("q")
        api.ok(api.post(f"queue/{node}/{node}", {"name": queue}), 201)
        response = api.post(f"queue/{node}/{node}/{queue}/replayMessages", {"fromVersion": 0})
        assert response.status_code == 409, response.text
        assert f"virtual host node '{node}' is of type 'memory'" in response.json()["errorMessage"]
    finally:
        api.delete(f"virtualhostnode/{node}")


# -- deltamq replay ------------------------------------------------------------------------

def deltamq(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    for variable in ("DELTAMQ_MANAGEMENT_URL", "DELTAMQ_USER", "DELTAMQ_PASSWORD"):
        env.pop(variable, None)
    return subprocess.run([sys.executable, "-m", "broker.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=60)


def test_deltamq_replay_command(amqp: BrokerEndpoint, broker_process: DeltaMQProcess,
                                history: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{broker_process.http_port}"
    source, target = history["source"], unique("cli")
    with amqp.pika() as connection:
        connection.channel().queue_declare(target, durable=True)
    done = deltamq("replay", source, "--from", history["start"], "--to", history["end"],
                   "--to-queue", target, "--url", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"replayed 3 messages of queue '{source}' in virtual host"
                                  f" 'default' into queue '{target}' (journal version "), done.stdout
    assert [body for _, _, body in consume_all(amqp, target)] == [b"fanned out", b"rich", b"third"]

    as_json = deltamq("replay", source, "--from", history["start"], "--to", history["end"],
                      "--to-queue", target, "--limit", "1", "--json", "--url", url)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["replayed"] == 1
    assert [body for _, _, body in consume_all(amqp, target)] == [b"fanned out"]

    bad = deltamq("replay", source, "--from", "5", "--to", "4", "--url", url)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("deltamq: error: ") and "4 is before fromVersion 5" in bad.stderr
    assert "(HTTP 422)" in bad.stderr
    both = deltamq("replay", source, "--from", "0", "--exchange", "x", "--to-queue", target,
                   "--url", url)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
