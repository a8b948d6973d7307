"""An AMQP 1.0 terminus as the link registry keeps it: plain Python, no codec.

The engine decodes a ``source`` or ``target`` (AMQP 1.0 part 3.5.3, 3.5.4)
into a :class:`Terminus` and encodes one back; the registry only reads the
fields that decide a link's lifetime (``durable``, ``expiry-policy``,
``timeout``) and keeps the rest to give back on resume and recovery.  The
unsettled map of a link (delivery tag -> delivery state, part 2.6.13) is
opaque bytes both ways: the engine encodes the states, the registry keeps
and persists them.

:func:`terminus_record` and :func:`terminus_from_record` are the JSON form
of the ``terminus`` column of ``link_termini`` (``docs/tables.md``); bytes
travel as base64.  :func:`subscription_queue_name` names the queue of a
topic subscription as Broker-J does.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TerminusDurability", "ExpiryPolicy", "Terminus", "terminus_record",
           "terminus_from_record", "unsettled_record", "unsettled_from_record",
           "subscription_queue_name", "SHARED_CAPABILITY", "GLOBAL_CAPABILITY"]

#: source capabilities of JMS 2.0 shared / global subscriptions (the qpid-jms mapping)
SHARED_CAPABILITY = "shared"
GLOBAL_CAPABILITY = "global"


class TerminusDurability(enum.IntEnum):
    """terminus-durability (3.5.5): what of the terminus outlives the broker."""

    NONE = 0              # nothing: the terminus is kept in memory only
    CONFIGURATION = 1     # the terminus itself
    UNSETTLED_STATE = 2   # the terminus and its unsettled map


class ExpiryPolicy(enum.Enum):
    """terminus-expiry-policy (3.5.6): what starts the terminus's expiry timer."""

    LINK_DETACH = "link-detach"             # the link detaching (also: closed, session, connection)
    SESSION_END = "session-end"             # the most recently associated session ending
    CONNECTION_CLOSE = "connection-close"   # the most recently associated connection closing
    NEVER = "never"                         # nothing: kept until the link is closed


@dataclass(frozen=True, slots=True)
class Terminus:
    """The broker's terminus of a link: its source (sending link) or target (receiving link).

    ``timeout`` is the peer's, in seconds; None when the peer sent none, when
    the virtual host's default applies (context variable
    ``deltamq.link_terminus_timeout``).  ``selector`` is the text of a
    JMS selector filter (``apache.org:selector-filter:string``), the one
    filter the broker evaluates; ``capabilities`` are symbols as text.
    """

    address: str | None = None
    durable: TerminusDurability = TerminusDurability.NONE
    expiry_policy: ExpiryPolicy = ExpiryPolicy.SESSION_END
    timeout: int | None = None
    dynamic: bool = False
    distribution_mode: str | None = None
    selector: str | None = None
    capabilities: tuple[str, ...] = ()

    @property
    def persistent(self) -> bool:
        """Whether the terminus is kept in the virtual host's terminus store."""
        return self.durable >= TerminusDurability.CONFIGURATION

    @property
    def keeps_unsettled(self) -> bool:
        """Whether the unsettled map is stored with it (durability ``unsettled-state``)."""
        return self.durable >= TerminusDurability.UNSETTLED_STATE

    def has_capability(self, capability: str) -> bool:
        return capability in self.capabilities


def terminus_record(terminus: Terminus) -> dict[str, Any]:
    """The JSON-able form of ``terminus`` (AMQP field names, absent fields left out)."""
    record: dict[str, Any] = {"durable": int(terminus.durable),
                              "expiry-policy": terminus.expiry_policy.value}
    if terminus.address is not None:
        record["address"] = terminus.address
    if terminus.timeout is not None:
        record["timeout"] = terminus.timeout
    if terminus.dynamic:
        record["dynamic"] = True
    if terminus.distribution_mode is not None:
        record["distribution-mode"] = terminus.distribution_mode
    if terminus.selector is not None:
        record["selector"] = terminus.selector
    if terminus.capabilities:
        record["capabilities"] = list(terminus.capabilities)
    return record


def terminus_from_record(record: Mapping[str, Any]) -> Terminus:
    """The terminus :func:`terminus_record` wrote; ValueError naming a field that is wrong."""
    try:
        durable = TerminusDurability(int(record.get("durable", 0)))
    except (TypeError, ValueError):
        raise ValueError(f"terminus field 'durable' is {record.get('durable')!r}:"
                         " not 0, 1 or 2") from None
    try:
        policy = ExpiryPolicy(record.get("expiry-policy", ExpiryPolicy.SESSION_END.value))
    except ValueError:
        raise ValueError(f"terminus field 'expiry-policy' is {record.get('expiry-policy')!r}:"
                         f" not one of {', '.join(p.value for p in ExpiryPolicy)}") from None
    timeout = record.get("timeout")
    if timeout is not None and (not isinstance(timeout, int) or timeout < 0):
        raise ValueError(f"terminus field 'timeout' is {timeout!r}: not a number of seconds")
    capabilities = record.get("capabilities") or ()
    return Terminus(address=record.get("address"), durable=durable, expiry_policy=policy,
                    timeout=timeout, dynamic=bool(record.get("dynamic", False)),
                    distribution_mode=record.get("distribution-mode"),
                    selector=record.get("selector"),
                    capabilities=tuple(str(c) for c in capabilities))


def unsettled_record(unsettled: Mapping[bytes, bytes]) -> list[list[str]]:
    """The unsettled map as JSON: ``[[tag, state], ...]``, both base64."""
    return [[base64.b64encode(tag).decode("ascii"), base64.b64encode(state).decode("ascii")]
            for tag, state in unsettled.items()]


def unsettled_from_record(pairs: Sequence[Sequence[str]]) -> dict[bytes, bytes]:
    return {base64.b64decode(tag): base64.b64decode(state) for tag, state in pairs}


def _sanitised(name: str) -> str:
    # Broker-J's escaping: '_' is the separator's first character, so it is doubled
    return (name.replace("_", "__").replace(".", "_:").replace("(", "_O").replace(")", "_C")
            .replace("<", "_L").replace(">", "_R"))


def subscription_queue_name(remote_container_id: str, link_name: str, terminus: Terminus,
                            unique: str) -> str:
    """The queue of a subscription to an exchange, named as Broker-J names it.

    ``qpidsub_/<container>_/<subscription>_/durable`` (or ``nondurable``):
    durable when the source's expiry policy is ``never``; a shared
    subscription's name is the link name up to its first ``|`` (qpid-jms
    appends ``|2``, ``|3`` for further consumers of one subscription); a
    global one uses ``_global_`` for the container.  A subscription neither
    durable nor shared is the link's alone: ``unique`` (a fresh id) names it.
    """
    durable = terminus.expiry_policy is ExpiryPolicy.NEVER
    shared = terminus.has_capability(SHARED_CAPABILITY)
    container = "_global_" if terminus.has_capability(GLOBAL_CAPABILITY) \
        else _sanitised(remote_container_id)
    if not durable and not shared:
        subscription = unique
    else:
        subscription = link_name
        if shared and subscription.find("|") > 0:
            subscription = subscription[:subscription.find("|")]
        subscription = _sanitised(subscription)
    return f"qpidsub_/{container}_/{subscription}_/{'durable' if durable else 'nondurable'}"
