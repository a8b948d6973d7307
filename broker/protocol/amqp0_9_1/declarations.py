"""The exchange and queue classes of a channel (spec 0-9-1 sections 1.6, 1.7).

Declares, deletes, binds and unbinds answer once their durable change is
stored, and the channel's later frames wait until then (:mod:`.store_wait`;
``Namespace.when_stored``); a purge answers at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from broker import errors
from broker.messaging.queue import Queue

from . import direct_reply
from . import methods as m
from .store_wait import when_stored

if TYPE_CHECKING:
    from .channel import Channel
    from .connection import AmqpConnection

T = TypeVar("T")


class DeclarationMethods:
    """The exchange- and queue-class handlers of :class:`~.channel.Channel` (mixed into it)."""

    connection: AmqpConnection
    namespace: Any
    last_queue_name: str

    if TYPE_CHECKING:
        def reply(self, method: m.Method) -> None: ...

    def _stored(self, method: m.Method, operation: Callable[[], T], then: Callable[[T], None]) -> None:
        when_stored(cast("Channel", self), method, operation, then)

    # -- exchange class ----------------------------------------------------------
    def _ok(self, method: m.Method, answer: m.Method) -> Callable[[object], None]:
        nowait = getattr(method, "nowait", False)
        return lambda _result: None if nowait else self.reply(answer)

    def _exchange_declare(self, method: m.ExchangeDeclare) -> None:
        self._stored(method, lambda: self.namespace.declare_exchange(
            method.exchange, method.type, passive=method.passive, durable=method.durable,
            auto_delete=method.auto_delete, internal=method.internal, arguments=method.arguments),
            self._ok(method, m.ExchangeDeclareOk()))

    def _exchange_delete(self, method: m.ExchangeDelete) -> None:
        self._stored(method, lambda: self.namespace.delete_exchange(method.exchange, if_unused=method.if_unused),
                    self._ok(method, m.ExchangeDeleteOk()))

    def _exchange_bind(self, method: m.ExchangeBind) -> None:
        self._stored(method, lambda: self.namespace.bind_exchange(
            method.destination, method.source, method.routing_key, method.arguments),
            self._ok(method, m.ExchangeBindOk()))

    def _exchange_unbind(self, method: m.ExchangeUnbind) -> None:
        self._stored(method, lambda: self.namespace.unbind_exchange(
            method.destination, method.source, method.routing_key, method.arguments),
            self._ok(method, m.ExchangeUnbindOk()))

    def _exchange_bound(self, method: m.ExchangeBound) -> None:
        # Qpid's exchange.bound: reply codes of Qpid's 0-9-1 client
        # (0 ok, 1 exchange not found, 2 queue not found, 3 no bindings,
        #  4 queue not bound, 5 no queue bound with that key, 6 queue not bound with that key)
        code, text = self.namespace.binding_status(method.exchange, method.queue, method.routing_key)
        self.reply(m.ExchangeBoundOk(reply_code=code, reply_text=text))

    # -- queue class -----------------------------------------------------------------
    def _queue_name(self, name: str) -> str:
        # spec 0-9-1 1.7.2: an empty queue name means the channel's last declared queue
        if name:
            return name
        if not self.last_queue_name:
            raise errors.NotFound("no previously declared queue")
        return self.last_queue_name

    def _queue(self, name: str) -> Queue:
        return self.namespace.queue(self._queue_name(name), owner=self.connection)

    def _queue_declare(self, method: m.QueueDeclare) -> None:
        name = method.queue
        if name == direct_reply.PSEUDO_QUEUE and method.passive:
            # RabbitMQ answers a passive declare of the pseudo-queue (clients probe for support)
            if not method.nowait:
                self.reply(m.QueueDeclareOk(queue=name))
            return
        if name.startswith("amq.") and not method.passive:
            raise errors.AccessRefused(
                f"queue name '{name}' contains reserved prefix 'amq.*'")

        def declared(result: tuple[Queue, int, int]) -> None:
            queue, message_count, consumer_count = result
            self.last_queue_name = queue.name
            if not method.nowait:
                self.reply(m.QueueDeclareOk(
                    queue=queue.name, message_count=message_count, consumer_count=consumer_count))

        self._stored(method, lambda: self.namespace.declare_queue(
            name, passive=method.passive, durable=method.durable,
            exclusive_owner=self.connection if method.exclusive else None,
            auto_delete=method.auto_delete, arguments=method.arguments, owner=self.connection),
            declared)

    def _queue_bind(self, method: m.QueueBind) -> None:
        queue = self._queue_name(method.queue)
        self._stored(method, lambda: self.namespace.bind_queue(
            queue, method.exchange, method.routing_key, method.arguments, owner=self.connection),
            self._ok(method, m.QueueBindOk()))

    def _queue_unbind(self, method: m.QueueUnbind) -> None:
        queue = self._queue_name(method.queue)
        self._stored(method, lambda: self.namespace.unbind_queue(
            queue, method.exchange, method.routing_key, method.arguments, owner=self.connection),
            lambda _result: self.reply(m.QueueUnbindOk()))

    def _queue_purge(self, method: m.QueuePurge) -> None:
        count = self._queue(method.queue).purge()
        if not method.nowait:
            self.reply(m.QueuePurgeOk(message_count=count))

    def _queue_delete(self, method: m.QueueDelete) -> None:
        queue = self._queue_name(method.queue)

        def deleted(count: int) -> None:
            if not method.nowait:
                self.reply(m.QueueDeleteOk(message_count=count))

        self._stored(method, lambda: self.namespace.delete_queue(
            queue, if_unused=method.if_unused, if_empty=method.if_empty, owner=self.connection), deleted)
