"""ACL rules over AMQP 0-9-1 (pika), AMQP 1.0 (proton) and REST, against a broker started as a
user starts it, configured over REST the way an operator would; the rules survive a restart.

The rules (a RuleBased provider) and groups (a GroupFile provider): ``alice`` manages and
consumes ``acl.*`` queues, the ``publishers`` (alice, carol) publish to them through the
default exchange, ``bob`` may not connect at all, ``guest`` may do everything.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest
from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker

from tests.mgmt.conftest import wait_for_http

from .conftest import DeltaMQProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("Broker-J ACLs are DeltaMQ's: it starts a broker of its own",
                allow_module_level=True)

USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
RULES = [
    "ACL ALLOW guest ALL ALL",
    "ACL DENY-LOG bob ACCESS VIRTUALHOST",
    "ACL ALLOW ALL ACCESS VIRTUALHOST",
    "ACL ALLOW ALL ACCESS MANAGEMENT",
    'ACL ALLOW alice CREATE QUEUE name="acl.*"',
    'ACL ALLOW alice DELETE QUEUE name="acl.*"',
    'ACL ALLOW alice BIND EXCHANGE name="amq.direct" routingkey="acl.*"',
    'ACL ALLOW alice UNBIND EXCHANGE name="amq.direct" routingkey="acl.*"',
    'ACL ALLOW alice PURGE QUEUE name="acl.*"',
    'ACL ALLOW alice CONSUME QUEUE name="acl.*"',
    'ACL ALLOW publishers PUBLISH EXCHANGE name="" routingkey="acl.*"',
]


def rest(proc: DeltaMQProcess, user: str = "guest") -> httpx.Client:
    password = "guest" if user == "guest" else USERS[user]
    return httpx.Client(base_url=f"http://127.0.0.1:{proc.http_port}/api/latest/",
                        auth=(user, password), timeout=30)


@pytest.fixture(scope="module")
def proc() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as process:
        wait_for_http(process)
        groups = process.dir / "data" / "groups"
        groups.write_text("# Broker-J's group file\npublishers.users=alice,carol\n")
        with rest(process) as api:
            for name, password in USERS.items():
                api.put(f"user/passwordFile/{name}", json={"password": password}
                        ).raise_for_status()
            api.put("groupprovider/groups", json={"type": "GroupFile", "path": str(groups)}
                    ).raise_for_status()
            api.put("queue/default/default/guest.q", json={"durable": True}).raise_for_status()
            api.put("accesscontrolprovider/acl", json={"type": "RuleBased", "rules": RULES}
                    ).raise_for_status()
        yield process


def connect(proc: DeltaMQProcess, user: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", proc.amqp_port, credentials=pika.PlainCredentials(user, USERS[user]),
        connection_attempts=1, socket_timeout=10))


def refused_403(action: Any) -> ChannelClosedByBroker:
    with pytest.raises(ChannelClosedByBroker) as raised:
        action()
    assert raised.value.reply_code == 403
    assert raised.value.reply_text.startswith("ACCESS_REFUSED")
    return raised.value


def test_a_user_denied_the_virtual_host_cannot_connect(proc: DeltaMQProcess) -> None:
    with pytest.raises(AMQPConnectionError) as raised:
        connect(proc, "bob")
    assert "403" in repr(raised.value) or "ACCESS_REFUSED" in repr(raised.value)
    with connect(proc, "alice"):
        pass


def test_allowed_actions_go_through(proc: DeltaMQProcess) -> None:
    with connect(proc, "alice") as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("acl.work")
        ch.queue_bind("acl.work", "amq.direct", routing_key="acl.key")
        ch.basic_publish("", "acl.work", b"hello")               # as one of the publishers
        method, _props, body = ch.basic_get("acl.work", auto_ack=True)
        assert body == b"hello"
        ch.basic_publish("", "acl.work", b"again")
        assert ch.queue_purge("acl.work").method.message_count == 1
        ch.queue_unbind("acl.work", "amq.direct", routing_key="acl.key")
        ch.queue_delete("acl.work")


@pytest.mark.parametrize("what", ["declare", "bind", "unbind", "consume", "get", "purge",
                                  "delete", "publish"])
def test_actions_no_rule_allows_are_refused_with_403(proc: DeltaMQProcess, what: str) -> None:
    with connect(proc, "alice") as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        action = {
            "declare": lambda: ch.queue_declare("other.q"),
            "bind": lambda: ch.queue_bind("guest.q", "amq.fanout"),
            "unbind": lambda: ch.queue_unbind("guest.q", "amq.direct", routing_key="k"),
            "consume": lambda: ch.basic_consume("guest.q", lambda *a: None),
            "get": lambda: ch.basic_get("guest.q"),
            "purge": lambda: ch.queue_purge("guest.q"),
            "delete": lambda: ch.queue_delete("guest.q"),
            "publish": lambda: ch.basic_publish("", "guest.q", b"not yours"),
        }[what]
        error = refused_403(action)
        assert "refused for user 'alice'" in error.reply_text
    with connect(proc, "carol") as conn:       # the connection stays usable for others too
        assert conn.channel().queue_declare("guest.q", passive=True).method.queue == "guest.q"


def test_group_members_get_the_group_rules(proc: DeltaMQProcess) -> None:
    with connect(proc, "alice") as conn:
        conn.channel().queue_declare("acl.carol")
    with connect(proc, "carol") as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "acl.carol", b"from a publisher")      # publishers: allowed
        refused_403(lambda: ch.basic_get("acl.carol"))             # not a consumer


def test_amqp_1_0_links_are_refused_what_they_may_not_publish_or_consume(proc: DeltaMQProcess) -> None:
    proton = pytest.importorskip("proton")
    from proton.utils import BlockingConnection, LinkDetached

    with connect(proc, "alice") as conn:
        conn.channel().queue_declare("acl.proton")
    amqp = BlockingConnection(f"amqp://carol:{USERS['carol']}@127.0.0.1:{proc.amqp_port}",
                              timeout=20)
    try:
        allowed = amqp.create_sender("acl.proton").send(proton.Message(body="ok"))
        assert allowed.remote_state == proton.Delivery.ACCEPTED
        denied = amqp.create_sender("guest.q").send(proton.Message(body="no"), timeout=10,
                                                     error_states=[])
        assert denied.remote_state == proton.Delivery.REJECTED
        assert denied.remote.condition.name == "amqp:unauthorized-access"
        for refused in ({"address": "guest.q"},                  # CONSUME QUEUE
                        {"address": "amq.direct/acl.key"},       # BIND EXCHANGE (a subscription)
                        {"address": None, "dynamic": True}):     # CREATE QUEUE (temporary)
            with pytest.raises(LinkDetached) as detached:
                amqp.create_receiver(**refused)
            assert "amqp:unauthorized-access" in str(detached.value)
    finally:
        amqp.close()
    alice = BlockingConnection(f"amqp://alice:{USERS['alice']}@127.0.0.1:{proc.amqp_port}",
                               timeout=20)
    try:
        alice.create_receiver("amq.direct/acl.key").close()      # alice may bind acl.* keys
        alice.create_receiver("acl.proton", credit=1).receive(timeout=20)
    finally:
        alice.close()


def test_rest_refuses_with_403_until_a_rule_is_added_over_rest(proc: DeltaMQProcess) -> None:
    with rest(proc, "alice") as alice:
        created = alice.put("queue/default/default/acl.rest", json={"durable": False})
        assert created.status_code == 201
        denied = alice.put("queue/default/default/rest.q", json={"durable": False})
        assert denied.status_code == 403
        assert alice.delete("queue/default/default/guest.q").status_code == 403
        with rest(proc) as guest:
            guest.post("accesscontrolprovider/acl/addRule",
                       json={"rule": 'ACL ALLOW alice CREATE QUEUE name="rest.*"', "position": 1}
                       ).raise_for_status()
            guest.post("accesscontrolprovider/acl/addRule",
                       json={"rule": 'ACL ALLOW alice DELETE QUEUE name="rest.*"'}
                       ).raise_for_status()
            text = guest.get("accesscontrolprovider/acl/extractRules").text
            assert 'ACL ALLOW alice CREATE QUEUE name="rest.*"' in text.splitlines()[1]
        assert alice.put("queue/default/default/rest.q", json={"durable": False}
                         ).status_code == 201
        assert alice.delete("queue/default/default/rest.q").status_code == 200
        assert alice.delete("queue/default/default/guest.q").status_code == 403
        assert alice.delete("queue/default/default/acl.rest").status_code == 200


def test_virtual_host_rules_are_asked_first_and_defer_to_the_broker(proc: DeltaMQProcess) -> None:
    with connect(proc, "alice") as conn:
        conn.channel().queue_declare("acl.vhost")
        conn.channel().queue_declare("acl.vhost-ok")
    with rest(proc) as guest:
        guest.put("virtualhostaccesscontrolprovider/default/default/vacl", json={
            "rules": ['ACL DENY carol PUBLISH EXCHANGE routingkey="acl.vhost"']}
        ).raise_for_status()
        try:
            with rest(proc, "alice") as alice:             # only administrators change them
                assert alice.delete("virtualhostaccesscontrolprovider/default/default/vacl"
                                    ).status_code == 403
            with connect(proc, "carol") as conn:
                ch = conn.channel()
                ch.confirm_delivery()
                ch.basic_publish("", "acl.vhost-ok", b"deferred to the broker: allowed")
                refused_403(lambda: ch.basic_publish("", "acl.vhost", b"denied here"))
        finally:
            guest.delete("virtualhostaccesscontrolprovider/default/default/vacl"
                         ).raise_for_status()
    with connect(proc, "carol") as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "acl.vhost", b"allowed again")


def test_denials_are_counted_in_metrics_and_logged(proc: DeltaMQProcess) -> None:
    metrics = httpx.get(f"http://127.0.0.1:{proc.http_port}/metrics", auth=("guest", "guest"),
                        timeout=30).text
    count = next(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("deltamq_access_denials_total"))
    assert count >= 10
    log = proc.log_tail(200_000)
    assert "ACL-1003 : Denied : user 'bob' ACCESS VIRTUALHOST" in log
    assert log.count("ACL denied user 'alice': CONSUME QUEUE") == 1        # once per kind


def test_rules_survive_a_restart(proc: DeltaMQProcess) -> None:
    proc.restart(signal.SIGTERM)
    wait_for_http(proc)
    with rest(proc) as guest:
        rules = guest.get("accesscontrolprovider/acl").json()["rules"]
    assert len(rules) == len(RULES) + 2
    with rest(proc) as guest:
        assert guest.get("virtualhostaccesscontrolprovider/default/default").json() == []
    with pytest.raises(AMQPConnectionError):
        connect(proc, "bob")
    with connect(proc, "alice") as conn:
        ch = conn.channel()
        ch.queue_declare("acl.after-restart")
        refused_403(lambda: ch.queue_declare("other.after-restart"))
