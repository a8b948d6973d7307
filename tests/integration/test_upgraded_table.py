"""`deltamq serve` over a data directory whose node table was changed by another Delta writer.

The node's ``config`` table gets a CHECK constraint (delta-rs, as Delta Spark's
``ALTER TABLE ... ADD CONSTRAINT`` would): the broker starts, serves its
management API, shows the node ERRORED and logs why once; clients of that
virtual host are refused; the table is left as it was.
"""

from __future__ import annotations

import os
import signal

import httpx
import pika
import pika.exceptions
import pytest
from deltalake import DeltaTable

from tests.mgmt.conftest import wait_for_http

from .conftest import DeltaMQProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts a broker of its own: DeltaMQ only", allow_module_level=True)


def test_a_node_whose_table_deltamq_must_not_write_is_errored_and_the_broker_serves() -> None:
    proc = DeltaMQProcess()
    proc.start()
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))
        conn.channel().queue_declare("orders", durable=True)
        conn.close()
        assert proc.proc is not None
        os.killpg(proc.proc.pid, signal.SIGTERM)
        proc.proc.wait(timeout=30)

        table = proc.dir / "data" / "default" / "config"
        DeltaTable(str(table)).alter.add_constraint({"has_id": "id IS NOT NULL"})
        log_entries = sorted(p.name for p in (table / "_delta_log").iterdir())
        proc.start()                                   # AMQP listens: the broker runs (new log)
        wait_for_http(proc)

        node = httpx.get(f"http://127.0.0.1:{proc.http_port}/api/latest/virtualhostnode/default",
                         auth=("guest", "guest"), timeout=30)
        assert node.status_code == 200, node.text
        described = node.json()
        described = described[0] if isinstance(described, list) else described
        assert described["state"] == "ERRORED"
        refusals = [line for line in proc.log_tail(100_000).splitlines()
                    if "could not be opened" in line]
        assert len(refusals) == 1
        assert f"Delta table 'config' at {table} uses table feature 'checkConstraints'" in refusals[0]
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))
        assert proc.alive()
        assert sorted(p.name for p in (table / "_delta_log").iterdir()) == log_entries
    finally:
        proc.stop()
