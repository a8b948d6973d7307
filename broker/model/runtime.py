"""Runtime children: Connection -> Session -> Consumer.

Protocol engines register what comes and goes so management can list and
close it; nothing here is persisted (``durable = False``) and no value is
taken for a ``${...}`` context reference (``resolves_context = False``:
these strings come from clients).

An engine calls, on the event loop::

    connection = vhost.register_connection(remote_address="10.0.0.7:51234",
                                           protocol="AMQP_0_9_1", principal="guest",
                                           port="AMQP", closer=engine_close)
    session = connection.register_session(channel=1)
    consumer = session.register_consumer("ctag-1", queue="orders")
    ...
    consumer.unregister(); session.unregister(); connection.unregister()

``unregister()`` is the engine saying "this is gone"; ``delete()`` is
management asking for it to go: for a connection it calls the ``closer``
the engine gave, which closes the connection on the wire (320
CONNECTION_FORCED), then removes it from the model.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from broker.model.attributes import attribute, derived
from broker.model.configured_object import ConfiguredObject, State
from broker.model.port import PortProtocol, Transport

#: reason handed to a connection's closer when management deletes it
CLOSED_BY_MANAGEMENT = "Closed via management"

_connection_numbers = itertools.count(1)


class RuntimeObject(ConfiguredObject):
    """Shared behaviour of objects that exist only while a peer is connected."""

    durable = False
    resolves_context = False

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self.created_at = time.time()

    @derived(float, description="When the peer opened it (seconds since the epoch)")
    def created_time(self) -> float:
        return self.created_at

    def unregister(self) -> None:
        """The engine reports it gone: remove it (and its descendants) from the model."""
        if self.state is not State.DELETED:
            self._delete_tree()


class Connection(RuntimeObject):
    category = "Connection"

    remote_address = attribute(str, default="", mutable=False,
                               description="Peer address, host:port")
    protocol = attribute(PortProtocol, mandatory=True, mutable=False,
                         description="Protocol version spoken on this connection")
    principal = attribute(str, default="", mutable=False,
                          description="Authenticated user name")
    port = attribute(str, default="", mutable=False, description="Name of the port it came in on")
    transport = attribute(Transport, default="TCP", mutable=False, description="TCP, SSL, WS, WSS")
    client_id = attribute(str, default="", mutable=False, description="Client-supplied id")
    client_product = attribute(str, default="", mutable=False,
                               description="Client library (client properties 'product')")
    client_version = attribute(str, default="", mutable=False,
                               description="Client library version")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        #: called with a reason when management deletes this connection
        self.closer: Callable[[str], None] | None = None

    @derived(int, statistic=True, description="Sessions (channels) open on this connection")
    def session_count(self) -> int:
        return len(self._children["Session"])

    @property
    def sessions(self) -> list[Session]:
        return cast("list[Session]", self.children("Session"))

    def register_session(self, channel: int, *, name: str | None = None,
                         transactional: bool = False) -> Session:
        session = Session(self, {"name": name or str(channel), "channelId": channel,
                                 "transactional": transactional})
        session.create()
        return session

    def unregister(self) -> None:
        self.closer = None
        super().unregister()

    def on_delete(self) -> None:
        closer, self.closer = self.closer, None
        if closer is not None:
            closer(CLOSED_BY_MANAGEMENT)


class Session(RuntimeObject):
    category = "Session"

    channel_id = attribute(int, mandatory=True, mutable=False, description="Channel number")
    transactional = attribute(bool, default=False,
                              description="True once the session is transactional (tx.select)")

    @derived(int, statistic=True, description="Consumers on this session")
    def consumer_count(self) -> int:
        return len(self._children["Consumer"])

    @property
    def consumers(self) -> list[Consumer]:
        return cast("list[Consumer]", self.children("Consumer"))

    def register_consumer(self, tag: str, *, queue: str, exclusive: bool = False,
                          no_ack: bool = False, arguments: Mapping[str, Any] | None = None,
                          ) -> Consumer:
        consumer = Consumer(self, {"name": tag, "queue": queue, "exclusive": exclusive,
                                   "noAck": no_ack, "arguments": dict(arguments or {})})
        consumer.create()
        return consumer


class Consumer(RuntimeObject):
    category = "Consumer"

    queue = attribute(str, mandatory=True, mutable=False, description="Queue consumed from")
    exclusive = attribute(bool, default=False, mutable=False,
                          description="Exclusive consumer (no other consumer on the queue)")
    no_ack = attribute(bool, default=False, mutable=False,
                       description="Messages are settled when sent (no acknowledgement)")
    arguments = attribute(dict, default={}, mutable=False, description="Consumer arguments")


def next_connection_name(remote_address: str) -> str:
    """Broker-J's style of connection name: ``[7] 10.0.0.7:51234``."""
    return f"[{next(_connection_numbers)}] {remote_address}"
