"""RabbitMQ's sender-selected distribution for 0-9-1 publishers: the ``CC`` and ``BCC`` headers.

A publisher may list more routing keys in the ``CC`` and ``BCC`` headers
(arrays of strings); the message is routed with each of them as well as its
own, and reaches every queue at most once.  ``BCC`` is removed before any
consumer sees the message; ``CC`` stays (dead-lettering records it among the
``routing-keys`` of ``x-death``).  https://www.rabbitmq.com/docs/sender-selected
"""

from __future__ import annotations

from broker import errors
from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.messaging.queue import Queue

from .properties import FORMAT

__all__ = ["route_sender_selected"]


def route_sender_selected(namespace: Namespace, exchange: str, routing_key: str, body: bytes,
                          props: MessageProperties) -> tuple[Message, list[Queue]]:
    """The message to enqueue (without ``BCC``) and the queues any of its keys reach."""
    headers = dict(props.headers or {})
    keys = [routing_key]
    for name in ("CC", "BCC"):
        extra = headers.get(name)
        if extra is None:
            continue
        if not isinstance(extra, list) or not all(isinstance(k, (str, bytes)) for k in extra):
            raise errors.PreconditionFailed(f"header '{name}' must be an array of routing keys")
        keys += [k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in extra]
    headers.pop("BCC", None)
    message = Message(exchange=exchange, routing_key=routing_key, body=body,
                      properties=props.replace(headers=headers), format=FORMAT,
                      arrival=namespace.clock())
    queues: dict[int, Queue] = {}
    for key in dict.fromkeys(keys):
        probe = message if key == routing_key else Message(
            exchange=exchange, routing_key=key, body=body, properties=props, arrival=message.arrival)
        for queue in namespace.route(exchange, probe):
            queues.setdefault(id(queue), queue)
    return message, list(queues.values())
