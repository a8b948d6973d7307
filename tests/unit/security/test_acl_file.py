"""Broker-J's ACL file syntax: every form it takes, and the line every bad one is reported at."""

from __future__ import annotations

import pytest

from broker.errors import ConfigurationError
from broker.security.acl_file import AclSyntaxError, format_acl, format_rule, parse, parse_rule
from broker.security.acl_rules import ALL, ObjectType, Operation, Outcome, Property, Result, Rule


def only_rule(text: str) -> Rule:
    parsed = parse(text)
    assert len(parsed.rules) == 1
    return parsed.rules[0]


def test_a_full_rule_reads_every_part() -> None:
    rule = only_rule('ACL ALLOW-LOG alice CREATE QUEUE name="orders" durable="true"\n')
    assert rule.outcome is Outcome.ALLOW_LOG
    assert rule.identity == "alice"
    assert rule.operation is Operation.CREATE
    assert rule.object_type is ObjectType.QUEUE
    assert rule.predicates == {Property.NAME: ("orders",), Property.DURABLE: ("true",)}


@pytest.mark.parametrize("permission, outcome", [
    ("ALLOW", Outcome.ALLOW), ("allow-log", Outcome.ALLOW_LOG), ("Deny", Outcome.DENY),
    ("DENY-LOG", Outcome.DENY_LOG), ("deny_log", Outcome.DENY_LOG)])
def test_permissions_are_case_insensitive(permission: str, outcome: Outcome) -> None:
    assert only_rule(f"ACL {permission} bob ACCESS VIRTUALHOST").outcome is outcome


def test_keywords_actions_and_objects_are_case_insensitive_but_names_are_not() -> None:
    rule = only_rule("acl allow Alice consume queue Name=q")
    assert (rule.identity, rule.operation, rule.object_type) == \
        ("Alice", Operation.CONSUME, ObjectType.QUEUE)
    assert rule.predicates == {Property.NAME: ("q",)}


def test_all_as_identity_action_and_object() -> None:
    rule = only_rule("ACL DENY-LOG all ALL ALL")
    assert rule.identity == ALL and rule.for_all
    assert (rule.operation, rule.object_type) == (Operation.ALL, ObjectType.ALL)


def test_the_object_may_be_left_out() -> None:
    rule = only_rule("ACL DENY guest ALL")
    assert rule.object_type is ObjectType.ALL and rule.predicates == {}


def test_comments_whole_line_and_trailing_and_blank_lines() -> None:
    parsed = parse("# a comment\n\n   \nACL ALLOW admin CREATE ALL # also a comment\n#ACL DENY x ALL\n")
    assert [r.identity for r in parsed.rules] == ["admin"]


def test_a_hash_inside_quotes_is_not_a_comment() -> None:
    rule = only_rule('ACL ALLOW a PUBLISH EXCHANGE name="amq.topic" routingKey="a.#"')
    assert rule.predicates[Property.ROUTING_KEY] == ("a.#",)


def test_line_continuation_joins_lines() -> None:
    rule = only_rule("ACL DENY guest \\\n  ALL ALL   # a broken line\n")
    assert (rule.identity, rule.operation) == ("guest", Operation.ALL)
    rule = only_rule('ACL DENY-LOG users ACCESS VIRTUALHOST \\\n from_network="192.168.1.0/24"')
    assert rule.predicates == {Property.FROM_NETWORK: ("192.168.1.0/24",)}


def test_single_quotes_and_empty_values() -> None:
    rule = only_rule("ACL ALLOW p PUBLISH EXCHANGE name='' routingkey='x'")
    assert rule.predicates == {Property.NAME: ("",), Property.ROUTING_KEY: ("x",)}


def test_a_list_value_and_a_repeated_property_mean_either() -> None:
    listed = only_rule('ACL ALLOW op INVOKE QUEUE method_name=["deleteMessages", "getMessage*"]')
    repeated = only_rule('ACL ALLOW op INVOKE QUEUE method_name="deleteMessages"'
                         ' method_name="getMessage*"')
    assert listed.predicates == repeated.predicates == {
        Property.METHOD_NAME: ("deleteMessages", "getMessage*")}


@pytest.mark.parametrize("spelling", ["routingkey", "routingKey", "routing_key", "ROUTINGKEY"])
def test_property_names_ignore_case_and_underscores(spelling: str) -> None:
    assert only_rule(f"ACL ALLOW a PUBLISH EXCHANGE {spelling}=k").predicates == \
        {Property.ROUTING_KEY: ("k",)}


def test_queue_name_and_attribute_names_spellings() -> None:
    assert Property.QUEUE_NAME in only_rule("ACL ALLOW a BIND EXCHANGE queue_name=q").predicates
    assert Property.QUEUE_NAME in only_rule("ACL ALLOW a BIND EXCHANGE queuename=q").predicates
    assert Property.ATTRIBUTES in only_rule("ACL ALLOW a UPDATE QUEUE attributes=x").predicates
    assert Property.ATTRIBUTES in only_rule(
        'ACL ALLOW a UPDATE QUEUE attribute_names="x,y"').predicates


@pytest.mark.parametrize("line, default", [
    ("CONFIG defaultdeny=true", Result.DENIED), ("CONFIG defaultallow=true", Result.ALLOWED),
    ("CONFIG DEFAULTDEFER=TRUE", Result.DEFERRED), ("config defaultallow=false", Result.DENIED)])
def test_config_lines_set_the_default(line: str, default: Result) -> None:
    parsed = parse(line + "\nACL ALLOW a ALL ALL")
    assert parsed.default is default and parsed.default_given


def test_the_default_without_config_is_deny() -> None:
    parsed = parse("ACL ALLOW a ALL ALL")
    assert parsed.default is Result.DENIED and not parsed.default_given


def test_rule_numbers_order_the_rules() -> None:
    parsed = parse("30 ACL ALLOW c ALL ALL\n10 ACL ALLOW a ALL ALL\n20 ACL ALLOW b ALL ALL\n"
                   "ACL ALLOW d ALL ALL")
    assert [r.identity for r in parsed.rules] == ["a", "b", "c", "d"]


def test_an_unnumbered_rule_follows_the_highest_number_by_ten() -> None:
    parsed = parse("ACL ALLOW a ALL ALL\n5 ACL ALLOW b ALL ALL\n")
    assert [r.identity for r in parsed.rules] == ["a", "b"]        # a is 0, b is 5


def test_a_repeated_rule_is_dropped() -> None:
    parsed = parse("ACL ALLOW a CREATE QUEUE name=q\nACL DENY a CREATE QUEUE name=q\n")
    assert [r.outcome for r in parsed.rules] == [Outcome.ALLOW]


@pytest.mark.parametrize("text, line, says", [
    ("ACL ALLOW a ALL ALL\nFOO bar baz", 2, "Unrecognised initial token 'FOO'"),
    ("\n\nACL", 3, "Not enough tokens"),
    ("ACL ALLOW a", 1, "Not enough data for an acl"),
    ("ACL PERMIT a ALL", 1, "Not a valid permission: 'PERMIT'"),
    ('ACL ALLOW "" ALL', 1, "Empty identity"),
    ("ACL ALLOW a JUMP QUEUE", 1, "Not a valid action: 'JUMP'"),
    ("ACL ALLOW a CREATE TABLE", 1, "Not a valid object type: 'TABLE'"),
    ("ACL ALLOW a CREATE QUEUE colour=red", 1, "Not a valid property: 'colour'"),
    ("ACL ALLOW a CREATE QUEUE name", 1, "Incomplete property (key only)"),
    ("ACL ALLOW a CREATE QUEUE name q", 1, "Incomplete property (no equals)"),
    ("ACL ALLOW a CREATE QUEUE name=", 1, "Incomplete property (no value)"),
    ('ACL ALLOW a CREATE QUEUE name=["a", "b"', 1, "no close bracket"),
    ("ACL ALLOW a CREATE QUEUE name=[]", 1, "empty list"),
    ('ACL ALLOW a CREATE QUEUE name="q', 1, "Unterminated quoted value"),
    ("ACL ALLOW a \\ CREATE QUEUE", 1, "Premature continuation character"),
    ("ACL ALLOW a ALL ALL\n\n\nGROUP admins alice bob", 4, "GROUP keyword not supported"),
    ("10 ACL ALLOW a ALL ALL\n10 ACL ALLOW b ALL ALL", 2, "Invalid rule number 10"),
    ("10 CONFIG defaultdeny=true", 1, "Number not allowed before 'CONFIG'"),
    ("CONFIG", 1, "Not enough tokens"),
    ("CONFIG defaultdeny", 1, "Incomplete property (key only)"),
    ("CONFIG defaultwhatever=true", 1, "Unknown config property 'defaultwhatever'"),
    ("CONFIG defaultdeny=maybe", 1, "takes true or false"),
    ("ACL ALLOW a PUBLISH QUEUE", 1, "action PUBLISH does not apply to object type QUEUE"),
    ("ACL ALLOW a ACCESS VIRTUALHOST from_network=10.0.0.999", 1, "not a network"),
    ('ACL ALLOW a ACCESS VIRTUALHOST from_hostname="(["', 1, "not a regular expression"),
])
def test_bad_lines_are_reported_with_their_line_number(text: str, line: int, says: str) -> None:
    with pytest.raises(AclSyntaxError) as raised:
        parse(text, "test.acl")
    assert raised.value.line == line
    assert says in str(raised.value)
    assert str(raised.value).startswith("test.acl: ")
    assert str(raised.value).endswith(f"at line {line}")
    assert isinstance(raised.value, ConfigurationError)         # management answers 422


def test_a_continued_statement_reports_the_line_of_the_bad_property() -> None:
    with pytest.raises(AclSyntaxError) as raised:
        parse("ACL ALLOW a CREATE QUEUE \\\n name=q \\\n colour=red\n")
    assert raised.value.line == 3


def test_one_rule_as_text_with_or_without_acl() -> None:
    assert parse_rule("ALLOW bob CONSUME QUEUE name=q") == parse_rule(
        "ACL ALLOW bob CONSUME QUEUE name=q")
    with pytest.raises(AclSyntaxError):
        parse_rule("ACL ALLOW bob CONSUME QUEUE\nACL DENY bob ALL ALL")


def test_written_rules_read_back_the_same() -> None:
    text = ('CONFIG defaultdefer=true\n'
            'ACL ALLOW-LOG alice CREATE QUEUE name="orders.*" durable="true"\n'
            'ACL DENY "odd user" PUBLISH EXCHANGE name="" routingkey=\'say "hi"\'\n'
            'ACL ALLOW op INVOKE QUEUE method_name=["deleteMessages", "getMessage*"]\n'
            'ACL DENY-LOG ALL ALL ALL\n')
    parsed = parse(text)
    again = parse(format_acl(parsed.rules, parsed.default))
    assert again.rules == parsed.rules and again.default is Result.DEFERRED
    assert format_rule(parsed.rules[0]) == 'ACL ALLOW-LOG alice CREATE QUEUE name="orders.*"' \
                                           ' durable="true"'


# -- any text: read, or refused with a line number; rules written out read back the same ------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from broker.security.acl_file import LINE_BREAK  # noqa: E402
from broker.security.acl_rules import Outcome as _Outcome  # noqa: E402

_TOKENS = st.sampled_from(["ACL", "CONFIG", "GROUP", "ALLOW", "DENY-LOG", "ALL", "alice", "QUEUE",
                           "CREATE", "PUBLISH", "EXCHANGE", "name", "routingkey", "=", "[", "]",
                           ",", '"', "'", "\\", "#", "\n", " ", "10", "defaultdeny", "true", "*",
                           "from_network", "1.2.3.*", "durable", "x"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_TOKENS, max_size=30).map("".join) | st.text(max_size=200))
def test_any_text_is_read_or_refused_with_a_line_number(text: str) -> None:
    try:
        parse(text)
    except AclSyntaxError as exc:
        assert 1 <= exc.line <= len(LINE_BREAK.split(text))


_NAMES = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(outcome=st.sampled_from(list(_Outcome)), identity=_NAMES.filter(str.strip),
       values=st.lists(_NAMES, min_size=1, max_size=3))
def test_a_written_rule_reads_back_the_same(outcome: _Outcome, identity: str,
                                            values: list[str]) -> None:
    if '"' in identity and "'" in identity or any('"' in v and "'" in v for v in values):
        return                              # a value cannot hold both kinds of quotes
    rule = Rule(outcome, identity, Operation.PUBLISH, ObjectType.EXCHANGE,
                {Property.NAME: tuple(values)})
    again = parse_rule(format_rule(rule))
    assert again.predicates == rule.predicates
    assert again.identity == (ALL if identity.upper() == ALL else identity)
