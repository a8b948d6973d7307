"""Exactly-once and link resumption with an unmodified python-qpid-proton against `deltamq serve`.

A sender in rcv-settle-mode second sees the broker's outcome unsettled and settles it itself; a
durable receiver (terminus durability unsettled-state, expiry never) whose connection drops keeps
its unsettled deliveries -- nobody else gets them -- and gets them back when it attaches its link
again with the same container id and name: after a reconnect, and after the broker was stopped
(SIGTERM) or killed (SIGKILL) and started again, the unsettled maps coming back from the
``link_termini`` table.  Management's ``getLinks`` shows each link's unsettled count.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_until

from .conftest import DeltaMQProcess

proton = pytest.importorskip("proton")
httpx = pytest.importorskip("httpx")
from proton import Delivery, Link, Message, Terminus  # noqa: E402
from proton.reactor import Container, DurableSubscription, SenderOption  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("AMQP 1.0 is DeltaMQ's here (an external 0-9-1 broker may not speak it)", allow_module_level=True)


class ExactlyOnce(SenderOption):
    """A sender asking for rcv-settle-mode second, its target durable with its unsettled state."""

    def apply(self, sender: Any) -> None:
        sender.snd_settle_mode = Link.SND_UNSETTLED
        sender.rcv_settle_mode = Link.RCV_SECOND
        sender.target.durability = Terminus.DELIVERIES
        sender.target.expiry_policy = Terminus.EXPIRE_NEVER


@pytest.fixture
def proc() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as process:
        yield process


def _connect(proc: DeltaMQProcess, container_id: str) -> Any:
    container = Container()
    container.container_id = container_id
    return BlockingConnection(f"amqp://guest:guest@127.0.0.1:{proc.amqp_port}", timeout=20, container=container)


def _queue(proc: DeltaMQProcess) -> str:
    import pika

    name = f"resume-{uuid.uuid4().hex[:8]}"
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port)) as conn:
        conn.channel().queue_declare(name, durable=True)
    return name


def _link(proc: DeltaMQProcess, container_id: str, name: str) -> dict[str, Any] | None:
    with httpx.Client(base_url=f"http://127.0.0.1:{proc.http_port}/api/latest/", auth=("guest", "guest"),
                      timeout=20) as api:
        links = api.get("virtualhost/default/default/getLinks").json()
    found = [item for item in links if item["remoteContainerId"] == container_id and item["linkName"] == name]
    return found[0] if found else None


def _stored_unsettled(proc: DeltaMQProcess, container_id: str, name: str) -> int | None:
    """How many unsettled deliveries the ``link_termini`` table holds for the link (None: no row)."""
    from lakehouse.termini_store import DeltaTerminusStore

    [table] = list(Path(proc.dir, "data").rglob("link_termini"))
    store = DeltaTerminusStore(table.parent)
    try:
        store.open()
        rows = [r for r in store.recover() if (r.remote_container_id, r.link_name) == (container_id, name)]
    finally:
        store.close()
    return len(rows[0].terminus.get("unsettled") or []) if rows else None


def _basic_get(proc: DeltaMQProcess, queue: str) -> Any:
    import pika

    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port)) as conn:
        method, _props, _body = conn.channel().basic_get(queue, auto_ack=False)
        return method


def _restart(proc: DeltaMQProcess, how: int) -> None:
    assert proc.proc is not None
    os.killpg(proc.proc.pid, how)
    proc.proc.wait(timeout=60)
    proc.start()                                   # returns once AMQP is accepted; then REST

    def answering() -> bool:
        try:
            _link(proc, "", "")
        except httpx.TransportError:
            return False
        return True
    wait_until(answering, 60, what="the management API after the restart")


def test_a_sender_in_mode_second_settles_after_the_broker(proc: DeltaMQProcess) -> None:
    queue, container_id = _queue(proc), f"eo-{uuid.uuid4().hex[:8]}"
    connection = _connect(proc, container_id)
    try:
        sender = connection.create_sender(queue, name="exactly-once", options=ExactlyOnce())
        assert sender.link.remote_rcv_settle_mode == Link.RCV_SECOND
        delivery = sender.link.send(Message(body="once", durable=True))
        connection.wait(lambda: delivery.remote_state == Delivery.ACCEPTED, timeout=20, msg="the outcome")
        assert not delivery.settled                     # the broker waits for us to settle first
        link = _link(proc, container_id, "exactly-once")
        assert link is not None and (link["unsettledCount"], link["durable"]) == (1, "unsettled-state")
        wait_until(lambda: _stored_unsettled(proc, container_id, "exactly-once") == 1, 30,
                   what="the unsettled map in link_termini")
        delivery.settle()
        connection.create_sender(queue).close()         # a round trip: our disposition went first
        assert _link(proc, container_id, "exactly-once")["unsettledCount"] == 0  # type: ignore[index]
    finally:
        connection.close()
    assert _basic_get(proc, queue) is not None           # routed once


def test_a_durable_receiver_gets_its_unsettled_deliveries_back_after_a_reconnect(proc: DeltaMQProcess) -> None:
    queue, container_id = _queue(proc), f"resume-{uuid.uuid4().hex[:8]}"
    publisher = _connect(proc, f"{container_id}-pub")
    sender = publisher.create_sender(queue)
    for i in range(2):
        sender.send(Message(body=f"m{i}", durable=True))
    publisher.close()
    first = _connect(proc, container_id)
    receiver = first.create_receiver(queue, name="kept", credit=2, options=DurableSubscription())
    assert [receiver.receive(timeout=20).body for _ in range(2)] == ["m0", "m1"]
    first.close()                                         # without settling or detaching
    wait_until(lambda: (_link(proc, container_id, "kept") or {}).get("state") == "suspended", 20,
               what="the link suspended")
    assert _link(proc, container_id, "kept")["unsettledCount"] == 2  # type: ignore[index]
    assert _basic_get(proc, queue) is None               # kept for the link: nobody else gets them
    again = _connect(proc, container_id)
    try:
        receiver = again.create_receiver(queue, name="kept", credit=2, options=DurableSubscription())
        got = [receiver.receive(timeout=20) for _ in range(2)]
        assert [m.body for m in got] == ["m0", "m1"] and all(m.delivery_count >= 1 for m in got)
        receiver.accept()
    finally:
        again.close()
    assert _basic_get(proc, queue) is None


def test_a_connection_stealing_a_durable_receiver_gets_its_unsettled_deliveries(proc: DeltaMQProcess) -> None:
    from proton.utils import LinkDetached

    queue, container_id = _queue(proc), f"steal-{uuid.uuid4().hex[:8]}"
    publisher = _connect(proc, f"{container_id}-pub")
    publisher.create_sender(queue).send(Message(body="m0", durable=True))
    publisher.close()
    victim_connection = _connect(proc, container_id)
    thief_connection = _connect(proc, container_id)
    try:
        victim = victim_connection.create_receiver(queue, name="taken", credit=1, options=DurableSubscription())
        assert victim.receive(timeout=20).body == "m0"            # not settled
        thief = thief_connection.create_receiver(queue, name="taken", credit=1, options=DurableSubscription())
        with pytest.raises(LinkDetached) as raised:
            victim.receive(timeout=10)
        assert "amqp:link:stolen" in str(raised.value)
        message = thief.receive(timeout=20)
        assert message.body == "m0" and message.delivery_count >= 1
        thief.accept()
        thief_connection.create_sender(queue).close()
        assert _link(proc, container_id, "taken")["unsettledCount"] == 0  # type: ignore[index]
    finally:
        thief_connection.close()
        victim_connection.close()
    assert _basic_get(proc, queue) is None


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "kill"])
def test_unsettled_maps_survive_a_broker_restart(proc: DeltaMQProcess, how: int) -> None:
    queue, container_id = _queue(proc), f"restart-{uuid.uuid4().hex[:8]}"
    connection = _connect(proc, container_id)
    sender = connection.create_sender(queue, name="in", options=ExactlyOnce())
    delivery = sender.link.send(Message(body="m0", durable=True))
    connection.wait(lambda: delivery.remote_state == Delivery.ACCEPTED, timeout=20, msg="the outcome")
    receiver = connection.create_receiver(queue, name="out", credit=1, options=DurableSubscription())
    assert receiver.receive(timeout=20).body == "m0"
    for name in ("in", "out"):
        wait_until(lambda: _stored_unsettled(proc, container_id, name) == 1, 30,
                   what=f"link {name}'s unsettled map in link_termini")
    _restart(proc, how)
    for name, role in (("in", "receiving"), ("out", "sending")):
        link = _link(proc, container_id, name)
        assert link is not None and (link["role"], link["state"], link["unsettledCount"], link["stored"]) == (
            role, "suspended", 1, True)
    again = _connect(proc, container_id)
    try:
        # proton sends no unsettled map: it settled everything it knew, so the broker forgets
        # the outcome it kept, and delivers the message it had sent again
        again.create_sender(queue, name="in", options=ExactlyOnce())
        assert _link(proc, container_id, "in")["unsettledCount"] == 0  # type: ignore[index]
        receiver = again.create_receiver(queue, name="out", credit=1, options=DurableSubscription())
        assert receiver.receive(timeout=20).body == "m0"
        receiver.accept()
        again.create_sender(queue).close()
        assert _link(proc, container_id, "out")["unsettledCount"] == 0  # type: ignore[index]
    finally:
        again.close()
    assert _basic_get(proc, queue) is None
