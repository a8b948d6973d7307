"""VirtualHostNode and VirtualHost.

A VirtualHostNode owns a configuration store (its ``type`` picks the store
plugin from entry point group ``deltamq.stores``: ``memory`` here, ``delta``
from the lakehouse) in which its VirtualHost and the virtual host's durable
descendants are kept.  On first open, when that store is empty, the node
stores a virtual host made from ``virtualHostInitialConfiguration``
(Broker-J's blueprint), named after the node unless the blueprint names it,
and recovers it like any stored one.

A VirtualHost owns a :class:`broker.messaging.namespace.Namespace` (its
exchanges, queues and bindings) as the plain Python attribute ``namespace``:
created on open, never persisted as an attribute.  Tests, or a server that
wants another implementation, hand a factory to SystemConfig
(``namespace_factory``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from broker.errors import BrokerError, ConfigurationError, InternalError, NotAllowed, StoreFailed
from broker.model import registry
from broker.model.attributes import attribute, convert_all, derived
from broker.model.config_store import ConfigurationRecord, DurableConfigurationStore
from broker.model.configured_object import ConfiguredObject
from broker.model.messaging_objects import DELETE_ON_NO_OUTBOUND_LINKS
from broker.model.messaging_objects import Exchange as ModelExchange
from broker.model.messaging_objects import NamespaceMirror, NamespaceObject, NamespaceRecords
from broker.model.messaging_objects import Queue as ModelQueue
from broker.model.operations import operation
from broker.model.persistence import StoreBinding, recover
from broker.model.port import PortProtocol, Transport
from broker.model.runtime import Connection, VirtualHostConnections, next_connection_name
from broker.model.system_store import keeps_data

if TYPE_CHECKING:
    from broker.messaging.namespace import Namespace
    from broker.messaging.termini import TerminusStore

NamespaceFactory = Callable[[str], Any]


#: record categories a virtual host node's store holds for the namespace, not the model
NAMESPACE_CATEGORIES = frozenset(NamespaceRecords.CATEGORY.values())


class VirtualHostNode(ConfiguredObject):
    category = "VirtualHostNode"
    manages_children = True

    type = attribute(str, default="memory", mutable=False,
                     description="Store type of the node (deltamq.stores): memory or delta")
    store_path = attribute(str, default="${deltamq.data_dir}/${this:name}", path=True,
                           description="Where a durable store keeps this node's data (set"
                                       " over management: inside the data directory)")
    virtual_host_initial_configuration = attribute(
        dict, default={}, mutable=True, expand=False,
        description="Attributes of the virtual host created when the node's store is"
                    " empty; its name defaults to the node's")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self.store: DurableConfigurationStore | None = None
        self.termini: TerminusStore | None = None
        self._binding: StoreBinding | None = None

    @property
    def virtual_hosts(self) -> list[VirtualHost]:
        return cast("list[VirtualHost]", self.children("VirtualHost"))

    @property
    def virtual_host(self) -> VirtualHost | None:
        hosts = self.virtual_hosts
        return hosts[0] if hosts else None

    def validate(self) -> None:
        store_class = registry.load_plugin(registry.STORE_GROUP, self.type,
                                           what="virtual host node type")
        # the root (SystemConfig) refuses a storePath that is its own store's
        check_node_store = getattr(self.root, "check_node_store", None)
        if check_node_store is not None:
            check_node_store(self, store_class)

    def writes_to_paths(self) -> bool:
        return keeps_data(registry.load_plugin(registry.STORE_GROUP, self.type,
                                               what="virtual host node type"))

    def on_open(self) -> None:
        store_class = registry.load_plugin(registry.STORE_GROUP, self.type,
                                           what="virtual host node type")
        store = cast(DurableConfigurationStore, store_class(path=self.store_path))
        store.open()
        self.store = store
        # AMQP 1.0 link termini are kept apart from configuration (Link Registry design);
        # opened first: the virtual host recovers its link registry from them as it opens
        terminus_store = getattr(store, "terminus_store", None)
        if terminus_store is not None:
            self.termini = terminus_store()
            self.termini.open()
        records = store.recover()
        if not records:
            # The blueprint is stored, then recovered like any stored virtual
            # host: one that fails to open is then ERRORED in the model (and
            # visible to management) instead of taking its node down.
            blueprint = dict(self.virtual_host_initial_configuration or {})
            blueprint.setdefault("name", self.name)
            store.save([ConfigurationRecord(str(uuid.uuid4()), "VirtualHost", None, blueprint)])
            records = store.recover()
        # exchanges, queues and bindings are the virtual host's to restore (into its namespace)
        recover(self, [r for r in records if r.category not in NAMESPACE_CATEGORIES])
        self._binding = StoreBinding(self, store)
        self._binding.attach()

    def on_close(self) -> None:
        if self.termini is not None:
            self.termini.close()
            self.termini = None
        if self._binding is not None:
            self._binding.detach()
            self._binding = None
        if self.store is not None:
            self.store.close()
            self.store = None


class VirtualHost(ConfiguredObject):
    category = "VirtualHost"

    max_connections = attribute(int, default=-1,
                                description="Connections open at once; -1 for no limit")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        #: exchanges, queues and bindings; set on open, never persisted
        self.namespace: Namespace | None = None
        #: the message journal of a node that keeps one (``delta``); set on open
        self.journal: Any = None
        self._mirror: NamespaceMirror | None = None
        #: the connections that opened this virtual host (children of their ports)
        self.open_connections = VirtualHostConnections(self)

    @property
    def node(self) -> VirtualHostNode:
        return cast(VirtualHostNode, self.parent)

    @property
    def connections(self) -> list[Connection]:
        return list(self.open_connections)

    @derived(int, statistic=True, description="Connections open on this virtual host")
    def connection_count(self) -> int:
        return len(self.open_connections)

    @derived(int, statistic=True, description="Queues of this virtual host")
    def queue_count(self) -> int:
        return len(self._children["Queue"])

    @derived(int, statistic=True, description="Exchanges of this virtual host")
    def exchange_count(self) -> int:
        return len(self._children["Exchange"])

    def _live_queues(self) -> Iterable[Any]:
        """The namespace's queues, which the Queue children show: totals over
        thousands of queues read them directly rather than through the views."""
        live = getattr(self.namespace, "queues", None)
        return live.values() if live is not None else ()

    @derived(int, statistic=True, description="Messages ready in all queues")
    def total_depth_of_queues_messages(self) -> int:
        return sum([q.message_count for q in self._live_queues()])

    @derived(int, statistic=True, description="Body bytes ready in all queues")
    def total_depth_of_queues_bytes(self) -> int:
        return sum([q.message_bytes for q in self._live_queues()])

    @derived(int, counter=True, description="Messages published into this virtual host")
    def messages_in(self) -> int:
        return int(getattr(self.namespace, "published_messages", 0))

    @derived(int, counter=True, description="Body bytes published into this virtual host")
    def bytes_in(self) -> int:
        return int(getattr(self.namespace, "published_bytes", 0))

    @derived(int, counter=True, description="Deliveries from the queues of this virtual host")
    def messages_out(self) -> int:
        return sum([q.delivered_messages for q in self._live_queues()])

    @derived(int, counter=True, description="Body bytes delivered from its queues")
    def bytes_out(self) -> int:
        return sum([q.delivered_bytes for q in self._live_queues()])

    def validate(self) -> None:
        if self.max_connections < -1:
            raise ConfigurationError(f"{self.label}: attribute 'maxConnections' must be -1"
                                     " (no limit) or more")

    def on_open(self) -> None:
        terminus_timeout = self._terminus_timeout()      # refused before anything is opened
        factory = cast("NamespaceFactory | None", getattr(self.root, "namespace_factory", None))
        namespace = self.namespace = (factory or messaging_namespace)(self.name)
        if hasattr(namespace, "unknown_arguments"):
            from broker.messaging.arguments import UNKNOWN_ARGUMENTS_VARIABLE, unknown_argument_behaviour

            try:
                namespace.unknown_arguments = unknown_argument_behaviour(self._lookup(UNKNOWN_ARGUMENTS_VARIABLE))
            except ValueError as exc:
                raise ConfigurationError(f"{self.label}: {exc}") from None
        if hasattr(namespace, "flow"):
            from broker.messaging.flow_control import RESUME_LIMIT_VARIABLE, resume_limit
            from broker.messaging.publish_rate import PER_PUBLISHER_VARIABLE, PER_VIRTUAL_HOST_VARIABLE, rate_limit

            try:
                namespace.flow.resume_percent = resume_limit(self._lookup(RESUME_LIMIT_VARIABLE))
                namespace.flow.rates.set_limits(
                    rate_limit(PER_PUBLISHER_VARIABLE, self._lookup(PER_PUBLISHER_VARIABLE)),
                    rate_limit(PER_VIRTUAL_HOST_VARIABLE, self._lookup(PER_VIRTUAL_HOST_VARIABLE)))
            except ValueError as exc:
                raise ConfigurationError(f"{self.label}: {exc}") from None
        store = getattr(self.parent, "store", None)
        journal_factory = getattr(store, "message_journal", None)
        if journal_factory is not None and hasattr(namespace, "journal"):
            # persistent messages on durable queues: given to the queues as they
            # are restored or declared, recovered once the queues exist
            self.journal = journal_factory(self.name)
            self.journal.open()
            namespace.journal = self.journal
            self._flow_to_disk_threshold()
        if store is not None and hasattr(namespace, "listeners"):
            # durable exchanges, queues and bindings: back from the store, and
            # written through to it as clients declare and delete them
            records = NamespaceRecords(self, store)
            records.restore(namespace)
            namespace.listeners.append(records)
        if self.journal is not None:
            self.journal.recover(namespace)
        links = getattr(namespace, "links", None)
        if links is not None:
            # AMQP 1.0 link termini: after the queues, whose subscriptions they name
            links.open(self.node.termini, default_timeout=terminus_timeout)
        if hasattr(namespace, "observers"):
            self._mirror = NamespaceMirror(self, namespace)
            self._mirror.attach()

    def _flow_to_disk_threshold(self) -> None:
        """broker.flowToDiskThreshold, for the journal's recovery (flow to disk pages a large backlog)."""
        from broker.messaging.flow_to_disk import THRESHOLD_VARIABLE, threshold_from

        text = self._lookup(THRESHOLD_VARIABLE)
        try:
            self.journal.page_threshold = threshold_from(
                self.resolve(text) if text else None, int(getattr(self.root, "memory_high_watermark", 0)))
        except ValueError as exc:
            raise ConfigurationError(f"{self.label}: {exc}") from None

    def _terminus_timeout(self) -> int:
        from broker.messaging.link_registry import TIMEOUT_VARIABLE

        text = self._lookup(TIMEOUT_VARIABLE)
        if text is not None:
            text = self.resolve(text)
        try:
            timeout = int(text) if text not in (None, "") else 0
        except ValueError:
            timeout = -1
        if timeout < 0:
            raise ConfigurationError(f"{self.label}: context variable '{TIMEOUT_VARIABLE}' is"
                                     f" {text!r}; expected a number of seconds (0 or more)")
        return timeout

    def _delete_tree(self) -> None:
        # its connections are children of their ports, not of the virtual host, but
        # go with it, first (as they did when they were its last children): each is
        # closed with 320 CONNECTION_FORCED
        self.open_connections.close_all()
        # the namespace refuses to delete its standard exchanges (the default one,
        # amq.*): they go with the virtual host, only their views are removed
        for exchange in self.exchanges:
            name = getattr(exchange.live, "name", None)
            if name is not None and (name == "" or name.startswith("amq.")):
                exchange.unregister()
        super()._delete_tree()

    def on_close(self) -> None:
        links = getattr(self.namespace, "links", None)
        if links is not None:
            links.close()
        if self._mirror is not None:
            self._mirror.detach()
            self._mirror = None
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        self.namespace = None

    # -- management: exchanges and queues are declared in the namespace -----------------

    def create_child(self, category: str, attributes: Mapping[str, Any]) -> ConfiguredObject:
        """Exchanges and queues are declared in the namespace, which the model mirrors."""
        wanted = registry.category(category).name
        if wanted == "Exchange":
            return self._declare(ModelExchange, attributes)
        if wanted == "Queue":
            return self._declare(ModelQueue, attributes)
        return super().create_child(category, attributes)

    def _declare(self, view: type[NamespaceObject], given: Mapping[str, Any]) -> ConfiguredObject:
        from broker.messaging.records import from_json_value

        namespace = self.namespace
        if namespace is None:
            raise ConfigurationError(f"{self.label} is not active")
        label = f"new {view.category} in {self.label}"
        name = given.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"{label}: attribute 'name' is mandatory")
        if name.startswith("amq."):
            raise ConfigurationError(f"{label}: attribute 'name' must not start with the"
                                     " reserved prefix 'amq.'")
        if len(name.encode("utf-8")) > 255:
            raise ConfigurationError(f"{label}: attribute 'name' is longer than 255 bytes")
        unknown = sorted(set(given) - set(view.creation) - {"name", "id"})
        if unknown:
            raise ConfigurationError(f"{label}: unknown attribute"
                                     f" {', '.join(repr(u) for u in unknown)};"
                                     f" known: name, {', '.join(view.creation)}")
        values = convert_all(view.creation, given, label)
        if values.get("lifetimePolicy") is not None:
            values["autoDelete"] = values["lifetimePolicy"] == DELETE_ON_NO_OUTBOUND_LINKS
        arguments = from_json_value(values["arguments"] or {})
        try:
            if view is ModelExchange:
                namespace.declare_exchange(name, values["type"], durable=values["durable"],
                                           auto_delete=values["autoDelete"],
                                           internal=values["internal"], arguments=arguments)
            else:
                self._check_queue_type(label, name, values.get("type"), arguments)
                namespace.declare_queue(name, durable=values["durable"],
                                        auto_delete=values["autoDelete"], arguments=arguments)
        except BrokerError as exc:
            if isinstance(exc, (ConfigurationError, StoreFailed)):
                raise                           # StoreFailed: not the request's fault (503)
            raise ConfigurationError(f"{label}: {exc.text}") from None
        created = self.child(view.category, name)
        if created is None:
            raise InternalError(f"{label} '{name}' was declared but is not in the model")
        return created

    def _check_queue_type(self, label: str, name: str, wanted: str | None,
                          arguments: dict[str, Any]) -> None:
        from broker.messaging.arguments import queue_settings

        kind = queue_settings(arguments, name, self.name).kind
        if wanted is not None and wanted != kind:
            raise ConfigurationError(
                f"{label}: attribute 'type' is '{wanted}' but the arguments make a {kind} queue"
                " (a priority queue needs x-max-priority, lvq x-last-value-key, sorted"
                " qpid.queue_sort_key)")

    @operation(description="Publish a message through an exchange (or straight to a queue"
                           " named by 'address'); the number of queues it reached",
               returns=int,
               message=attribute(dict, mandatory=True,
                                 description="address (exchange, or queue), routingKey, content,"
                                             " contentTransferEncoding (base64), mimeType,"
                                             " encoding, headers, messageId, correlationId,"
                                             " replyTo, persistent, priority, expiration (ms),"
                                             " appId, type"))
    def publish_message(self, message: dict[str, Any]) -> int:
        from broker.model.message_views import new_message

        namespace = self.namespace
        if namespace is None:
            raise ConfigurationError(f"{self.label} is not active")
        built = new_message(message, namespace.clock)
        address = built.exchange
        if address and address not in namespace.exchanges:
            if address not in namespace.queues:
                raise ConfigurationError(f"{self.label}: message: field 'address': no exchange"
                                         f" or queue '{address}'")
            built = built.with_properties(built.bare_properties(), exchange="", routing_key=address)
        try:
            queues = namespace.route(built.exchange, built)
        except BrokerError as exc:
            raise ConfigurationError(f"{self.label}: message: {exc.text}") from None
        reached = 0
        for queue in queues:
            if queue.enqueue(built):
                reached += 1
        return reached

    @property
    def exchanges(self) -> list[ModelExchange]:
        return cast("list[ModelExchange]", self.children("Exchange"))

    @property
    def queues(self) -> list[ModelQueue]:
        return cast("list[ModelQueue]", self.children("Queue"))

    @operation(description="The connections that opened this virtual host (each a child"
                           " of the port it came in on)",
               changes=False, returns=list)
    def get_connections(self) -> list[Connection]:
        return self.connections

    @operation(description="The AMQP 1.0 links of this virtual host (its link registry):"
                           " each link's key (remoteContainerId, linkName, role), state"
                           " (attached, suspended, stealing), the broker's terminus, its"
                           " unsettled deliveries and when it expires",
               changes=False, returns=list)
    def get_links(self) -> list[dict[str, Any]]:
        links = getattr(self.namespace, "links", None)
        return links.describe() if links is not None else []

    def register_connection(
        self, port: ConfiguredObject, *, remote_address: str, protocol: PortProtocol | str,
        principal: str = "", transport: Transport | str = "TCP",
        client_id: str = "", client_product: str = "", client_version: str = "",
        closer: Callable[[str], None] | None = None, name: str | None = None,
    ) -> Connection:
        """Record a connection that came in on ``port`` and opened this virtual host
        (after connection.open): a child of the port, associated with this virtual host.

        ``closer(reason)`` is called if management deletes the connection, or
        this virtual host.  Raises :class:`~broker.errors.NotAllowed` (530,
        RabbitMQ's text) when ``maxConnections`` is reached.
        """
        if 0 <= self.max_connections <= len(self.open_connections):
            raise NotAllowed(f"access to vhost '{self.name}' refused for user '{principal}':"
                             f" connection limit ({self.max_connections}) is reached")
        connection = Connection(port, {
            "name": name or next_connection_name(remote_address),
            "remoteAddress": remote_address,
            "protocol": protocol.name if isinstance(protocol, PortProtocol) else protocol,
            "principal": principal,
            "transport": transport.name if isinstance(transport, Transport) else transport,
            "clientId": client_id, "clientProduct": client_product,
            "clientVersion": client_version,
        })
        connection.closer = closer
        connection.association = self.open_connections
        connection._registered = True
        connection.create()
        self.open_connections.add(connection)
        return connection


def messaging_namespace(vhost_name: str) -> Any:
    """The messaging layer's Namespace for ``vhost_name`` (imported when first needed)."""
    try:
        from broker.messaging.namespace import Namespace
    except ImportError as exc:
        raise InternalError(f"virtual host '{vhost_name}' cannot open: the messaging layer"
                            f" (broker.messaging.namespace.Namespace) is unavailable: {exc}"
                            ) from exc
    return Namespace(vhost_name=vhost_name)
