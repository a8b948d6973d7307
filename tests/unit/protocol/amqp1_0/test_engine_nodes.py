"""The AMQP 1.0 engine's nodes in memory, over a real Namespace: dynamic nodes (temporary queues),
durable subscriptions to an exchange, selectors, browsing (distribution-mode copy) and
consumer priority."""

from __future__ import annotations

from typing import Any

import pytest

from broker.protocol.amqp1_0.definitions import (Accepted, ApplicationProperties, Attach, Data, DeleteOnClose,
                                                 DeleteOnNoLinks, Detach, Disposition, End, Flow, Header,
                                                 Released, Source, Target, Transfer)
from broker.protocol.amqp1_0.dynamic_nodes import TEMPORARY_QUEUE_PREFIX
from broker.protocol.amqp1_0.encoding import encode
from broker.protocol.amqp1_0.sections import MessageSections
from broker.protocol.amqp1_0.values import Described, Symbol, ULong

from .engine_client import Client10, message_payload

SELECTOR = Symbol("apache.org:selector-filter:string")


def _open(queue: str | None = "q", container_id: str = "test-client", client: Client10 | None = None) -> Client10:
    client = Client10(host=client.host if client is not None else None)
    if queue is not None:
        client.host.namespace.declare_queue(queue, durable=False)
    client.handshake(container_id=container_id)
    client.begin()
    client.take()
    return client


def _coloured(colour: str, body: bytes, *, durable: bool = False) -> bytes:
    return (encode(Header(durable=durable)) + encode(ApplicationProperties(value={"color": colour}))
            + encode(Data(value=body)))


def _send(client: Client10, address: str, payloads: list[bytes], handle: int = 9) -> None:
    client.attach_sender(address, handle=handle, name=f"sender-{handle}-{address}")
    assert _answer(client, handle).target is not None
    for i, payload in enumerate(payloads):
        client.transfer(handle, 1000 + i, payload, settled=True)
    client.send(Detach(handle=handle, closed=True))


def _answer(client: Client10, handle: int) -> Attach:
    """The broker's attach for ``handle``, taken out of what it sent (other frames stay)."""
    for index, (_c, value, _p) in enumerate(client.received):
        if isinstance(value, Attach) and value.handle == handle:
            del client.received[index]
            return value
    raise AssertionError(f"no attach for handle {handle} among {client.received}")


def _receiver(client: Client10, handle: int, source: Source | None, name: str | None = None,
              properties: dict[Any, Any] | None = None, snd_settle_mode: int = 0) -> Attach:
    client.send(Attach(name=name or f"receiver-{handle}", handle=handle, role=True, snd_settle_mode=snd_settle_mode,
                       source=source, target=Target(address="client"), properties=properties))
    return _answer(client, handle)


def _bodies(client: Client10) -> list[bytes]:
    return [b"".join(MessageSections(p).body()) for _c, v, p in client.take() if isinstance(v, Transfer)]


def _transfers(client: Client10) -> list[Transfer]:
    return [v for _c, v, _p in client.take() if isinstance(v, Transfer)]


# -- dynamic nodes --------------------------------------------------------------------------------

def test_a_dynamic_source_gets_a_temporary_queue_that_goes_with_its_link() -> None:
    client = _open(None)
    attach = _receiver(client, 1, Source(dynamic=True, dynamic_node_properties={
        Symbol("lifetime-policy"): DeleteOnNoLinks()}))
    address = attach.source.address
    assert address.startswith(TEMPORARY_QUEUE_PREFIX) and attach.source.dynamic is True
    # the broker applies delete-on-close, and says so
    assert attach.source.dynamic_node_properties == {Symbol("lifetime-policy"): DeleteOnClose()}
    assert address in client.host.namespace.queues
    client.credit(1, 5)
    _send(client, address, [message_payload(b"pong")])          # a reply sent to the reply-to address
    assert _bodies(client) == [b"pong"]
    client.send(Detach(handle=1, closed=True))
    assert address not in client.host.namespace.queues


def test_a_dynamic_node_goes_when_its_session_ends() -> None:
    client = _open(None)
    address = _receiver(client, 1, Source(dynamic=True)).source.address
    assert address in client.host.namespace.queues
    client.send(End())
    assert address not in client.host.namespace.queues


def test_two_dynamic_receivers_get_two_queues() -> None:
    client = _open(None)
    first = _receiver(client, 1, Source(dynamic=True)).source.address
    second = _receiver(client, 2, Source(dynamic=True)).source.address
    assert first != second and {first, second} <= set(client.host.namespace.queues)


def test_a_dynamic_node_of_a_suspended_link_stays_until_it_expires_and_is_found_on_resume() -> None:
    client = _open(None)
    source = Source(dynamic=True, expiry_policy=Symbol("link-detach"), timeout=60)
    address = _receiver(client, 1, source, name="replies").source.address
    client.send(Detach(handle=1, closed=False))
    assert address in client.host.namespace.queues            # suspended: kept for 60 s
    again = _receiver(client, 2, source, name="replies")
    assert again.source.address == address                    # resumed: the same node
    client.send(Detach(handle=2, closed=False))
    client.host.clock.now += 61
    client.host.namespace.run_due(client.host.clock())
    assert address not in client.host.namespace.queues


def test_a_dynamic_target_makes_a_temporary_queue_senders_and_receivers_use() -> None:
    client = _open(None)
    client.send(Attach(name="temp-queue-creator", handle=0, role=False, snd_settle_mode=2,
                       source=Source(address="client"),
                       target=Target(dynamic=True, expiry_policy=Symbol("link-detach"),
                                     capabilities=[Symbol("temporary-queue")]),
                       initial_delivery_count=0))
    attach = client.expect(Attach)
    address = attach.target.address
    assert address.startswith(TEMPORARY_QUEUE_PREFIX) and attach.target.dynamic is True
    assert attach.target.dynamic_node_properties == {Symbol("lifetime-policy"): DeleteOnClose()}
    client.expect(Flow)
    attach = _receiver(client, 1, Source(address=address))
    assert attach.source.address == address
    client.credit(1, 5)
    _send(client, address, [message_payload(b"reply")])
    assert _bodies(client) == [b"reply"]
    client.send(Detach(handle=0, closed=True))                # TemporaryQueue.delete()
    assert address not in client.host.namespace.queues
    detaches = {v.handle: v for _c, v, _p in client.take() if isinstance(v, Detach)}
    assert detaches[1].error.condition == "amqp:resource-deleted"       # its receiver is told
    assert detaches[0].closed and detaches[0].error is None


# -- selectors ------------------------------------------------------------------------------------

def test_a_selector_on_a_queue_source_filters_and_is_echoed() -> None:
    client = _open()
    _send(client, "q", [_coloured("red" if i % 2 == 0 else "blue", b"m%d" % i) for i in range(6)])
    selector = {Symbol("jms-selector"): Described(SELECTOR, "color = 'red'"),
                Symbol("no-local"): Described(Symbol("apache.org:no-local-filter:list"), [])}
    attach = _receiver(client, 1, Source(address="q", filter=selector))
    # only what the broker applied comes back: the selector, under the client's key
    assert attach.source.filter == {Symbol("jms-selector"): Described(SELECTOR, "color = 'red'")}
    client.credit(1, 10)
    assert _bodies(client) == [b"m0", b"m2", b"m4"]
    assert client.host.namespace.queue("q").message_count == 3           # the blue ones wait


def test_the_ulong_selector_descriptor_of_qpid_jms_is_understood() -> None:
    client = _open()
    _send(client, "q", [_coloured("blue", b"b"), _coloured("red", b"r")])
    attach = _receiver(client, 1, Source(address="q", filter={
        Symbol("jms-selector"): Described(ULong(0x0000468C00000004), "color='red'")}))
    assert attach.source.filter[Symbol("jms-selector")].value == "color='red'"
    client.credit(1, 10)
    assert _bodies(client) == [b"r"]


def test_a_bad_selector_refuses_the_link_with_invalid_field() -> None:
    client = _open()
    attach = _receiver(client, 1, Source(address="q", filter={
        Symbol("jms-selector"): Described(SELECTOR, "color = = 'red'")}))
    assert attach.source is None
    detach = client.expect(Detach)
    assert detach.closed and detach.error.condition == "amqp:invalid-field"
    assert "color = = 'red'" in detach.error.description
    assert client.host.namespace.queue("q").consumer_count == 0
    assert not list(client.host.namespace.links)


def test_a_selector_on_a_subscription_filters_what_the_exchange_routes_to_it() -> None:
    client = _open()
    attach = _receiver(client, 1, Source(address="amq.topic/colours", filter={
        Symbol("jms-selector"): Described(SELECTOR, "color = 'blue'")}))
    assert attach.source.filter[Symbol("jms-selector")].value == "color = 'blue'"
    client.credit(1, 10)
    _send(client, "amq.topic/colours", [_coloured("red", b"r"), _coloured("blue", b"b")])
    assert _bodies(client) == [b"b"]


def test_a_legacy_topic_binding_filter_gives_the_binding_key_of_an_exchange_source() -> None:
    client = _open()
    binding = {Symbol("topic"): Described(Symbol("apache.org:legacy-amqp-topic-binding:string"), "news.*")}
    attach = _receiver(client, 1, Source(address="amq.topic", filter=binding))
    assert attach.source.filter == binding
    client.credit(1, 10)
    _send(client, "amq.topic/news.today", [message_payload(b"news")])
    _send(client, "amq.topic/sport.today", [message_payload(b"sport")], handle=8)
    assert _bodies(client) == [b"news"]


# -- browsing -------------------------------------------------------------------------------------

def test_a_browser_sees_every_message_and_takes_none() -> None:
    client = _open()
    _send(client, "q", [message_payload(b"m%d" % i) for i in range(4)])
    attach = _receiver(client, 1, Source(address="q", distribution_mode=Symbol("copy")))
    assert attach.source.distribution_mode == "copy"
    client.credit(1, 10)
    transfers = [(v, p) for _c, v, p in client.take() if isinstance(v, Transfer)]
    assert [b"".join(MessageSections(p).body()) for _v, p in transfers] == [b"m0", b"m1", b"m2", b"m3"]
    first = transfers[0][0]
    client.send(Disposition(role=True, first=first.delivery_id, last=transfers[-1][0].delivery_id,
                            settled=True, state=Accepted()))
    queue = client.host.namespace.queue("q")
    assert (queue.message_count, queue.unacked_count, queue.consumer_count) == (4, 0, 0)
    client.credit(1, 10, delivery_count=4)                    # more credit: nothing is sent twice
    assert _transfers(client) == []
    _send(client, "q", [message_payload(b"m4")])
    client.credit(1, 10, delivery_count=4)                    # a new message is seen at the next flow
    client.take()
    consumer = _receiver(client, 2, Source(address="q"))
    assert consumer.source.distribution_mode is None
    client.credit(2, 10)
    assert _bodies(client) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_a_browser_with_a_selector_and_unsettled_copies_leaves_the_queue_as_it_was() -> None:
    client = _open()
    _send(client, "q", [_coloured("red" if i % 2 == 0 else "blue", b"m%d" % i) for i in range(4)])
    _receiver(client, 1, Source(address="q", distribution_mode=Symbol("copy"), filter={
        Symbol("jms-selector"): Described(SELECTOR, "color = 'blue'")}))
    client.credit(1, 10)
    assert _bodies(client) == [b"m1", b"m3"]
    client.send(Disposition(role=True, first=0, settled=True, state=Released()))
    client.send(End())                                       # the other copy is still unsettled
    queue = client.host.namespace.queue("q")
    assert (queue.message_count, queue.unacked_count) == (4, 0)


def test_drain_on_a_browser_uses_up_the_credit_it_cannot_fill() -> None:
    client = _open()
    _send(client, "q", [message_payload(b"only")])
    _receiver(client, 1, Source(address="q", distribution_mode=Symbol("copy")))
    client.credit(1, 5, drain=True)
    taken = client.take()
    assert len([v for _c, v, _p in taken if isinstance(v, Transfer)]) == 1
    flow = [v for _c, v, _p in taken if isinstance(v, Flow)][-1]
    assert flow.drain and flow.link_credit == 0 and flow.delivery_count == 5


# -- consumer priority ------------------------------------------------------------------------------

@pytest.mark.parametrize("property_name", ["rabbitmq:priority", "priority"])
def test_a_receiver_of_higher_priority_gets_messages_while_it_has_credit(property_name: str) -> None:
    client = _open()
    _receiver(client, 1, Source(address="q"))
    _receiver(client, 2, Source(address="q"), properties={Symbol(property_name): 5})
    _receiver(client, 3, Source(address="q"), properties={Symbol(property_name): 2})
    client.credit(1, 10)
    client.credit(2, 2)
    client.credit(3, 1)
    client.attach_sender("q", handle=9, name="s")
    client.take()
    handles = []
    for i in range(5):
        client.transfer(9, 100 + i, message_payload(b"m%d" % i), settled=True)
        handles += [t.handle for t in _transfers(client)]
    assert handles == [2, 2, 3, 1, 1]


def test_a_priority_that_is_not_an_int_refuses_the_link() -> None:
    client = _open()
    attach = _receiver(client, 1, Source(address="q"), properties={Symbol("rabbitmq:priority"): "high"})
    assert attach.source is None
    detach = client.expect(Detach)
    assert detach.error.condition == "amqp:invalid-field" and "rabbitmq:priority" in detach.error.description


# -- durable subscriptions -----------------------------------------------------------------------

def _durable(address: str = "amq.topic/news", **fields: Any) -> Source:
    fields.setdefault("capabilities", [Symbol("topic")])
    return Source(address=address, durable=2, expiry_policy=Symbol("never"), **fields)


def test_a_durable_subscription_keeps_its_queue_and_messages_across_a_reconnect_until_closed() -> None:
    first = _open(None, container_id="jms-client")
    _receiver(first, 1, _durable(), name="my-sub")
    name = "qpidsub_/jms-client_/my-sub_/durable"
    queue = first.host.namespace.queue(name)
    assert queue.durable
    first.send(Detach(handle=1, closed=False))               # consumer.close(): the subscription stays
    first.server.connection_lost()
    publisher = _open(None, container_id="publisher", client=first)
    _send(publisher, "amq.topic/news", [message_payload(b"n%d" % i, durable=True) for i in range(3)])
    assert first.host.namespace.queue(name).message_count == 3
    second = _open(None, container_id="jms-client", client=first)
    attach = _receiver(second, 1, _durable(), name="my-sub")
    assert attach.source.address == "amq.topic/news"
    second.credit(1, 10)
    assert _bodies(second) == [b"n0", b"n1", b"n2"]
    second.send(Detach(handle=1, closed=True))               # unsubscribe
    assert name not in second.host.namespace.queues


def test_a_durable_subscription_is_recovered_by_a_null_source_then_unsubscribed() -> None:
    first = _open(None, container_id="jms-client")
    _receiver(first, 1, _durable(), name="sub")
    first.send(Detach(handle=1, closed=False))
    attach = _receiver(first, 2, None, name="sub")           # Qpid JMS's unsubscribe: recover, close
    assert attach.source.address == "amq.topic/news" and attach.source.expiry_policy == "never"
    first.send(Detach(handle=2, closed=True))
    assert "qpidsub_/jms-client_/sub_/durable" not in first.host.namespace.queues
    assert not list(first.host.namespace.links)


def test_a_durable_subscription_resumed_with_another_selector_is_a_new_subscription() -> None:
    client = _open(None, container_id="jms-client")
    _receiver(client, 1, _durable(), name="sub")
    client.send(Detach(handle=1, closed=False))
    _send(client, "amq.topic/news", [_coloured("red", b"old", durable=True)])
    name = "qpidsub_/jms-client_/sub_/durable"
    assert client.host.namespace.queue(name).message_count == 1
    selector = {Symbol("jms-selector"): Described(SELECTOR, "color = 'blue'")}
    attach = _receiver(client, 2, _durable(filter=selector), name="sub")
    assert attach.source.filter == selector
    assert client.host.namespace.queue(name).message_count == 0          # made again
    client.credit(2, 10)
    _send(client, "amq.topic/news", [_coloured("red", b"r"), _coloured("blue", b"b")])
    assert _bodies(client) == [b"b"]


def test_unsubscribing_a_shared_durable_subscription_ends_its_suspended_links_and_queue() -> None:
    client = _open(None, container_id="jms-client")
    shared = _durable(capabilities=[Symbol("topic"), Symbol("shared")])
    _receiver(client, 1, shared, name="sub")
    _receiver(client, 2, shared, name="sub|2")                # Qpid JMS's second consumer of it
    name = "qpidsub_/jms-client_/sub_/durable"
    assert [c.handle for c in client.host.namespace.queue(name).consumers] == [1, 2]
    client.send(Detach(handle=1, closed=False))
    client.send(Detach(handle=2, closed=False))
    _receiver(client, 3, None, name="sub")                    # unsubscribe: recover and close
    client.send(Detach(handle=3, closed=True))
    assert name not in client.host.namespace.queues
    assert not list(client.host.namespace.links)


def test_closing_one_link_of_a_shared_subscription_keeps_it_for_the_others() -> None:
    client = _open(None, container_id="jms-client")
    shared = _durable(capabilities=[Symbol("topic"), Symbol("shared")])
    _receiver(client, 1, shared, name="sub")
    _receiver(client, 2, shared, name="sub|2")
    client.send(Detach(handle=1, closed=True))
    name = "qpidsub_/jms-client_/sub_/durable"
    assert [c.handle for c in client.host.namespace.queue(name).consumers] == [2]


def test_copy_on_a_subscription_consumes_as_qpid_jms_topic_subscribers_expect() -> None:
    client = _open(None, container_id="jms-client")
    _receiver(client, 1, _durable(distribution_mode=Symbol("copy")), name="sub")
    client.credit(1, 10)
    _send(client, "amq.topic/news", [message_payload(b"n")])
    transfers = _transfers(client)
    assert len(transfers) == 1
    client.send(Disposition(role=True, first=transfers[0].delivery_id, settled=True, state=Accepted()))
    assert client.host.namespace.queue("qpidsub_/jms-client_/sub_/durable").message_count == 0


def test_a_browser_is_detached_with_resource_deleted_when_its_queue_is_deleted() -> None:
    client = _open()
    _send(client, "q", [message_payload(b"m")])
    _receiver(client, 1, Source(address="q", distribution_mode=Symbol("copy")))
    _receiver(client, 2, Source(address="q", distribution_mode=Symbol("copy")))
    client.credit(1, 10)
    assert _bodies(client) == [b"m"]
    client.send(Detach(handle=2, closed=True))                # a browser gone before: not told
    client.take()
    client.host.namespace.delete_queue("q")
    client._read()
    detaches = [v for _c, v, _p in client.take() if isinstance(v, Detach)]
    assert [(d.handle, d.closed, d.error.condition) for d in detaches] == [
        (1, True, "amqp:resource-deleted")]
