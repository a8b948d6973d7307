"""What a receiving client asks of the broker's source beyond its address (AMQP 1.0 part 3.5.3).

- **Filters** (3.5.8, the filter map of the source): the JMS selector filter
  (``apache.org:selector-filter:string``, descriptor symbol or the ulong
  ``0x0000468C00000004`` that Qpid JMS sends, JMS selector syntax) filters
  the link's consumer on a queue and the subscription queue's binding on an
  exchange.  A selector that does not compile refuses the link with
  ``amqp:invalid-field`` naming the selector and where it is wrong.  The
  legacy binding filters of the AMQP filter registry
  (``apache.org:legacy-amqp-direct-binding:string`` and
  ``...-topic-binding:string``) give the binding key of a subscription to an
  exchange address without a key.  Filters the broker does not apply (no-local,
  headers bindings, anything else) are left out of the answer: the ``attach``
  the broker sends back echoes only the filters it applied, as the
  specification asks, so a client can tell.
- **Consumer priority**: the attach property ``rabbitmq:priority``
  (RabbitMQ 4) or ``priority`` (Broker-J), an int; the link is then a
  consumer of that priority, as an AMQP 0-9-1 consumer with ``x-priority``
  (:mod:`broker.messaging.consumers`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from broker.messaging.link_terminus import Terminus
from broker.messaging.selectors import Selector, compile_selector
from broker.messaging.selector_syntax import SelectorError

from .conditions import AmqpErrorCondition, ProtocolFault, Scope
from .definitions import Attach, Source
from .values import Described, Symbol

__all__ = ["SELECTOR_DESCRIPTORS", "BINDING_DESCRIPTORS", "PRIORITY_PROPERTIES", "selector_text",
           "binding_key_of", "checked_selector", "consumer_priority", "answer_source", "JMS_SELECTOR_KEY"]

SELECTOR_DESCRIPTORS: tuple[Any, ...] = ("apache.org:selector-filter:string", 0x0000468C00000004)
#: legacy direct and topic binding filters: their string is a binding key
BINDING_DESCRIPTORS: tuple[Any, ...] = ("apache.org:legacy-amqp-direct-binding:string", 0x0000468C00000000,
                                        "apache.org:legacy-amqp-topic-binding:string", 0x0000468C00000001)
#: attach properties naming a consumer priority, in the order they are read
PRIORITY_PROPERTIES = ("rabbitmq:priority", "priority")
#: the filter key Qpid JMS uses (and the broker, echoing a selector it kept without one)
JMS_SELECTOR_KEY = Symbol("jms-selector")

_INT_MIN, _INT_MAX = -(2 ** 31), 2 ** 31 - 1


def _entries(filters: dict[Any, Any] | None, descriptors: tuple[Any, ...]) -> list[tuple[Any, Described]]:
    return [(key, value) for key, value in (filters or {}).items()
            if isinstance(value, Described) and value.descriptor in descriptors]


def selector_text(filters: dict[Any, Any] | None) -> str | None:
    """The text of the JMS selector filter in a source's filter map, if it has one."""
    for _key, value in _entries(filters, SELECTOR_DESCRIPTORS):
        return str(value.value)
    return None


def binding_key_of(filters: dict[Any, Any] | None) -> str | None:
    """The binding key of a legacy direct or topic binding filter, if the filter map has one."""
    for _key, value in _entries(filters, BINDING_DESCRIPTORS):
        return str(value.value)
    return None


def checked_selector(text: str, handle: int | None = None) -> Selector:
    """``text`` compiled; a link fault ``amqp:invalid-field`` naming what is wrong if it does not."""
    try:
        return compile_selector(text)
    except SelectorError as exc:
        raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD,
                            f"invalid JMS selector filter {text!r}: {exc.text}", Scope.LINK, handle) from None


def consumer_priority(attach: Attach) -> int:
    """The consumer priority the attach's properties ask for (0 when none)."""
    properties = attach.properties or {}
    for name in PRIORITY_PROPERTIES:
        if name not in properties:
            continue
        value = properties[name]
        if isinstance(value, bool) or not isinstance(value, int) or not _INT_MIN <= value <= _INT_MAX:
            raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD,
                                f"link property '{name}' is {value!r}: not a 32-bit integer consumer priority",
                                Scope.LINK, attach.handle)
        return int(value)
    return 0


def applied_filters(requested: dict[Any, Any] | None, terminus: Terminus,
                    binding_key: str | None) -> dict[Any, Any] | None:
    """The entries of ``requested`` the broker applies (the selector of ``terminus``, the binding
    filter whose key it used); a selector kept without its entry comes back as ``jms-selector``."""
    applied: dict[Any, Any] = {}
    if terminus.selector is not None:
        kept = [(k, v) for k, v in _entries(requested, SELECTOR_DESCRIPTORS) if str(v.value) == terminus.selector]
        key, value = kept[0] if kept else (JMS_SELECTOR_KEY,
                                           Described(Symbol(SELECTOR_DESCRIPTORS[0]), terminus.selector))
        applied[key] = value
    if binding_key is not None:
        applied.update((k, v) for k, v in _entries(requested, BINDING_DESCRIPTORS) if str(v.value) == binding_key)
    return applied or None


def answer_source(requested: Source | None, default: Source, terminus: Terminus, *,
                  binding_key: str | None = None, **fields: Any) -> Source:
    """The source the broker answers an attach with: the client's (``default``, the terminus's
    own, when it sent none) with the address in force, the filters applied, and ``fields``."""
    base = requested if requested is not None else default
    filters = applied_filters(requested.filter if requested is not None else default.filter, terminus,
                              binding_key)
    return replace(base, address=terminus.address, filter=filters, **fields)
