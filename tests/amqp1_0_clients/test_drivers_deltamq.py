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
from tests.waiting import wait_until

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


# -- nodes: selectors, browsing, dynamic reply-to, durable subscriptions, priority ------------------
# (docs/amqp-1-0-nodes.md; the same scenarios as test_drivers_broker_j.py, plus DeltaMQ's own)

needs_rhea = pytest.mark.skipif(not rhea_fetched(), reason="rhea is not fetched (tools/ensure-amqp1-clients)")
needs_jms = pytest.mark.skipif(not jms_fetched(), reason="Qpid JMS is not fetched (tools/ensure-amqp1-clients)")


@pytest.fixture(scope="module")
def jms(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return compile_jms(tmp_path_factory.mktemp("jms-driver"))


def _unique(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def queue_exists(broker: DeltaMQProcess, name: str) -> bool:
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as connection:
        try:
            connection.channel().queue_declare(name, passive=True)
        except pika.exceptions.ChannelClosedByBroker:
            return False
    return True


def deleted(broker: DeltaMQProcess, name: str) -> bool:
    """Whether queue ``name`` is gone, or goes within 20 s (a durable one once the store has it)."""
    return bool(wait_until(lambda: not queue_exists(broker, name), timeout=20, interval=0.5,
                           what=f"queue {name} deleted"))


@needs_rhea
def test_rhea_selector(broker: DeltaMQProcess) -> None:
    r = _ok(run_rhea(broker.amqp_port, "selector", durable_queue(broker, "rhea"), "--count", str(COUNT)))
    assert (r["selected"], r["selected_colors"]) == (COUNT // 2, ["red"])
    assert (r["rest"], r["rest_colors"]) == (COUNT // 2, ["blue"])


@needs_rhea
def test_rhea_bad_selector_is_refused_with_invalid_field(broker: DeltaMQProcess) -> None:
    r = _ok(run_rhea(broker.amqp_port, "bad-selector", durable_queue(broker, "rhea")))
    assert r["refused"] is True and r["condition"] == "amqp:invalid-field"
    assert "color = = 'red'" in r["description"]
    assert r["remote_source"] is None             # the attach was answered with a null source first


@needs_rhea
def test_rhea_browse(broker: DeltaMQProcess) -> None:
    r = _ok(run_rhea(broker.amqp_port, "browse", durable_queue(broker, "rhea"), "--count", str(COUNT)))
    assert (r["browsed"], r["consumed_after_browse"]) == (COUNT, COUNT)


@needs_rhea
def test_rhea_dynamic_reply_to(broker: DeltaMQProcess) -> None:
    r = _ok(run_rhea(broker.amqp_port, "reply-to", durable_queue(broker, "rhea")))
    assert r["temporary_address"].startswith("TempQueue") and r["request_reply_to"] == r["temporary_address"]
    assert r["reply"] == "pong" and r["correlated"] is True
    assert deleted(broker, r["temporary_address"])       # gone with its link


@needs_rhea
def test_rhea_durable_subscription_survives_detach_and_is_deleted_on_close(broker: DeltaMQProcess) -> None:
    subscription, container = _unique("sub"), _unique("rhea-container")
    out = run_rhea(broker.amqp_port, "durable-subscription", "amq.topic", "--count", str(COUNT),
                   "--subscription", subscription, "--container-id", container)
    r = _ok(out)
    assert out.events("subscribed") and r["accepted"] == COUNT
    assert r["received_after_reattach"] == COUNT and r["in_order"] is True
    assert deleted(broker, f"qpidsub_/{container}_/{subscription}_/durable")


@needs_rhea
def test_rhea_priority_receiver_is_served_first(broker: DeltaMQProcess) -> None:
    r = _ok(run_rhea(broker.amqp_port, "priority", durable_queue(broker, "rhea"), "--count", str(COUNT)))
    assert r["order"] == ["high"] * (COUNT // 2) + ["low"] * (COUNT - COUNT // 2)


@needs_jms
def test_qpid_jms_selector(broker: DeltaMQProcess, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.amqp_port, "selector", durable_queue(broker, "jms"), "--count", str(COUNT)))
    assert (r["selected"], r["selected_colors"]) == (r["expected_red"], ["red"])
    assert (r["rest"], r["rest_colors"]) == (COUNT - r["expected_red"], ["blue"])


@needs_jms
def test_qpid_jms_queue_browser(broker: DeltaMQProcess, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.amqp_port, "browse", durable_queue(broker, "jms"), "--count", str(COUNT)))
    assert (r["browsed"], r["consumed_after_browse"]) == (COUNT, COUNT)


@needs_jms
def test_qpid_jms_temporary_reply_queue(broker: DeltaMQProcess, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.amqp_port, "reply-to", durable_queue(broker, "jms")))
    assert r["temporary_queue"].startswith("TempQueue") and r["reply"] == "pong"
    assert r["correlated"] is True and r["temporary_deleted"] is True
    assert deleted(broker, r["temporary_queue"])


@needs_jms
@pytest.mark.parametrize("scenario", ["durable-subscription", "shared-durable-subscription"])
def test_qpid_jms_durable_subscription_and_unsubscribe(broker: DeltaMQProcess, jms: list[str], scenario: str) -> None:
    client, subscription = _unique("jms-client"), _unique("sub")
    r = _ok(run_jms(jms, broker.amqp_port, scenario, "unused", "--count", str(COUNT),
                    "--client-id", client, "--subscription", subscription))
    assert r["published_while_closed"] == COUNT and r["received_after_reconnect"] == COUNT
    if scenario == "durable-subscription":
        assert r["in_order"] is True
    else:                                                  # two consumers share it: each message once
        assert r["distinct"] == COUNT
    assert r["unsubscribed"] is True
    assert deleted(broker, f"qpidsub_/{client}_/{subscription}_/durable")
