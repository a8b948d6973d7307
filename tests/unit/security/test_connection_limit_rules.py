"""Broker-J's connection limit (CLT) rules: the file syntax, and what the merged rules allow."""

from __future__ import annotations

import pytest

from broker.security.connection_limit_rules import ALL, ConnectionLimitRule, \
    ConnectionLimitSyntaxError, Limit, RuleLimits, parse, parse_rule
from tests.unit.protocol.harness import FakeClock


# -- the syntax ---------------------------------------------------------------------------

def test_the_documented_example_file() -> None:
    parsed = parse("""
        # Limit operator
        CLT operator connection_limit=50
        # Limit publisher
        CLT publisher port=amqp connection_frequency_limit=30/2M connection_limit=20
        # Block all users by default
        CLT ALL BLOCK
    """)
    assert parsed.rules == [
        ConnectionLimitRule("operator", ALL, count=50),
        ConnectionLimitRule("publisher", "amqp", count=20, frequency=30, frequency_period=120.0),
        ConnectionLimitRule(ALL, ALL, blocked=True)]
    assert parsed.default_period_ms == 60_000 and not parsed.log_all


@pytest.mark.parametrize("written, seconds", [
    ("60/1m", 60.0), ("7200/H", 3600.0), ("120/M", 60.0), ("2/S", 1.0), ("5/hour", 3600.0),
    ("5/Minute", 60.0), ("5/second", 1.0), ("5/1h30m", 5400.0), ("5/0.5s", 0.5), ("5/PT2M", 120.0),
    ("5/90S", 90.0)])
def test_frequency_periods_as_broker_j_writes_them(written: str, seconds: float) -> None:
    rule = parse_rule(f"CLT alice connection_frequency_limit={written}")
    assert rule.frequency_period == seconds and rule.frequency == int(written.split("/")[0])


def test_property_spellings_continuations_comments_and_config() -> None:
    parsed = parse("CONFIG log-all=true defaultFrequencyPeriod=30000\n"
                   "CLT mark port=brokerAMQP \\\n"
                   "  connection-limit=10 \\\n"
                   "  connectionFrequencyLimit=60 # a comment\n"
                   "CLT 'bob smith' connection_count=3 connection_frequency_count=4\n"
                   "CLT all connection_limit=-1\n"           # no limit at all: dropped
                   "ACL ALLOW alice ALL ALL\n"               # an ACL line is not ours
                   "10 ACL DENY bob ALL ALL\n")
    assert parsed.log_all and parsed.default_period_ms == 30_000
    assert parsed.rules == [ConnectionLimitRule("mark", "brokerAMQP", count=10, frequency=60),
                            ConnectionLimitRule("bob smith", ALL, count=3, frequency=4)]


@pytest.mark.parametrize("text, error", [
    ("CLT alice connection_limit=ten", "takes an integer"),
    ("CLT alice speed=3", "Unknown connection limit property: speed"),
    ("CLT alice connection_limit=1 connectionLimit=2", "already been defined"),
    ("CLT alice connection_limit", "key only"),
    ("CLT alice connection_limit 1", "no equals"),
    ("CLT alice connection_limit=", "no value"),
    ("CLT alice connection_frequency_limit=3/fortnight", "not a period"),
    ("CLT", "Not enough tokens"),
    ("LIMIT alice connection_limit=1", "Unrecognised initial token"),
])
def test_a_bad_line_is_an_error_naming_it(text: str, error: str) -> None:
    with pytest.raises(ConnectionLimitSyntaxError, match=error) as raised:
        parse("# first\n" + text + "\n", "limits.clt")
    assert "limits.clt: " in str(raised.value) and raised.value.line == 2


def test_a_rule_is_written_back_as_it_reads() -> None:
    for rule in (ConnectionLimitRule("alice", "amqp", count=3, frequency=10, frequency_period=90.0),
                 ConnectionLimitRule(ALL, ALL, blocked=True),
                 ConnectionLimitRule("bob", ALL, frequency=5)):
        assert parse_rule(rule.text()) == rule


@pytest.mark.parametrize("seconds", [60.0, 0.5, 1_209_600.0, 100_000.25])
def test_a_rules_text_reads_back_as_the_same_rule(seconds: float) -> None:
    """extractRules writes what loadFromFile reads (two weeks once came out as 1.2096e+06S)."""
    rule = ConnectionLimitRule("alice", "amqp", count=3, frequency=10, frequency_period=seconds)
    assert parse_rule(rule.text()) == rule


# -- deciding -----------------------------------------------------------------------------

def test_a_users_rules_merge_into_the_most_restrictive() -> None:
    limits = RuleLimits(parse("CLT alice port=amqp connection_limit=10\n"
                              "CLT alice port=amqp connection_limit=12 connection_frequency_limit=60/1m\n"
                              "CLT alice port=amqp connection_frequency_limit=100/1m\n"
                              "CLT alice connection_frequency_limit=5/1h\n").rules)
    assert limits.limit("alice", frozenset(), "amqp") == Limit(False, 10, ((60.0, 60), (3600.0, 5)))
    assert limits.limit("alice", frozenset(), "other") == Limit(False, None, ((3600.0, 5),))


def test_the_user_then_its_groups_then_all() -> None:
    limits = RuleLimits(parse("CLT alice connection_limit=5\n"
                              "CLT staff connection_limit=3\nCLT interns connection_limit=1\n"
                              "CLT ALL BLOCK\n").rules)
    assert limits.limit("alice", frozenset({"staff"}), "amqp") == Limit(count=5)       # the user's
    assert limits.limit("bob", frozenset({"staff", "interns"}), "amqp") == Limit(count=1)
    assert limits.limit("carol", frozenset(), "amqp") == Limit(blocked=True)
    assert RuleLimits(parse("CLT alice BLOCK").rules).limit("bob", frozenset(), "amqp") is None


def test_each_sources_rules_limit_on_their_own() -> None:
    """As Broker-J chains its providers: one provider's rule for alice does not set aside
    another provider's ALL rule."""
    import dataclasses

    everyone = [dataclasses.replace(r, source="everyone")
                for r in parse("CLT ALL connection_limit=1").rules]
    generous = [dataclasses.replace(r, source="generous")
                for r in parse("CLT alice connection_limit=5\nCLT bob BLOCK").rules]
    limits = RuleLimits(everyone + generous)
    assert limits.limit("alice", frozenset(), "amqp") == Limit(count=1)
    assert limits.limit("bob", frozenset(), "amqp") == Limit(blocked=True, count=1)
    limits.opened("amqp", "alice")
    assert "connection limit of 1" in limits.refusal("amqp", "alice", frozenset())


def test_count_limit_counts_open_connections_per_port() -> None:
    limits = RuleLimits(parse("CLT alice connection_limit=2").rules)
    for _ in range(2):
        assert limits.refusal("amqp", "alice", frozenset()) == ""
        limits.opened("amqp", "alice")
    assert "connection limit of 2 on port 'amqp'" in limits.refusal("amqp", "alice", frozenset())
    assert limits.refusal("amqps", "alice", frozenset()) == ""          # per port
    limits.closed("amqp", "alice")
    assert limits.refusal("amqp", "alice", frozenset()) == ""


def test_frequency_limit_counts_connections_opened_within_the_period() -> None:
    clock = FakeClock()
    limits = RuleLimits(parse("CLT alice connection_frequency_limit=2/10s").rules, clock=clock)
    for _ in range(2):
        assert limits.refusal("amqp", "alice", frozenset()) == ""
        limits.opened("amqp", "alice")
        limits.closed("amqp", "alice")                # closing does not give the chance back
        clock.now += 1
    assert "frequency limit of 2 per 10 s" in limits.refusal("amqp", "alice", frozenset())
    clock.now += 8.5                                   # the first one is 10.5 s old
    assert limits.refusal("amqp", "alice", frozenset()) == ""
    limits.opened("amqp", "alice")
    assert limits.refusal("amqp", "alice", frozenset()) != ""
    limits.reset_counters()
    assert limits.refusal("amqp", "alice", frozenset()) == ""


def test_only_users_with_a_frequency_limit_have_their_openings_remembered() -> None:
    """A user another rule's long period does not concern churns connections: nothing of it
    is kept (Broker-J keeps registration times only for users with a frequency limit)."""
    limits = RuleLimits(parse("CLT ALL connection_limit=100\n"
                              "CLT bob connection_frequency_limit=10/1h").rules)
    for _ in range(50):
        assert limits.refusal("amqp", "alice", frozenset()) == ""
        limits.opened("amqp", "alice")
        limits.closed("amqp", "alice")
    assert ("amqp", "alice") not in limits.opened_at
    assert limits.refusal("amqp", "bob", frozenset()) == ""
    limits.opened("amqp", "bob")
    assert len(limits.opened_at[("amqp", "bob")]) == 1


def test_a_blocked_user_is_refused_on_its_port_only() -> None:
    limits = RuleLimits(parse("CLT mallory BLOCK port=amqp").rules)
    assert "blocked on port 'amqp'" in limits.refusal("amqp", "mallory", frozenset())
    assert limits.refusal("ws", "mallory", frozenset()) == ""
