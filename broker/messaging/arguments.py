"""Queue and exchange declaration arguments, normalised in one place.

Clients name the same feature differently: RabbitMQ's ``x-max-priority`` is
Broker-J's ``x-qpid-priorities``, ``x-max-length`` is ``qpid.max_count``, and
so on.  :func:`queue_settings` reads every accepted spelling and produces one
typed :class:`QueueSettings`; nothing else in the broker looks at raw
arguments.  Invalid values raise ``PreconditionFailed`` with RabbitMQ's text,
``invalid arg 'x-max-length' for queue 'q' in vhost 'v': {value_negative,-1}``,
because that is the text client users search for.

When both a RabbitMQ and a Broker-J name are given, the RabbitMQ one wins.
Broker-J also takes its queue attribute names as declare arguments
(``priorities``, ``maximumQueueDepthMessages``, ``alternateExchange``, ...);
so does this module.

Arguments nobody here reads are ignored, as RabbitMQ does, unless the
virtual host's context variable ``queue.behaviourOnUnknownDeclareArgument``
(Broker-J's name) says ``FAIL`` (refused with 406, naming them) or ``LOG``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from broker.errors import PreconditionFailed

__all__ = ["QueueSettings", "queue_settings", "alternate_exchange_of", "required_alternate_of",
           "unknown_arguments", "unknown_argument_behaviour", "QUEUE_ARGUMENTS", "EXCHANGE_ARGUMENTS", "UNKNOWN_ARGUMENTS_VARIABLE",
           "UNKNOWN_ARGUMENT_BEHAVIOURS", "UnknownArguments", "amqp_type_name",
           "describe_value", "EQUIVALENCE_CHECKED_QUEUE_ARGS", "EQUIVALENCE_CHECKED_EXCHANGE_ARGS",
           "inequivalent_argument", "DEFAULT_LVQ_KEY", "MAX_SUPPORTED_PRIORITY"]

Overflow = Literal["drop-head", "reject-publish", "reject-publish-dlx", "producer-flow-control"]
QueueKind = Literal["standard", "priority", "lvq", "sorted"]

#: RabbitMQ's ceiling for x-max-priority (rabbit_amqqueue ?MAX_SUPPORTED_PRIORITY).
MAX_SUPPORTED_PRIORITY: Final = 255
#: Broker-J's key header when ``qpid.last_value_queue`` is set without a key.
DEFAULT_LVQ_KEY: Final = "qpid.LVQ_key"

_LVQ_KEY_NAMES: Final = ("x-last-value-key", "x-qpid-last-value-queue-key", "qpid.last_value_queue_key",
                         "lvqKey")
_OVERFLOWS: Final[tuple[Overflow, ...]] = ("drop-head", "reject-publish", "reject-publish-dlx")
# Broker-J's qpid.policy_type (OverflowPolicy names); "none" switches limits off;
# producer flow control blocks publishers instead (broker.messaging.flow_control).
_QPID_POLICIES: Final[dict[str, Overflow | None]] = {
    "ring": "drop-head", "reject": "reject-publish", "none": None,
    "producer_flow_control": "producer-flow-control"}

#: RabbitMQ's spelling of an exchange's alternate: it may be declared later and
#: deleted while named (RabbitMQ checks neither).
RABBITMQ_ALTERNATE_EXCHANGE: Final = "alternate-exchange"
#: Broker-J's spellings (``alternateExchange`` is its attribute name, on queues
#: too): as in Broker-J, the alternate must exist when named (else 404) and
#: cannot be deleted while it is named (530).
QPID_ALTERNATE_EXCHANGES: Final = ("x-qpid-alternate-exchange", "alternateExchange")

#: The context variable choosing what unknown declare arguments get (Broker-J's name and values).
UNKNOWN_ARGUMENTS_VARIABLE: Final = "queue.behaviourOnUnknownDeclareArgument"
UnknownArguments = Literal["IGNORE", "LOG", "FAIL"]
UNKNOWN_ARGUMENT_BEHAVIOURS: Final[tuple[UnknownArguments, ...]] = ("IGNORE", "LOG", "FAIL")

#: Every queue argument :func:`queue_settings` reads.
QUEUE_ARGUMENTS: Final = frozenset({
    "x-queue-type", "x-max-priority", "x-qpid-priorities", "priorities", *_LVQ_KEY_NAMES,
    "qpid.last_value_queue", "qpid.queue_sort_key", "sortKey", "x-max-length", "qpid.max_count",
    "maximumQueueDepthMessages", "x-max-length-bytes", "qpid.max_size", "maximumQueueDepthBytes",
    "x-overflow", "qpid.policy_type", "overflowPolicy", "x-dead-letter-exchange", "alternateExchange",
    "x-dead-letter-routing-key", "x-delivery-limit", "x-qpid-maximum-delivery-count",
    "maximumDeliveryAttempts", "x-message-ttl", "x-expires", "x-single-active-consumer", "x-queue-mode"})
#: Every exchange argument the broker reads.
EXCHANGE_ARGUMENTS: Final = frozenset({RABBITMQ_ALTERNATE_EXCHANGE, *QPID_ALTERNATE_EXCHANGES})

#: Arguments compared on redeclare, RabbitMQ-style (unknown ``x-`` arguments are not).
EQUIVALENCE_CHECKED_QUEUE_ARGS: Final = frozenset({
    "x-max-priority", "x-qpid-priorities", "x-message-ttl", "x-expires", "x-max-length",
    "x-max-length-bytes", "x-overflow", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-single-active-consumer", "x-delivery-limit", "x-queue-type", "qpid.max_count",
    "qpid.max_size", "qpid.policy_type", "x-qpid-maximum-delivery-count", "qpid.queue_sort_key",
    "qpid.last_value_queue", "priorities", "sortKey", "maximumQueueDepthMessages",
    "maximumQueueDepthBytes", "overflowPolicy", "alternateExchange", "maximumDeliveryAttempts",
    *_LVQ_KEY_NAMES})
EQUIVALENCE_CHECKED_EXCHANGE_ARGS: Final = frozenset({"alternate-exchange", "x-qpid-alternate-exchange",
                                                    "alternateExchange"})


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """What a queue's arguments mean, typed.  Durations are in milliseconds.

    ``priority_levels``/``priority_offset`` map a message priority ``p`` to the
    level ``clamp(p - offset, 0, levels - 1)``: RabbitMQ's ``x-max-priority N``
    is N+1 levels with offset 0 (priorities above N count as N); Broker-J's
    ``x-qpid-priorities N`` is N levels centred on the 0-9 JMS range
    (offset ``5 - (N+1)//2``, as its PriorityQueueList does).
    """

    kind: QueueKind = "standard"
    priority_levels: int = 0
    priority_offset: int = 0
    lvq_key: str | None = None
    sort_key: str | None = None
    message_ttl: int | None = None
    expires: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: Overflow = "drop-head"
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    single_active_consumer: bool = False
    #: redeliveries allowed: a message released after more than this many
    #: deliveries is dead-lettered (reason ``delivery_limit``) or dropped
    delivery_limit: int | None = None
    #: RabbitMQ's ``x-queue-mode: lazy``: persistent messages are paged out of memory
    #: as soon as they are durable (:mod:`broker.messaging.paged_queue`)
    lazy: bool = False

    @property
    def limited(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None


def amqp_type_name(value: Any) -> str:
    """The AMQP field-table type name RabbitMQ would report for ``value``."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (str, bytes, bytearray)):
        return "longstr"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def describe_value(value: Any) -> str:
    """RabbitMQ's wording for an argument value in an inequivalence error."""
    if value is None:
        return "none"
    return f"the value '{_text(value)}' of type '{amqp_type_name(value)}'"


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _ArgumentReader:
    """Reads one declaration's arguments and produces RabbitMQ-worded errors."""

    __slots__ = ("args", "queue", "vhost")

    def __init__(self, args: dict[str, Any], queue: str, vhost: str) -> None:
        self.args = args
        self.queue = queue
        self.vhost = vhost

    def fail(self, key: str, reason: str) -> PreconditionFailed:
        return PreconditionFailed(
            f"invalid arg '{key}' for queue '{self.queue}' in vhost '{self.vhost}': {reason}")

    def first(self, *keys: str) -> tuple[str, Any] | None:
        for key in keys:
            if key in self.args and self.args[key] is not None:
                return key, self.args[key]
        return None

    def integer(self, *keys: str, minimum: int = 0, lenient: bool = False,
                maximum: int | None = None) -> int | None:
        found = self.first(*keys)
        if found is None:
            return None
        key, value = found
        if lenient and isinstance(value, (str, bytes)):
            text = _text(value).strip()
            if text.lstrip("-").isdigit():
                value = int(text)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"{{unacceptable_type,{amqp_type_name(value)}}}")
        if value < minimum:
            raise self.fail(key, "{value_zero,0}" if value == 0 else f"{{value_negative,{value}}}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"{{max_value_exceeded,{value}}}")
        return value

    def string(self, *keys: str) -> str | None:
        found = self.first(*keys)
        if found is None:
            return None
        key, value = found
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8", "replace")
        if not isinstance(value, str):
            raise self.fail(key, f"{{unacceptable_type,{amqp_type_name(value)}}}")
        return value

    def boolean(self, key: str, *, lenient: bool = False) -> bool | None:
        if key not in self.args or self.args[key] is None:
            return None
        value = self.args[key]
        if lenient and isinstance(value, (str, bytes)):
            return _text(value).strip().lower() == "true"
        if not isinstance(value, bool):
            raise self.fail(key, f"{{unacceptable_type,{amqp_type_name(value)}}}")
        return value


def queue_settings(arguments: dict[str, Any] | None, queue: str = "", vhost: str = "") -> QueueSettings:
    """Normalise declaration ``arguments`` of ``queue`` into :class:`QueueSettings`.

    Raises PreconditionFailed for a value of the wrong type or range, an unknown
    ``x-overflow``/``qpid.policy_type``/``x-queue-type``, a dead-letter routing
    key without a dead-letter exchange, or two queue kinds at once.
    """
    if not arguments:
        return _DEFAULT_SETTINGS
    read = _ArgumentReader(arguments, queue, vhost)

    # A single in-memory node has nothing to replicate: RabbitMQ's quorum queue
    # is a classic queue here (its x-delivery-limit works on every queue).
    queue_type = read.string("x-queue-type")
    if queue_type is not None and queue_type not in ("classic", "quorum"):
        raise read.fail("x-queue-type", f"{{unsupported_queue_type,{queue_type}}}")

    levels, offset = 0, 0
    max_priority = read.integer("x-max-priority", maximum=MAX_SUPPORTED_PRIORITY)
    if max_priority is not None:
        if max_priority > 0:
            levels = max_priority + 1
    else:
        qpid_priorities = read.integer("x-qpid-priorities", "priorities", minimum=1, lenient=True,
                                       maximum=MAX_SUPPORTED_PRIORITY + 1)
        if qpid_priorities is not None and qpid_priorities > 1:
            levels, offset = qpid_priorities, 5 - (qpid_priorities + 1) // 2

    lvq_key = read.string(*_LVQ_KEY_NAMES)
    if lvq_key is None and read.boolean("qpid.last_value_queue", lenient=True):
        lvq_key = DEFAULT_LVQ_KEY
    sort_key = read.string("qpid.queue_sort_key", "sortKey")
    kinds: list[tuple[QueueKind, str]] = []
    if levels:
        kinds.append(("priority", "x-max-priority" if max_priority is not None else "x-qpid-priorities"))
    if lvq_key is not None:
        kinds.append(("lvq", "x-last-value-key"))
    if sort_key is not None:
        kinds.append(("sorted", "qpid.queue_sort_key"))
    if len(kinds) > 1:
        raise read.fail(kinds[1][1], f"{{conflicting_queue_type,{kinds[0][0]},{kinds[1][0]}}}")
    kind: QueueKind = kinds[0][0] if kinds else "standard"

    # Broker-J's legacy limits treat 0 as "no limit"; RabbitMQ's 0 is a real limit.
    # Broker-J's maximumQueueDepth* attributes: -1 is "no limit".
    max_length = read.integer("x-max-length")
    if max_length is None:
        max_length = read.integer("qpid.max_count", lenient=True) or None
    if max_length is None:
        max_length = _limit(read.integer("maximumQueueDepthMessages", minimum=-1, lenient=True))
    max_bytes = read.integer("x-max-length-bytes")
    if max_bytes is None:
        max_bytes = read.integer("qpid.max_size", lenient=True) or None
    if max_bytes is None:
        max_bytes = _limit(read.integer("maximumQueueDepthBytes", minimum=-1, lenient=True))

    overflow: Overflow = "drop-head"
    overflow_text = read.string("x-overflow")
    if overflow_text is not None:
        if overflow_text not in _OVERFLOWS:
            raise read.fail("x-overflow", f"{{unacceptable_value,{overflow_text}}}")
        overflow = overflow_text
    else:
        found = read.first("qpid.policy_type", "overflowPolicy")
        policy = read.string(found[0]) if found is not None else None
        if found is not None and policy is not None:
            policy = policy.strip().lower()
            if policy not in _QPID_POLICIES:
                raise read.fail(found[0], f"{{unsupported_policy,{policy}}}")
            mapped = _QPID_POLICIES[policy]
            if mapped is None:
                max_length = max_bytes = None
            else:
                overflow = mapped

    # Broker-J's queue alternateExchange takes what the queue rejects or gives up on: a DLX
    dlx = read.string("x-dead-letter-exchange", "alternateExchange")
    dlrk = read.string("x-dead-letter-routing-key")
    if dlrk is not None and dlx is None:
        raise read.fail("x-dead-letter-routing-key", "{routing_key_but_no_dlx_defined}")

    # RabbitMQ's x-delivery-limit N allows N redeliveries (N+1 deliveries);
    # Broker-J's maximumDeliveryAttempts N allows N deliveries in all (0: no limit).
    delivery_limit = read.integer("x-delivery-limit")
    if delivery_limit is None:
        attempts = read.integer("x-qpid-maximum-delivery-count", "maximumDeliveryAttempts", lenient=True)
        delivery_limit = attempts - 1 if attempts else None

    mode = read.string("x-queue-mode")
    if mode is not None and mode not in ("default", "lazy"):
        raise read.fail("x-queue-mode", f"{{unacceptable_value,{mode}}}")

    return QueueSettings(
        kind=kind, priority_levels=levels, priority_offset=offset, lvq_key=lvq_key,
        sort_key=sort_key, message_ttl=read.integer("x-message-ttl"),
        expires=read.integer("x-expires", minimum=1), max_length=max_length,
        max_length_bytes=max_bytes, overflow=overflow, dead_letter_exchange=dlx,
        dead_letter_routing_key=dlrk,
        single_active_consumer=bool(read.boolean("x-single-active-consumer")),
        delivery_limit=delivery_limit, lazy=mode == "lazy")


_DEFAULT_SETTINGS: Final = QueueSettings()


def _limit(value: int | None) -> int | None:
    return None if value is None or value < 0 else value


def _name_under(arguments: dict[str, Any] | None, keys: tuple[str, ...]) -> str | None:
    if not arguments:
        return None
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8", "replace")
        if isinstance(value, str):
            return value
    return None


def alternate_exchange_of(arguments: dict[str, Any] | None) -> str | None:
    """The alternate exchange named by exchange ``arguments`` (RabbitMQ or Broker-J spelling)."""
    return _name_under(arguments, (RABBITMQ_ALTERNATE_EXCHANGE, *QPID_ALTERNATE_EXCHANGES))


def required_alternate_of(arguments: dict[str, Any] | None) -> str | None:
    """The alternate exchange named with a Broker-J spelling (exchange or queue
    ``arguments``), which must exist and stays while named."""
    if arguments and RABBITMQ_ALTERNATE_EXCHANGE in arguments:
        return None                      # RabbitMQ's spelling wins, with RabbitMQ's lenience
    return _name_under(arguments, QPID_ALTERNATE_EXCHANGES)


def unknown_argument_behaviour(text: str | None) -> UnknownArguments:
    """The value of :data:`UNKNOWN_ARGUMENTS_VARIABLE` (case-insensitive; unset is IGNORE)."""
    value = (text or "IGNORE").strip().upper()
    for behaviour in UNKNOWN_ARGUMENT_BEHAVIOURS:
        if value == behaviour:
            return behaviour
    raise ValueError(f"context variable '{UNKNOWN_ARGUMENTS_VARIABLE}' is {text!r};"
                     f" expected one of {', '.join(UNKNOWN_ARGUMENT_BEHAVIOURS)}")


def unknown_arguments(arguments: dict[str, Any] | None, known: frozenset[str]) -> list[str]:
    """The names in ``arguments`` the broker does not read, sorted."""
    return sorted(key for key in arguments or () if key not in known)


def inequivalent_argument(current: dict[str, Any] | None, received: dict[str, Any] | None,
                          checked: frozenset[str]) -> tuple[str, Any, Any] | None:
    """The first checked argument whose value differs: ``(key, received, current)``."""
    current = current or {}
    received = received or {}
    for key in sorted(checked):
        mine, theirs = current.get(key), received.get(key)
        if isinstance(mine, (bytes, bytearray)):
            mine = bytes(mine).decode("utf-8", "replace")
        if isinstance(theirs, (bytes, bytearray)):
            theirs = bytes(theirs).decode("utf-8", "replace")
        if mine != theirs or isinstance(mine, bool) != isinstance(theirs, bool):
            return key, received.get(key), current.get(key)
    return None
