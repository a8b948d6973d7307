"""ACL decisions as Broker-J makes them: first match, DEFERRED, defaults, groups, wildcards."""

from __future__ import annotations

import logging

import pytest

from broker.errors import AccessRefused, ConnectionAccessRefused
from broker.security.access_control import AccessControl, ConnectionAccess
from broker.security.acl_file import parse
from broker.security.acl_rules import ObjectType, Operation, Property, Result, RuleSet, Subject, \
    properties

QUEUE, EXCHANGE, VHOST = ObjectType.QUEUE, ObjectType.EXCHANGE, ObjectType.VIRTUALHOST
CREATE, CONSUME, PUBLISH = Operation.CREATE, Operation.CONSUME, Operation.PUBLISH


def rules(text: str) -> RuleSet:
    return parse(text).rule_set()


def check(rule_set: RuleSet, who: str | Subject, operation: Operation, object_type: ObjectType,
          **props: object) -> Result:
    subject = who if isinstance(who, Subject) else Subject(who)
    return rule_set.check(subject, operation, object_type, properties(**props)).result


def test_the_first_matching_rule_decides() -> None:
    dead = rules('ACL ALLOW bob ALL EXCHANGE\nACL DENY bob CREATE EXCHANGE name="myexch"')
    assert check(dead, "bob", CREATE, EXCHANGE, name="myexch") is Result.ALLOWED
    live = rules('ACL DENY bob CREATE EXCHANGE name="myexch"\nACL ALLOW bob ALL EXCHANGE')
    assert check(live, "bob", CREATE, EXCHANGE, name="myexch") is Result.DENIED
    assert check(live, "bob", CREATE, EXCHANGE, name="other") is Result.ALLOWED


def test_no_rule_for_the_action_gives_the_default() -> None:
    only_queues = rules("ACL ALLOW alice CREATE QUEUE")
    assert check(only_queues, "alice", CREATE, EXCHANGE, name="x") is Result.DENIED
    allowing = parse("CONFIG defaultallow=true\nACL DENY alice CREATE QUEUE").rule_set()
    assert check(allowing, "alice", CREATE, EXCHANGE, name="x") is Result.ALLOWED


def test_rules_for_the_action_that_do_not_match_defer() -> None:
    rule_set = rules("ACL ALLOW alice CREATE QUEUE")
    assert check(rule_set, "bob", CREATE, QUEUE, name="q") is Result.DEFERRED
    named = rules('ACL ALLOW alice CREATE QUEUE name="a"')
    assert check(named, "alice", CREATE, QUEUE, name="b") is Result.DEFERRED


def test_all_matches_every_user_action_and_object() -> None:
    rule_set = rules("ACL DENY-LOG ALL ALL ALL")
    for operation, object_type in ((CREATE, QUEUE), (PUBLISH, EXCHANGE),
                                   (Operation.ACCESS, VHOST)):
        assert check(rule_set, "anyone", operation, object_type) is Result.DENIED


def test_groups_are_identities() -> None:
    rule_set = rules("ACL ALLOW messaging-users CONSUME QUEUE\nACL DENY ALL CONSUME QUEUE")
    member = Subject("carol", frozenset({"messaging-users"}))
    assert check(rule_set, member, CONSUME, QUEUE, name="q") is Result.ALLOWED
    assert check(rule_set, "dave", CONSUME, QUEUE, name="q") is Result.DENIED


def test_user_names_are_case_sensitive() -> None:
    rule_set = rules("ACL ALLOW Alice CONSUME QUEUE")
    assert check(rule_set, "alice", CONSUME, QUEUE, name="q") is Result.DEFERRED


@pytest.mark.parametrize("pattern, name, matches", [
    ("orders", "orders", True), ("orders", "orders.eu", False), ("orders*", "orders.eu", True),
    ("orders.*", "orders", False), ("*", "anything", True), ("*", "", True), ("", "", True),
    ("", "x", False)])
def test_wildcard_values_match_by_prefix(pattern: str, name: str, matches: bool) -> None:
    rule_set = rules(f'ACL ALLOW alice CREATE QUEUE name="{pattern}"')
    assert (check(rule_set, "alice", CREATE, QUEUE, name=name) is Result.ALLOWED) is matches


def test_an_absent_property_matches_only_a_star() -> None:
    assert check(rules('ACL ALLOW a CREATE QUEUE owner="*"'), "a", CREATE, QUEUE,
                 name="q") is Result.ALLOWED
    assert check(rules('ACL ALLOW a CREATE QUEUE owner="a"'), "a", CREATE, QUEUE,
                 name="q") is Result.DEFERRED


def test_boolean_properties_compare_case_insensitively() -> None:
    rule_set = rules('ACL ALLOW a CREATE QUEUE durable="TRUE"')
    assert check(rule_set, "a", CREATE, QUEUE, name="q", durable=True) is Result.ALLOWED
    assert check(rule_set, "a", CREATE, QUEUE, name="q", durable=False) is Result.DEFERRED


def test_every_property_must_match() -> None:
    rule_set = rules('ACL ALLOW p PUBLISH EXCHANGE name="" routingKey="appqueue"')
    assert check(rule_set, "p", PUBLISH, EXCHANGE, name="", routing_key="appqueue") \
        is Result.ALLOWED
    assert check(rule_set, "p", PUBLISH, EXCHANGE, name="", routing_key="other") \
        is Result.DEFERRED
    assert check(rule_set, "p", PUBLISH, EXCHANGE, name="amq.direct", routing_key="appqueue") \
        is Result.DEFERRED


def test_a_list_of_values_matches_any() -> None:
    rule_set = rules('ACL ALLOW op INVOKE QUEUE method_name=["deleteMessages", "getMessage*"]')
    for method, result in (("deleteMessages", Result.ALLOWED), ("getMessageInfo", Result.ALLOWED),
                           ("clearQueue", Result.DEFERRED)):
        assert check(rule_set, "op", Operation.INVOKE, QUEUE, method_name=method) is result


def test_attribute_names_match_when_every_changed_attribute_is_listed() -> None:
    rule_set = rules('ACL ALLOW a UPDATE QUEUE attribute_names="description,alternateBinding"')
    assert check(rule_set, "a", Operation.UPDATE, QUEUE,
                 attributes={"description"}) is Result.ALLOWED
    assert check(rule_set, "a", Operation.UPDATE, QUEUE,
                 attributes={"description", "durable"}) is Result.DEFERRED


@pytest.mark.parametrize("networks, address, matches", [
    ("192.168.1.0/24,192.168.2.0/24", "192.168.2.7", True),
    ("192.168.1.0/24", "192.168.3.1", False),
    ("192.169.1.*", "192.169.1.200", True), ("192.169.1.*", "192.169.2.1", False),
    ("127.0.0.1", "::ffff:127.0.0.1", True), ("::1/128", "::1", True)])
def test_from_network_matches_cidr_ranges_and_wildcards(networks: str, address: str,
                                                        matches: bool) -> None:
    rule_set = rules(f'ACL DENY-LOG ALL ACCESS VIRTUALHOST from_network="{networks}"\n'
                     "ACL ALLOW ALL ACCESS VIRTUALHOST")
    result = check(rule_set, Subject("u", remote_address=address), Operation.ACCESS, VHOST,
                   name="default")
    assert (result is Result.DENIED) is matches


def test_from_hostname_matches_a_known_host_name_only() -> None:
    rule_set = rules(r'ACL ALLOW all ACCESS VIRTUALHOST from_hostname=".*\.company1\.com"')
    known = Subject("u", hostname="box.company1.com")
    assert check(rule_set, known, Operation.ACCESS, VHOST) is Result.ALLOWED
    assert check(rule_set, Subject("u"), Operation.ACCESS, VHOST) is Result.DEFERRED


# -- the chain: a virtual host's rules, then the broker's --------------------------------------

def control(broker: str, hosts: dict[str, str] | None = None) -> AccessControl:
    access = AccessControl()
    access.configure([rules(broker)] if broker else [],
                     {name: [parse(text).rule_set()] for name, text in (hosts or {}).items()})
    return access


def test_no_provider_allows_everything() -> None:
    access = AccessControl()
    assert not access.active
    assert access.decide(Subject("x"), CREATE, QUEUE, {}, "v") is Result.ALLOWED


def test_a_virtual_host_that_defers_leaves_it_to_the_broker() -> None:
    access = control("ACL ALLOW bob CREATE QUEUE",
                     {"v": "CONFIG defaultdefer=true\nACL ALLOW alice CREATE QUEUE"})
    assert access.decide(Subject("alice"), CREATE, QUEUE, {}, "v") is Result.ALLOWED
    assert access.decide(Subject("bob"), CREATE, QUEUE, {}, "v") is Result.ALLOWED   # deferred
    assert access.decide(Subject("carol"), CREATE, QUEUE, {}, "v") is Result.DENIED  # all defer
    assert access.decide(Subject("alice"), CREATE, QUEUE, {}, "w") is Result.DENIED


def test_a_virtual_host_decision_is_final() -> None:
    access = control("ACL ALLOW bob ALL ALL", {"v": "ACL DENY bob CREATE QUEUE"})
    assert access.decide(Subject("bob"), CREATE, QUEUE, {}, "v") is Result.DENIED
    assert access.decide(Subject("bob"), CREATE, QUEUE, {}, "w") is Result.ALLOWED


def test_rules_in_force_deny_what_none_allows() -> None:
    access = control("ACL ALLOW alice ALL ALL")
    assert access.decide(Subject("bob"), CREATE, QUEUE, {}) is Result.DENIED
    assert access.denials == 1


def test_denials_are_counted_each_time_and_logged_once_per_kind(
        caplog: pytest.LogCaptureFixture) -> None:
    access = control("ACL ALLOW alice ALL ALL")
    with caplog.at_level(logging.INFO, logger="deltamq.acl"):
        for name in ("a", "b", "c"):
            access.decide(Subject("bob"), CREATE, QUEUE, {Property.NAME: name})
        access.decide(Subject("bob"), Operation.DELETE, QUEUE, {Property.NAME: "a"})
    assert access.denials == 4
    assert [r.getMessage().split(":")[0] for r in caplog.records] == \
        ["ACL denied user 'bob'"] * 2


def test_log_rules_log_what_they_decide(caplog: pytest.LogCaptureFixture) -> None:
    access = control("ACL ALLOW-LOG alice CREATE QUEUE\nACL ALLOW alice DELETE QUEUE")
    with caplog.at_level(logging.INFO, logger="deltamq.acl"):
        access.decide(Subject("alice"), CREATE, QUEUE, {Property.NAME: "q"})
        access.decide(Subject("alice"), CREATE, QUEUE, {Property.NAME: "q"})
        access.decide(Subject("alice"), Operation.DELETE, QUEUE, {Property.NAME: "q"})
    assert [r.getMessage() for r in caplog.records] == \
        ["ACL-1002 : Allowed : user 'alice' CREATE QUEUE name=\"q\""]
    assert access.logged_allowed == 2


# -- one connection's checks -------------------------------------------------------------------

def test_connection_access_refuses_with_access_refused() -> None:
    access = control("ACL ALLOW alice CONSUME QUEUE name=mine")
    checks = ConnectionAccess(access, access.subject("alice", "127.0.0.1"), "default")
    checks.check(CONSUME, QUEUE, "mine")
    with pytest.raises(AccessRefused) as raised:
        checks.check(CONSUME, QUEUE, "theirs")
    assert raised.value.reply_code == 403
    assert "consume queue 'theirs' in vhost 'default' refused for user 'alice'" in \
        raised.value.text


def test_virtual_host_access_refuses_the_connection() -> None:
    access = control("ACL DENY bob ACCESS VIRTUALHOST\nACL ALLOW ALL ACCESS VIRTUALHOST")
    ConnectionAccess(access, Subject("alice"), "default").check_access()
    with pytest.raises(ConnectionAccessRefused):
        ConnectionAccess(access, Subject("bob"), "default").check_access()


def test_groups_are_looked_up_when_the_subject_is_made() -> None:
    access = AccessControl()
    access.configure([rules("ACL ALLOW admins ALL ALL")], {},
                     lambda user: frozenset({"admins"}) if user == "root" else frozenset())
    assert access.subject("root", "10.0.0.1") == Subject("root", frozenset({"admins"}), "10.0.0.1")
    assert access.decide(access.subject("root"), CREATE, QUEUE, {}) is Result.ALLOWED
    assert access.decide(access.subject("joe"), CREATE, QUEUE, {}) is Result.DENIED


def test_publish_decisions_are_cached_until_the_rules_change() -> None:
    access = control('ACL ALLOW p PUBLISH EXCHANGE name="" routingKey="a*"')
    checks = ConnectionAccess(access, Subject("p"), "default")
    checks.check_publish("", "a1")
    with pytest.raises(AccessRefused):
        checks.check_publish("", "b1")
    with pytest.raises(AccessRefused):
        checks.check_publish("", "b1")                  # from the cache: counted all the same
    assert access.denials == 2
    access.configure([rules('ACL ALLOW p PUBLISH EXCHANGE name="" routingKey="b*"')], {})
    checks.check_publish("", "b1")
    with pytest.raises(AccessRefused):
        checks.check_publish("", "a1")


def test_publish_checks_cost_nothing_without_providers() -> None:
    access = AccessControl()
    checks = ConnectionAccess(access, Subject("p"), "default")
    checks.check_publish("x", "y")
    checks.check(CREATE, QUEUE, "q")
    access.configure([rules("ACL DENY ALL ALL")], {})
    with pytest.raises(AccessRefused):
        checks.check_publish("x", "y")                  # rules added later apply at once
