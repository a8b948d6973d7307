"""Broker-J's ACL rule file (``security/acl_file.py``).

The input is the file's text (UTF-8; bytes that are not become U+FFFD).  A
text that does not read is refused with ``AclSyntaxError`` only, naming a
line the text has.  What reads survives a round trip: the rules and the
default written back as text (``format_acl``) read as the same rules, in the
same order, with the same default; each rule written alone
(``format_rule``) reads back as itself (``parse_rule``).
"""

from __future__ import annotations

from broker.security.acl_file import LINE_BREAK, AclSyntaxError, format_acl, format_rule, parse, \
    parse_rule
from broker.security.acl_rules import Rule
from fuzz.contract import ContractViolation, agree


def _fields(rule: Rule) -> tuple[object, ...]:
    return rule.outcome, rule.identity, rule.operation, rule.object_type, dict(rule.predicates)


def one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        parsed = parse(text)
    except AclSyntaxError as exc:
        lines = len(LINE_BREAK.split(text))
        if not 1 <= exc.line <= lines:
            raise ContractViolation(f"an error at line {exc.line} of a text of {lines} lines: {exc}") from exc
        return
    written = format_acl(parsed.rules, parsed.default if parsed.default_given else None)
    try:
        again = parse(written)
    except AclSyntaxError as exc:
        raise ContractViolation(f"the rules written back do not read: {written!r}") from exc
    agree("the rules written back and read", [_fields(r) for r in again.rules], [_fields(r) for r in parsed.rules])
    agree("the default written back and read", again.default, parsed.default)
    for rule in parsed.rules:
        agree("one rule written and read", _fields(parse_rule(format_rule(rule))), _fields(rule))


def seeds() -> list[bytes]:
    return [text.encode() for text in (
        "CONFIG defaultdeny=true\nACL ALLOW-LOG admin ALL ALL\nACL DENY-LOG ALL ALL ALL\n",
        '# comment\n10 ACL ALLOW alice CREATE QUEUE name="orders" durable="true"  # trailing\n'
        "20 ACL DENY bob CONSUME QUEUE name=['q1', \"q2\"]\n5 acl allow-log all access virtualhost\n",
        'ACL ALLOW app PUBLISH EXCHANGE name="amq.topic" routingKey="a.#" \\\n    from_network="10.0.0.0/8"\n',
        "ACL DENY_LOG 'odd name' BIND EXCHANGE name=* queueName='x\"y'\r\nCONFIG defaultallow=true\r\n",
        "ACL ALLOW g ACCESS_LOGS BROKER\nGROUP admins alice bob\n",
        'ACL ALLOW u CREATE QUEUE name="a" name="b" alternate=x\n', "ACL ALLOW \\ x\n",
        "7 ACL DENY \u00e9l\u00e8ve ALL ALL\n\u0663 ACL ALLOW x ALL ALL\n")]
