"""The AMQP 0-9-1 engine's ACL checks, in memory: every checked method refused with 403."""

from __future__ import annotations

import pytest

from broker.protocol.amqp0_9_1 import methods as m
from broker.security.acl_file import parse

from .harness import Client, FakeHost

#: guest may do what these rules allow and nothing else
RULES = """
ACL ALLOW guest ACCESS VIRTUALHOST
ACL ALLOW guest CREATE QUEUE name="ok.*"
ACL ALLOW guest CREATE EXCHANGE name="ok.*"
ACL ALLOW guest DELETE QUEUE name="ok.*"
ACL ALLOW guest DELETE EXCHANGE name="ok.*"
ACL ALLOW guest BIND EXCHANGE name="ok.x" routingkey="ok.*"
ACL ALLOW guest UNBIND EXCHANGE name="ok.x" routingkey="ok.*"
ACL ALLOW guest PURGE QUEUE name="ok.*"
ACL ALLOW guest CONSUME QUEUE name="ok.*"
ACL ALLOW guest PUBLISH EXCHANGE name="" routingkey="ok.*"
"""


def host_with(rules: str) -> FakeHost:
    host = FakeHost()
    host.access_control.configure([parse(rules).rule_set()], {})
    return host


@pytest.fixture
def client() -> Client:
    c = Client(host_with(RULES))
    c.handshake()
    c.open_channel()
    # made by the broker's owner, without rules in the way
    ns = c.host.namespace
    for name in ("ok.q", "no.q"):
        ns.declare_queue(name)
    for name in ("ok.x", "no.x"):
        ns.declare_exchange(name, "direct")
    return c


def refused(client: Client, method: m.Method) -> str:
    client.send(1, method)
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 403
    client.send(1, m.ChannelCloseOk())
    client.open_channel()
    return str(close.reply_text)


ALLOWED = [
    (m.QueueDeclare(queue="ok.new"), m.QueueDeclareOk),
    (m.QueueDeclare(queue="no.q"), m.QueueDeclareOk),              # exists: nothing created
    (m.QueueDeclare(queue="no.other", passive=True), None),        # passive: 404, not 403
    (m.ExchangeDeclare(exchange="ok.new", type="fanout"), m.ExchangeDeclareOk),
    (m.QueueBind(queue="no.q", exchange="ok.x", routing_key="ok.1"), m.QueueBindOk),
    (m.QueueUnbind(queue="no.q", exchange="ok.x", routing_key="ok.1"), m.QueueUnbindOk),
    (m.QueuePurge(queue="ok.q"), m.QueuePurgeOk),
    (m.BasicConsume(queue="ok.q", consumer_tag="c"), m.BasicConsumeOk),
    (m.BasicGet(queue="ok.q"), m.BasicGetEmpty),
    (m.QueueDelete(queue="ok.q"), m.QueueDeleteOk),
    (m.ExchangeDelete(exchange="ok.x"), m.ExchangeDeleteOk),
]


@pytest.mark.parametrize("method, answer", ALLOWED, ids=lambda v: getattr(v, "NAME", ""))
def test_what_the_rules_allow_goes_through(client: Client, method: m.Method,
                                           answer: type | None) -> None:
    client.send(1, method)
    if answer is None:
        assert client.expect(m.ChannelClose, 1).reply_code == 404
    else:
        client.expect(answer, 1)


DENIED = [
    (m.QueueDeclare(queue="no.new"), "create queue 'no.new'"),
    (m.QueueDeclare(queue=""), "create queue ''"),
    (m.ExchangeDeclare(exchange="no.new", type="direct"), "create exchange 'no.new'"),
    (m.QueueBind(queue="ok.q", exchange="no.x", routing_key="ok.1"), "bind exchange 'no.x'"),
    (m.QueueBind(queue="ok.q", exchange="ok.x", routing_key="no.1"), "bind exchange 'ok.x'"),
    (m.QueueUnbind(queue="ok.q", exchange="no.x", routing_key="ok.1"), "unbind exchange 'no.x'"),
    (m.ExchangeBind(destination="ok.x", source="no.x", routing_key="k"), "bind exchange 'no.x'"),
    (m.QueuePurge(queue="no.q"), "purge queue 'no.q'"),
    (m.BasicConsume(queue="no.q"), "consume queue 'no.q'"),
    (m.BasicGet(queue="no.q"), "consume queue 'no.q'"),
    (m.QueueDelete(queue="no.q"), "delete queue 'no.q'"),
    (m.ExchangeDelete(exchange="no.x"), "delete exchange 'no.x'"),
]


@pytest.mark.parametrize("method, says", DENIED, ids=lambda v: getattr(v, "NAME", str(v)))
def test_what_no_rule_allows_closes_the_channel_with_403(client: Client, method: m.Method,
                                                          says: str) -> None:
    text = refused(client, method)
    assert text.startswith("ACCESS_REFUSED - ")
    assert f"{says} in vhost '/' refused for user 'guest'" in text
    ns = client.host.namespace
    assert "no.new" not in ns.queues and "no.new" not in ns.exchanges
    assert "no.q" in ns.queues and "no.x" in ns.exchanges


def test_publish_is_checked_per_exchange_and_routing_key(client: Client) -> None:
    client.publish(1, "", "ok.q", b"allowed")
    client.publish(1, "", "no.q", b"refused")
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 403
    assert "publish to exchange '' with routing key 'no.q'" in close.reply_text
    assert client.host.namespace.queues["ok.q"].message_count == 1
    assert client.host.namespace.queues["no.q"].message_count == 0
    assert client.host.access_control.denials == 1


def test_access_to_the_virtual_host_is_checked_at_connection_open() -> None:
    c = Client(host_with("ACL DENY-LOG guest ACCESS VIRTUALHOST"))
    c.expect(m.ConnectionStart)
    c.send(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                  response=b"\x00guest\x00guest", locale="en_US"))
    tune = c.expect(m.ConnectionTune)
    c.send(0, m.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max))
    c.send(0, m.ConnectionOpen(virtual_host="/"))
    close = c.expect(m.ConnectionClose)
    assert close.reply_code == 403
    assert "access to vhost 'default' refused for user 'guest'" in close.reply_text


def test_rules_changed_while_connected_apply_at_once(client: Client) -> None:
    client.publish(1, "", "ok.q", b"1")
    client.host.access_control.configure([parse("ACL DENY guest PUBLISH EXCHANGE\n"
                                                "ACL ALLOW guest ALL ALL").rule_set()], {})
    client.publish(1, "", "ok.q", b"2")
    assert client.expect(m.ChannelClose, 1).reply_code == 403
    assert client.host.namespace.queues["ok.q"].message_count == 1
