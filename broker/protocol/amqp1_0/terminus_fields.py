"""An attach's source or target and the link registry's :class:`Terminus`, both ways.

What a link's ``attach`` says about its node becomes the registry's terminus
(kept in ``link_termini`` when durable); a link recovered with a null source or
target (spec 2.6.3) is answered with the source or target its terminus gives
back.
"""

from __future__ import annotations

from typing import Any

from broker.messaging.link_terminus import ExpiryPolicy, Terminus, TerminusDurability

from .conditions import AmqpErrorCondition, ProtocolFault, Scope
from .decoding import describe
from .definitions import Source, Target
from .receiver_options import SELECTOR_DESCRIPTORS, selector_text
from .values import Described, Symbol


def terminus_of(node: Source | Target | None) -> Terminus | None:
    if node is None:
        return None
    if not isinstance(node, (Source, Target)):          # the attach's fields are "*": any described value
        raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD, f"a terminus that is {describe(node)}", Scope.LINK)
    try:
        policy = ExpiryPolicy(str(node.expiry_policy))
    except ValueError:
        raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD, f"expiry-policy {node.expiry_policy!r}",
                            Scope.LINK) from None
    durable = TerminusDurability(min(max(int(node.durable), 0), 2))
    address = node.address if node.address is None else str(node.address)
    capabilities = node.capabilities
    if isinstance(capabilities, str):
        capabilities = [capabilities]
    distribution = getattr(node, "distribution_mode", None)
    return Terminus(address=address, durable=durable, expiry_policy=policy, timeout=node.timeout or None,
                    dynamic=bool(node.dynamic),
                    distribution_mode=str(distribution) if distribution is not None else None,
                    selector=selector_text(getattr(node, "filter", None)),
                    capabilities=tuple(str(c) for c in capabilities or ()))


def _node_fields(terminus: Terminus) -> dict[str, Any]:
    return {"address": terminus.address, "durable": int(terminus.durable),
            "expiry_policy": Symbol(terminus.expiry_policy.value), "timeout": terminus.timeout or 0,
            "dynamic": terminus.dynamic,
            "capabilities": [Symbol(c) for c in terminus.capabilities] or None}


def source_of(terminus: Terminus) -> Source:
    filters = None
    if terminus.selector is not None:
        filters = {Symbol("jms-selector"): Described(Symbol(SELECTOR_DESCRIPTORS[0]), terminus.selector)}
    return Source(distribution_mode=Symbol(terminus.distribution_mode) if terminus.distribution_mode else None,
                  filter=filters, **_node_fields(terminus))


def target_of(terminus: Terminus) -> Target:
    return Target(**_node_fields(terminus))
