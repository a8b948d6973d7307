"""Exchange and Queue in the model tree: live views of the namespace's objects.

The messaging layer's :class:`~broker.messaging.namespace.Namespace` is the one
source of truth for a virtual host's exchanges, queues and bindings (it runs
the hot path).  Each of them also appears here as a child of its VirtualHost,
with its attributes declared once, so management can list, inspect and delete
them generically, as every other category.  Durable ones are persisted by the
virtual host through its node's configuration store (see
:class:`NamespaceRecords`), not by the model's generic store binding: these
views are never written themselves.

Created and removed by :class:`NamespaceMirror` as the namespace reports its
objects coming and going; ``delete()`` from management deletes the real
object.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, cast

from broker.model.attributes import derived
from broker.model.config_store import ConfigurationRecord, DurableConfigurationStore
from broker.model.configured_object import ConfiguredObject
from broker.model.runtime import RuntimeObject

if TYPE_CHECKING:
    from broker.messaging.exchange import Exchange as LiveExchange
    from broker.messaging.namespace import Namespace
    from broker.messaging.queue import Queue as LiveQueue


class NamespaceObject(RuntimeObject):
    """What exchanges and queues share: a name, a live object, the declared basics."""

    def __init__(self, parent: ConfiguredObject | None, live: Any, namespace: Namespace) -> None:
        super().__init__(parent, {"name": live.name or "<default>"})
        self.live: Any = live
        self.namespace = namespace

    def _get(self, name: str, default: Any = None) -> Any:
        return getattr(self.live, name, default) if self.live is not None else default

    @derived(str, description="Exchange: direct, fanout, topic, headers; queue: standard, priority, lvq, sorted")
    def type(self) -> str:
        return str(self._get("type", ""))

    # "durable" on the wire; the Python name differs because the class flag
    # ``durable`` tells the model's store binding whether to persist the view
    @derived(bool, name="durable", description="Survives a broker restart")
    def is_durable(self) -> bool:
        return bool(self._get("durable", False))

    @derived(bool, description="Exchange: deleted with its last binding; queue: with its last consumer")
    def auto_delete(self) -> bool:
        return bool(self._get("auto_delete", False))

    @derived(dict, description="Declaration arguments (RabbitMQ's and Broker-J's names)")
    def arguments(self) -> dict[str, Any]:
        return dict(self._get("arguments", None) or {})

    def unregister(self) -> None:
        """The namespace deleted the real object: only the view goes."""
        self.live = None
        super().unregister()

    def on_delete(self) -> None:
        """Management deletes the view: delete the real object."""
        live, self.live = self.live, None
        if live is not None:
            self.delete_live(live)

    def delete_live(self, live: Any) -> None:
        raise NotImplementedError      # each category knows how its objects are deleted


class Exchange(NamespaceObject):
    category = "Exchange"

    @derived(bool, description="Cannot be published to directly, only through exchange bindings")
    def internal(self) -> bool:
        return bool(self._get("internal", False))

    @derived(list, description="Bindings from this exchange: destination, binding key, arguments")
    def bindings(self) -> list[dict[str, Any]]:
        live: LiveExchange | None = self.live
        if live is None:
            return []
        return [{"destination": b.destination.name, "bindingKey": b.routing_key,
                 "arguments": dict(b.arguments or {})} for b in live.bindings.values()]

    def delete_live(self, live: LiveExchange) -> None:
        self.namespace.delete_exchange(live.name)


class Queue(NamespaceObject):
    category = "Queue"

    @derived(bool, description="Owned by one connection, deleted with it")
    def exclusive(self) -> bool:
        return self._get("exclusive_owner") is not None

    @derived(int, description="Messages ready for delivery")
    def queue_depth_messages(self) -> int:
        return int(self._get("message_count", 0))

    @derived(int, description="Bytes of message bodies ready for delivery")
    def queue_depth_bytes(self) -> int:
        return int(self._get("message_bytes", 0))

    @derived(int, description="Messages delivered and not yet acknowledged")
    def unacknowledged_messages(self) -> int:
        return int(self._get("unacked_count", 0))

    @derived(int, description="Consumers attached")
    def consumer_count(self) -> int:
        return int(self._get("consumer_count", 0))

    def delete_live(self, live: LiveQueue) -> None:
        self.namespace.delete_queue(live.name, owner=live.exclusive_owner)


class NamespaceMirror:
    """Keeps a VirtualHost's Exchange and Queue children in step with its namespace."""

    def __init__(self, vhost: ConfiguredObject, namespace: Namespace) -> None:
        self.vhost = vhost
        self.namespace = namespace
        self._views: dict[int, NamespaceObject] = {}

    def attach(self) -> None:
        for exchange in self.namespace.exchanges.values():
            self.object_created(exchange)
        for queue in self.namespace.queues.values():
            self.object_created(queue)
        self.namespace.observers.append(self)

    def detach(self) -> None:
        if self in self.namespace.observers:
            self.namespace.observers.remove(self)

    def object_created(self, obj: Any) -> None:
        from broker.messaging.exchange import Exchange as LiveExchange
        from broker.messaging.queue import Queue as LiveQueue

        view: NamespaceObject
        if isinstance(obj, LiveExchange):
            view = Exchange(self.vhost, obj, self.namespace)
        elif isinstance(obj, LiveQueue):
            view = Queue(self.vhost, obj, self.namespace)
        else:
            return                      # bindings are shown by their exchange
        view.create()
        self._views[id(obj)] = view

    def object_deleted(self, obj: Any) -> None:
        view = self._views.pop(id(obj), None)
        if view is not None:
            view.unregister()


class NamespaceRecords:
    """Writes a namespace's durable exchanges, queues and bindings through a config store.

    Each object is one record (category "Exchange", "Queue" or "Binding",
    parented by the virtual host) holding the namespace's own
    ``to_record()``; :meth:`restore` gives them back to a namespace on open.
    """

    CATEGORY = {"exchange": "Exchange", "queue": "Queue", "binding": "Binding"}

    def __init__(self, vhost: ConfiguredObject, store: DurableConfigurationStore) -> None:
        self.vhost = vhost
        self.store = store
        self._ids: dict[str, str] = {}        # record key -> record id

    @staticmethod
    def _key(record: dict[str, Any]) -> str:
        return repr(sorted((k, repr(v)) for k, v in record.items()
                           if k in ("object", "name", "source", "destination", "routing_key", "arguments")))

    def restore(self, namespace: Namespace) -> None:
        mine = [r for r in self.store.recover()
                if r.category in ("Exchange", "Queue", "Binding") and r.parent_id == self.vhost.id]
        for r in mine:
            self._ids[self._key(dict(r.attributes))] = r.id
        namespace.restore([dict(r.attributes) for r in mine])

    def object_created(self, obj: Any) -> None:
        record = cast("dict[str, Any]", obj.to_record())
        key = self._key(record)
        record_id = self._ids.setdefault(key, str(uuid.uuid4()))
        category = self.CATEGORY.get(str(record.get("object")), "Binding")
        self.store.save([ConfigurationRecord(record_id, category, self.vhost.id, record)])

    def object_deleted(self, obj: Any) -> None:
        record_id = self._ids.pop(self._key(cast("dict[str, Any]", obj.to_record())), None)
        if record_id is not None:
            self.store.remove([record_id])
