"""The dead-letter processor's policy file and its decisions (no Spark, no broker)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from broker import cli

from lakehouse.dlq_policy import (ATTEMPT_HEADER, DROP, PARK, REPUBLISH, Policy, PolicyError, Retry, Rule,
                                  classify, decide, load_policy, parse_policy)

FULL = """
dead_letter_queues = ["orders.dlq", "billing.dlq"]
vhost = "shop"
curated_table = "curated/dead_letters"
default_action = "drop"

[retry]
max_attempts = 4
backoff_seconds = 2
backoff_multiplier = 3
backoff_max_seconds = 30

[[rule]]
name = "repair orders"
match = { reason = ["rejected", "expired"], source_queue = "orders", headers = { tenant = ["acme", 7] } }
action = "republish"
exchange = "orders.retry"
set_headers = { repaired = true }
remove_headers = ["error"]
max_attempts = 2

[[rule]]
name = "park old ones"
action = "park"
[rule.match]
dead_letter_queue = "billing.dlq"
min_deaths = 3
max_deaths = 10
"""


def test_a_full_policy_parses_into_its_rules(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(FULL)
    policy = load_policy(path)
    assert policy == Policy(
        dead_letter_queues=("orders.dlq", "billing.dlq"), vhost="shop",
        curated_table=tmp_path / "curated" / "dead_letters", default_action=DROP,
        retry=Retry(max_attempts=4, backoff_seconds=2.0, backoff_multiplier=3.0, backoff_max_seconds=30.0),
        rules=(Rule(name="repair orders", action=REPUBLISH, reasons=frozenset({"rejected", "expired"}),
                    source_queues=frozenset({"orders"}), headers={"tenant": ("acme", 7)},
                    exchange="orders.retry", set_headers={"repaired": True}, remove_headers=("error",),
                    max_attempts=2),
               Rule(name="park old ones", action=PARK, dead_letter_queues=frozenset({"billing.dlq"}),
                    min_deaths=3, max_deaths=10)))


def test_defaults_and_an_absolute_table_path() -> None:
    policy = parse_policy('dead_letter_queues = "q.dlq"\ncurated_table = "/srv/dlq"\n', base=Path("/etc"))
    assert policy == Policy(dead_letter_queues=("q.dlq",), curated_table=Path("/srv/dlq"))
    assert policy.default_action == PARK and policy.retry == Retry(3, 5.0, 2.0, 300.0)


def test_backoff_is_exponential_up_to_its_cap() -> None:
    retry = Retry(max_attempts=9, backoff_seconds=2, backoff_multiplier=3, backoff_max_seconds=30)
    assert [retry.delay(n) for n in range(1, 6)] == [2, 6, 18, 30, 30]
    assert Retry(backoff_seconds=0).delay(5) == 0


HEAD = 'dead_letter_queues = ["q.dlq"]\ncurated_table = "t"\n'


@pytest.mark.parametrize("text, message", [
    ("dead_letter_queues = [", "p.toml: not valid TOML: "),
    ('curated_table = "t"', "p.toml: 'dead_letter_queues' is missing: name the dead-letter queue(s)"),
    ('dead_letter_queues = []\ncurated_table = "t"', "'dead_letter_queues' is missing"),
    ('dead_letter_queues = [1]\ncurated_table = "t"',
     "p.toml: 'dead_letter_queues' must be a name or a list of names (non-empty strings)"),
    ('dead_letter_queues = ["q"]', "p.toml: 'curated_table' is missing: give the path of the curated Delta"),
    ('dead_letter_queues = ["q"]\ncurated_table = "a`b"', "p.toml: 'curated_table' must not contain a backquote"),
    (HEAD + 'dead_letter_queue = "x"',
     "p.toml: unknown key 'dead_letter_queue' (known: dead_letter_queues, vhost, curated_table,"),
    (HEAD + 'vhost = ""', "p.toml: 'vhost' must be a virtual host name"),
    (HEAD + 'settle = "yes"', "p.toml: 'settle' must be true or false (got 'yes')"),
    (HEAD + 'default_action = "requeue"',
     "p.toml: 'default_action' must be one of republish, park, drop (got 'requeue')"),
    (HEAD + "[retry]\nmax_attempts = -1", "p.toml: [retry] 'max_attempts' must be an integer >= 0 (got -1)"),
    (HEAD + "[retry]\nmax_attempts = 1.5", "[retry] 'max_attempts' must be an integer >= 0 (got 1.5)"),
    (HEAD + "[retry]\nbackoff_multiplier = 0.5",
     "p.toml: [retry] 'backoff_multiplier' must be a number >= 1 (got 0.5)"),
    (HEAD + "[retry]\nbackoff_seconds = true", "[retry] 'backoff_seconds' must be a number >= 0 (got True)"),
    (HEAD + "[retry]\nbackoff_seconds = 10\nbackoff_max_seconds = 5",
     "p.toml: [retry] 'backoff_max_seconds' (5) is below 'backoff_seconds' (10)"),
    (HEAD + "[retry]\ntries = 3", "p.toml: [retry]: unknown key 'tries' (known: max_attempts,"),
    (HEAD + "rule = 3", "p.toml: 'rule' must be an array of tables ([[rule]])"),
    (HEAD + '[[rule]]\nname = "fix"', "p.toml: rule 1 ('fix'): 'action' is missing (one of republish,"),
    (HEAD + '[[rule]]\naction = "park"\n[[rule]]\nacton = "drop"',
     "p.toml: rule 2 ('rule 2'): unknown key 'acton' (known: name, match, action,"),
    (HEAD + '[[rule]]\nname = 5\naction = "park"', "p.toml: rule 1: 'name' must be a non-empty string"),
    (HEAD + '[[rule]]\naction = "retry"', "rule 1 ('rule 1'): 'action' must be one of republish, park,"
                                          " drop (got 'retry')"),
    (HEAD + '[[rule]]\naction = "park"\nmatch = { reason = "timeout" }',
     "rule 1 ('rule 1'): match.reason 'timeout' is not a dead-letter reason (one of rejected, expired,"
     " maxlen, delivery_limit)"),
    (HEAD + '[[rule]]\naction = "park"\nmatch = { queue = "q" }',
     "rule 1 ('rule 1'): match: unknown key 'queue' (known: reason, source_queue, dead_letter_queue,"),
    (HEAD + '[[rule]]\naction = "park"\nmatch = { min_deaths = 3, max_deaths = 2 }',
     "rule 1 ('rule 1'): match.min_deaths is above match.max_deaths: no dead letter matches"),
    (HEAD + '[[rule]]\naction = "park"\nmatch = { min_deaths = "3" }',
     "rule 1 ('rule 1'): match.min_deaths must be an integer >= 0 (got '3')"),
    (HEAD + '[[rule]]\naction = "park"\nmatch = { headers = { a = { b = 1 } } }',
     "rule 1 ('rule 1'): match.headers.a must be a string, number or boolean, or a list of them"),
    (HEAD + '[[rule]]\nname = "p"\naction = "park"\nset_headers = { a = 1 }',
     "rule 1 ('p'): 'set_headers' only applies to action = \"republish\" (this rule's action is \"park\")"),
    (HEAD + '[[rule]]\naction = "drop"\nexchange = "x"', "'exchange' only applies to action = \"republish\""),
    (HEAD + '[[rule]]\naction = "republish"\nexchange = 1',
     "rule 1 ('rule 1'): 'exchange' must be a string (\"\" is the default exchange)"),
    (HEAD + '[[rule]]\naction = "republish"\nset_headers = { a = [1] }',
     "rule 1 ('rule 1'): set_headers.a must be a string, number or boolean"),
    (HEAD + f'[[rule]]\naction = "republish"\nremove_headers = ["{ATTEMPT_HEADER}"]',
     f"rule 1 ('rule 1'): header '{ATTEMPT_HEADER}' is the processor's own and cannot be edited"),
    (HEAD + '[[rule]]\naction = "republish"\nmax_attempts = -2',
     "rule 1 ('rule 1'): 'max_attempts' must be an integer >= 0 (got -2)"),
    (HEAD + '[[rule]]\nname = "a"\naction = "park"\n[[rule]]\nname = "a"\naction = "drop"',
     "p.toml: two rules are named 'a': rule names must be unique"),
])
def test_a_bad_policy_is_refused_with_a_message_naming_the_mistake(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="p.toml")
    assert message in str(raised.value)


def test_an_unreadable_policy_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=f"{tmp_path / 'nope.toml'}: cannot read the policy"):
        load_policy(tmp_path / "nope.toml")


# -- classification and decisions -------------------------------------------------------

TIME = datetime.datetime(2026, 11, 24, tzinfo=datetime.timezone.utc)


def death(queue: str, reason: str, count: int, exchange: str = "orders", keys: Any = ("order.new",)) -> dict:
    """An x-death entry as the 0-9-1 decoder gives it (text as bytes, as on the wire)."""
    return {"count": count, "reason": reason.encode(), "queue": queue.encode(), "time": TIME,
            "exchange": exchange.encode(), "routing-keys": [k.encode() for k in keys]}


def dead_letter_headers(*deaths: dict, **extra: Any) -> dict[str, Any]:
    return {"x-death": list(deaths), "x-first-death-reason": deaths[-1]["reason"] if deaths else None,
            **extra}


def test_classify_reads_the_newest_death_and_counts_them_all() -> None:
    headers = dead_letter_headers(death("orders", "rejected", 2, keys=("order.new", "cc.copy")),
                                  death("intake", "expired", 1, exchange="in"),
                                  tenant=b"acme", **{ATTEMPT_HEADER: 2})
    letter = classify(headers, "orders.dlq")
    assert (letter.dead_letter_queue, letter.reason, letter.source_queue, letter.source_exchange,
            letter.source_routing_key, letter.death_count, letter.first_death_reason, letter.attempt) == (
        "orders.dlq", "rejected", "orders", "orders", "order.new", 3, "expired", 3)
    assert letter.headers is headers


def test_classify_without_x_death() -> None:
    letter = classify({"a": 1}, "q.dlq")
    assert (letter.reason, letter.source_queue, letter.source_exchange, letter.source_routing_key,
            letter.death_count, letter.first_death_reason, letter.attempt) == (None, None, None, None, 0, None, 1)


POLICY = parse_policy("""
dead_letter_queues = ["orders.dlq", "audit.dlq"]
curated_table = "t"
[retry]
max_attempts = 2
backoff_seconds = 10
backoff_multiplier = 2
backoff_max_seconds = 25
[[rule]]
name = "poison"
match = { headers = { kind = "poison" } }
action = "drop"
[[rule]]
name = "many deaths"
match = { min_deaths = 5 }
action = "park"
[[rule]]
name = "audit"
match = { dead_letter_queue = "audit.dlq", reason = "expired" }
action = "republish"
exchange = ""
routing_key = "audit.retry"
max_attempts = 5
[[rule]]
name = "repair orders"
match = { source_queue = "orders", reason = ["rejected", "delivery_limit"], max_deaths = 4 }
action = "republish"
set_headers = { repaired = true, kind = "fixed" }
remove_headers = ["error"]
""")


def test_the_first_matching_rule_decides() -> None:
    poison = classify(dead_letter_headers(death("orders", "rejected", 1), kind=b"poison"), "orders.dlq")
    assert decide(POLICY, poison).rule == "poison" and decide(POLICY, poison).action == DROP
    many = classify(dead_letter_headers(death("orders", "rejected", 5)), "orders.dlq")
    assert (decide(POLICY, many).rule, decide(POLICY, many).action) == ("many deaths", PARK)
    other = classify(dead_letter_headers(death("payments", "rejected", 1)), "orders.dlq")
    assert (decide(POLICY, other).rule, decide(POLICY, other).action) == ("default", PARK)
    maxlen = classify(dead_letter_headers(death("orders", "maxlen", 1)), "orders.dlq")
    assert decide(POLICY, maxlen).rule == "default"
    expired_elsewhere = classify(dead_letter_headers(death("audit", "expired", 1)), "orders.dlq")
    assert decide(POLICY, expired_elsewhere).rule == "default"


def test_republish_goes_back_to_the_original_exchange_with_the_rule_header_edits() -> None:
    headers = dead_letter_headers(death("orders", "rejected", 1), error=b"bad sku", kind=b"order",
                                  **{ATTEMPT_HEADER: 1})
    decision = decide(POLICY, classify(headers, "orders.dlq"))
    assert (decision.action, decision.rule, decision.attempt, decision.exchange, decision.routing_key,
            decision.delay_seconds, decision.note) == (REPUBLISH, "repair orders", 2, "orders", "order.new",
                                                       20.0, None)
    assert decision.headers == {"x-death": headers["x-death"], "x-first-death-reason": b"rejected",
                                "kind": "fixed", "repaired": True, ATTEMPT_HEADER: 2}
    assert "error" in headers                                        # the dead letter's own are untouched


def test_republish_to_a_named_exchange_and_key() -> None:
    decision = decide(POLICY, classify(dead_letter_headers(death("audit", "expired", 1)), "audit.dlq"))
    assert (decision.exchange, decision.routing_key, decision.attempt, decision.delay_seconds) == (
        "", "audit.retry", 1, 10.0)


def test_the_retry_cap_parks_the_message() -> None:
    at_cap = classify(dead_letter_headers(death("orders", "rejected", 2), **{ATTEMPT_HEADER: 2}), "orders.dlq")
    decision = decide(POLICY, at_cap)
    assert (decision.action, decision.rule, decision.attempt, decision.note) == (
        PARK, "repair orders", 3, "retry cap: 2 republish(es) already made")
    assert decision.exchange is None and decision.headers is None
    # a rule's own cap wins over [retry]'s
    audit = classify(dead_letter_headers(death("audit", "expired", 1), **{ATTEMPT_HEADER: 4}), "audit.dlq")
    assert (decide(POLICY, audit).action, decide(POLICY, audit).attempt,
            decide(POLICY, audit).delay_seconds) == (REPUBLISH, 5, 25.0)
    audit = classify(dead_letter_headers(death("audit", "expired", 1), **{ATTEMPT_HEADER: b"5"}), "audit.dlq")
    assert decide(POLICY, audit).action == PARK


def test_republish_without_x_death_or_a_target_parks_with_a_reason() -> None:
    policy = parse_policy('dead_letter_queues = "q"\ncurated_table = "t"\ndefault_action = "republish"')
    decision = decide(policy, classify({}, "q"))
    assert decision.action == PARK and decision.note is not None and "x-death" in decision.note


# -- the command checks its policy and arguments before Spark starts ---------------------------

def dlq(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["spark", "dlq", *argv])
    return code, capsys.readouterr().err.strip()


def test_the_command_refuses_a_bad_policy_before_starting_spark(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(HEAD + '[[rule]]\naction = "requeue"\n')
    assert dlq(["--policy", str(policy), "--once"], capsys) == (
        2, f"deltamq spark dlq: {policy}: rule 1 ('rule 1'): 'action' must be one of republish, park, drop"
           " (got 'requeue')")
    policy.write_text(HEAD)
    assert dlq(["--policy", str(policy), "--interval", "0"], capsys) == (
        2, "deltamq spark dlq: --interval must be a positive number of seconds (got 0)")
    assert dlq(["--policy", str(policy), "--data-dir", str(tmp_path), "--node", "n1"], capsys) == (
        2, f"deltamq spark dlq: no journal at {tmp_path / 'n1' / 'journal'}: give the broker's --data-dir and"
           " the --node whose virtual host has the dead-letter queues")


def test_the_command_is_in_the_spark_group(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["spark", "dlq", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for option in ("--policy FILE", "--data-dir", "--node", "--checkpoint DIR", "--once", "--interval SECONDS",
                   "--amqp-url", "--username", "--password"):
        assert option in text
