"""Access control providers and group providers: Broker-J's ACL, as configured objects.

* ``AccessControlProvider`` (a child of the Broker) of type

  - ``AclFile``: the rules of an ACL file (``path``), read on open and by
    the ``reload`` operation; the file's ``CONFIG`` line gives the default
    result (DENIED unless it says otherwise);
  - ``RuleBased``: the rules kept in the broker's configuration store (the
    ``rules`` attribute, a list of ``{"outcome", "identity", "operation",
    "objectType", "attributes"}``), with operations ``addRule`` (one line of
    ACL syntax), ``removeRule`` (by position), ``loadFromFile`` (replace them
    with a file's) and ``extractRules`` (the rules as file text);
    ``defaultResult`` answers when no rule names an action (DENIED).

* ``VirtualHostAccessControlProvider`` (a child of a VirtualHost), type
  ``RuleBased``: asked before the broker's providers about what happens in
  its virtual host; its ``defaultResult`` is DEFERRED, so what it does not
  decide the broker's providers do.

* ``GroupProvider`` of type ``GroupFile``: the groups of a Broker-J group file
  (``<group>.users=user1,user2``), read on open and by ``reload``; a user's
  groups are looked up when it logs in and ACL rules name them as identities.

Providers are asked in ``priority`` order (lower first).  Whenever one opens,
changes or goes, :func:`apply` hands the rule sets in force to the broker's
:class:`~broker.security.access_control.AccessControl`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from broker.errors import ConfigurationError
from broker.model import registry
from broker.model.attributes import attribute, derived
from broker.model.confinement import check_path
from broker.model.configured_object import ConfiguredObject, State
from broker.model.operations import operation
from broker.security import acl_file, group_file
from broker.security.access_control import AccessControl
from broker.security.acl_rules import ObjectType, Operation, Outcome, Property, Result, Rule, \
    RuleSet

log = logging.getLogger(__name__)

RESULTS = tuple(r.value for r in Result)


class InForce(ConfiguredObject):
    """A provider whose content (rules, groups) is read on validation and put in force on
    open and on every change, so that a change that cannot be read is refused before it is
    applied (or stored); deleting it takes the content out of force."""

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self._checked: Any = None

    def read(self) -> Any:
        """The content, read from the attributes or a file (ConfigurationError if bad)."""
        raise NotImplementedError

    def put_in_force(self, content: Any) -> None:
        raise NotImplementedError

    def hand_over(self, obj: ConfiguredObject) -> None:
        """Give the broker of ``obj`` what its providers of this kind now have in force."""
        apply(obj)

    def validate(self) -> None:
        self._checked = self.read()

    def on_open(self) -> None:
        self.put_in_force(self._checked if self._checked is not None else self.read())
        self.hand_over(self)

    def set_attributes(self, changes: Mapping[str, Any]) -> None:
        super().set_attributes(changes)
        if self.state is State.ACTIVE and self._checked is not None:
            self.put_in_force(self._checked)
            self.hand_over(self)

    def delete(self) -> None:
        broker = self.ancestor("Broker")
        super().delete()
        if broker is not None:
            self.hand_over(broker)

    def reread(self) -> None:
        self.put_in_force(self.read())
        self.hand_over(self)


class RuleProvider(InForce):
    """What the broker's and a virtual host's providers share: rules in force, kept current."""

    type = attribute(str, mandatory=True, mutable=False,
                     description="Provider type: AclFile or RuleBased")
    priority = attribute(int, default=10,
                         description="Providers are asked in priority order, lowest first")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self.rule_set: RuleSet | None = None

    def read(self) -> RuleSet:
        return self.load_rule_set()

    def put_in_force(self, content: RuleSet) -> None:
        self.rule_set = content

    def load_rule_set(self) -> RuleSet:
        raise ConfigurationError(f"{self.label} has no rules")

    @derived(int, description="The number of rules in force")
    def rule_count(self) -> int:
        return len(self.rule_set) if self.rule_set is not None else 0

    @operation(description="The rules in force as the text of an ACL file", changes=False,
               returns=str)
    def extract_rules(self) -> str:
        rules = self.rule_set
        if rules is None:
            return ""
        return acl_file.format_acl(rules.rules, rules.default)


class AccessControlProvider(RuleProvider):
    """Base of the broker's access control provider types."""

    category = "AccessControlProvider"


class AclFileAccessControlProvider(AccessControlProvider):
    type_name = "AclFile"

    path = attribute(str, mandatory=True, path=True,
                     description="The ACL file (Broker-J syntax); read on open and by reload")

    def writes_to_paths(self) -> bool:
        return False

    def load_rule_set(self) -> RuleSet:
        return acl_file.parse(read_text(self.path, self.label), self.path).rule_set()

    @operation(description="Read the ACL file again")
    def reload(self) -> None:
        self.reread()


class RuleBasedRules(RuleProvider):
    """The ``rules`` attribute and its operations, for the broker's and a virtual host's."""

    rules = attribute(list, default=[], expand=False,
                      description="The ACL rules in order: {outcome, identity, operation,"
                                  " objectType, attributes}")
    default_result = attribute(str, default="DENIED", choices=RESULTS,
                               description="The result when no rule names an action")

    def load_rule_set(self) -> RuleSet:
        rules = [rule_from_json(item, f"{self.label}: rule {i + 1}")
                 for i, item in enumerate(self.rules or [])]
        return RuleSet(rules, Result(self.default_result or "DENIED"))

    def _replace(self, rules: list[Rule], default: Result | None = None) -> None:
        changes: dict[str, Any] = {"rules": [rule_to_json(r) for r in rules]}
        if default is not None:
            changes["defaultResult"] = default.value
        self.set_attributes(changes)

    def _current(self) -> list[Rule]:
        return list(self.rule_set.rules) if self.rule_set is not None else []

    @operation(description="Add one rule written as a line of an ACL file (the leading ACL"
                           " may be left out), at position (1 is first; 0 or absent: last)",
               rule=attribute(str, mandatory=True, description="ACL ALLOW alice CREATE QUEUE"),
               position=attribute(int, default=0, description="1-based; 0: append"))
    def add_rule(self, rule: str, position: int = 0) -> None:
        rules = self._current()
        parsed = acl_file.parse_rule(rule)
        if position < 0 or position > len(rules) + 1:
            raise ConfigurationError(f"position {position} is outside 1..{len(rules) + 1}")
        rules.insert(position - 1 if position else len(rules), parsed)
        self._replace(rules)

    @operation(description="Remove the rule at position (1 is first)",
               position=attribute(int, mandatory=True, description="1-based"))
    def remove_rule(self, position: int) -> None:
        rules = self._current()
        if not 1 <= position <= len(rules):
            raise ConfigurationError(f"there is no rule {position}; there are {len(rules)}")
        del rules[position - 1]
        self._replace(rules)

    @operation(description="Replace the rules with those of an ACL file (and its CONFIG line)",
               path=attribute(str, mandatory=True, description="The ACL file to load"))
    def load_from_file(self, path: str) -> None:
        roots = self.root.path_roots()
        if roots is not None:
            check_path(path, roots, self.label, "path")
        parsed = acl_file.parse(read_text(path, self.label), path)
        self._replace(parsed.rules, parsed.default if parsed.default_given else None)


class RuleBasedAccessControlProvider(RuleBasedRules, AccessControlProvider):
    type_name = "RuleBased"


class VirtualHostAccessControlProvider(RuleProvider):
    """A virtual host's own rules, asked before the broker's."""

    category = "VirtualHostAccessControlProvider"

    type = attribute(str, default="RuleBased", mutable=False,
                     description="Provider type: RuleBased")


class RuleBasedVirtualHostAccessControlProvider(RuleBasedRules, VirtualHostAccessControlProvider):
    type_name = "RuleBased"

    default_result = attribute(str, default="DEFERRED", choices=RESULTS,
                               description="The result when no rule names an action (DEFERRED:"
                                           " the broker's providers decide)")


class GroupProvider(InForce):
    """Base of the group provider types."""

    category = "GroupProvider"

    type = attribute(str, mandatory=True, mutable=False, description="Provider type: GroupFile")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self.members: dict[str, frozenset[str]] = {}

    def read(self) -> dict[str, frozenset[str]]:
        return self.load_groups()

    def put_in_force(self, content: dict[str, frozenset[str]]) -> None:
        self.members = content

    def load_groups(self) -> dict[str, frozenset[str]]:
        return {}

    @derived(dict, description="Group name -> its members")
    def groups(self) -> dict[str, list[str]]:
        return {name: sorted(users) for name, users in sorted(self.members.items())}


class GroupFileGroupProvider(GroupProvider):
    type_name = "GroupFile"

    path = attribute(str, mandatory=True, path=True,
                     description="The group file (<group>.users=user1,user2); created empty if"
                                 " missing")

    def load_groups(self) -> dict[str, frozenset[str]]:
        path = Path(self.path)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        return group_file.parse(read_text(self.path, self.label), self.path)

    @operation(description="Read the group file again")
    def reload(self) -> None:
        self.reread()

    @operation(description="Add a user to a group (created if new), and write the file",
               group=attribute(str, mandatory=True), user=attribute(str, mandatory=True))
    def add_group_member(self, group: str, user: str) -> None:
        if "," in user or not user.strip() or not group.strip():
            raise ConfigurationError("group and user names must be non-empty, without commas")
        members = dict(self.members)
        members[group] = members.get(group, frozenset()) | {user}
        self._write(members)

    @operation(description="Remove a user from a group, and write the file",
               group=attribute(str, mandatory=True), user=attribute(str, mandatory=True))
    def remove_group_member(self, group: str, user: str) -> None:
        if user not in self.members.get(group, frozenset()):
            raise ConfigurationError(f"user '{user}' is not in group '{group}'")
        members = dict(self.members)
        members[group] = members[group] - {user}
        self._write(members)

    def _write(self, members: dict[str, frozenset[str]]) -> None:
        path = Path(self.path)
        spare = path.with_name(path.name + ".new")
        spare.write_text(group_file.format_groups(members))
        spare.replace(path)
        self.members = members
        self.hand_over(self)


# -- rules as JSON (the RuleBased ``rules`` attribute) ------------------------------------

def rule_to_json(rule: Rule) -> dict[str, Any]:
    return {"outcome": rule.outcome.value, "identity": rule.identity,
            "operation": rule.operation.value, "objectType": rule.object_type.value,
            "attributes": {prop.value: (list(values) if len(values) > 1 else values[0])
                           for prop, values in rule.predicates.items()}}


def rule_from_json(item: Any, where: str) -> Rule:
    if isinstance(item, str):
        try:
            return acl_file.parse_rule(item)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc.text}") from None
    if not isinstance(item, Mapping):
        raise ConfigurationError(f"{where}: expected an object or a line of ACL syntax")
    try:
        outcome = Outcome(str(item.get("outcome", "")).upper().replace("_", "-"))
        operation_ = Operation(str(item.get("operation", "ALL")).upper())
        object_type = ObjectType(str(item.get("objectType", "ALL")).upper())
        identity = str(item["identity"])
        predicates: dict[Property, tuple[str, ...]] = {}
        for key, value in dict(item.get("attributes") or {}).items():
            values = value if isinstance(value, list) else [value]
            predicates[Property.parse(str(key))] = tuple(_text(v) for v in values)
        return Rule(outcome, identity, operation_, object_type, predicates)
    except KeyError:
        raise ConfigurationError(f"{where}: 'identity' is mandatory") from None
    except ValueError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def read_text(path: str, label: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{label}: cannot read '{path}': {exc}") from None


# -- handing the rules in force to the broker ----------------------------------------------

def apply(obj: ConfiguredObject) -> None:
    """Give the broker of ``obj`` the rule sets and groups of its active providers."""
    broker = obj.ancestor("Broker")
    control = getattr(broker, "access_control", None)
    if broker is None or not isinstance(control, AccessControl):
        return
    hosts = {str(vhost.name): _rule_sets(vhost.children("VirtualHostAccessControlProvider"), obj)
             for vhost in getattr(broker, "virtual_hosts", [])}
    membership: dict[str, set[str]] = {}
    for provider in broker.children("GroupProvider"):
        if provider.state is State.ACTIVE or provider is obj:
            for group, users in cast(GroupProvider, provider).members.items():
                for user in users:
                    membership.setdefault(user, set()).add(group)
    frozen = {user: frozenset(groups) for user, groups in membership.items()}
    control.configure(_rule_sets(broker.children("AccessControlProvider"), obj), hosts,
                      lambda user: frozen.get(user, frozenset()))


def _rule_sets(providers: list[ConfiguredObject], opening: ConfiguredObject | None = None
               ) -> list[RuleSet]:
    live = [p for p in providers if p.state is State.ACTIVE or p is opening]
    live.sort(key=lambda p: (int(p.attributes().get("priority") or 0), str(p.name)))
    return [rs for p in live if (rs := getattr(p, "rule_set", None)) is not None]


for _cls in (AclFileAccessControlProvider, RuleBasedAccessControlProvider,
             RuleBasedVirtualHostAccessControlProvider, GroupFileGroupProvider):
    registry.register_type(_cls)
