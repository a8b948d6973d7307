"""Routing within a virtual host: where a published or dead-lettered message goes.

A publish names an exchange; the exchange's bindings pick queues and, through
exchange-to-exchange bindings, further exchanges, walked breadth-first and
cycle-safe.  As in RabbitMQ, an exchange's alternate exchange is used when its
own bindings select nothing, and the default exchange routes to the queue
named by the routing key.  Dead letters are republished through the
dead-letter exchange the same way, minus the queues that would close a
dead-lettering cycle.  :meth:`Routing.binding_status` answers Qpid's
``exchange.bound`` question about the same bindings.

:class:`Routing` is that part of :class:`~broker.messaging.namespace.Namespace`.
"""

from __future__ import annotations

from typing import Callable, Sequence, cast

from broker.errors import AccessRefused, NotFound
from broker.messaging.arrivals import enqueue_all
from broker.messaging.dead_letter import dead_lettered, is_cycle
from broker.messaging.exchange import Exchange
from broker.messaging.message import Message
from broker.messaging.queue import Queue

__all__ = ["Routing"]


class Routing:
    """Routing over a virtual host's exchanges and queues (a base of the Namespace)."""

    vhost_name: str
    clock: Callable[[], float]
    default_exchange: Exchange
    published_messages: int
    published_bytes: int
    _wall_clock: Callable[[], float]
    _queues: dict[str, Queue]
    _exchanges: dict[str, Exchange]

    def binding_status(self, exchange_name: str, queue_name: str = "",
                       routing_key: str = "") -> tuple[int, str]:
        """Answer Qpid's ``exchange.bound`` (0-8/0-9): ``(reply_code, reply_text)``.

        Codes as Broker-J's ExchangeBoundOkBody: 0 bound, 1 exchange not found,
        2 queue not found, 3 exchange has no bindings, 4 queue not bound to the
        exchange, 5 no queue bound with the key, 6 the queue not bound with the
        key.  Empty ``queue_name``/``routing_key`` mean "any".  The default
        exchange counts every queue as bound by its own name.
        """
        queue = self._queues.get(queue_name) if queue_name else None
        if queue_name and queue is None:
            if exchange_name and exchange_name not in self._exchanges:
                return 1, f"Exchange '{exchange_name}' not found"
            return 2, f"Queue '{queue_name}' not found"
        if not exchange_name:
            if not routing_key:
                return (0, "") if queue is not None or self._queues else (3, "")
            if queue is None:
                return (0, "") if routing_key in self._queues else (5, "")
            return (0, "") if routing_key == queue_name else (6, "")
        exchange = self._exchanges.get(exchange_name)
        if exchange is None:
            return 1, f"Exchange '{exchange_name}' not found"
        if queue is None:
            if not routing_key:
                return (0, "") if exchange.bindings else (3, "")
            if any(b.routing_key == routing_key for b in exchange.bindings.values()):
                return 0, ""
            return 5, f"No queue bound with routing key '{routing_key}' to exchange '{exchange_name}'"
        if not routing_key:
            if any(b.source is exchange for b in queue.bindings):
                return 0, ""
            return 4, f"Queue '{queue_name}' not bound to exchange '{exchange_name}'"
        if any(b.source is exchange and b.routing_key == routing_key for b in queue.bindings):
            return 0, ""
        return 6, (f"Queue '{queue_name}' not bound with routing key '{routing_key}' "
                   f"to exchange '{exchange_name}'")

    def route(self, exchange_name: str, message: Message) -> list[Queue]:
        """The queues ``message`` published to ``exchange_name`` goes to, each once.

        Raises NotFound for a missing exchange and AccessRefused for an internal one.
        """
        self.published_messages += 1
        self.published_bytes += len(message.body)
        if not exchange_name:
            queue = self._queues.get(message.routing_key)
            return [queue] if queue is not None else []
        exchange = self._exchanges.get(exchange_name)
        if exchange is None:
            raise NotFound(f"no exchange '{exchange_name}' in vhost '{self.vhost_name}'")
        if exchange.internal:
            raise AccessRefused(
                f"cannot publish to internal exchange '{exchange_name}' in vhost '{self.vhost_name}'")
        if not exchange.routes_to_exchanges:
            destinations = exchange.route(message)
            if destinations or exchange.alternate is None:
                return cast("list[Queue]", list(destinations))
        return self._route_graph(exchange, message)

    def _route_graph(self, start: Exchange, message: Message) -> list[Queue]:
        """Breadth-first over exchange-to-exchange bindings and alternate exchanges, cycle-safe.

        As in RabbitMQ, an exchange's alternate is used when the exchange's own
        bindings select nothing at all.
        """
        queues: dict[Queue, None] = {}
        seen = {start}
        pending = [start]
        index = 0
        default = self.default_exchange
        while index < len(pending):
            exchange = pending[index]
            index += 1
            destinations: Sequence[Queue | Exchange]
            if exchange is default:
                queue = self._queues.get(message.routing_key)
                destinations = (queue,) if queue is not None else ()
            else:
                destinations = exchange.route(message)
            if not destinations:
                alternate = self._exchanges.get(exchange.alternate) if exchange.alternate is not None else None
                if alternate is not None and alternate not in seen:
                    seen.add(alternate)
                    pending.append(alternate)
                continue
            for destination in destinations:
                if isinstance(destination, Exchange):
                    if destination not in seen:
                        seen.add(destination)
                        pending.append(destination)
                else:
                    queues[destination] = None
        return list(queues)

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        """Republish ``message`` through ``queue``'s dead-letter exchange (dropped if it is missing)."""
        settings = queue.settings
        name = settings.dead_letter_exchange
        if name is None:
            return
        exchange = self._exchanges.get(name)
        if exchange is None:
            return
        copy = dead_lettered(message, queue=queue.name, reason=reason,
                             wall_time=self._wall_clock(), exchange=name,
                             routing_key=settings.dead_letter_routing_key, arrival=self.clock())
        # kept, not held: the original left its queue already, whatever the journal says
        enqueue_all(copy, [target for target in self._route_graph(exchange, copy)
                           if not is_cycle(copy, target.name)], keep=True)
