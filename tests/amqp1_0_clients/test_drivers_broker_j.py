"""The AMQP 1.0 client drivers work: rhea, Qpid JMS and python-qpid-proton against Broker-J.

The drivers the 1.0 tests run against DeltaMQ (test_drivers_deltamq.py) are proven
here against Apache Qpid Broker-J 9.2.0, the broker whose behaviour DeltaMQ follows,
in every scenario they have (bench/broker_j.py starts a private one on a free loopback
port).  `make test` fetches Broker-J first (tools/ensure-amqp1-clients; by hand:
``python -m bench.broker_j --fetch``); where it could not be fetched these tests skip.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from bench import broker_j
from bench.broker_j import BrokerJ
from bench.procutil import free_port

from .drivers import Outcome, compile_jms, ensure_fetched, run_jms, run_rhea

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not broker_j.fetched(),
                       reason="Broker-J is not fetched (python -m bench.broker_j --fetch)"),
]

COUNT = 10


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerJ]:
    ensure_fetched()
    b = BrokerJ(port=free_port(None), log=lambda msg: None)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def jms(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    ensure_fetched()
    return compile_jms(tmp_path_factory.mktemp("jms-driver"))


def _name(kind: str) -> str:
    return f"drivers.{kind}.{uuid.uuid4().hex[:8]}"


def _ok(out: Outcome) -> dict:
    assert out.ok, f"exit {out.returncode}: {out.result}\n{out.stderr[-3000:]}"
    return out.result


# -- rhea --------------------------------------------------------------------------------

def test_rhea_send_receive_durable(broker: BrokerJ) -> None:
    r = _ok(run_rhea(broker.port, "send-receive", _name("rhea"), "--count", str(COUNT), "--durable"))
    assert (r["sent"], r["accepted"], r["received"]) == (COUNT, COUNT, COUNT)
    assert r["in_order"] is True and r["durable"] is True


def test_rhea_selector(broker: BrokerJ) -> None:
    r = _ok(run_rhea(broker.port, "selector", _name("rhea"), "--count", str(COUNT)))
    assert (r["selected"], r["selected_colors"]) == (COUNT // 2, ["red"])
    assert (r["rest"], r["rest_colors"]) == (COUNT // 2, ["blue"])


def test_rhea_browse(broker: BrokerJ) -> None:
    r = _ok(run_rhea(broker.port, "browse", _name("rhea"), "--count", str(COUNT)))
    assert (r["browsed"], r["consumed_after_browse"]) == (COUNT, COUNT)


def test_rhea_dynamic_reply_to(broker: BrokerJ) -> None:
    r = _ok(run_rhea(broker.port, "reply-to", _name("rhea")))
    assert r["temporary_address"] and r["request_reply_to"] == r["temporary_address"]
    assert r["reply"] == "pong" and r["correlated"] is True


def test_rhea_durable_subscription_survives_detach(broker: BrokerJ) -> None:
    out = run_rhea(broker.port, "durable-subscription", "amq.topic", "--count", str(COUNT),
                   "--subscription", _name("sub"), "--container-id", _name("rhea-container"))
    r = _ok(out)
    assert out.events("subscribed") and r["accepted"] == COUNT
    assert r["received_after_reattach"] == COUNT and r["in_order"] is True



# -- Qpid JMS ----------------------------------------------------------------------------

def test_jms_send_receive_persistent(broker: BrokerJ, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.port, "send-receive", _name("jms"), "--count", str(COUNT), "--durable"))
    assert (r["sent"], r["received"]) == (COUNT, COUNT)
    assert r["in_order"] is True and r["persistent"] is True


def test_jms_transacted_session(broker: BrokerJ, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.port, "transacted", _name("jms"), "--count", str(COUNT)))
    assert r["after_rolled_back_send"] == 0
    assert r["received_then_rolled_back"] == COUNT
    assert r["redelivered"] == COUNT and r["all_flagged_redelivered"] is True
    assert r["left_after_commit"] == 0


def test_jms_transacted_forward(broker: BrokerJ, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.port, "transacted-forward", _name("jms"), "--forward-to", _name("jms"),
                    "--count", str(COUNT)))
    assert (r["forwarded_then_rolled_back"], r["target_after_rollback"]) == (COUNT, 0)
    assert (r["forwarded_then_committed"], r["target_after_commit"], r["in_order"]) == (COUNT, COUNT, True)
    assert r["source_after_commit"] == 0


def test_jms_selector(broker: BrokerJ, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.port, "selector", _name("jms"), "--count", str(COUNT)))
    assert (r["selected"], r["selected_colors"]) == (r["expected_red"], ["red"])
    assert (r["rest"], r["rest_colors"]) == (COUNT - r["expected_red"], ["blue"])


def test_jms_queue_browser(broker: BrokerJ, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.port, "browse", _name("jms"), "--count", str(COUNT)))
    assert (r["browsed"], r["consumed_after_browse"]) == (COUNT, COUNT)


def test_jms_temporary_reply_queue(broker: BrokerJ, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.port, "reply-to", _name("jms")))
    assert r["temporary_queue"] and r["reply"] == "pong"
    assert r["correlated"] is True and r["temporary_deleted"] is True


def test_jms_durable_topic_subscription(broker: BrokerJ, jms: list[str]) -> None:
    r = _ok(run_jms(jms, broker.port, "durable-subscription", "unused", "--count", str(COUNT),
                    "--client-id", _name("jms-client"), "--subscription", _name("sub")))
    assert r["published_while_closed"] == COUNT
    assert r["received_after_reconnect"] == COUNT and r["in_order"] is True
    assert r["unsubscribed"] is True



# -- python-qpid-proton ------------------------------------------------------------------

def test_proton_blocking_send_receive(broker: BrokerJ) -> None:
    from proton import Message
    from proton.utils import BlockingConnection

    address = _name("proton")
    conn = BlockingConnection(f"amqp://127.0.0.1:{broker.port}", user="guest", password="guest",
                              allowed_mechs="PLAIN", timeout=30)
    try:
        sender = conn.create_sender(address)
        for i in range(COUNT):
            sender.send(Message(body=f"message {i}", durable=True))
        receiver = conn.create_receiver(address, credit=COUNT)
        bodies = []
        for _ in range(COUNT):
            bodies.append(receiver.receive(timeout=30).body)
            receiver.accept()
    finally:
        conn.close()
    assert bodies == [f"message {i}" for i in range(COUNT)]
