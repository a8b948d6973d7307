"""Link stealing across connections (AMQP 1.0 part 2.6.1), each connection a task of one event loop.

Broker-J's design feared a deadlock: connection A steals link "bar" from B
while B steals "foo" from A, each IO thread waiting for the other's detach.
Here each simulated connection handles what the registry tells its
endpoints in its own task, as an engine would (a steal request is queued to
the connection, which sends its detach and releases the link on its next
turn); nobody waits for anybody, so both steals complete.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from broker.errors import BrokerError
from broker.messaging.link_registry import Attachment, Link, LinkKey, LinkRegistry
from broker.messaging.link_terminus import ExpiryPolicy
from broker.messaging.namespace import Namespace
from broker.messaging.termini import LinkRole

from .link_support import terminus

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Connection:
    """One connection's engine: a task that handles its endpoints' events in turn."""

    def __init__(self, name: str, registry: LinkRegistry, wire: list[str]) -> None:
        self.name = name
        self.registry = registry
        self.wire = wire                  # what every connection sent, in order
        send, receive = anyio.create_memory_object_stream[tuple[str, Link, "ConnectionEndpoint"]](100)
        self.send: MemoryObjectSendStream[tuple[str, Link, ConnectionEndpoint]] = send
        self.receive: MemoryObjectReceiveStream[tuple[str, Link, ConnectionEndpoint]] = receive
        self.attached: dict[str, Attachment] = {}

    def attach(self, link_name: str) -> ConnectionEndpoint:
        endpoint = ConnectionEndpoint(self, link_name)
        self.registry.attach(endpoint, LinkKey("client", link_name, LinkRole.SENDING),
                             terminus(ExpiryPolicy.LINK_DETACH, timeout=0))
        return endpoint

    async def run(self) -> None:
        async for event, link, endpoint in self.receive:
            await anyio.sleep(0)          # other connections get their turns in between
            if event == "stolen":
                self.wire.append(f"{self.name}: detach {link.key.link_name} amqp:link:stolen")
                self.registry.detach(link, endpoint, closed=False)


class ConnectionEndpoint:
    def __init__(self, connection: Connection, link_name: str) -> None:
        self.owner = connection
        self.link_name = link_name
        self.session = (connection.name, 1)
        self.connection = connection.name
        self.connection_name = connection.name

    def link_attached(self, attachment: Attachment) -> None:
        self.owner.wire.append(f"{self.owner.name}: attach {self.link_name}"
                               f"{' (stolen)' if attachment.stolen else ''}")
        self.owner.attached[self.link_name] = attachment

    def link_stolen(self, link: Link) -> None:
        # an engine must not act inside another connection's call: it queues the work
        self.owner.send.send_nowait(("stolen", link, self))

    def attach_refused(self, error: BrokerError) -> None:
        raise AssertionError(f"refused: {error}")


async def test_two_connections_stealing_from_each_other_both_complete() -> None:
    registry = Namespace("v").links
    wire: list[str] = []
    a, b = Connection("A", registry, wire), Connection("B", registry, wire)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(a.run)
        tasks.start_soon(b.run)
        a.attach("foo")
        b.attach("bar")
        # at the same moment: each steals the other's link
        a.attach("bar")
        b.attach("foo")
        assert "bar" not in a.attached and "foo" not in b.attached   # not before the release
        with anyio.fail_after(5):
            while "bar" not in a.attached or "foo" not in b.attached:
                await anyio.sleep(0.001)
        tasks.cancel_scope.cancel()
    assert wire.index("B: detach bar amqp:link:stolen") < wire.index("A: attach bar (stolen)")
    assert wire.index("A: detach foo amqp:link:stolen") < wire.index("B: attach foo (stolen)")
    foo = registry.get(LinkKey("client", "foo", LinkRole.SENDING))
    bar = registry.get(LinkKey("client", "bar", LinkRole.SENDING))
    # handed over, never expired (link-detach, timeout 0), each now on the thief's connection
    assert foo is not None and bar is not None
    assert foo.connection == "B" and bar.connection == "A"


async def test_a_link_stolen_back_and_forth_ends_with_the_last_attach() -> None:
    registry = Namespace("v").links
    wire: list[str] = []
    connections = [Connection(name, registry, wire) for name in "ABC"]
    async with anyio.create_task_group() as tasks:
        for connection in connections:
            tasks.start_soon(connection.run)
        for connection in connections * 2:
            connection.attach("shared")
        with anyio.fail_after(5):
            while True:
                link = registry.get(LinkKey("client", "shared", LinkRole.SENDING))
                if link is not None and link.state == "attached" and not link.pending:
                    break
                await anyio.sleep(0.001)
        tasks.cancel_scope.cancel()
    assert link.connection == "C"
    attaches = [line for line in wire if "attach shared" in line and "detach" not in line]
    assert attaches[0] == "A: attach shared" and len(attaches) == 6
    # every attach after the first took the link from the one before it
    assert all(line.endswith("(stolen)") for line in attaches[1:])
