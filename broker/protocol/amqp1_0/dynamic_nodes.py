"""Dynamic nodes (AMQP 1.0 part 3.5.3/3.5.4 ``dynamic``, 3.5.9 node properties): temporary queues.

A client that attaches with a ``dynamic`` source (a receiver: the reply-to
pattern) or a ``dynamic`` target (a sender: Qpid JMS makes a
``TemporaryQueue`` so) and no address asks the broker to make a node for
the link.  The broker declares a non-durable queue named as Broker-J names
its temporary queues, ``TempQueue<uuid>``, and answers the attach with that
name as the terminus's address; any client may then send to it (a
request's ``reply-to``), and receivers may attach to it by name.

Lifetime (3.5.10): the queue belongs to the link that made it, and is
deleted when that link ends -- closed, or its terminus expired (with the
default expiry policy ``session-end`` and timeout 0, when its session ends
or its connection goes) -- as the ``delete-on-close`` policy says, the
default and the one the broker applies: the answer's
``dynamic-node-properties`` carry ``lifetime-policy`` ``delete-on-close``
whatever the client asked (the specification lets the node's owner say what
it applied).  The link registry deletes it, as it deletes a subscription's
queue (the queue is the link's :attr:`~broker.messaging.link_registry.Link.subscription_queue`).
A link resumed after a detach without ``closed`` finds its node again by
the address its terminus kept.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from broker.messaging.link_terminus import Terminus

from .definitions import DeleteOnClose, Target
from .values import Symbol

if TYPE_CHECKING:
    from broker.messaging.link_registry import Link
    from broker.messaging.namespace import Namespace

__all__ = ["TEMPORARY_QUEUE_PREFIX", "LIFETIME_POLICY", "needs_node", "make_dynamic_node",
           "applied_node_properties", "answer_target", "dynamic_source_fields"]

#: the prefix of the queues the broker makes for dynamic nodes (Broker-J's)
TEMPORARY_QUEUE_PREFIX = "TempQueue"
LIFETIME_POLICY = Symbol("lifetime-policy")


def needs_node(terminus: Terminus) -> bool:
    """Whether ``terminus`` asks for a node the broker has not made yet."""
    return terminus.dynamic and terminus.address is None


def make_dynamic_node(namespace: Namespace, link: Link) -> Terminus:
    """Declare the temporary queue of ``link`` (dynamic, no address yet); its terminus, with the
    queue's name as its address, is the link's from now on (and stored if it is durable)."""
    while True:
        name = f"{TEMPORARY_QUEUE_PREFIX}{uuid.uuid4()}"
        if name not in namespace.queues:
            break
    namespace.declare_queue(name, durable=False)
    link.subscription_queue = name              # the registry deletes it with the link
    terminus = replace(link.terminus, address=name)
    namespace.links.update_terminus(link, terminus)
    return terminus


def applied_node_properties(terminus: Terminus) -> dict[Any, Any] | None:
    """The ``dynamic-node-properties`` of the broker's answer: the lifetime policy it applies."""
    return {LIFETIME_POLICY: DeleteOnClose()} if terminus.dynamic else None


def answer_target(requested: Target | None, default: Target, terminus: Terminus) -> Target:
    """The target the broker answers a sender's attach with: the client's, with a dynamic
    node's address and properties filled in; ``default`` (the terminus's own) when it sent none."""
    base = requested if requested is not None else default
    if not terminus.dynamic:
        return base
    return replace(base, address=terminus.address, dynamic=True,
                   dynamic_node_properties=applied_node_properties(terminus))


def dynamic_source_fields(terminus: Terminus) -> dict[str, Any]:
    """The fields of a dynamic source in the broker's answer (none for any other source)."""
    if not terminus.dynamic:
        return {}
    return {"dynamic": True, "dynamic_node_properties": applied_node_properties(terminus)}

