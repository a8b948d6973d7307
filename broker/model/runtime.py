"""Runtime objects: Connection -> Session, and Consumer, where Broker-J 7 puts them.

Protocol engines register what comes and goes so management can list and
close it; nothing here is persisted (``durable = False``) and no value is
taken for a ``${...}`` context reference (``resolves_context = False``:
these strings come from clients).

Where each lives in the tree (:data:`broker.model.registry.TREE`):

- a **Connection** is a child of the Port it came in on
  (``/api/latest/connection/<port>/<connection>``); the virtual host it
  opened keeps it as an *association* -- :class:`VirtualHostConnections`,
  which counts it (``connectionCount``, ``maxConnections``), lists it
  (``getConnections``) and closes it when the virtual host is deleted -- and
  the connection names it (``virtualHost``);
- a **Session** is a child of its connection
  (``/api/latest/session/<port>/<connection>/<channel>``);
- a **Consumer** is a child of the Queue it consumes from
  (``/api/latest/consumer/<node>/<vhost>/<queue>/<tag>``); its session keeps
  it as an association and the consumer names its session and connection.

An engine calls, on the event loop::

    connection = vhost.register_connection(port, remote_address="10.0.0.7:51234",
                                           protocol="AMQP_0_9_1", principal="guest",
                                           closer=engine_close)
    session = connection.register_session(channel=1)
    consumer = session.register_consumer("ctag-1", queue="orders")
    ...
    consumer.unregister(); session.unregister(); connection.unregister()

``unregister()`` is the engine saying "this is gone"; ``delete()`` is
management asking for it to go: for a connection it calls the ``closer``
the engine gave, which closes the connection on the wire (320
CONNECTION_FORCED), then removes it from the model.  A session that goes
takes its consumers with it; a queue that goes takes its consumers with it.

Connection names are Broker-J's, ``[<n>] <remote address>`` with ``n``
counting every connection the broker process accepted, so a name is unique
per port (indeed per broker) and never reused.  A consumer is named by its
tag; should another session already consume from the queue under the same
tag (tags are unique per channel only), the newcomer is named
``<tag>|<connection>|<channel>``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from broker.errors import ConfigurationError
from broker.messaging.selectors import SELECTOR_ARGUMENT
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

    @derived(int, description="When the peer opened it (milliseconds since the epoch, as"
                              " Broker-J gives every time)")
    def created_time(self) -> int:
        return int(self.created_at * 1000)

    def unregister(self) -> None:
        """The engine reports it gone: remove it (and its descendants) from the model."""
        if self.state is not State.DELETED:
            self._delete_tree()


class EngineObject(RuntimeObject):
    """A runtime object only a protocol engine brings about (through ``register_*``).

    Management lists and deletes them, but cannot create one: a connection
    is made by a client connecting.
    """

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self._registered = False

    def validate_on_create(self) -> None:
        if not self._registered:
            raise ConfigurationError(f"a {self.category} is made by a client, not through"
                                     " management")


class VirtualHostConnections:
    """The connections that opened one virtual host (Broker-J's ``getConnections``).

    Not the virtual host's children -- each is a child of its port -- but
    counted (``connectionCount``) and limited (``maxConnections``) by it,
    and closed when it is deleted.
    """

    __slots__ = ("vhost", "_open")

    def __init__(self, vhost: ConfiguredObject) -> None:
        self.vhost = vhost
        self._open: dict[str, Connection] = {}

    def add(self, connection: Connection) -> None:
        self._open[connection.id] = connection

    def discard(self, connection: Connection) -> None:
        self._open.pop(connection.id, None)

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._open.values()))

    def close_all(self) -> None:
        """Close every one as management's DELETE does (the client is told 320)."""
        for connection in self:
            connection.delete()


class Connection(EngineObject):
    category = "Connection"

    remote_address = attribute(str, default="", mutable=False,
                               description="Peer address, host:port")
    protocol = attribute(PortProtocol, mandatory=True, mutable=False,
                         description="Protocol version spoken on this connection")
    principal = attribute(str, default="", mutable=False,
                          description="Authenticated user name")
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
        #: the virtual host's association this connection is counted in
        self.association: VirtualHostConnections | None = None
        #: why the engine's publishing is blocked now ("": it is not; None: not told)
        self.blocked_reason_source: Callable[[], str] | None = None

    @property
    def vhost(self) -> ConfiguredObject | None:
        """The VirtualHost this connection opened (None once it has gone)."""
        return self.association.vhost if self.association is not None else None

    @derived(str, description="Name of the port it came in on (its parent)")
    def port(self) -> str:
        parent = self.parent
        return str(parent.name) if parent is not None else ""

    @derived(str, description="Name of the virtual host it opened")
    def virtual_host(self) -> str:
        association = self.association
        return str(association.vhost.name) if association is not None else ""

    @derived(str, description="Why its publishing is blocked now: a resource alarm ('low on"
                              " memory'), overfull queues it fed ('queue 'q' overfull'); empty"
                              " when it is not")
    def blocked_reason(self) -> str:
        source = self.blocked_reason_source
        return source() if source is not None else ""

    @derived(bool, statistic=True, description="True while its publishing is blocked")
    def blocked(self) -> bool:
        return bool(self.blocked_reason)

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
        session._registered = True
        session.create()
        return session

    def unregister(self) -> None:
        self.closer = None
        super().unregister()

    def on_delete(self) -> None:
        association, self.association = self.association, None
        if association is not None:
            association.discard(self)
        closer, self.closer = self.closer, None
        if closer is not None:
            closer(CLOSED_BY_MANAGEMENT)


class Session(EngineObject):
    category = "Session"

    channel_id = attribute(int, mandatory=True, mutable=False, description="Channel number")
    transactional = attribute(bool, default=False,
                              description="True once the session is transactional (tx.select)")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        #: its consumers (each a child of its queue), by id
        self._consumers: dict[str, Consumer] = {}

    @property
    def connection(self) -> Connection:
        return cast(Connection, self.parent)

    @derived(int, statistic=True, description="Consumers on this session")
    def consumer_count(self) -> int:
        return len(self._consumers)

    @property
    def consumers(self) -> list[Consumer]:
        return list(self._consumers.values())

    def register_consumer(self, tag: str, *, queue: str, exclusive: bool = False,
                          no_ack: bool = False, arguments: Mapping[str, Any] | None = None,
                          ) -> Consumer | None:
        """Record a consumer on ``queue`` of the connection's virtual host.

        None when the model shows no such queue (a virtual host without
        queue views): the engine then consumes unseen by management.
        """
        vhost = self.connection.vhost
        parent = vhost.child("Queue", queue) if vhost is not None else None
        if parent is None:
            return None
        name = tag
        if parent.child("Consumer", tag) is not None:
            name = f"{tag}|{self.connection.name}|{self.name}"
        consumer = Consumer(parent, {"name": name, "exclusive": exclusive, "noAck": no_ack,
                                     "arguments": dict(arguments or {})})
        consumer.session = self
        consumer._registered = True
        consumer.create()
        self._consumers[consumer.id] = consumer
        return consumer

    def on_delete(self) -> None:
        for consumer in list(self._consumers.values()):
            consumer.unregister()
        self._consumers.clear()


class Consumer(EngineObject):
    category = "Consumer"

    exclusive = attribute(bool, default=False, mutable=False,
                          description="Exclusive consumer (no other consumer on the queue)")
    no_ack = attribute(bool, default=False, mutable=False,
                       description="Messages are settled when sent (no acknowledgement)")
    arguments = attribute(dict, default={}, mutable=False, description="Consumer arguments")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        #: the session it consumes on (None once it has gone)
        self.session: Session | None = None

    @derived(str, description="Its message selector (Broker-J's x-filter-jms-selector), empty when none")
    def selector(self) -> str:
        value = (self.arguments or {}).get(SELECTOR_ARGUMENT)
        return value if isinstance(value, str) else ""

    @derived(str, description="Name of the queue it consumes from (its parent)")
    def queue(self) -> str:
        parent = self.parent
        return str(parent.name) if parent is not None else ""

    @derived(str, name="session", description="Name of its session (the channel number)")
    def session_name(self) -> str:
        session = self.session
        return str(session.name) if session is not None else ""

    @derived(str, description="Name of its session's connection")
    def connection(self) -> str:
        session = self.session
        return str(session.connection.name) if session is not None else ""

    @derived(str, description="Name of the port its connection came in on")
    def port(self) -> str:
        session = self.session
        return session.connection.port if session is not None else ""

    def on_delete(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session._consumers.pop(self.id, None)


def next_connection_name(remote_address: str) -> str:
    """Broker-J's style of connection name: ``[7] 10.0.0.7:51234``."""
    return f"[{next(_connection_numbers)}] {remote_address}"


def virtual_host_of(obj: ConfiguredObject) -> ConfiguredObject | None:
    """The virtual host ``obj`` belongs to: its ancestor, or, for a connection and its
    sessions (children of a port), the virtual host the connection opened."""
    found = obj.ancestor("VirtualHost")
    if found is not None:
        return found
    connection = obj.ancestor("Connection")
    return connection.vhost if isinstance(connection, Connection) else None
