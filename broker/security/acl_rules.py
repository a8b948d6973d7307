"""ACL rules as Broker-J writes them: permissions, actions, object types, properties.

A rule (``ACL ALLOW-LOG alice CREATE QUEUE name="orders.*" durable="true"``)
has an outcome, an identity (a user, a group, or ``ALL``), an action, an
object type and property predicates.  A :class:`RuleSet` is an ordered list of
rules with a default result; :meth:`RuleSet.check` answers the first
matching rule's outcome, as Broker-J's ``RuleSetImpl`` does:

* no rule at all names the action and object type (``ALL`` counts): the
  rule set's default result (``CONFIG defaultdeny=true``: DENIED, the default);
* rules name them but none matches the subject and the properties: DEFERRED,
  so the next access control provider (a virtual host's defers to the
  broker's) decides;
* otherwise the first matching rule's outcome.

Property values are strings; a value ending in ``*`` matches by prefix (``*``
alone matches anything, even an absent property); several values
(``name=["a", "b*"]`` or the property repeated) match if any does.  Booleans
compare case-insensitively.  ``from_network`` takes comma-separated CIDR
ranges or ``*``-wildcarded IPv4 addresses, ``from_hostname`` comma-separated
regular expressions, ``attribute_names`` the attributes an UPDATE may change.

Nothing here touches the model: :mod:`broker.security.access_control`
chains rule sets, :mod:`broker.security.acl_file` reads and writes the text.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable


class Result(enum.Enum):
    """An access control's answer (Broker-J's ``Result``)."""

    ALLOWED = "ALLOWED"
    DENIED = "DENIED"
    DEFERRED = "DEFERRED"

    @property
    def final(self) -> bool:
        return self is not Result.DEFERRED


class Outcome(enum.Enum):
    """A rule's permission (Broker-J's ``RuleOutcome``)."""

    ALLOW = "ALLOW"
    ALLOW_LOG = "ALLOW-LOG"
    DENY = "DENY"
    DENY_LOG = "DENY-LOG"

    @property
    def allowed(self) -> bool:
        return self in (Outcome.ALLOW, Outcome.ALLOW_LOG)

    @property
    def logged(self) -> bool:
        return self in (Outcome.ALLOW_LOG, Outcome.DENY_LOG)

    @property
    def result(self) -> Result:
        return Result.ALLOWED if self.allowed else Result.DENIED


class Operation(enum.Enum):
    """An ACL action (Broker-J's ``LegacyOperation``)."""

    ALL = "ALL"
    CONSUME = "CONSUME"
    PUBLISH = "PUBLISH"
    CREATE = "CREATE"
    ACCESS = "ACCESS"
    BIND = "BIND"
    UNBIND = "UNBIND"
    DELETE = "DELETE"
    PURGE = "PURGE"
    UPDATE = "UPDATE"
    CONFIGURE = "CONFIGURE"
    ACCESS_LOGS = "ACCESS_LOGS"
    SHUTDOWN = "SHUTDOWN"
    INVOKE = "INVOKE"


_O = Operation


class ObjectType(enum.Enum):
    """What an ACL action applies to (Broker-J's ``ObjectType``), with the actions it supports."""

    ALL = "ALL"
    VIRTUALHOSTNODE = "VIRTUALHOSTNODE"
    VIRTUALHOST = "VIRTUALHOST"
    MANAGEMENT = "MANAGEMENT"
    QUEUE = "QUEUE"
    EXCHANGE = "EXCHANGE"
    METHOD = "METHOD"
    USER = "USER"
    GROUP = "GROUP"
    BROKER = "BROKER"

    @property
    def operations(self) -> frozenset[Operation]:
        return _SUPPORTED[self]


_SUPPORTED: dict[ObjectType, frozenset[Operation]] = {
    ObjectType.ALL: frozenset(Operation),
    ObjectType.VIRTUALHOSTNODE: frozenset({_O.ALL, _O.CREATE, _O.DELETE, _O.UPDATE, _O.INVOKE}),
    ObjectType.VIRTUALHOST: frozenset({_O.ALL, _O.ACCESS, _O.CREATE, _O.DELETE, _O.UPDATE,
                                       _O.ACCESS_LOGS, _O.INVOKE}),
    ObjectType.MANAGEMENT: frozenset({_O.ALL, _O.ACCESS}),
    ObjectType.QUEUE: frozenset({_O.ALL, _O.CREATE, _O.DELETE, _O.PURGE, _O.CONSUME, _O.UPDATE,
                                 _O.INVOKE}),
    ObjectType.EXCHANGE: frozenset({_O.ALL, _O.ACCESS, _O.CREATE, _O.DELETE, _O.BIND, _O.UNBIND,
                                    _O.PUBLISH, _O.UPDATE, _O.INVOKE}),
    ObjectType.METHOD: frozenset({_O.ALL, _O.ACCESS, _O.UPDATE}),
    ObjectType.USER: frozenset({_O.ALL, _O.CREATE, _O.DELETE, _O.UPDATE, _O.INVOKE}),
    ObjectType.GROUP: frozenset({_O.ALL, _O.CREATE, _O.DELETE, _O.UPDATE, _O.INVOKE}),
    ObjectType.BROKER: frozenset({_O.ALL, _O.CONFIGURE, _O.ACCESS_LOGS, _O.SHUTDOWN, _O.INVOKE}),
}


class Property(enum.Enum):
    """A property a rule may test (Broker-J's ``Property``); the value is the file's spelling."""

    NAME = "name"
    ROUTING_KEY = "routingkey"
    QUEUE_NAME = "queuename"
    OWNER = "owner"
    TYPE = "type"
    ALTERNATE = "alternate"
    DURABLE = "durable"
    EXCLUSIVE = "exclusive"
    TEMPORARY = "temporary"
    AUTO_DELETE = "autodelete"
    COMPONENT = "component"
    PACKAGE = "package"
    CLASS = "class"
    FROM_NETWORK = "from_network"
    FROM_HOSTNAME = "from_hostname"
    VIRTUALHOST_NAME = "virtualhost_name"
    METHOD_NAME = "method_name"
    ATTRIBUTES = "attribute_names"
    CREATED_BY = "created_by"
    CONNECTION_LIMIT = "connection_limit"
    CONNECTION_FREQUENCY_LIMIT = "connection_frequency_limit"

    @classmethod
    def parse(cls, text: str) -> Property:
        """Case and underscores do not matter (``routingKey``, ``queue_name``), as in Broker-J."""
        found = _BY_CANONICAL.get(_canonical(text))
        if found is None:
            raise ValueError(f"unknown property '{text}'")
        return found

    @property
    def boolean(self) -> bool:
        return self in _BOOLEAN


def _canonical(text: str) -> str:
    return text.replace("_", "").lower()


_BY_CANONICAL: dict[str, Property] = {_canonical(p.value): p for p in Property}
_BY_CANONICAL["attributes"] = Property.ATTRIBUTES         # Broker-J's own name for it
_BOOLEAN = frozenset({Property.DURABLE, Property.EXCLUSIVE, Property.TEMPORARY,
                      Property.AUTO_DELETE})
#: properties that describe the client, not the object: matched against the subject
CLIENT_PROPERTIES = frozenset({Property.FROM_NETWORK, Property.FROM_HOSTNAME})

#: the identity that matches everyone (case-insensitive in a file)
ALL = "ALL"


@dataclass(frozen=True, slots=True)
class Subject:
    """Who asks: the user, the groups it belongs to, where it connects from."""

    name: str
    groups: frozenset[str] = frozenset()
    remote_address: str | None = None
    hostname: str | None = None
    #: the names a rule's identity may give: the user's and its groups' (made once, not per check)
    identities: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "identities", self.groups | {self.name})


#: what is asked about: property -> value (str, bool, or a collection of attribute names)
Properties = Mapping[Property, Any]


# -- property predicates -------------------------------------------------------------------

def _value_matcher(pattern: str, boolean: bool) -> Callable[[Any], bool]:
    if pattern == "*":
        return lambda value: True
    if boolean:
        wanted = pattern.lower()
        return lambda value: value is not None and str(value).lower() == wanted
    if pattern.endswith("*"):
        prefix = pattern[:-1]
        return lambda value: value is not None and str(value).startswith(prefix)
    return lambda value: value is not None and str(value) == pattern


def _network_matcher(values: Iterable[str]) -> Callable[[Subject], bool]:
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    wildcards: list[re.Pattern[str]] = []
    for item in (part.strip() for value in values for part in value.split(",")):
        if not item:
            continue
        if "*" in item:
            octets = item.split(".")
            if len(octets) != 4 or not all(o == "*" or (o.isdigit() and int(o) < 256)
                                           for o in octets):
                raise ValueError(f"'{item}' is not an IPv4 address with wildcards")
            wildcards.append(re.compile(r"\.".join(r"\d+" if o == "*" else re.escape(o)
                                                   for o in octets) + r"$"))
        else:
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"'{item}' is not a network (CIDR) or address") from None

    def matches(subject: Subject) -> bool:
        address = subject.remote_address
        if not address:
            return False
        if any(pattern.match(address) for pattern in wildcards):
            return True
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip.version == net.version and ip in net for net in networks)
    return matches


def _hostname_matcher(values: Iterable[str]) -> Callable[[Subject], bool]:
    patterns = []
    for item in (part.strip() for value in values for part in value.split(",")):
        if item:
            try:
                patterns.append(re.compile(item))
            except re.error as exc:
                raise ValueError(f"'{item}' is not a regular expression: {exc}") from None

    def matches(subject: Subject) -> bool:
        host = subject.hostname
        return host is not None and any(p.fullmatch(host) for p in patterns)
    return matches


def _attributes_matcher(values: Iterable[str]) -> Callable[[Properties], bool]:
    allowed = frozenset(a.strip() for v in values for a in v.split(",") if a.strip())
    return lambda props: set(props.get(Property.ATTRIBUTES) or ()) <= allowed


def _property_matcher(prop: Property, values: Iterable[str]) -> Callable[[Properties], bool]:
    matchers = [_value_matcher(v, prop.boolean) for v in values]
    return lambda props: any(m(props.get(prop)) for m in matchers)


@dataclass(frozen=True)
class Rule:
    """One ACL rule.  ``predicates``: property -> the values it may have (any matches)."""

    outcome: Outcome
    identity: str
    operation: Operation
    object_type: ObjectType = ObjectType.ALL
    predicates: Mapping[Property, tuple[str, ...]] = field(default_factory=dict)
    #: made from the above once: whether the identity is ALL, and the predicates as tests of
    #: the subject (from_network, from_hostname) and of the properties asked about
    for_all: bool = field(init=False, repr=False, compare=False)
    client_tests: tuple[Callable[[Subject], bool], ...] = field(init=False, repr=False,
                                                                compare=False)
    object_tests: tuple[Callable[[Properties], bool], ...] = field(init=False, repr=False,
                                                                   compare=False)

    def __post_init__(self) -> None:
        if self.operation not in self.object_type.operations:
            raise ValueError(f"action {self.operation.value} does not apply to object type"
                             f" {self.object_type.value}; it takes"
                             f" {', '.join(sorted(o.value for o in self.object_type.operations))}")
        object_tests: list[Callable[[Properties], bool]] = []
        client_tests: list[Callable[[Subject], bool]] = []
        for prop, values in self.predicates.items():
            if not values:
                raise ValueError(f"property '{prop.value}' has no value")
            if prop is Property.FROM_NETWORK:
                client_tests.append(_network_matcher(values))
            elif prop is Property.FROM_HOSTNAME:
                client_tests.append(_hostname_matcher(values))
            elif prop is Property.ATTRIBUTES:
                object_tests.append(_attributes_matcher(values))
            else:
                object_tests.append(_property_matcher(prop, values))
        object.__setattr__(self, "for_all", self.identity.upper() == ALL)
        object.__setattr__(self, "client_tests", tuple(client_tests))
        object.__setattr__(self, "object_tests", tuple(object_tests))

    def applies_to(self, operation: Operation, object_type: ObjectType) -> bool:
        return (self.operation is Operation.ALL or self.operation is operation) and \
            (self.object_type is ObjectType.ALL or self.object_type is object_type)

    def matches(self, subject: Subject, properties: Properties) -> bool:
        return all(test(subject) for test in self.client_tests) and \
            all(test(properties) for test in self.object_tests)

    def key(self) -> tuple[Any, ...]:
        """What makes two rules the same rule (a duplicate is dropped, as Broker-J does)."""
        return (self.identity, self.operation, self.object_type,
                tuple(sorted((p.value, v) for p, v in self.predicates.items())))


@dataclass(frozen=True, slots=True)
class Decision:
    """A rule set's answer, and the rule that gave it (None: no rule did)."""

    result: Result
    rule: Rule | None = None

    @property
    def logged(self) -> bool:
        return self.rule is not None and self.rule.outcome.logged


class RuleSet:
    """An ordered list of rules and a default result (see the module docstring)."""

    def __init__(self, rules: Iterable[Rule], default: Result = Result.DENIED) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.default = default
        # (operation, object type) -> the rules that apply, None when none does
        self._by_action: dict[tuple[Operation, ObjectType], tuple[Rule, ...] | None] = {}

    def __len__(self) -> int:
        return len(self.rules)

    def check(self, subject: Subject, operation: Operation, object_type: ObjectType,
              properties: Properties) -> Decision:
        key = (operation, object_type)
        try:
            applicable = self._by_action[key]
        except KeyError:
            found = tuple(r for r in self.rules if r.applies_to(operation, object_type))
            applicable = self._by_action[key] = found or None
        if applicable is None:
            return Decision(self.default)
        identities = subject.identities
        for rule in applicable:
            if (rule.for_all or rule.identity in identities) and rule.matches(subject, properties):
                return Decision(rule.outcome.result, rule)
        return Decision(Result.DEFERRED)


def properties(**given: Any) -> dict[Property, Any]:
    """``properties(name="q", durable=True)``: keyword names are :class:`Property` member names."""
    return {Property[key.upper()]: value for key, value in given.items() if value is not None}


def describe(operation: Operation, object_type: ObjectType, props: Properties) -> str:
    """``CREATE QUEUE name="q" durable="true"``: how a decision is logged."""
    shown = " ".join(f'{p.value}="{_shown(v)}"' for p, v in props.items())
    return f"{operation.value} {object_type.value}" + (f" {shown}" if shown else "")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Collection) and not isinstance(value, str):
        return ",".join(sorted(str(v) for v in value))
    return str(value)
