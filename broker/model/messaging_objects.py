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

import asyncio
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, cast

from broker.errors import BrokerError, ConfigurationError, NotFound, StoreFailed
from broker.model.attributes import Attribute, attribute, derived, named
from broker.model.config_store import BackgroundStore, ConfigurationRecord, DurableConfigurationStore, \
    LoopTicket
from broker.model.configured_object import ConfiguredObject, State
from broker.model.operations import operation
from broker.model.paged_head import head_read_back
from broker.messaging.selectors import SelectorError, compile_selector
from broker.model.runtime import RuntimeObject

if TYPE_CHECKING:
    from broker.messaging.exchange import Exchange as LiveExchange
    from broker.messaging.namespace import Namespace
    from broker.messaging.queue import Queue as LiveQueue
    from broker.messaging.queue import QueueEntry
    from broker.model.message_views import Content

#: Broker-J's lifetime policies, as auto-delete and exclusive queues and exchanges map to them
PERMANENT = "PERMANENT"
DELETE_ON_NO_OUTBOUND_LINKS = "DELETE_ON_NO_OUTBOUND_LINKS"
DELETE_ON_CONNECTION_CLOSE = "DELETE_ON_CONNECTION_CLOSE"

#: the overflow policy of queue settings -> Broker-J's OverflowPolicy name
_OVERFLOW_POLICIES = {"drop-head": "RING", "reject-publish": "REJECT", "reject-publish-dlx": "REJECT",
                      "producer-flow-control": "PRODUCER_FLOW_CONTROL"}

_SELECTOR_PARAMETER = ("A JMS message selector: only the messages it matches (with messageIds:"
                       " those of them it matches)")


class NamespaceObject(RuntimeObject):
    """What exchanges and queues share: a name, a live object, the declared basics."""

    #: what management may give when it creates one (see VirtualHost.create_child)
    creation: ClassVar[dict[str, Attribute[Any]]] = {}

    def __init__(self, parent: ConfiguredObject | None, live: Any, namespace: Namespace) -> None:
        super().__init__(parent, {"name": live.name or "<default>"})
        self.live: Any = live
        self.namespace = namespace

    # The derived attributes read the live object as ``getattr(self.live,
    # name, default)``: the default too once it is gone (live is None), with
    # no helper call -- management lists thousands of queues every second.

    @derived(str, description="Exchange: direct, fanout, topic, headers; queue: standard, priority, lvq, sorted")
    def type(self) -> str:
        return str(getattr(self.live, "type", ""))

    # "durable" on the wire; the Python name differs because the class flag
    # ``durable`` tells the model's store binding whether to persist the view
    @derived(bool, name="durable", description="Survives a broker restart")
    def is_durable(self) -> bool:
        return bool(getattr(self.live, "durable", False))

    @derived(bool, description="Exchange: deleted with its last binding; queue: with its last consumer")
    def auto_delete(self) -> bool:
        return bool(getattr(self.live, "auto_delete", False))

    @derived(dict, description="Declaration arguments (RabbitMQ's and Broker-J's names)")
    def arguments(self) -> dict[str, Any]:
        return dict(getattr(self.live, "arguments", None) or {})

    @derived(str, description="Broker-J's view of auto-delete and exclusivity: PERMANENT,"
                              " DELETE_ON_NO_OUTBOUND_LINKS, DELETE_ON_CONNECTION_CLOSE")
    def lifetime_policy(self) -> str:
        if getattr(self.live, "exclusive_owner", None) is not None:
            return DELETE_ON_CONNECTION_CLOSE
        auto_delete = getattr(self.live, "auto_delete", False)
        return DELETE_ON_NO_OUTBOUND_LINKS if auto_delete else PERMANENT

    @property
    def live_object(self) -> Any:
        if self.live is None:
            raise NotFound(f"{self.label} has been deleted")
        return self.live

    @contextmanager
    def journal_transaction(self) -> Iterator[None]:
        """Everything journaled inside is one journal transaction (one atomic commit)."""
        journal = self.namespace.journal
        if journal is None:
            yield
            return
        journal.begin_transaction()
        try:
            yield
        finally:
            journal.end_transaction()

    def unregister(self) -> None:
        """The namespace deleted the real object: only the view goes."""
        self.live = None
        super().unregister()

    def delete(self) -> None:
        """Delete the real object first: when the namespace refuses (its store failed), the view stays.

        Once it is gone, the namespace's mirror unregisters this view.
        """
        live = self.live
        if live is not None and self.state is not State.DELETED:
            self.validate_delete()
            self.delete_live(live)
        super().delete()

    def on_delete(self) -> None:
        """Management deletes the view: delete the real object."""
        live, self.live = self.live, None
        if live is not None:
            self.delete_live(live)

    def delete_live(self, live: Any) -> None:
        raise NotImplementedError      # each category knows how its objects are deleted


class Exchange(NamespaceObject):
    category = "Exchange"

    creation = named(
        type=attribute(str, mandatory=True, choices=("direct", "fanout", "topic", "headers"),
                       description="Routing algorithm"),
        durable=attribute(bool, default=True, description="Survives a broker restart"),
        auto_delete=attribute(bool, default=False,
                              description="Deleted with its last binding"),
        lifetime_policy=attribute(str, choices=(PERMANENT, DELETE_ON_NO_OUTBOUND_LINKS),
                                  description="Broker-J's spelling of autoDelete"),
        internal=attribute(bool, default=False,
                           description="Only exchange-to-exchange bindings may route to it"),
        arguments=attribute(dict, default={}, description="Declaration arguments"
                                                          " (alternate-exchange, ...)"),
    )

    @derived(bool, description="Cannot be published to directly, only through exchange bindings")
    def internal(self) -> bool:
        return bool(getattr(self.live, "internal", False))

    @derived(list, description="Bindings from this exchange: destination, binding key, arguments")
    def bindings(self) -> list[dict[str, Any]]:
        live: LiveExchange | None = self.live
        if live is None:
            return []
        return [{"destination": b.destination.name, "bindingKey": b.routing_key,
                 "arguments": dict(b.arguments or {})} for b in live.bindings.values()]

    def delete_live(self, live: LiveExchange) -> None:
        self.namespace.delete_exchange(live.name)

    @operation(description="Bind a queue or exchange to this exchange; false when the binding"
                           " existed already",
               returns=bool,
               destination=attribute(str, mandatory=True,
                                     description="Queue (or else exchange) to route to"),
               binding_key=attribute(str, default="", description="Binding (routing) key"),
               arguments=attribute(dict, default={}, description="Binding arguments"
                                                                 " (headers exchange: x-match...)"),
               replace_existing_arguments=attribute(
                   bool, default=False,
                   description="Replace a binding with the same key and other arguments"))
    def bind(self, destination: str, binding_key: str, arguments: dict[str, Any],
             replace_existing_arguments: bool) -> bool:
        target = self._destination(destination)
        existing = self._bindings_to(target, binding_key)
        if any(binding.arguments == arguments for binding in existing):
            return False
        self._wrap(lambda: self._bind_one(target, binding_key, arguments))
        if replace_existing_arguments:
            for binding in existing:
                self._unbind_one(target, binding_key, binding.arguments)
        return True

    @operation(description="Remove the bindings of this exchange to a queue or exchange with"
                           " this key; false when there was none",
               returns=bool,
               destination=attribute(str, mandatory=True,
                                     description="Queue (or else exchange) bound to"),
               binding_key=attribute(str, default="", description="Binding (routing) key"))
    def unbind(self, destination: str, binding_key: str) -> bool:
        target = self._destination(destination)
        found = self._bindings_to(target, binding_key)
        for binding in found:
            self._wrap(lambda: self._unbind_one(target, binding_key, binding.arguments))
        return bool(found)

    def _destination(self, name: str) -> Any:
        destination = self.namespace.queues.get(name) or self.namespace.exchanges.get(name)
        if destination is None or not name:
            raise ConfigurationError(f"{self.label}: parameter 'destination': no queue or"
                                     f" exchange '{name}' in vhost '{self.namespace.vhost_name}'")
        return destination

    def _bindings_to(self, target: Any, key: str) -> list[Any]:
        live: LiveExchange = self.live_object
        return [b for b in live.bindings.values() if b.destination is target and b.routing_key == key]

    def _bind_one(self, target: Any, key: str, arguments: dict[str, Any]) -> None:
        from broker.messaging.exchange import Exchange as LiveExchange

        if isinstance(target, LiveExchange):
            self.namespace.bind_exchange(target.name, self.live_object.name, key, arguments)
        else:
            self.namespace.bind_queue(target.name, self.live_object.name, key, arguments)

    def _unbind_one(self, target: Any, key: str, arguments: dict[str, Any]) -> None:
        from broker.messaging.exchange import Exchange as LiveExchange

        if isinstance(target, LiveExchange):
            self.namespace.unbind_exchange(target.name, self.live_object.name, key, arguments)
        else:
            self.namespace.unbind_queue(target.name, self.live_object.name, key, arguments)

    def _wrap(self, action: Callable[[], None]) -> None:
        """Namespace refusals (a bad x-match, the default exchange) are invalid input here."""
        try:
            action()
        except (NotFound, StoreFailed):
            raise
        except BrokerError as exc:
            raise ConfigurationError(f"{self.label}: {exc.text}") from None


class Queue(NamespaceObject):
    category = "Queue"

    creation = named(
        type=attribute(str, choices=("standard", "priority", "lvq", "sorted"),
                       description="Queue kind; chosen by the arguments (x-max-priority,"
                                   " x-last-value-key, qpid.queue_sort_key), checked against"
                                   " them when given"),
        durable=attribute(bool, default=True, description="Survives a broker restart"),
        auto_delete=attribute(bool, default=False,
                              description="Deleted when its last consumer goes"),
        lifetime_policy=attribute(str, choices=(PERMANENT, DELETE_ON_NO_OUTBOUND_LINKS),
                                  description="Broker-J's spelling of autoDelete"),
        arguments=attribute(dict, default={}, description="Declaration arguments (x-message-ttl,"
                                                          " x-max-length, x-dead-letter-exchange"
                                                          ", ...)"),
    )

    @derived(bool, description="Owned by one connection, deleted with it")
    def exclusive(self) -> bool:
        return getattr(self.live, "exclusive_owner", None) is not None

    @derived(int, statistic=True, description="Messages ready for delivery")
    def queue_depth_messages(self) -> int:
        return int(getattr(self.live, "message_count", 0))

    @derived(int, statistic=True, description="Bytes of message bodies ready for delivery")
    def queue_depth_bytes(self) -> int:
        return int(getattr(self.live, "message_bytes", 0))

    @derived(int, statistic=True, description="Ready messages paged out of memory to the journal"
                                               " (flow to disk; counted in queueDepthMessages)")
    def messages_paged_out(self) -> int:
        return int(getattr(self.live, "paged_count", 0))

    @derived(int, statistic=True, description="Body bytes of the messages paged out of memory")
    def message_bytes_paged_out(self) -> int:
        return int(getattr(self.live, "paged_bytes", 0))

    @derived(int, statistic=True, description="Messages delivered and not yet acknowledged")
    def unacknowledged_messages(self) -> int:
        return int(getattr(self.live, "unacked_count", 0))

    @derived(int, statistic=True, description="Consumers attached")
    def consumer_count(self) -> int:
        return int(getattr(self.live, "consumer_count", 0))

    @derived(int, counter=True, description="Messages enqueued since the queue was created")
    def messages_in(self) -> int:
        return int(getattr(self.live, "enqueued_messages", 0))

    @derived(int, counter=True, description="Body bytes enqueued since the queue was created")
    def bytes_in(self) -> int:
        return int(getattr(self.live, "enqueued_bytes", 0))

    @derived(int, counter=True, description="Deliveries to consumers and basic.get"
                                            " (redeliveries included)")
    def messages_out(self) -> int:
        return int(getattr(self.live, "delivered_messages", 0))

    @derived(int, counter=True, description="Body bytes delivered")
    def bytes_out(self) -> int:
        return int(getattr(self.live, "delivered_bytes", 0))

    @derived(str, description="What a full queue does (Broker-J's names): NONE (no maximum),"
                              " RING (drops the oldest), REJECT (refuses the publish),"
                              " PRODUCER_FLOW_CONTROL (blocks the publishers feeding it)")
    def overflow_policy(self) -> str:
        settings = getattr(self.live, "settings", None)
        if settings is None or not settings.limited:
            return "NONE"
        return _OVERFLOW_POLICIES.get(settings.overflow, "NONE")

    @derived(int, description="Messages the queue may hold before its overflow policy acts;"
                              " -1: no maximum")
    def maximum_queue_depth_messages(self) -> int:
        settings = getattr(self.live, "settings", None)
        found = settings.max_length if settings is not None else None
        return -1 if found is None else int(found)

    @derived(int, description="Body bytes the queue may hold before its overflow policy acts;"
                              " -1: no maximum")
    def maximum_queue_depth_bytes(self) -> int:
        settings = getattr(self.live, "settings", None)
        found = settings.max_length_bytes if settings is not None else None
        return -1 if found is None else int(found)

    @derived(bool, statistic=True, description="True while the queue is overfull and blocks the"
                                                " publishers feeding it (PRODUCER_FLOW_CONTROL)")
    def queue_flow_stopped(self) -> bool:
        live = self.live
        return live is not None and self.namespace.flow.is_overfull(live)

    @derived(int, statistic=True, description="Publishers (0-9-1 connections, 1.0 links) the"
                                               " overfull queue blocks now")
    def blocked_publishers(self) -> int:
        live = self.live
        return self.namespace.flow.blocked_publishers(live) if live is not None else 0

    def delete_live(self, live: LiveQueue) -> None:
        self.namespace.delete_queue(live.name, owner=live.exclusive_owner)

    # -- operations (Broker-J's Queue operations) --------------------------------------

    @operation(description="Remove every ready message (not dead-lettered); the number removed",
               returns=int)
    def clear_queue(self) -> int:
        with self.journal_transaction():
            return int(self.live_object.purge())

    @operation(description="Ready messages from position 'first' to 'last' (from 0, both"
                           " included; -1: no bound), in delivery order",
               changes=False, returns=list,
               first=attribute(int, default=-1, description="First position (-1: the head)"),
               last=attribute(int, default=-1, description="Last position (-1: the tail)"),
               include_headers=attribute(bool, default=False,
                                         description="Include application headers"))
    async def get_message_info(self, first: int, last: int, include_headers: bool) -> list[dict[str, Any]]:
        from broker.model.message_views import message_info

        live: LiveQueue = self.live_object
        await head_read_back(live)
        entries = live.browse(limit=last + 1 if last >= 0 else None)
        start = max(first, 0)
        return [message_info(entry, self.namespace.clock, include_headers)
                for entry in entries[start:]]

    @operation(description="The body of one ready message, with its content type",
               changes=False, returns=bytes,
               message_id=attribute(int, mandatory=True,
                                    description="The message's id (from getMessageInfo)"),
               limit=attribute(int, default=-1, description="At most this many bytes (-1: all)"),
               return_json=attribute(bool, default=False,
                                     description="Answer the body parsed as JSON"))
    async def get_message_content(self, message_id: int, limit: int,
                                  return_json: bool) -> Content | Any:
        from broker.model.message_views import message_content

        live: LiveQueue = self.live_object
        await head_read_back(live)
        found = live.browse(_numbered([message_id]), limit=1)
        if not found:
            raise NotFound(f"no message {message_id} in {self.label}")
        return message_content(found[0].message, limit, return_json)

    # -- lease consumers (Spark jobs): broker.messaging.leases, broker.model.lease_views -------

    @operation(description="Grant up to 'max' messages from the head to lease consumer"
                           " 'consumer' (attached if new), held under a lease every call renews;"
                           " answered once journaled. max 0: renew only",
               returns=dict,
               consumer=attribute(str, mandatory=True, description="The consumer's name"),
               session=attribute(str, default="", description="The calling process (a new one"
                                                              " orphans the last one's messages)"),
               max=attribute(int, default=1000, description="At most this many messages"),
               lease_seconds=attribute(int, default=60, description="Lease length in seconds"))
    def grant_messages(self, consumer: str, session: str, max: int, lease_seconds: int) -> dict[str, Any]:
        from broker.model import lease_views

        return lease_views.grant(self, consumer, session, max, lease_seconds)

    @operation(description="Hold exactly these messages for lease consumer 'consumer' (a replayed"
                           " batch): adopted from an earlier session or taken back from the queue",
               returns=dict,
               consumer=attribute(str, mandatory=True, description="The consumer's name"),
               session=attribute(str, default="", description="The calling process"),
               message_ids=attribute(list, mandatory=True, description="[first, last] id ranges"),
               lease_seconds=attribute(int, default=60, description="Lease length in seconds"))
    def claim_messages(self, consumer: str, session: str, message_ids: list[Any],
                       lease_seconds: int) -> dict[str, Any]:
        from broker.model import lease_views

        return lease_views.claim(self, consumer, session, message_ids, lease_seconds)

    @operation(description="Acknowledge messages granted to lease consumer 'consumer'"
                           " (idempotent); answered once journaled",
               returns=dict,
               consumer=attribute(str, mandatory=True, description="The consumer's name"),
               session=attribute(str, default="", description="The calling process"),
               message_ids=attribute(list, mandatory=True, description="[first, last] id ranges"),
               lease_seconds=attribute(int, default=60, description="Lease length in seconds"))
    def settle_messages(self, consumer: str, session: str, message_ids: list[Any],
                        lease_seconds: int) -> dict[str, Any]:
        from broker.model import lease_views

        return lease_views.settle(self, consumer, session, message_ids, lease_seconds)

    @operation(description="Return messages lease consumer 'consumer' holds to the queue"
                           " (all of them, detaching it, when no ids are given)",
               returns=dict,
               consumer=attribute(str, mandatory=True, description="The consumer's name"),
               message_ids=attribute(list, description="[first, last] id ranges (default: all)"))
    def release_messages(self, consumer: str, message_ids: list[Any] | None) -> dict[str, Any]:
        from broker.model import lease_views

        return lease_views.release(self, consumer, message_ids)

    @operation(description="Where the queue's messages are journaled (a path or URI; null when"
                           " its virtual host keeps no journal)",
               changes=False, returns=dict)
    def get_journal_location(self) -> dict[str, Any]:
        from broker.model import lease_views

        return {"journal": lease_views.journal_location(self),
                "durable": bool(getattr(self.live, "durable", False))}

    @operation(description="Move ready messages to another queue, atomically (one journal"
                           " commit); the ids moved",
               returns=list,
               destination=attribute(str, mandatory=True, description="The queue to move to"),
               message_ids=attribute(list, of=int, description="Ids to move (default: all)"),
               selector=attribute(str, description=_SELECTOR_PARAMETER),
               limit=attribute(int, default=-1, description="At most this many (-1: no limit)"))
    def move_messages(self, destination: str, message_ids: list[int] | None,
                      selector: str | None, limit: int) -> list[int]:
        from broker.messaging.message import message_number

        live: LiveQueue = self.live_object
        target = self._target_queue(destination)
        wanted = _chosen(self, message_ids, selector)
        with self.journal_transaction():
            moved = live.remove_ready(lambda e: wanted(e) and target.enqueue(e.message),
                                      limit=limit if limit >= 0 else None)
        return [message_number(entry.message) for entry in moved]

    @operation(description="Copy ready messages to another queue, atomically (one journal"
                           " commit); the ids copied",
               returns=list,
               destination=attribute(str, mandatory=True, description="The queue to copy to"),
               message_ids=attribute(list, of=int, description="Ids to copy (default: all)"),
               selector=attribute(str, description=_SELECTOR_PARAMETER),
               limit=attribute(int, default=-1, description="At most this many (-1: no limit)"))
    def copy_messages(self, destination: str, message_ids: list[int] | None,
                      selector: str | None, limit: int) -> list[int]:
        from broker.messaging.message import message_number

        live: LiveQueue = self.live_object
        target = self._target_queue(destination)
        entries = live.browse(_chosen(self, message_ids, selector), limit=limit if limit >= 0 else None)
        copied: list[int] = []
        with self.journal_transaction():
            for entry in entries:
                if target.enqueue(entry.message):
                    copied.append(message_number(entry.message))
        return copied

    @operation(description="Delete ready messages, atomically (one journal commit);"
                           " the ids deleted",
               returns=list,
               message_ids=attribute(list, of=int, description="Ids to delete (default: all)"),
               selector=attribute(str, description=_SELECTOR_PARAMETER),
               limit=attribute(int, default=-1, description="At most this many (-1: no limit)"))
    def delete_messages(self, message_ids: list[int] | None, selector: str | None,
                        limit: int) -> list[int]:
        from broker.messaging.message import message_number

        live: LiveQueue = self.live_object
        with self.journal_transaction():
            removed = live.remove_ready(_chosen(self, message_ids, selector),
                                        limit=limit if limit >= 0 else None)
        return [message_number(entry.message) for entry in removed]

    def _target_queue(self, name: str) -> LiveQueue:
        target = self.namespace.queues.get(name)
        if target is None:
            raise ConfigurationError(f"{self.label}: parameter 'destination': no queue '{name}'"
                                     f" in vhost '{self.namespace.vhost_name}'")
        if target is self.live:
            raise ConfigurationError(f"{self.label}: parameter 'destination' must be another"
                                     " queue")
        return target

    # -- time-travel replay (broker/model/replay.py) --------------------------------------

    @operation(description="Publish again the messages the journal says were enqueued on this"
                           " queue between two times or two journal versions (settled ones"
                           " too), through an exchange or into a queue, one journal commit per"
                           " page; the count and the journal's ids of the messages",
               returns=dict,
               from_time=attribute(str, description="Enqueued at or after this time"
                                                    " (ISO 8601; no offset: UTC)"),
               to_time=attribute(str, description="Enqueued before this time (ISO 8601)"),
               from_version=attribute(int, description="Committed by this version of the"
                                                       " journal or a later one"),
               to_version=attribute(int, description="Committed by this version or an earlier"
                                                     " one (default: the newest)"),
               exchange=attribute(str, description="Publish through this exchange (default:"
                                                   " each message's own)"),
               routing_key=attribute(str, description="With this routing key (default: each"
                                                      " message's own)"),
               destination=attribute(str, description="Put the messages straight into this"
                                                      " queue instead"),
               limit=attribute(int, default=-1, description="At most this many (-1: no limit)"))
    async def replay_messages(self, from_time: str | None, to_time: str | None,
                              from_version: int | None, to_version: int | None,
                              exchange: str | None, routing_key: str | None,
                              destination: str | None, limit: int) -> dict[str, Any]:
        from broker.model.replay import ReplayRequest, replay_messages

        return await replay_messages(self, ReplayRequest(
            from_time, to_time, from_version, to_version, exchange, routing_key, destination, limit))


def _numbered(ids: list[int] | None) -> Callable[[QueueEntry], bool]:
    """Selects the entries whose message has one of ``ids`` (every entry for None).

    A message management never numbered cannot be one the caller saw, so it
    is not numbered here either.
    """
    if ids is None:
        return lambda entry: True
    wanted = set(ids)
    return lambda entry: getattr(entry.message, "number", None) in wanted


def _chosen(queue: ConfiguredObject, ids: list[int] | None,
            selector: str | None) -> Callable[[QueueEntry], bool]:
    """Selects the entries with one of ``ids`` (any, for None) that ``selector`` matches (Broker-J)."""
    numbered = _numbered(ids)
    if not selector or not selector.strip():
        return numbered
    try:
        compiled = compile_selector(selector)
    except SelectorError as error:
        raise ConfigurationError(f"{queue.label}: parameter 'selector': {error.text}") from None
    return lambda entry: numbered(entry) and compiled.matches(
        entry.message, redelivered=entry.redelivered, delivery_count=entry.delivery_count)


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

    def _configuration_record(self, obj: Any) -> ConfigurationRecord:
        record = cast("dict[str, Any]", obj.to_record())
        record_id = self._ids.setdefault(self._key(record), str(uuid.uuid4()))
        category = self.CATEGORY.get(str(record.get("object")), "Binding")
        return ConfigurationRecord(record_id, category, self.vhost.id, record)

    def object_created(self, obj: Any) -> None:
        self.store.save([self._configuration_record(obj)])

    def object_deleted(self, obj: Any) -> None:
        key = self._key(cast("dict[str, Any]", obj.to_record()))
        record_id = self._ids.get(key)
        if record_id is not None:
            self.store.remove([record_id])      # kept when this fails: the delete is refused
            del self._ids[key]

    # -- StoreWriter: the event loop hands changes over and hears back -------------------

    def can_submit(self) -> bool:
        if not isinstance(self.store, BackgroundStore):
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False                        # no loop to hear back on: store synchronously
        return True

    def submit(self, obj: Any, *, created: bool) -> LoopTicket:
        store = cast(BackgroundStore, self.store)
        loop = asyncio.get_running_loop()
        if created:
            return LoopTicket(store.submit([self._configuration_record(obj)]), loop)
        key = self._key(cast("dict[str, Any]", obj.to_record()))
        record_id = self._ids.pop(key, None)
        # an id nobody stored: removing it changes nothing, but the ticket still keeps the order
        ticket = LoopTicket(store.submit(remove=[record_id] if record_id else []), loop)
        if record_id is not None:
            def kept(error: BaseException | None) -> None:
                if error is not None:               # not removed: the record keeps its id
                    self._ids.setdefault(key, record_id)
            ticket.when_stored(kept)
        return ticket
