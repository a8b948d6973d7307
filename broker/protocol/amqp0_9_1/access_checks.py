"""ACL checks of AMQP 0-9-1 channel methods (see :mod:`broker.security.access_control`).

The connection asks :func:`permitted` before a channel method runs, and only
when access control rules are in force.  What each method is checked for
(Broker-J's ACL actions):

=====================  ====================================================================
exchange.declare       CREATE EXCHANGE name durable autodelete type alternate (when new)
exchange.delete        DELETE EXCHANGE name (when it exists)
exchange.bind/unbind   BIND / UNBIND EXCHANGE name=source routingkey queuename=destination
queue.declare          CREATE QUEUE name durable autodelete exclusive temporary (when new)
queue.bind/unbind      BIND / UNBIND EXCHANGE name=exchange routingkey queuename durable
                       temporary
queue.purge            PURGE QUEUE name
queue.delete           DELETE QUEUE name durable autodelete exclusive (when it exists)
basic.consume/get      CONSUME QUEUE name durable autodelete exclusive temporary
basic.publish          PUBLISH EXCHANGE name routingkey (per message, cached per connection)
=====================  ====================================================================

A refusal closes the channel with 403 ACCESS_REFUSED (the content frames of
a refused basic.publish are dropped by the closing channel).  Declares that
find the object already there, passive declares, and deletes of what does
not exist are not checked: they create or remove nothing, and the channel
answers them as it would without rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.security.acl_rules import ObjectType, Operation

from . import direct_reply
from . import methods as m

if TYPE_CHECKING:
    from .channel import Channel

Check = Callable[["Channel", Any], None]


def permitted(channel: Channel, method: m.Method) -> bool:
    """Run ``method``'s check; False (the channel is closed with 403) when it is refused."""
    if channel.closing or channel._publish is not None:
        return True                 # (a method amid a message's content is the channel's error)
    try:
        if type(method) is m.BasicPublish:          # every message: the short way
            channel.connection.access.check_publish(method.exchange, method.routing_key)
            return True
        check = _CHECKS.get(type(method))
        if check is not None:
            check(channel, method)
    except errors.BrokerError as exc:
        channel.soft_error(exc, method)
        return False
    return True


def _queue_flags(channel: Channel, name: str) -> dict[str, Any]:
    queue = channel.namespace.queues.get(name)
    if queue is None:
        return {}
    exclusive = queue.exclusive_owner is not None
    return {"durable": queue.durable, "auto_delete": queue.auto_delete, "exclusive": exclusive,
            "temporary": exclusive or queue.auto_delete}


def _queue_named(channel: Channel, name: str) -> str:
    return name or channel.last_queue_name         # spec 1.7.2: "" is the last declared queue


def _exchange_declare(channel: Channel, method: m.ExchangeDeclare) -> None:
    if method.passive or method.exchange in channel.namespace.exchanges:
        return
    alternate = (method.arguments or {}).get("alternate-exchange")
    channel.connection.access.check(
        Operation.CREATE, ObjectType.EXCHANGE, method.exchange, durable=method.durable,
        auto_delete=method.auto_delete, type=method.type,
        alternate=str(alternate) if alternate is not None else None)


def _exchange_delete(channel: Channel, method: m.ExchangeDelete) -> None:
    if method.exchange in channel.namespace.exchanges:
        channel.connection.access.check(Operation.DELETE, ObjectType.EXCHANGE, method.exchange)


def _exchange_binding(operation: Operation) -> Check:
    def check(channel: Channel, method: m.ExchangeBind | m.ExchangeUnbind) -> None:
        channel.connection.access.check(operation, ObjectType.EXCHANGE, method.source,
                                        routing_key=method.routing_key,
                                        queue_name=method.destination)
    return check


def _queue_declare(channel: Channel, method: m.QueueDeclare) -> None:
    name = method.queue
    if method.passive or name == direct_reply.PSEUDO_QUEUE or (name and name in
                                                               channel.namespace.queues):
        return
    channel.connection.access.check(
        Operation.CREATE, ObjectType.QUEUE, name, durable=method.durable,
        auto_delete=method.auto_delete, exclusive=method.exclusive,
        temporary=method.exclusive or method.auto_delete,
        owner=channel.connection.access.subject.name if method.exclusive else None)


def _queue_binding(operation: Operation) -> Check:
    def check(channel: Channel, method: m.QueueBind | m.QueueUnbind) -> None:
        queue = _queue_named(channel, method.queue)
        flags = _queue_flags(channel, queue)
        channel.connection.access.check(operation, ObjectType.EXCHANGE, method.exchange,
                                        routing_key=method.routing_key, queue_name=queue,
                                        durable=flags.get("durable"),
                                        temporary=flags.get("temporary"))
    return check


def _queue_purge(channel: Channel, method: m.QueuePurge) -> None:
    queue = _queue_named(channel, method.queue)
    channel.connection.access.check(Operation.PURGE, ObjectType.QUEUE, queue,
                                    **_queue_flags(channel, queue))


def _queue_delete(channel: Channel, method: m.QueueDelete) -> None:
    queue = _queue_named(channel, method.queue)
    if queue in channel.namespace.queues:
        channel.connection.access.check(Operation.DELETE, ObjectType.QUEUE, queue,
                                        **_queue_flags(channel, queue))


def _consume(channel: Channel, method: m.BasicConsume | m.BasicGet) -> None:
    if method.queue == direct_reply.PSEUDO_QUEUE:
        return                                   # replies to this connection's own requests
    queue = _queue_named(channel, method.queue)
    channel.connection.access.check(Operation.CONSUME, ObjectType.QUEUE, queue,
                                    **_queue_flags(channel, queue))


_CHECKS: dict[type, Check] = {
    m.ExchangeDeclare: _exchange_declare,
    m.ExchangeDelete: _exchange_delete,
    m.ExchangeBind: _exchange_binding(Operation.BIND),
    m.ExchangeUnbind: _exchange_binding(Operation.UNBIND),
    m.QueueDeclare: _queue_declare,
    m.QueueBind: _queue_binding(Operation.BIND),
    m.QueueUnbind: _queue_binding(Operation.UNBIND),
    m.QueuePurge: _queue_purge,
    m.QueueDelete: _queue_delete,
    m.BasicConsume: _consume,
    m.BasicGet: _consume,
}
