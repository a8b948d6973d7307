"""Access control and group providers as configured objects: rules in force, persisted, managed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from broker.errors import ConfigurationError
from broker.model import Broker, MemoryConfigurationStore, State
from broker.model.access_control import RuleBasedAccessControlProvider
from broker.model.operations import declared_operations
from broker.model.permissions import Action, ManagementPermissions
from broker.security.acl_rules import ObjectType, Operation, Property, Result, Subject
from broker.security.principal import Principal
from tests.unit.model.conftest import Loader, minimal_config

CREATE, QUEUE = Operation.CREATE, ObjectType.QUEUE


def decide(broker: Broker, who: str, operation: Operation = CREATE,
           object_type: ObjectType = QUEUE, vhost: str | None = None, **props: Any) -> Result:
    control = broker.access_control
    given = {Property[k.upper()]: v for k, v in props.items()}
    return control.decide(control.subject(who), operation, object_type, given, vhost)


def rule_based(broker: Broker, *lines: str, **attributes: Any) -> RuleBasedAccessControlProvider:
    return cast(RuleBasedAccessControlProvider, broker.create_child(
        "AccessControlProvider", {"name": "acl", "type": "RuleBased", "rules": list(lines),
                                  **attributes}))


def invoke(obj: Any, name: str, **arguments: Any) -> Any:
    return declared_operations(type(obj))[name].invoke(obj, arguments)


def provider_of_file(load: Loader, tmp_path: Path, category: str, type_: str, file_name: str,
                     text: str) -> tuple[Broker, Any, Path]:
    """A broker with a ``category`` provider of ``type_`` over a file in its data directory."""
    path = tmp_path / "data" / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    broker = load().broker
    provider = broker.create_child(category, {"name": type_, "type": type_, "path": str(path)})
    return broker, provider, path


def test_no_provider_means_no_access_control(load: Loader) -> None:
    broker = load().broker
    assert not broker.access_control.active
    assert decide(broker, "anyone") is Result.ALLOWED


def test_rule_based_rules_are_in_force_once_created_and_gone_once_deleted(load: Loader) -> None:
    broker = load().broker
    provider = rule_based(broker, "ACL ALLOW alice CREATE QUEUE",
                          {"outcome": "DENY", "identity": "bob", "operation": "CREATE",
                           "objectType": "QUEUE", "attributes": {"name": "secret*"}},
                          "ACL ALLOW bob CREATE QUEUE")
    assert provider.rule_count == 3
    assert decide(broker, "alice", name="q") is Result.ALLOWED
    assert decide(broker, "bob", name="secret.1") is Result.DENIED
    assert decide(broker, "bob", name="open") is Result.ALLOWED
    assert decide(broker, "carol", name="q") is Result.DENIED              # default deny
    assert decide(broker, "alice", Operation.DELETE) is Result.DENIED      # no rule: default
    provider.delete()
    assert not broker.access_control.active


def test_the_default_result_is_an_attribute(load: Loader) -> None:
    broker = load().broker
    provider = rule_based(broker, "ACL ALLOW alice CREATE QUEUE", defaultResult="ALLOWED")
    assert decide(broker, "alice", Operation.DELETE) is Result.ALLOWED
    provider.set_attributes({"defaultResult": "DENIED"})
    assert decide(broker, "alice", Operation.DELETE) is Result.DENIED


def test_a_bad_rule_is_refused_naming_it(load: Loader) -> None:
    broker = load().broker
    with pytest.raises(ConfigurationError, match=r"rule 2: .*Not a valid action: 'FLY'"):
        rule_based(broker, "ACL ALLOW a ALL ALL", "ACL ALLOW a FLY QUEUE")
    assert broker.child("AccessControlProvider", "acl") is None
    provider = rule_based(broker, "ACL ALLOW a ALL ALL")
    with pytest.raises(ConfigurationError, match="'identity' is mandatory"):
        provider.set_attributes({"rules": [{"outcome": "ALLOW", "operation": "ALL"}]})
    assert provider.rule_count == 1


def test_rules_are_added_removed_extracted_and_loaded_by_operations(load: Loader,
                                                                    tmp_path: Path) -> None:
    broker = load().broker
    provider = rule_based(broker, "ACL ALLOW alice CREATE QUEUE")
    invoke(provider, "addRule", rule="ACL DENY alice CREATE QUEUE name=private", position=1)
    invoke(provider, "addRule", rule="ALLOW-LOG bob ALL ALL")
    assert decide(broker, "alice", name="private") is Result.DENIED
    assert decide(broker, "bob", name="x") is Result.ALLOWED
    assert [r["identity"] for r in provider.rules] == ["alice", "alice", "bob"]
    assert invoke(provider, "extractRules") == (
        "CONFIG defaultdeny=true\n"
        'ACL DENY alice CREATE QUEUE name="private"\n'
        "ACL ALLOW alice CREATE QUEUE\n"
        "ACL ALLOW-LOG bob ALL ALL\n")
    invoke(provider, "removeRule", position=1)
    assert decide(broker, "alice", name="private") is Result.ALLOWED
    with pytest.raises(ConfigurationError, match="there is no rule 9"):
        invoke(provider, "removeRule", position=9)
    acl = tmp_path / "data" / "loaded.acl"
    acl.parent.mkdir(parents=True, exist_ok=True)
    acl.write_text("CONFIG defaultallow=true\nACL DENY carol CREATE QUEUE\n")
    invoke(provider, "loadFromFile", path=str(acl))
    assert provider.default_result == "ALLOWED"
    assert decide(broker, "carol") is Result.DENIED
    assert decide(broker, "alice") is Result.DENIED                   # named, no match: deferred
    assert decide(broker, "alice", Operation.DELETE) is Result.ALLOWED  # not named: the default
    acl.write_text("ACL ALLOW carol ALL ALL\nGROUP x y\n")
    with pytest.raises(ConfigurationError, match="at line 2"):
        invoke(provider, "loadFromFile", path=str(acl))
    assert decide(broker, "carol") is Result.DENIED          # unchanged


def test_load_from_file_stays_inside_the_data_directory(load: Loader, tmp_path: Path) -> None:
    broker = load().broker
    provider = rule_based(broker, "ACL ALLOW a ALL ALL")
    outside = tmp_path / "outside.acl"
    outside.write_text("ACL ALLOW b ALL ALL\n")
    with pytest.raises(ConfigurationError, match="outside the data directory"):
        invoke(provider, "loadFromFile", path=str(outside))


def test_an_acl_file_provider_reads_its_file_and_reloads_it(load: Loader, tmp_path: Path) -> None:
    broker, provider, acl = provider_of_file(load, tmp_path, "AccessControlProvider", "AclFile",
                                             "broker.acl", "# rules\nACL ALLOW alice ALL ALL\n"
                                                           "ACL DENY-LOG ALL ALL ALL\n")
    assert decide(broker, "alice") is Result.ALLOWED
    assert decide(broker, "bob") is Result.DENIED
    acl.write_text("ACL ALLOW bob ALL ALL\n")
    invoke(provider, "reload")
    assert decide(broker, "bob") is Result.ALLOWED
    acl.write_text("ACL ALLOW bob ALL ALL\nACL ALLOW bob TELEPORT QUEUE\n")
    with pytest.raises(ConfigurationError, match=r"broker\.acl: .* at line 2"):
        invoke(provider, "reload")


def test_an_acl_file_with_a_bad_line_refuses_to_start(load: Loader, tmp_path: Path) -> None:
    acl = tmp_path / "bad.acl"
    acl.write_text("ACL ALLOW alice ALL ALL\n\nACL ALLOW\n")
    config = minimal_config(accesscontrolproviders=[
        {"name": "file", "type": "AclFile", "path": str(acl)}])
    with pytest.raises(ConfigurationError, match="at line 3"):
        load(config)


def test_group_file_groups_are_identities(load: Loader, tmp_path: Path) -> None:
    broker, provider, groups = provider_of_file(
        load, tmp_path, "GroupProvider", "GroupFile", "groups",
        "# who is who\nadministrators.users = admin,manager\nreaders.users=dave\n")
    rule_based(broker, "ACL ALLOW administrators ALL ALL", "ACL ALLOW readers CONSUME QUEUE")
    assert provider.groups == {"administrators": ["admin", "manager"], "readers": ["dave"]}
    assert broker.access_control.subject("manager") == \
        Subject("manager", frozenset({"administrators"}))
    assert decide(broker, "manager") is Result.ALLOWED
    assert decide(broker, "dave") is Result.DENIED
    assert decide(broker, "dave", Operation.CONSUME) is Result.ALLOWED
    invoke(provider, "addGroupMember", group="readers", user="erin")
    assert "readers.users=dave,erin" in groups.read_text()
    assert decide(broker, "erin", Operation.CONSUME) is Result.ALLOWED
    invoke(provider, "removeGroupMember", group="administrators", user="manager")
    assert decide(broker, "manager") is Result.DENIED


def test_a_missing_group_file_is_created_empty(load: Loader, tmp_path: Path) -> None:
    broker = load().broker
    path = tmp_path / "data" / "new-groups"
    provider = broker.create_child("GroupProvider",
                                   {"name": "g", "type": "GroupFile", "path": str(path)})
    assert path.read_text() == "" and provider.groups == {}


def test_a_virtual_host_provider_is_asked_first_and_defers_to_the_broker(load: Loader) -> None:
    broker = load().broker
    vhost = broker.find_virtual_host("node")
    assert vhost is not None
    rule_based(broker, "ACL ALLOW bob CREATE QUEUE")
    provider = vhost.create_child("VirtualHostAccessControlProvider", {
        "name": "vacl", "rules": ["ACL ALLOW alice CREATE QUEUE", "ACL DENY bob CREATE QUEUE"
                                  " name=mine"]})
    assert provider.default_result == "DEFERRED"
    assert decide(broker, "alice", vhost="node") is Result.ALLOWED
    assert decide(broker, "alice", vhost="elsewhere") is Result.DENIED
    assert decide(broker, "bob", vhost="node", name="other") is Result.ALLOWED     # deferred
    assert decide(broker, "bob", vhost="node", name="mine") is Result.DENIED
    provider.delete()
    assert decide(broker, "alice", vhost="node") is Result.DENIED


def test_rules_survive_a_restart_from_the_configuration_store(load: Loader) -> None:
    store = MemoryConfigurationStore()
    system = load(store=store)
    provider = rule_based(system.broker, "ACL ALLOW alice CREATE QUEUE")
    invoke(provider, "addRule", rule="ACL DENY alice ALL ALL")
    system.close()
    again = load(store=store).broker
    recovered = again.child("AccessControlProvider", "acl")
    assert recovered is not None and recovered.state is State.ACTIVE
    assert decide(again, "alice") is Result.ALLOWED
    assert decide(again, "alice", Operation.DELETE) is Result.DENIED


def test_management_needs_access_management_and_the_rule_for_the_action(load: Loader) -> None:
    broker = load().broker
    vhost = broker.find_virtual_host("node")
    assert vhost is not None
    permissions = ManagementPermissions()
    admin = Principal("anyone", "anon")            # the Anonymous provider: an administrator
    assert permissions.allowed(admin, Action.CREATE, vhost, "Queue", details={"name": "q"})
    rule_based(broker, "ACL ALLOW ALL ACCESS MANAGEMENT", 'ACL ALLOW anyone CREATE QUEUE name="q*"')
    assert permissions.allowed(admin, Action.READ, vhost, "VirtualHost")
    assert permissions.allowed(admin, Action.CREATE, vhost, "Queue", details={"name": "q1"})
    assert not permissions.allowed(admin, Action.CREATE, vhost, "Queue", details={"name": "x"})
    assert not permissions.allowed(admin, Action.CREATE, broker, "Port", details={"name": "p"})
    broker.child("AccessControlProvider", "acl").set_attributes(  # type: ignore[union-attr]
        {"rules": ["ACL ALLOW anyone CONFIGURE BROKER"]})
    assert not permissions.allowed(admin, Action.READ, vhost, "VirtualHost")  # no ACCESS MANAGEMENT
