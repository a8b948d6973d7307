"""AMQP 1.0 local transactions with an unmodified python-qpid-proton against `deltamq serve`.

proton's reactor declares transactions on a coordinator link
(``Container.declare_transaction``), sends and accepts under them, and
commits or aborts (``proton.handlers.TransactionHandler``).  Queues are
declared over 0-9-1 (pika) and checked over 0-9-1 too.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .conftest import DeltaMQProcess

proton = pytest.importorskip("proton")
from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler, TransactionHandler  # noqa: E402
from proton.reactor import AtMostOnce, Container  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("AMQP 1.0 is DeltaMQ's here (an external 0-9-1 broker may not speak it)", allow_module_level=True)

#: one step: ("send" | "receive", how many, "commit" | "abort")
Step = tuple[str, int, str]


class TransactedClient(MessagingHandler, TransactionHandler):  # type: ignore[misc]
    """Runs its steps in order, each in a transaction of its own, on one connection.

    ``outcomes`` gets "committed", "aborted" or "commit failed" per step;
    ``received`` the bodies received (in every step, rolled back or not).
    Sent bodies are ``"<step>-<i>"``.
    """

    def __init__(self, url: str, address: str, steps: list[Step], *, send_to: str | None = None,
                 sender_options: Any = None) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.address, self.steps = url, address, list(steps)
        self.send_to, self.sender_options = send_to or address, sender_options
        self.outcomes: list[str] = []
        self.conditions: list[str] = []
        self.received: list[str] = []
        self.index = -1
        self.txn: Any = None
        self.taken = 0

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(self.conn, self.send_to, options=self.sender_options)
        self.receiver = event.container.create_receiver(self.conn, self.address)
        self._next()

    def _next(self) -> None:
        self.index += 1
        if self.index == len(self.steps):
            self.conn.close()
            return
        self.taken = 0
        self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        self.txn = event.transaction
        kind, count, _outcome = self.steps[self.index]
        if kind == "send":
            for i in range(count):
                # a data section (inferred): 0-9-1 reads the bytes as its body
                self.txn.send(self.sender, Message(body=f"{self.index}-{i}".encode(), inferred=True, durable=True))
            self._discharge()
        else:
            self.receiver.flow(count)

    def on_message(self, event: Any) -> None:
        self.received.append(bytes(event.message.body).decode())
        self.txn.accept(event.delivery)
        self.taken += 1
        if self.taken == self.steps[self.index][1]:
            self._discharge()

    def _discharge(self) -> None:
        if self.steps[self.index][2] == "commit":
            self.txn.commit()
        else:
            self.txn.abort()

    def on_transaction_committed(self, event: Any) -> None:
        self.outcomes.append("committed")
        self._next()

    def on_transaction_aborted(self, event: Any) -> None:
        self.outcomes.append("aborted")
        self._next()

    def on_transaction_commit_failed(self, event: Any) -> None:
        self.outcomes.append("commit failed")
        self.conditions.append(event.delivery.remote.condition.name)
        self._next()

    def on_transaction_declare_failed(self, event: Any) -> None:
        self.outcomes.append("declare failed")
        self.conn.close()


def run(port: int, address: str, steps: list[Step], **options: Any) -> TransactedClient:
    client = TransactedClient(f"amqp://guest:guest@127.0.0.1:{port}", address, steps, **options)
    Container(client).run()
    return client


def browse(port: int, queue: str) -> list[bytes]:
    """The bodies in ``queue`` (taken unacknowledged, back in the queue once the channel closes)."""
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as connection:
        ch = connection.channel()
        bodies = []
        while True:
            method, _props, body = ch.basic_get(queue)
            if method is None:
                return bodies
            bodies.append(body)


@pytest.fixture
def queue(ch: Any) -> Iterator[str]:
    name = f"amqp10-txn-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(name, durable=True)
    yield name
    ch.queue_delete(name)


def test_proton_sends_and_receives_in_committed_and_aborted_transactions(broker: Any, queue: str) -> None:
    client = run(broker.port, queue, [("send", 3, "abort"), ("send", 3, "commit"),
                                      ("receive", 3, "abort"), ("receive", 3, "commit")])
    assert client.outcomes == ["committed" if o == "commit" else "aborted"
                               for o in ("abort", "commit", "abort", "commit")]
    # the aborted send never arrived; the aborted receive gave the messages back, in order
    assert client.received == ["1-0", "1-1", "1-2"] * 2
    assert browse(broker.port, queue) == []


def test_an_aborted_receive_then_a_plain_consumer_gets_the_messages(broker: Any, queue: str) -> None:
    client = run(broker.port, queue, [("send", 2, "commit"), ("receive", 2, "abort")])
    assert client.outcomes == ["committed", "aborted"]
    assert browse(broker.port, queue) == [b"0-0", b"0-1"]


def test_a_commit_is_refused_when_a_settled_send_in_it_was_rejected(broker: Any, queue: str) -> None:
    # sent settled (at most once), an unroutable message's rejection cannot reach the sender:
    # the transaction can only roll back, and the commit says so
    client = run(broker.port, queue, [("send", 2, "commit"), ("send", 1, "commit")],
                 send_to="/exchanges/amq.direct/nobody-binds-this", sender_options=AtMostOnce())
    assert client.outcomes == ["commit failed", "commit failed"]
    assert client.conditions == ["amqp:transaction:rollback"] * 2


def test_committed_transactions_survive_sigkill_and_rolled_back_ones_never_appear() -> None:
    with DeltaMQProcess() as proc:
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port)) as connection:
            connection.channel().queue_declare("ledger", durable=True)
        client = run(proc.amqp_port, "ledger", [("send", 4, "commit"), ("send", 3, "abort"),
                                                ("receive", 1, "commit"), ("receive", 1, "abort")])
        assert client.outcomes == ["committed", "aborted", "committed", "aborted"]
        assert client.received == ["0-0", "0-1"]
        assert proc.proc is not None
        os.killpg(proc.proc.pid, signal.SIGKILL)          # no shutdown code runs
        proc.proc.wait(timeout=30)
        proc.start()
        # 0-0 was taken in a committed transaction; 0-1's receive was rolled back; 1-* never were
        assert browse(proc.amqp_port, "ledger") == [b"0-1", b"0-2", b"0-3"]
