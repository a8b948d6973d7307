"""The broker's access decisions: chained rule sets, per-connection checks, denials.

:class:`AccessControl` is one per broker (``broker.access_control``).  The
model (:mod:`broker.model.access_control`) hands it the rule sets of the
access control providers -- the broker's, and each virtual host's -- every
time one changes (:meth:`AccessControl.configure`); each change bumps
:attr:`AccessControl.version`, which is what cached decisions compare.

A decision about something in virtual host ``v`` asks ``v``'s providers
first, then the broker's, in priority order; the first ALLOWED or DENIED
wins (Broker-J's ``CompoundAccessControl``).  When all of them defer, the
answer is DENIED.  With no provider at all there is no access control: all
is allowed, and :attr:`AccessControl.active` is False, which is the only
thing a check looks at then.

:class:`ConnectionAccess` is what a protocol engine holds for one
connection (Broker-J's security token): the subject (user, groups, address)
fixed at open, and a cache of publish decisions by (exchange, routing key),
dropped when the rules change, so a message costs a dictionary lookup.

Denials raise :class:`~broker.errors.AccessRefused` (0-9-1: channel error
403; 1.0: ``amqp:unauthorized-access``) and are counted
(:attr:`AccessControl.denials`); each kind of denial (user, action, object
type) is logged once at WARNING, later ones are only counted.  Rules with
``-LOG`` log what they decide (once per distinct user and request).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker.errors import AccessRefused, ConnectionAccessRefused
from broker.security.acl_rules import Decision, ObjectType, Operation, Properties, Property, \
    Result, RuleSet, Subject, describe, properties as named_properties
from broker.security.host_names import HostNames

log = logging.getLogger("deltamq.acl")

#: distinct (user, request) pairs remembered for logging, and publish decisions per connection
LOG_MEMORY = 10_000
PUBLISH_CACHE_SIZE = 4096

GroupLookup = Callable[[str], frozenset[str]]


class AccessControl:
    """Every access decision of one broker (see the module docstring)."""

    def __init__(self) -> None:
        self.version = 0
        self.active = False
        self._broker: tuple[RuleSet, ...] = ()
        #: per virtual host with rules of its own: its rule sets, then the broker's
        self._chains: dict[str, tuple[RuleSet, ...]] = {}
        self._groups: GroupLookup = lambda user: frozenset()
        #: some rule in force has from_hostname: clients' names are looked up (:attr:`host_names`)
        self.uses_hostnames = False
        self.host_names = HostNames()
        #: decisions that refused something, and that allowed something with a -LOG rule
        self.denials = 0
        self.logged_allowed = 0
        self._warned: set[tuple[str, Operation, ObjectType]] = set()
        self._logged: set[tuple[str, Result, str]] = set()

    def configure(self, broker: Iterable[RuleSet], hosts: Mapping[str, Iterable[RuleSet]],
                  groups: GroupLookup | None = None) -> None:
        """The rule sets now in force (each list in priority order), and who is in which group."""
        self._broker = tuple(broker)
        self._chains = {name: (*sets, *self._broker) for name, sets in hosts.items() if sets}
        if groups is not None:
            self._groups = groups
        self.active = bool(self._broker or self._chains)
        self.uses_hostnames = any(Property.FROM_HOSTNAME in rule.predicates
                                  for sets in (self._broker, *self._chains.values())
                                  for rule_set in sets for rule in rule_set.rules)
        self.version += 1
        self._warned.clear()

    def groups_of(self, user: str) -> frozenset[str]:
        return self._groups(user)

    def subject(self, name: str, remote_address: str | None = None,
                hostname: str | None = None) -> Subject:
        """The subject of a user logging in now: its groups are looked up once, here."""
        return Subject(name, self._groups(name), remote_address, hostname)

    def connection_access(self, user: str, remote_address: str, vhost: str) -> ConnectionAccess:
        """The checks of a connection of ``user`` opening ``vhost`` now: its subject has the
        client's host name if it is known, or gets it when its look-up ends
        (:mod:`broker.security.host_names`).  ACCESS VIRTUALHOST is not checked here."""
        names = self.host_names if self.uses_hostnames else None
        hostname = names.known(remote_address)[1] if names is not None else None
        access = ConnectionAccess(self, self.subject(user, remote_address, hostname), vhost)
        if names is not None and hostname is None:
            names.when_known(remote_address, access.hostname_known)
        return access

    # -- deciding ---------------------------------------------------------------------------

    def decide(self, subject: Subject, operation: Operation, object_type: ObjectType,
               properties: Properties, vhost: str | None = None) -> Result:
        """ALLOWED or DENIED (never DEFERRED): what the providers in force say."""
        if not self.active:
            return Result.ALLOWED
        chain = self._chains.get(vhost, self._broker) if vhost is not None else self._broker
        decision = Decision(Result.DEFERRED)
        for rule_set in chain:
            decision = rule_set.check(subject, operation, object_type, properties)
            if decision.result.final:
                break
        result = decision.result if decision.result.final else Result.DENIED
        if decision.logged:
            self._log_decision(subject, result, operation, object_type, properties)
        if result is Result.DENIED:
            self.denied(subject, operation, object_type, properties)
        return result

    def allows(self, subject: Subject, operation: Operation, object_type: ObjectType,
               properties: Properties, vhost: str | None = None) -> bool:
        return self.decide(subject, operation, object_type, properties, vhost) is Result.ALLOWED

    def denied(self, subject: Subject, operation: Operation, object_type: ObjectType,
               properties: Properties) -> None:
        """Count a denial; log the first of its kind."""
        self.denials += 1
        kind = (subject.name, operation, object_type)
        if kind not in self._warned:
            if len(self._warned) >= LOG_MEMORY:
                self._warned.clear()
            self._warned.add(kind)
            log.warning("ACL denied user '%s': %s (further %s %s denials of this user are counted,"
                        " not logged, until the rules change)", subject.name,
                        describe(operation, object_type, properties), operation.value,
                        object_type.value)

    def _log_decision(self, subject: Subject, result: Result, operation: Operation,
                      object_type: ObjectType, properties: Properties) -> None:
        if result is Result.ALLOWED:
            self.logged_allowed += 1
        text = describe(operation, object_type, properties)
        key = (subject.name, result, text)
        if key in self._logged:
            return
        if len(self._logged) >= LOG_MEMORY:
            self._logged.clear()
        self._logged.add(key)
        code = "ACL-1002" if result is Result.ALLOWED else "ACL-1003"
        log.info("%s : %s : user '%s' %s", code, result.value.capitalize(), subject.name, text)


class ConnectionAccess:
    """The checks of one messaging connection (see the module docstring)."""

    __slots__ = ("control", "subject", "vhost", "_version", "_publish")

    def __init__(self, control: AccessControl, subject: Subject, vhost: str) -> None:
        self.control = control
        self.subject = subject
        self.vhost = vhost
        self._version = -1
        self._publish: dict[tuple[str, str], bool] = {}

    def hostname_known(self, hostname: str | None) -> None:
        """The client's host name was looked up after the connection opened."""
        if hostname:
            self.subject = dataclasses.replace(self.subject, hostname=hostname)
            self._version = -1                  # cached publish decisions are made again

    def check_access(self) -> None:
        """ACCESS VIRTUALHOST: may this subject open the virtual host at all (connect)?"""
        control = self.control
        if control.active and not control.allows(
                self.subject, Operation.ACCESS, ObjectType.VIRTUALHOST,
                {Property.NAME: self.vhost, Property.VIRTUALHOST_NAME: self.vhost}, self.vhost):
            raise ConnectionAccessRefused(f"access to vhost '{self.vhost}' refused for user"
                                          f" '{self.subject.name}'")

    def check(self, operation: Operation, object_type: ObjectType, name: str,
              **given: Any) -> None:
        """Refuse (AccessRefused) unless the rules allow ``operation`` on ``object_type`` ``name``.

        ``given``: further properties by :class:`Property` member name
        (``durable=True``, ``routing_key="k"``); None values are left out.
        """
        control = self.control
        if not control.active:
            return
        props = {Property.NAME: name, Property.VIRTUALHOST_NAME: self.vhost,
                 **named_properties(**given)}
        if not control.allows(self.subject, operation, object_type, props, self.vhost):
            raise AccessRefused(_refusal(operation, object_type, name, self.vhost,
                                         self.subject.name))

    def check_publish(self, exchange: str, routing_key: str) -> None:
        """PUBLISH EXCHANGE name routingkey, per message: decided once per (exchange, key)."""
        control = self.control
        if not control.active:
            return
        if self._version != control.version:
            self._publish.clear()
            self._version = control.version
        key = (exchange, routing_key)
        allowed = self._publish.get(key)
        if allowed is None:
            allowed = control.allows(
                self.subject, Operation.PUBLISH, ObjectType.EXCHANGE,
                {Property.NAME: exchange, Property.ROUTING_KEY: routing_key,
                 Property.VIRTUALHOST_NAME: self.vhost}, self.vhost)
            if len(self._publish) >= PUBLISH_CACHE_SIZE:
                self._publish.clear()
            self._publish[key] = allowed
        elif not allowed:
            control.denials += 1
        if not allowed:
            raise AccessRefused(f"publish to exchange '{exchange}' with routing key"
                                f" '{routing_key}' in vhost '{self.vhost}' refused for user"
                                f" '{self.subject.name}'")


#: the checks of a connection before it opened a virtual host: there is nothing to check yet
UNCHECKED = ConnectionAccess(AccessControl(), Subject(""), "")


def _refusal(operation: Operation, object_type: ObjectType, name: str, vhost: str,
             user: str) -> str:
    return (f"{operation.value.lower()} {object_type.value.lower()} '{name}' in vhost '{vhost}'"
            f" refused for user '{user}'")
