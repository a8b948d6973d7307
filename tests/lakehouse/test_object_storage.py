"""The lakehouse tables on object storage: a real S3 API server (moto) on 127.0.0.1.

Nothing is passed to delta-rs but ``s3://`` locations: the endpoint and the
credentials come from the standard ``AWS_*`` environment variables, as in
production.

The server runs in a child process, not on a thread of this one (moto's
``ThreadedMotoServer``): a few delta-rs 1.6 calls keep the GIL while they wait
for the store (``DeltaTable.is_deltatable``, reading a query's result), so a
server needing this process's GIL to answer would never get it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.messaging.termini import LinkRole, TerminusRecord
from broker.model.config_store import ConfigurationRecord
from broker.protocol.amqp0_9_1.properties import FORMAT, encode_properties
from lakehouse.config_store import DeltaConfigurationStore
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.maintenance import TableMaintenance, table_files
from lakehouse.termini_store import DeltaTerminusStore
from tests.waiting import wait_until

pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

pytestmark = pytest.mark.slow          # a server process, and ~10 s in all

BUCKET = "deltamq-test"
SCHEMA = pa.schema([pa.field("message_id", pa.int64(), nullable=False), pa.field("body", pa.binary())])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m moto.server`` on a free port of 127.0.0.1, once it accepts connections."""
    port = _free_port()
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    server.kill()
    server.wait()
    raise RuntimeError(f"moto server did not start on port {port}: {log.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An S3 server with one bucket; the AWS_* variables point delta-rs at it."""
    server, endpoint = _start_moto(tmp_path_factory.mktemp("moto") / "server.log")
    try:
        with pytest.MonkeyPatch.context() as env:
            for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_S3_LOCKING_PROVIDER",
                         "AWS_S3_ALLOW_UNSAFE_RENAME", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
                env.delenv(name, raising=False)
            env.setenv("AWS_ACCESS_KEY_ID", "testing")
            env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            env.setenv("AWS_REGION", "us-east-1")
            env.setenv("AWS_ENDPOINT_URL", endpoint)
            env.setenv("AWS_ALLOW_HTTP", "true")
            client = boto3.client("s3", endpoint_url=endpoint)
            client.create_bucket(Bucket=BUCKET)
            yield client
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def keys(client: Any, prefix: str) -> list[str]:
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"] for item in listing.get("Contents", []))


def batch(start: int, count: int) -> pa.Table:
    return pa.table({"message_id": list(range(start, start + count)),
                     "body": [b"x%d" % i for i in range(start, start + count)]}, schema=SCHEMA)


def all_ids(table: AppendOnlyTable) -> list[int]:
    return table.read("SELECT message_id FROM t ORDER BY message_id").column(0).to_pylist()


def test_config_store_round_trip_on_s3(s3: Any) -> None:
    root = f"s3://{BUCKET}/node"
    store = DeltaConfigurationStore(root)
    store.open()
    assert store.recover() == []
    store.save([ConfigurationRecord("vh", "VirtualHost", None, {"name": "default"}),
                ConfigurationRecord("q1", "Queue", "vh", {"name": "orders", "durable": True})])
    store.save([ConfigurationRecord("q2", "Queue", "vh", {"name": "billing"})])
    store.remove(["q2"])
    store.close()

    again = DeltaConfigurationStore(root + "/")          # a trailing slash names the same place
    again.open()
    assert [(r.id, dict(r.attributes)) for r in again.recover()] == [
        ("vh", {"name": "default"}), ("q1", {"name": "orders", "durable": True})]
    again.close()
    # the table is in the bucket, under the store path -- and nothing was written locally
    assert "node/config/_delta_log/00000000000000000003.json" in keys(s3, "node/config/")
    assert again.table.uri == f"s3://{BUCKET}/node/config"


def test_terminus_store_round_trip_on_s3(s3: Any) -> None:
    root = f"s3://{BUCKET}/termini-node"
    store = DeltaConfigurationStore(root).terminus_store()
    store.open()
    store.save([TerminusRecord(LinkRole.SENDING, "c1", "l1", {"address": "orders"}),
                TerminusRecord(LinkRole.RECEIVING, "c1", "l2", {"address": "billing"})])
    store.remove([(LinkRole.RECEIVING, "c1", "l2")])
    store.close()
    again = DeltaTerminusStore(root)
    again.open()
    assert [(r.key, dict(r.terminus)) for r in again.recover()] == [
        ((LinkRole.SENDING, "c1", "l1"), {"address": "orders"})]
    assert keys(s3, "termini-node/link_termini/_delta_log/")


def test_append_and_read_on_s3(s3: Any) -> None:
    uri = f"s3://{BUCKET}/tables/appends"
    table = AppendOnlyTable(uri, SCHEMA, stats_column="message_id")
    assert table.remote and table.name == "appends"
    with pytest.raises(ValueError):
        table.path                                      # no local directory to hand out
    table.open()
    assert table.version == 0
    assert table.append(batch(0, 3)) == 1
    assert table.append(batch(3, 2)) == 2
    assert all_ids(table) == [0, 1, 2, 3, 4]
    table.close()

    again = AppendOnlyTable(uri, SCHEMA)                # another process, later
    again.open()
    assert again.version == 2
    assert again.append(batch(5, 1)) == 3
    assert again.read("SELECT body FROM t WHERE message_id = 5").column(0).to_pylist() == [b"x5"]
    # explicit storage options are passed through (here: the ones the environment gives too)
    explicit = AppendOnlyTable(uri, SCHEMA, storage_options={"AWS_REGION": "us-east-1"})
    explicit.open()
    assert all_ids(explicit) == list(range(6))


def test_compaction_checkpoint_and_vacuum_on_s3(s3: Any) -> None:
    uri = f"s3://{BUCKET}/tables/maintained"
    table = AppendOnlyTable(uri, SCHEMA, checkpoint_interval=5)
    table.open()
    maintenance = TableMaintenance(table, compact_min_files=4, retention_hours=0)
    table.on_checkpoint_due = maintenance.checkpoint_due
    for i in range(6):
        table.append(batch(i * 10, 10))
    assert table_files(uri) == 6
    maintenance.run_once()                              # compacts, and checkpoints (due, and after it)
    assert maintenance.compactions == 1 and maintenance.files_compacted == 6
    assert maintenance.checkpoints == 1
    assert table_files(uri) == 1
    assert "tables/maintained/_delta_log/_last_checkpoint" in keys(s3, "tables/maintained/_delta_log/")
    # delta-rs's compaction commit changes no data: a Spark stream skips it
    version = table.delta_table().version()
    commit = s3.get_object(Bucket=BUCKET, Key=f"tables/maintained/_delta_log/{version:020d}.json")
    actions = [json.loads(line) for line in commit["Body"].read().decode().splitlines()]
    assert {a["commitInfo"]["operation"] for a in actions if "commitInfo" in a} == {"OPTIMIZE"}
    assert all(a[k]["dataChange"] is False for a in actions for k in ("add", "remove") if k in a)
    assert all_ids(table) == list(range(60))
    table.append(batch(60, 5))                          # the appender carries on after it
    assert all_ids(table) == list(range(65))
    assert maintenance.compact() == 0                   # two files: not worth it yet
    maintenance.vacuum()                                # retention 0: the six compacted files go
    parquet = [k for k in keys(s3, "tables/maintained/") if k.endswith(".parquet")
               and "_delta_log" not in k]
    assert len(parquet) == 2
    reader = AppendOnlyTable(uri, SCHEMA)
    reader.open()
    assert all_ids(reader) == list(range(65))


def test_appends_racing_maintenance_thread_on_s3(s3: Any, caplog: pytest.LogCaptureFixture) -> None:
    uri = f"s3://{BUCKET}/tables/racing"
    table = AppendOnlyTable(uri, SCHEMA, checkpoint_interval=5)
    table.open()
    maintenance = TableMaintenance(table, compact_min_files=4, poll_interval=0.01)
    maintenance.start()
    try:
        for i in range(30):
            table.append(batch(i * 2, 2))
        wait_until(lambda: maintenance.compactions and maintenance.checkpoints, 30,
                   what="a compaction and a checkpoint in the background")
    finally:
        maintenance.close()
    assert maintenance.compactions >= 1 and maintenance.checkpoints >= 1
    assert not [r for r in caplog.records if r.name == "lakehouse.maintenance" and r.levelname == "ERROR"]
    assert all_ids(table) == list(range(60))
    assert table.delta_table().version() >= table.version


def persistent(body: bytes) -> Message:
    properties = MessageProperties(delivery_mode=2)
    return Message(exchange="", routing_key="rk", body=body, properties=properties,
                   native=encode_properties(properties), format=FORMAT,
                   arrival=time.monotonic())


def test_message_journal_on_s3(s3: Any) -> None:
    root = f"s3://{BUCKET}/journal-node"
    store = DeltaConfigurationStore(root)
    ns = Namespace("v")
    journal = store.message_journal("v")
    assert journal.table.uri == f"{root}/journal"
    journal.open()
    ns.journal = journal
    queue = ns.declare_queue("q", durable=True)[0]
    for i in range(3):
        queue.enqueue(persistent(b"m%d" % i))
    entry = queue.get()
    assert entry is not None
    queue.settle(entry)
    journal.close()                                     # commits what is still open

    ns2 = Namespace("v")
    again = store.message_journal("v")
    again.open()
    ns2.journal = again
    queue2 = ns2.declare_queue("q", durable=True)[0]
    assert again.recover(ns2) == 2
    bodies = []
    while (got := queue2.get()) is not None:
        bodies.append(got.message.body)
    assert bodies == [b"m1", b"m2"]
    again.close()
    assert keys(s3, "journal-node/journal/_delta_log/")


# -- what docker-compose.yml's stack relies on: the broker's node in the bucket, Spark reading it --

REPO = Path(__file__).resolve().parents[2]
COMPOSE_QUEUE = "compose.orders"


def start_compose_broker() -> Any:
    """``deltamq serve --config conf/docker-compose.json`` with its node in the test's bucket."""
    from tests.integration.conftest import DeltaMQProcess

    with pytest.MonkeyPatch.context() as env:
        env.setenv("DELTAMQ_BUCKET", BUCKET)
        broker = DeltaMQProcess()
        broker.command += ["--config", str(REPO / "conf" / "docker-compose.json")]
        broker.start()
    return broker


def amqp_parameters(broker: Any) -> Any:
    import pika

    return pika.ConnectionParameters("127.0.0.1", broker.amqp_port, "/", pika.PlainCredentials("guest", "guest"),
                                     socket_timeout=10)


@pytest.fixture(scope="module")
def compose_broker(s3: Any) -> Iterator[dict[str, Any]]:
    """``deltamq serve --config conf/docker-compose.json`` journaled pika's traffic into the bucket, then stopped.

    Started as a user starts it (tests/integration/conftest.py), with the
    stack's configuration file; ``DELTAMQ_BUCKET`` and the ``AWS_*`` variables
    point it at the S3 server, as docker-compose.yml points it at MinIO.
    """
    import signal

    import pika

    broker = start_compose_broker()
    try:
        with pika.BlockingConnection(amqp_parameters(broker)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare(COMPOSE_QUEUE, durable=True)
            for i in range(5):
                ch.basic_publish("", COMPOSE_QUEUE, b"order %d" % i, pika.BasicProperties(delivery_mode=2))
            for _ in range(2):
                method, _props, _body = ch.basic_get(COMPOSE_QUEUE)
                assert method is not None
                ch.basic_ack(method.delivery_tag)
        local = sorted(path.name for path in (broker.dir / "data").iterdir())
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
        assert broker.proc.wait(60) == 0, broker.log_tail()
        yield {"location": f"s3://{BUCKET}/nodes", "local": local, "log": broker.log_tail()}
    finally:
        broker.stop()


def test_the_compose_broker_keeps_its_node_in_the_bucket(s3: Any, compose_broker: dict[str, Any]) -> None:
    for table in ("config", "journal"):
        assert keys(s3, f"nodes/default/{table}/_delta_log/"), f"no {table} table in the bucket"
    # locally only the password file and the broker's own configuration store
    assert "default" not in compose_broker["local"], compose_broker["local"]
    assert "broker" in compose_broker["local"]


def test_object_store_locations_and_s3a_settings() -> None:
    from lakehouse.spark_object_store import is_object_store, object_store_artifacts, s3a_settings

    assert is_object_store("s3://bucket/nodes") and is_object_store("s3a://bucket")
    assert not any(is_object_store(x) for x in ("data", "/data/s3:", Path("s3://x"), None, "file:///data"))
    settings = dict(s3a_settings({"AWS_ENDPOINT_URL": "http://minio:9000", "AWS_REGION": "us-east-1",
                                  "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}))
    assert settings["spark.hadoop.fs.s3.impl"] == settings["spark.hadoop.fs.s3a.impl"] \
        == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert settings["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    assert settings["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert settings["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert (settings["spark.hadoop.fs.s3a.access.key"], settings["spark.hadoop.fs.s3a.secret.key"]) == ("k", "s")
    # AWS itself: no endpoint, no path-style requests; credentials from the SDK's chain
    assert dict(s3a_settings({})).keys() == {"spark.hadoop.fs.s3.impl", "spark.hadoop.fs.s3a.impl"}
    assert object_store_artifacts("3.4.1")[0] == "org.apache.hadoop:hadoop-aws:3.4.1"


#: run in a process of its own: S3A's jars must be on the JVM's class path when it starts, and
#: other tests of the run may have started this process's JVM without them
_VIEWS_OVER_S3 = """
import json, sys
from lakehouse.spark import spark_session
spark = spark_session(sys.argv[1], app_name="deltamq-object-store-test")
try:
    rows = spark.sql(f\"\"\"
        SELECT node, CAST(body AS STRING) AS body, outcome FROM queue_history
        WHERE queue = '{sys.argv[2]}' ORDER BY message_id\"\"\").collect()
    queues = spark.sql(\"\"\"SELECT get_json_object(attributes, '$.name') FROM configuration
                          WHERE node = 'default' AND category = 'Queue'\"\"\").collect()
    print(json.dumps({"rows": [list(r) for r in rows], "queues": [r[0] for r in queues]}))
finally:
    spark.stop()
"""


@pytest.mark.timeout(900)
def test_spark_views_read_the_nodes_in_the_bucket(compose_broker: dict[str, Any]) -> None:
    """The views the notebooks and Spark Connect read, over ``s3://bucket/nodes`` (S3A, pyarrow's listing)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _VIEWS_OVER_S3, compose_broker["location"], COMPOSE_QUEUE],
                          capture_output=True, text=True, timeout=840, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert [tuple(r) for r in found["rows"]] == [("default", f"order {i}", "acked" if i < 2 else None)
                                                 for i in range(5)]
    assert found["queues"] == [COMPOSE_QUEUE]


@pytest.mark.timeout(900)
def test_the_snapshot_job_on_a_bucket_and_a_new_broker_starting_from_it(s3: Any, compose_broker: dict[str, Any]) -> None:
    """``deltamq spark snapshot --store-path s3://...`` as a user runs it (S3A joins its JVM), then a broker
    with nothing local -- another machine -- recovers the node from that snapshot and the journal's tail."""
    import pika

    store = f"{compose_broker['location']}/default"
    done = subprocess.run([sys.executable, "-m", "broker.cli", "spark", "snapshot", "--store-path", store],
                          capture_output=True, text=True, timeout=840, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "3 live messages in 1 queues" in done.stdout, done.stdout
    assert keys(s3, "nodes/default/journal_snapshot/_delta_log/")

    broker = start_compose_broker()
    try:
        assert "from the snapshot of version" in broker.log_tail(), broker.log_tail()
        with pika.BlockingConnection(amqp_parameters(broker)) as conn:
            channel = conn.channel()
            bodies = [channel.basic_get(COMPOSE_QUEUE, auto_ack=True)[2] for _ in range(3)]
            assert bodies == [b"order 2", b"order 3", b"order 4"]
            assert channel.basic_get(COMPOSE_QUEUE)[0] is None
    finally:
        broker.stop()


def test_a_node_started_elsewhere_recovers_from_the_snapshot_and_tail_on_s3(
        s3: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The path to replace a lost node: its tables are in the bucket, a new broker reads them there."""
    import logging

    from tests.lakehouse.snapshot_support import commit, full_live, snapshot_with_datafusion

    root = f"s3://{BUCKET}/snapshot-node"
    ns = Namespace("v")
    journal = DeltaConfigurationStore(root).message_journal("v")
    journal.open()
    ns.journal = journal
    queue = ns.declare_queue("q", durable=True)[0]
    for i in range(5):
        queue.enqueue(persistent(b"m%d" % i))
    queue.settle(queue.get())                           # type: ignore[arg-type]
    commit(journal)
    snapshot_with_datafusion(journal.table.uri, journal.table.version)
    assert keys(s3, "snapshot-node/journal_snapshot/_delta_log/")
    queue.settle(queue.get())                           # type: ignore[arg-type]   # after the snapshot
    queue.enqueue(persistent(b"after"))
    held = queue.get()                                  # delivered, never settled: redelivered later
    assert held is not None
    commit(journal)                                     # then the node is lost: nothing else runs

    other = Namespace("v")                              # another machine: nothing local, same URI
    again = DeltaConfigurationStore(root).message_journal("v")
    again.open()
    other.journal = again
    other.declare_queue("q", durable=True)
    with caplog.at_level(logging.INFO, logger="lakehouse.journal"):
        assert again.recover(other) == 4
    assert "from the snapshot of version" in caplog.text
    got = [(e.message.body, e.redelivered) for e in iter(lambda: other.queues["q"].get(no_ack=True), None)]
    assert got == [(b"m2", True), (b"m3", False), (b"m4", False), (b"after", False)]
    assert again.live_messages().to_pylist() == full_live(again)
    again.close()
