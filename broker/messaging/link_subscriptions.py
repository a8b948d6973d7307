"""The queues of AMQP 1.0 subscriptions to an exchange, made and removed for the link registry.

A sending link whose source is an exchange (a JMS topic subscriber) reads
from a queue of its own, bound to the exchange, as in Broker-J: named by
:func:`~broker.messaging.link_terminus.subscription_queue_name` (container
id and link name; ``durable`` when the source's expiry policy is ``never``,
so a durable subscription and its messages survive a restart), created on
the link's first attach, and deleted when the link is closed or its
terminus expires -- unless another link (a shared subscription) still reads
from it.  The source's selector becomes the binding's
``x-filter-jms-selector`` argument.  A resumed subscription whose exchange,
binding key or selector changed is a new subscription (JMS 2.0, 8.3): its
queue is deleted and made again.

Everything goes through the namespace's :meth:`~broker.messaging.namespace.Namespace.when_stored`,
so a durable queue and its binding are stored before they take effect,
without the event loop waiting for the commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.errors import BrokerError
from broker.messaging.link_terminus import ExpiryPolicy, Terminus, subscription_queue_name

if TYPE_CHECKING:
    from broker.messaging.namespace import Namespace
    from broker.messaging.queue import Queue

log = logging.getLogger(__name__)

#: the binding argument carrying a JMS selector (Broker-J's, read by the exchanges' filters)
SELECTOR_ARGUMENT = "x-filter-jms-selector"


class Subscriptions:
    """Makes and removes subscription queues in one namespace."""

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace

    def subscribe(self, key: tuple[str, str, Any], terminus: Terminus, current: str | None,
                  exchange: str, binding_key: str,
                  done: Callable[[str | None, BrokerError | None], None]) -> None:
        """The queue of the subscription of link ``key`` (container id, link name, role):
        ``current`` if it has one already, else a new one; ``done(name, None)`` once
        it exists and is bound (and stored), ``done(None, error)`` if not."""
        container, link_name = key[0], key[1]
        name = current or subscription_queue_name(container, link_name, terminus, str(uuid.uuid4()))
        durable = terminus.expiry_policy is ExpiryPolicy.NEVER
        arguments = {SELECTOR_ARGUMENT: terminus.selector} if terminus.selector else None
        namespace = self.namespace

        def operation() -> str:
            namespace.exchange(exchange)            # NotFound before anything is made
            queue = namespace.queues.get(name)
            if queue is not None and not _bound_only_by(queue, exchange, binding_key, arguments):
                namespace.delete_queue(name)
            namespace.declare_queue(name, durable=durable)
            namespace.bind_queue(name, exchange, binding_key, arguments)
            return name

        namespace.when_stored(operation, done)

    def unsubscribe(self, name: str) -> None:
        """Delete the subscription queue ``name`` (its link is gone)."""
        namespace = self.namespace

        def deleted(_: int | None, error: BrokerError | None) -> None:
            if error is not None:
                log.warning("virtual host '%s': subscription queue '%s' not deleted: %s",
                            namespace.vhost_name, name, error)

        namespace.when_stored(lambda: namespace.delete_queue(name), deleted)


def _bound_only_by(queue: Queue, exchange: str, binding_key: str,
                   arguments: dict[str, Any] | None) -> bool:
    """Whether ``queue``'s bindings are exactly the one a subscription asks for."""
    bindings = list(queue.bindings)
    if len(bindings) != 1:
        return not bindings           # a queue without bindings is bound next
    binding = bindings[0]
    return (binding.source.name == exchange and binding.routing_key == binding_key
            and binding.arguments == dict(arguments or {}))
