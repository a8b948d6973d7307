"""Unmodified rhea (Node.js) and Qpid JMS (Java) clients against DeltaMQ's AMQP 1.0 engine.

The broker is started as a user starts it (tests/integration/conftest.py); the drivers are
the ones proven against Broker-J (test_drivers_broker_j.py).  ``make test`` fetches the
clients (tools/ensure-amqp1-clients); where they could not be fetched these tests skip.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pika
import pytest

from tests.integration.conftest import DeltaMQProcess

from .drivers import Outcome, compile_jms, jms_fetched, rhea_fetched, run_jms, run_rhea

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

COUNT = 10


@pytest.fixture(scope="module")
def broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as proc:
        yield proc


def durable_queue(broker: DeltaMQProcess, kind: str) -> str:
    name = f"drivers.{kind}.{uuid.uuid4().hex[:8]}"
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as connection:
        connection.channel().queue_declare(name, durable=True)
    return name


def _ok(out: Outcome) -> dict:
    assert out.ok, f"exit {out.returncode}: {out.result}\n{out.stderr[-3000:]}"
    return out.result


@pytest.mark.skipif(not rhea_fetched(), reason="rhea is not fetched (tools/ensure-amqp1-clients)")
def test_rhea_sends_durable_messages_and_receives_them_in_order(broker: DeltaMQProcess) -> None:
    result = _ok(run_rhea(broker.amqp_port, "send-receive", durable_queue(broker, "rhea"), "--count", str(COUNT),
                          "--durable"))
    assert (result["sent"], result["accepted"], result["received"], result["in_order"]) == (COUNT, COUNT, COUNT, True)


@pytest.mark.skipif(not jms_fetched(), reason="Qpid JMS is not fetched (tools/ensure-amqp1-clients)")
def test_qpid_jms_sends_persistent_messages_and_receives_them_in_order(
        broker: DeltaMQProcess, tmp_path: Path) -> None:
    java = compile_jms(tmp_path)
    result = _ok(run_jms(java, broker.amqp_port, "send-receive", durable_queue(broker, "jms"), "--count", str(COUNT),
                         "--durable"))
    assert (result["sent"], result["received"], result["in_order"], result["persistent"]) == (COUNT, COUNT, True, True)


# -- AMQP 1.0 transactions (docs/amqp-1-0-transactions.md) ---------------------------------------

@pytest.mark.skipif(not jms_fetched(), reason="Qpid JMS is not fetched (tools/ensure-amqp1-clients)")
def test_qpid_jms_transacted_session_commits_and_rolls_back_sends_and_receives(
        broker: DeltaMQProcess, tmp_path: Path) -> None:
    java = compile_jms(tmp_path)
    result = _ok(run_jms(java, broker.amqp_port, "transacted", durable_queue(broker, "jms-tx"),
                         "--count", str(COUNT)))
    assert result["after_rolled_back_send"] == 0                  # send + rollback: nothing arrives
    assert result["received_then_rolled_back"] == COUNT           # send + commit: all arrive
    assert result["redelivered"] == COUNT and result["all_flagged_redelivered"] is True   # receive + rollback
    assert result["left_after_commit"] == 0                       # receive + commit: gone


@pytest.mark.skipif(not jms_fetched(), reason="Qpid JMS is not fetched (tools/ensure-amqp1-clients)")
def test_qpid_jms_forwards_messages_between_queues_in_one_transaction(
        broker: DeltaMQProcess, tmp_path: Path) -> None:
    java = compile_jms(tmp_path)
    source, target = durable_queue(broker, "jms-from"), durable_queue(broker, "jms-to")
    result = _ok(run_jms(java, broker.amqp_port, "transacted-forward", source, "--forward-to", target,
                         "--count", str(COUNT)))
    assert (result["sent"], result["forwarded_then_rolled_back"], result["target_after_rollback"]) == (COUNT, COUNT, 0)
    assert (result["forwarded_then_committed"], result["target_after_commit"]) == (COUNT, COUNT)
    assert (result["in_order"], result["source_after_commit"]) == (True, 0)
