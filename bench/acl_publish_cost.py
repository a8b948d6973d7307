"""CPU cost of the ACL's per-message publish check, in memory.

An in-memory AMQP 0-9-1 connection (the unit tests' harness: no sockets)
publishes ``--count`` messages through the default exchange to one queue,
in batches of 200 frames, three ways:

- ``no_acl_us``: no access control provider (the check is one attribute read);
- ``acl_us``: a rule set of 40 rules in force that allows the publishes (the
  decision for the connection's (exchange, routing key) is cached after the
  first message);
- ``check_us``: :meth:`ConnectionAccess.check_publish` alone, cached.

Figures are microseconds of process CPU time (``time.process_time``) per
message, the median of ``--rounds`` rounds: wall-clock time on a shared
machine says more about the neighbours than about the code::

    PYTHONPATH=. python bench/acl_publish_cost.py [--count 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

BATCH = 200
#: 39 rules that do not match the publish, then the one that does
RULES = "\n".join([f'ACL ALLOW user{i} PUBLISH EXCHANGE name="x{i}" routingkey="k{i}.*"'
                   for i in range(39)] + ['ACL ALLOW guest PUBLISH EXCHANGE name="" routingkey="q"',
                                          "ACL ALLOW guest ALL ALL"])


def _engine(rules: str | None, count: int) -> float:
    from broker.protocol.amqp0_9_1 import methods as m
    from broker.security.acl_file import parse
    from tests.unit.protocol.harness import Client, FakeHost

    host = FakeHost()
    if rules is not None:
        host.access_control.configure([parse(rules).rule_set()], {})
    client = Client(host)
    client.handshake()
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="q"))
    client.take()
    batch = b"".join(client.publish_bytes(1, "", "q", b"x" * 100) for _ in range(BATCH))
    queue = host.namespace.queues["q"]
    started = time.process_time()
    for _ in range(count // BATCH):
        client.raw(batch)
        queue.purge()
    spent = time.process_time() - started
    assert not client.take(), "the publishes were refused"
    return spent / (count // BATCH * BATCH) * 1e6


def _check(count: int) -> float:
    from broker.security.access_control import AccessControl, ConnectionAccess
    from broker.security.acl_file import parse
    from broker.security.acl_rules import Subject

    control = AccessControl()
    control.configure([parse(RULES).rule_set()], {})
    access = ConnectionAccess(control, Subject("guest"), "default")
    check = access.check_publish
    started = time.process_time()
    for _ in range(count):
        check("", "q")
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"no_acl_us": [], "acl_us": [], "check_us": []}
    for _ in range(args.rounds):
        figures["no_acl_us"].append(_engine(None, args.count))
        figures["acl_us"].append(_engine(RULES, args.count))
        figures["check_us"].append(_check(args.count * 10))
    print(json.dumps({name: round(statistics.median(values), 3)
                      for name, values in figures.items()}))


if __name__ == "__main__":
    main()
