"""``/api/latest/sql`` and the console's History page, over a real broker and a real Spark Connect server.

The broker is the suite's ``deltamq serve``; ``deltamq spark serve`` is
started over its data directory once for the module (after the tests that
need no server).  Messages are published with pika and read back as SQL
through the broker's REST API, which forwards them to the server: the broker
itself runs no Spark.
"""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pika
import pytest

from lakehouse.connect_server import remote_session
from mgmt.errors import ApiError
from mgmt.sql_history import SqlHistory
from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint
from tests.spark_connect import ServeProcess
from tests.waiting import wait_until

from .conftest import Api
from .test_console_browser import BROWSER_DIR, chromium_path, png_size, require_browser_tools

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

QUEUE = f"history.{uuid.uuid4().hex[:8]}"
BODIES = [f"message {n} of {QUEUE}".encode() for n in range(3)]


def data_dir_of(broker: DeltaMQProcess) -> Path:
    return broker.dir / "data"


def error(response: Any, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    message: str = response.json()["errorMessage"]
    return message


# -- before a server runs -----------------------------------------------------------------

def test_without_a_server_the_answer_is_503_saying_how_to_start_one(
        api: Api, broker_process: DeltaMQProcess) -> None:
    data_dir = data_dir_of(broker_process)
    status = api.ok(api.get("sql"))
    assert status["available"] is False and status["server"] is None
    assert status["dataDir"] == str(data_dir.resolve())
    assert error(api.post("sql", {"query": "SELECT 1"}), 503) == (
        "no Spark Connect server serves the broker's data directory: start one with"
        f" `deltamq spark serve --data-dir {data_dir}`")


@pytest.mark.parametrize("query", [
    "INSERT INTO t VALUES (1)", "DROP VIEW journal", "DELETE FROM journal", "CREATE TABLE t (a INT)",
    "SET spark.sql.ansi.enabled = false", "SELECT 1; DROP VIEW journal",
    "SELECT java_method('java.lang.System', 'exit', 0)",
])
def test_what_is_not_read_only_is_422_before_anything_is_sent(api: Api, query: str) -> None:
    assert error(api.post("sql", {"query": query}), 422)


def test_the_body_is_checked(api: Api) -> None:
    assert error(api.post("sql", {}), 422) == "give 'query': the SQL to run, e.g. SELECT * FROM queue_history"
    assert "'limit' must be a whole number from 1 to 10000" == \
        error(api.post("sql", {"query": "SELECT 1", "limit": 0}), 422)
    assert "malformed JSON" in error(api.client.post("/api/latest/sql", content=b"{"), 400)


@pytest.fixture
def operator(api: Api) -> Iterator[Api]:
    name = f"operator-{uuid.uuid4().hex[:8]}"
    api.ok(api.put(f"user/passwordFile/{name}", {"password": "pw"}), 201)
    client = Api(int(api.base.rsplit(":", 1)[1]), auth=(name, "pw"))
    yield client
    client.close()
    api.delete(f"user/passwordFile/{name}")


def test_only_administrators_may_query_the_history(operator: Api) -> None:
    for response in (operator.get("sql"), operator.post("sql", {"query": "SELECT 1"})):
        assert "administrators only" in error(response, 403)


# -- with the server ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def serve(broker_process: DeltaMQProcess, amqp: BrokerEndpoint,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """Three durable messages in a durable queue (confirmed: journaled), then the server."""
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        for body in BODIES:
            channel.basic_publish("", QUEUE, body, pika.BasicProperties(delivery_mode=2))
    process = ServeProcess(data_dir_of(broker_process), tmp_path_factory.mktemp("serve") / "serve.log")
    server = process.start()
    try:
        # the server's first query over the journal's views compiles and plans them, which on a
        # loaded machine can take longer than the endpoint's timeout: warm it up first
        spark = remote_session(server)
        try:
            wait_until(lambda: spark.sql(f"SELECT count(*) FROM queue_history WHERE queue = '{QUEUE}'").first()[0]
                       == len(BODIES), timeout=300, interval=0.5, what="the journal's views to show the messages")
        finally:
            spark.stop()
        yield process
    finally:
        process.stop()


#: a first query loads Spark Connect's client into the broker and warms the server: on a
#: loaded machine that takes longer than the client's usual 30 s
QUERY_TIMEOUT = 180


def post_sql(api: Api, body: dict[str, Any]) -> Any:
    return api.client.post("/api/latest/sql", json=body, timeout=QUERY_TIMEOUT)


def query(api: Api, sql: str, **extra: Any) -> Any:
    return api.ok(post_sql(api, {"query": sql, **extra}))


def test_a_query_runs_on_the_server_and_comes_back_as_columns_and_rows(
        api: Api, serve: ServeProcess) -> None:
    assert serve.server is not None
    status = api.ok(api.get("sql"))
    assert status["available"] is True and status["server"] == serve.server.address
    assert serve.server.token not in json.dumps(status)
    result = wait_until(lambda: query(api, f"SELECT message_id, body, outcome FROM queue_history"
                                           f" WHERE queue = '{QUEUE}' ORDER BY message_id"),
                        timeout=120, interval=0.5, what="the query to answer")
    assert result["columns"] == [{"name": "message_id", "type": "bigint"}, {"name": "body", "type": "binary"},
                                 {"name": "outcome", "type": "string"}]
    assert [row[1] for row in result["rows"]] == [base64.b64encode(b).decode() for b in BODIES]
    assert [row[2] for row in result["rows"]] == [None, None, None]         # live
    assert result["truncated"] is False and result["server"] == serve.server.address
    assert result["elapsedMs"] > 0


def test_the_limit_truncates_and_says_so(api: Api, serve: ServeProcess) -> None:
    result = query(api, f"SELECT message_id FROM live_messages WHERE queue = '{QUEUE}' ORDER BY message_id",
                   limit=2)
    assert len(result["rows"]) == 2 and result["truncated"] is True


def test_inspection_statements_run_as_they_are(api: Api, serve: ServeProcess) -> None:
    views = query(api, "SHOW VIEWS")
    names = {row[views["columns"].index({"name": "viewName", "type": "string"})] for row in views["rows"]}
    assert {"journal", "queue_history", "live_messages", "dead_letters", "configuration"} <= names
    described = query(api, "DESCRIBE queue_history")
    assert ["queue", "string"] == described["rows"][2][:2]


def test_what_spark_refuses_is_422_with_sparks_message(api: Api, serve: ServeProcess) -> None:
    assert "UNRESOLVED_COLUMN" in error(post_sql(api, {"query": "SELECT no_such_column FROM journal"}), 422)


def test_a_write_inside_a_query_fails_to_parse_and_writes_nothing(
        api: Api, serve: ServeProcess, tmp_path: Path) -> None:
    target = tmp_path / "written"
    message = error(post_sql(api, {"query": f"WITH a AS (SELECT 1 AS x) INSERT INTO delta.`{target}`"
                                            " SELECT * FROM a"}), 422)
    assert "PARSE_SYNTAX_ERROR" in message
    assert not target.exists()
    assert error(post_sql(api, {"query": "SELECT 1) AS q; DROP VIEW journal; SELECT (1"}), 422)
    assert "queue_history" in {row[1] for row in query(api, "SHOW VIEWS")["rows"]}


def test_a_query_running_too_long_is_interrupted(serve: ServeProcess, broker_process: DeltaMQProcess) -> None:
    history = SqlHistory(str(data_dir_of(broker_process)), timeout=3.0)
    with pytest.raises(ApiError) as refused:
        anyio.run(history.run, "SELECT count(*) FROM range(1000000000000)", 10)
    assert (refused.value.status, refused.value.message) == \
        (504, "the query ran longer than 3 s and was interrupted")
    # the server goes on answering
    assert anyio.run(history.run, "SELECT 42 AS answer", 10)["rows"] == [[42]]


@pytest.mark.slow
def test_history_page_in_a_real_browser(serve: ServeProcess, broker_process: DeltaMQProcess,
                                        amqp: BrokerEndpoint, tmp_path: Path) -> None:
    require_browser_tools()
    config = {
        "url": f"http://127.0.0.1:{broker_process.http_port}", "user": amqp.user, "password": amqp.password,
        "chromium": chromium_path(), "screenshot": str(tmp_path / "history.png"),
        "failureScreenshot": str(tmp_path / "failure.png"), "timeoutMs": 15000,
        "queue": QUEUE, "published": len(BODIES), "firstBody": BODIES[0].decode(),
    }
    out = subprocess.run(["node", str(BROWSER_DIR / "history-check.mjs"), json.dumps(config)], cwd=BROWSER_DIR,
                         capture_output=True, text=True, timeout=300)
    results = [json.loads(line[len("@@result "):]) for line in out.stdout.splitlines()
               if line.startswith("@@result ")]
    assert results and results[0]["ok"], out.stdout[-6000:] + out.stderr[-2000:]
    assert out.returncode == 0
    width, _ = png_size((tmp_path / "history.png").read_bytes())
    assert width == 1280
