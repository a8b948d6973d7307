"""AMQP 1.0 addresses: which exchange and routing key a target names, which queue a source.

A client names a node by its link's address (spec 3.5.3/3.5.4: the address
is the node's, its form the broker's business).  Accepted forms, in the order
they are tried (see ``docs/amqp-1-0.md``):

- RabbitMQ 4's v2 addresses: ``/queues/<queue>`` (target and source),
  ``/exchanges/<exchange>`` and ``/exchanges/<exchange>/<routing key>``
  (targets), every segment percent-encoded;
- Broker-J's: a queue's name; an exchange's name (the routing key is then
  the message's ``subject``); ``<exchange>/<routing key>``.

A source naming an exchange (``/exchanges/<exchange>[/<binding key>]``, an
exchange's name, ``<exchange>/<binding key>``) subscribes: the link reads a
queue of its own bound to the exchange (the link registry's subscriptions);
without a key it binds ``#`` to a topic exchange and the empty key elsewhere.

The names are looked up in the virtual host's namespace when the link
attaches: an address naming nothing is refused with ``amqp:not-found``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from broker.errors import NotFound

if TYPE_CHECKING:
    from broker.messaging.namespace import Namespace

__all__ = ["Destination", "SourceNode", "resolve_target", "resolve_source"]

_QUEUES = "/queues/"
_EXCHANGES = "/exchanges/"


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a receiving link's messages go: ``exchange`` ("" the default) and ``routing_key``;
    ``key_from_subject``: the routing key is each message's subject instead."""

    exchange: str
    routing_key: str = ""
    key_from_subject: bool = False


def _segment(text: str, address: str) -> str:
    if not text or "/" in text:
        raise NotFound(f"address '{address}' is not of the form /queues/<queue> or"
                       " /exchanges/<exchange>[/<routing key>]")
    return unquote(text)


def resolve_target(namespace: Namespace, address: str) -> Destination:
    """The destination of a target ``address``; NotFound when it names no exchange or queue."""
    vhost = namespace.vhost_name
    if address.startswith(_QUEUES):
        queue = _segment(address[len(_QUEUES):], address)
        namespace.queue(queue)
        return Destination("", queue)
    if address.startswith(_EXCHANGES):
        exchange, slash, key = address[len(_EXCHANGES):].partition("/")
        name = _segment(exchange, address)
        if name == "amq.default":
            name = ""
        if name:
            namespace.exchange(name)
        if slash:
            return Destination(name, _segment(key, address))
        return Destination(name, "", key_from_subject=True)
    if address in namespace.queues:
        return Destination("", address)
    if address in namespace.exchanges:
        return Destination(address, "", key_from_subject=True)
    exchange, slash, key = address.partition("/")
    if slash and exchange in namespace.exchanges:
        return Destination(exchange, key)
    raise NotFound(f"no exchange or queue '{address}' in vhost '{vhost}'")


@dataclass(frozen=True, slots=True)
class SourceNode:
    """What a sending link reads: ``queue``, or a subscription to ``exchange`` with ``binding_key``."""

    queue: str | None = None
    exchange: str = ""
    binding_key: str = ""


def _subscription(namespace: Namespace, exchange: str, key: str | None) -> SourceNode:
    if key is None:        # the whole exchange: every key of a topic exchange, the empty key elsewhere
        key = "#" if namespace.exchange(exchange).type == "topic" else ""
    return SourceNode(exchange=exchange, binding_key=key)


def resolve_source(namespace: Namespace, address: str) -> SourceNode:
    """The queue, or exchange to subscribe to, that a source ``address`` names; NotFound when none."""
    if address.startswith(_QUEUES):
        name = _segment(address[len(_QUEUES):], address)
        namespace.queue(name)
        return SourceNode(queue=name)
    if address.startswith(_EXCHANGES):
        exchange, slash, key = address[len(_EXCHANGES):].partition("/")
        name = _segment(exchange, address)
        namespace.exchange(name)
        return _subscription(namespace, name, _segment(key, address) if slash else None)
    if address in namespace.queues:
        return SourceNode(queue=address)
    if address in namespace.exchanges and address:
        return _subscription(namespace, address, None)
    exchange, slash, key = address.partition("/")
    if slash and exchange and exchange in namespace.exchanges:
        return _subscription(namespace, exchange, key)
    raise NotFound(f"no queue or exchange '{address}' in vhost '{namespace.vhost_name}'")
