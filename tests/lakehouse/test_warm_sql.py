"""``deltamq spark serve``: a real Spark Connect server that ``deltamq sql`` uses while it runs.

One server for the module, over a data directory of two nodes' configuration
tables.  ``deltamq sql`` is run with no Java on its PATH: it can only answer
through the server (a local session would refuse to start without a JVM).
The last test stops the server with ``--stop`` and shows ``deltamq sql``
falling back to a local session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.model.config_store import ConfigurationRecord
from lakehouse.config_store import DeltaConfigurationStore
from lakehouse.connect_server import ConnectServer, record_path, remote_session
from tests.spark_connect import ServeProcess, deltamq
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def add_node(root: Path, node: str, queue: str) -> None:
    store = DeltaConfigurationStore(str(root / node))
    store.open()
    store.save([ConfigurationRecord(f"{node}-vh", "VirtualHost", None, {"name": node})])
    store.save([ConfigurationRecord(f"{node}-q", "Queue", f"{node}-vh", {"name": queue, "durable": True})])
    store.close()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    add_node(root, "alpha", "orders")
    add_node(root, "beta", "billing")
    return root


@pytest.fixture(scope="module")
def serve(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    process = ServeProcess(data_dir, tmp_path_factory.mktemp("serve") / "serve.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def server(serve: ServeProcess) -> ConnectServer:
    assert serve.server is not None, serve.log()
    return serve.server


@pytest.fixture
def client(server: ConnectServer) -> Iterator[Any]:
    """A Spark Connect session of this test process (no JVM here)."""
    spark = remote_session(server)
    yield spark
    spark.stop()


def without_java(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "DELTAMQ_SPARK_REMOTE")}
    return {**env, "PATH": str(empty)}


QUEUES = ("SELECT node, category FROM configuration WHERE category = 'Queue' AND node IN ('alpha', 'beta')"
          " ORDER BY node")
QUEUE_TABLE = ["| node  | category |", "| alpha | Queue    |", "| beta  | Queue    |"]


def table_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("|")]


def test_the_server_listens_on_loopback_with_a_token_only_its_owner_may_read(
        server: ConnectServer, data_dir: Path) -> None:
    assert server.host == "127.0.0.1" and server.port > 0
    assert server.data_dir == str(data_dir.resolve())
    assert server.token and len(server.token) >= 32
    assert server.url == f"sc://localhost:{server.port}/;token={server.token}"
    assert record_path(data_dir).stat().st_mode & 0o077 == 0


def test_deltamq_sql_answers_through_the_server_without_a_jvm_of_its_own(
        server: ConnectServer, data_dir: Path, tmp_path: Path) -> None:
    out = deltamq("sql", "--data-dir", str(data_dir), QUEUES, env=without_java(tmp_path))
    assert out.returncode == 0, out.stderr
    assert table_lines(out.stdout) == QUEUE_TABLE
    assert out.stdout.rstrip().endswith("(2 rows)")
    assert out.stderr == ""


def test_the_server_session_is_the_serve_commands_with_delta_configured(
        server: ConnectServer, data_dir: Path, tmp_path: Path) -> None:
    out = deltamq("sql", "--data-dir", str(data_dir), "SET spark.app.name", env=without_java(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "| spark.app.name | deltamq-spark-serve |" in out.stdout
    partitions = deltamq("sql", "--data-dir", str(data_dir), "SET spark.sql.shuffle.partitions",
                         env=without_java(tmp_path))
    assert "| spark.sql.shuffle.partitions | 2 " in partitions.stdout, partitions.stdout
    # Delta's SQL extensions answer there: the history of a node's configuration table
    history = deltamq("sql", "--data-dir", str(data_dir), f"DESCRIBE HISTORY delta.`{data_dir / 'alpha' / 'config'}`",
                      env=without_java(tmp_path))
    assert history.returncode == 0, history.stderr
    lines = table_lines(history.stdout)
    assert lines[0].startswith("| version ") and len(lines) >= 3          # a version per commit


def test_a_query_spark_refuses_is_one_message_as_with_a_local_session(
        server: ConnectServer, data_dir: Path, tmp_path: Path) -> None:
    out = deltamq("sql", "--data-dir", str(data_dir), "SELEC node FROM configuration", env=without_java(tmp_path))
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.startswith(
        "deltamq sql: [PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'. SQLSTATE: 42601 (line 1, pos 0)\n")
    assert "Traceback" not in out.stderr and "\x1b[" not in out.stderr


def test_the_views_follow_a_node_whose_tables_appear(client: Any, data_dir: Path) -> None:
    def nodes() -> list[str]:
        return [r.node for r in client.sql("SELECT DISTINCT node FROM configuration ORDER BY node").collect()]

    assert nodes() == ["alpha", "beta"]
    add_node(data_dir, "gamma", "audit")
    wait_until(lambda: nodes() == ["alpha", "beta", "gamma"], timeout=60, interval=0.5,
               what="the new node in the configuration view")
    rows = client.sql("SELECT get_json_object(attributes, '$.name') AS name FROM configuration"
                      " WHERE node = 'gamma' AND category = 'Queue'").collect()
    assert [r.name for r in rows] == ["audit"]


def test_a_second_server_for_the_same_directory_is_refused(
        server: ConnectServer, data_dir: Path) -> None:
    out = deltamq("spark", "serve", "--data-dir", str(data_dir), "--port", "0")
    assert out.returncode == 1
    assert out.stderr == (f"deltamq spark serve: a Spark Connect server already serves {data_dir} at"
                          f" {server.address} (process {server.pid}); stop it with"
                          " `deltamq spark serve --stop`\n")


def test_status_names_the_server(server: ConnectServer, data_dir: Path) -> None:
    out = deltamq("spark", "serve", "--data-dir", str(data_dir), "--status")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{server.address} serves {data_dir.resolve()} (process {server.pid}, since ")
    assert server.token not in out.stdout       # the token is never printed


def test_stop_ends_the_server_cleanly_and_deltamq_sql_falls_back_to_a_local_session(
        serve: ServeProcess, server: ConnectServer, data_dir: Path) -> None:
    out = deltamq("spark", "serve", "--data-dir", str(data_dir), "--stop")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"stopped the Spark Connect server of {data_dir} (process {server.pid})\n"
    assert serve.wait() == 0, serve.log()
    assert "deltamq spark serve: stopped" in serve.log()
    assert not record_path(data_dir).exists()
    assert not server.answering()

    def group_ended() -> bool:                   # the JVM ended with it, unkilled
        try:
            os.killpg(server.pid or 0, 0)
            return False
        except ProcessLookupError:
            return True
    wait_until(group_ended, timeout=60, interval=0.2, what="the server's JVM to end")

    status = deltamq("spark", "serve", "--data-dir", str(data_dir), "--status")
    assert (status.returncode, status.stdout) == (1, f"no Spark Connect server serves {data_dir}\n")
    local = deltamq("sql", "--data-dir", str(data_dir), QUEUES)
    assert local.returncode == 0, local.stderr
    assert table_lines(local.stdout) == QUEUE_TABLE
    assert local.stderr == ""
