"""Resuming links in the AMQP 1.0 engine, in memory (spec 2.6.13): the unsettled maps exchanged on
attach, resumed transfers, maps cut to one frame, unsettled deliveries a suspended link keeps, link
stealing with them, and the unsettled map across a restart (the terminus store)."""

from __future__ import annotations

import struct
from typing import Any

from broker.messaging.link_registry import Link, LinkKey
from broker.messaging.termini import LinkRole, MemoryTerminusStore
from broker.protocol.amqp1_0.definitions import (Accepted, Attach, Detach, Disposition, Source, Target,
                                                 Transfer)
from broker.protocol.amqp1_0.encoding import encode

from ..harness import FakeHost
from .engine_client import Client10, Host10, message_payload

SECOND = 1
UNSETTLED_STATE = 2


def _client(host: FakeHost | None = None, **open_fields: Any) -> Client10:
    client = Client10(host)
    client.handshake(**open_fields)
    client.begin()
    client.take()
    return client


def _host(store: MemoryTerminusStore | None = None) -> Host10:
    host = Host10()
    if store is not None:
        host.namespace.links.open(store)
    host.namespace.declare_queue("q", durable=False)
    return host


def _tag(i: int) -> bytes:
    return struct.pack(">I", i)


def _attach_sender(client: Client10, *, unsettled: dict[bytes, Any] | None = None, incomplete: bool = False,
                   durable: int = UNSETTLED_STATE) -> Attach:
    client.send(Attach(name="out", handle=0, role=False, snd_settle_mode=0, rcv_settle_mode=SECOND,
                       source=Source(address="client"),
                       target=Target(address="q", durable=durable, expiry_policy="never"),
                       unsettled=unsettled, incomplete_unsettled=incomplete, initial_delivery_count=0))
    return client.expect(Attach)


def _attach_receiver(client: Client10, *, unsettled: dict[bytes, Any] | None = None,
                     durable: int = UNSETTLED_STATE, expiry: str = "never", timeout: int = 0) -> Attach:
    client.send(Attach(name="in", handle=1, role=True, snd_settle_mode=0, rcv_settle_mode=0,
                       source=Source(address="q", durable=durable, expiry_policy=expiry, timeout=timeout),
                       target=Target(address="client"), unsettled=unsettled))
    return client.expect(Attach)


def _link(host: FakeHost, name: str, role: LinkRole) -> Link:
    link = host.namespace.links.get(LinkKey("test-client", name, role))
    assert link is not None
    return link


def _dispositions(client: Client10) -> list[Disposition]:
    return [v for v in client.values() if isinstance(v, Disposition)]


def _transfers(client: Client10) -> list[tuple[Transfer, bytes]]:
    return [(v, p) for _c, v, p in client.take() if isinstance(v, Transfer)]


def _sent_unsettled(host: FakeHost, count: int) -> Client10:
    """A sender in mode second sent ``count`` deliveries the broker accepted; none is settled."""
    client = _client(host)
    _attach_sender(client)
    for i in range(count):
        client.transfer(0, i, message_payload(f"m{i}".encode()))
    assert [d.settled for d in _dispositions(client)] == [False] * count
    return client


def _lost(client: Client10) -> None:
    client.server.connection_lost()


# -- the broker receives ------------------------------------------------------------------------------

def test_a_resumed_receiving_link_answers_with_its_map_less_what_the_peer_settled() -> None:
    host = _host()
    _lost(_sent_unsettled(host, 2))
    again = _client(host)
    answer = _attach_sender(again, unsettled={_tag(0): None})      # the peer settled delivery 1
    assert answer.unsettled == {_tag(0): Accepted()} and not answer.incomplete_unsettled
    assert set(_link(host, "out", LinkRole.RECEIVING).unsettled) == {_tag(0)}


def test_a_null_peer_map_settles_every_tag_of_the_broker() -> None:
    host = _host()
    _lost(_sent_unsettled(host, 2))
    answer = _attach_sender(_client(host))
    assert answer.unsettled is None and _link(host, "out", LinkRole.RECEIVING).unsettled == {}


def test_an_incomplete_peer_map_proves_nothing_by_a_tags_absence() -> None:
    host = _host()
    _lost(_sent_unsettled(host, 2))
    answer = _attach_sender(_client(host), unsettled={}, incomplete=True)
    assert answer.unsettled == {_tag(0): Accepted(), _tag(1): Accepted()}


def test_a_resumed_delivery_known_by_its_tag_is_not_routed_twice() -> None:
    host = _host()
    _lost(_sent_unsettled(host, 2))
    again = _client(host)
    _attach_sender(again, unsettled={_tag(0): None, _tag(1): None})
    queue = host.namespace.queue("q")
    assert queue.message_count == 2
    again.transfer(0, 0, message_payload(b"m0"), resume=True)          # known: answered from the map
    [disposition] = _dispositions(again)
    assert (disposition.settled, disposition.state) == (False, Accepted())
    again.send(Disposition(role=False, first=0, settled=True))
    assert set(_link(host, "out", LinkRole.RECEIVING).unsettled) == {_tag(1)}
    again.transfer(0, 1, message_payload(b"m1"), resume=True, settled=True)   # settled: discarded
    assert _link(host, "out", LinkRole.RECEIVING).unsettled == {}
    assert queue.message_count == 2
    again.transfer(0, 2, message_payload(b"new"), resume=True)         # unknown tag: a new delivery
    assert queue.message_count == 3


def test_a_map_too_large_for_one_frame_is_cut_and_only_resumed_deliveries_may_follow() -> None:
    host = _host()
    _lost(_sent_unsettled(host, 60))
    again = _client(host, max_frame_size=512)
    answer = _attach_sender(again, unsettled={}, incomplete=True)
    assert answer.incomplete_unsettled and 0 < len(answer.unsettled) < 60
    assert len(encode(answer)) + 8 <= 512
    again.transfer(0, 0, message_payload(b"m0"), resume=True)
    assert _dispositions(again)
    again.transfer(0, 1, message_payload(b"brand new"))
    assert again.expect(Detach).error.condition == "amqp:illegal-state"


def test_stealing_a_receiving_link_hands_its_map_to_the_thief() -> None:
    host = _host()
    first = _sent_unsettled(host, 1)
    thief = _client(host)
    answer = _attach_sender(thief, unsettled={_tag(0): None})
    first._read()
    assert first.expect(Detach).error.condition == "amqp:link:stolen"
    assert answer.unsettled == {_tag(0): Accepted()}


def test_the_unsettled_map_survives_a_restart_in_the_terminus_store() -> None:
    store = MemoryTerminusStore()
    _sent_unsettled(_host(store), 1)
    [record] = store.recover()
    assert len(record.terminus["unsettled"]) == 1
    restarted = _host(store)                    # a new virtual host over the same store
    again = _client(restarted)
    answer = _attach_sender(again, unsettled={_tag(0): None})
    assert answer.unsettled == {_tag(0): Accepted()}
    again.transfer(0, 0, message_payload(b"m0"), resume=True, settled=True)
    assert restarted.namespace.queue("q").message_count == 0        # not routed again
    [record] = store.recover()
    assert "unsettled" not in record.terminus


def test_configuration_durability_keeps_the_map_in_memory_only() -> None:
    store = MemoryTerminusStore()
    client = _client(_host(store))
    _attach_sender(client, durable=1)
    client.transfer(0, 0, message_payload())
    [record] = store.recover()
    assert "unsettled" not in record.terminus


# -- the broker sends -----------------------------------------------------------------------------------

def _received_unsettled(host: FakeHost, count: int, **attach: Any) -> tuple[Client10, list[bytes]]:
    """A receiver got ``count`` deliveries it has not settled."""
    filler = _client(host)
    filler.send(Attach(name="fill", handle=5, role=False, source=Source(address="c"), target=Target(address="q"),
                       initial_delivery_count=0))
    for i in range(count):
        filler.transfer(5, i, message_payload(f"m{i}".encode()), settled=True)
    client = _client(host)
    _attach_receiver(client, **attach)
    client.credit(1, count)
    transfers = _transfers(client)
    assert len(transfers) == count and not any(t.settled for t, _p in transfers)
    return client, [bytes(t.delivery_tag) for t, _p in transfers]


def test_a_suspended_receiver_with_unsettled_state_keeps_its_deliveries() -> None:
    host = _host()
    client, tags = _received_unsettled(host, 3)
    _lost(client)
    queue = host.namespace.queue("q")
    assert queue.message_count == 0 and queue.unacked_count == 3       # nobody else gets them
    link = _link(host, "in", LinkRole.SENDING)
    assert set(link.unsettled) == set(tags) == set(link.held)


def test_resuming_applies_the_peers_outcomes_and_delivers_the_rest_again() -> None:
    host = _host()
    client, tags = _received_unsettled(host, 3)
    _lost(client)
    again = _client(host)
    answer = _attach_receiver(again, unsettled={tags[0]: Accepted(), tags[1]: None})
    assert answer.unsettled is None                    # the broker settled all of them
    queue = host.namespace.queue("q")
    assert queue.message_count == 2 and queue.unacked_count == 0
    again.credit(1, 10)
    from broker.protocol.amqp1_0.sections import MessageSections
    bodies = [MessageSections(p).body() for _t, p in _transfers(again)]
    assert bodies == [[b"m1"], [b"m2"]]                 # m0 was accepted: not again
    link = _link(host, "in", LinkRole.SENDING)
    assert link.held == {} and len(link.unsettled) == 2


def test_a_receiver_without_unsettled_state_gives_its_deliveries_back_at_once() -> None:
    host = _host()
    client, _tags = _received_unsettled(host, 2, durable=1)
    _lost(client)
    assert host.namespace.queue("q").message_count == 2
    assert _link(host, "in", LinkRole.SENDING).unsettled == {}


def test_kept_deliveries_go_back_to_the_queue_when_the_link_expires() -> None:
    host = _host()
    client, _tags = _received_unsettled(host, 2, expiry="link-detach", timeout=0)
    client.send(Detach(handle=1, closed=False))
    assert host.namespace.queue("q").message_count == 2
    assert host.namespace.links.get(LinkKey("test-client", "in", LinkRole.SENDING)) is None


def test_closing_the_link_gives_its_deliveries_back() -> None:
    host = _host()
    client, _tags = _received_unsettled(host, 2)
    client.send(Detach(handle=1, closed=True))
    assert host.namespace.queue("q").message_count == 2


def test_a_thief_takes_over_the_kept_deliveries() -> None:
    host = _host()
    first, tags = _received_unsettled(host, 2)
    thief = _client(host)
    _attach_receiver(thief, unsettled={tags[0]: Accepted()})
    first._read()
    assert first.expect(Detach).error.condition == "amqp:link:stolen"
    thief.credit(1, 10)
    transfers = _transfers(thief)
    assert len(transfers) == 1 and bytes(transfers[0][0].delivery_tag) not in tags
    assert host.namespace.queue("q").unacked_count == 1


def test_after_a_restart_the_stored_map_is_settled_and_the_journal_redelivers() -> None:
    store = MemoryTerminusStore()
    client, tags = _received_unsettled(_host(store), 1)
    [record] = [r for r in store.recover() if r.link_name == "in"]
    assert len(record.terminus["unsettled"]) == 1
    restarted = _host(store)
    link = _link(restarted, "in", LinkRole.SENDING)
    assert set(link.unsettled) == set(tags) and link.held == {}
    answer = _attach_receiver(_client(restarted), unsettled={tags[0]: None})
    assert answer.unsettled is None and _link(restarted, "in", LinkRole.SENDING).unsettled == {}


def test_a_null_target_recovers_the_stored_terminus_with_its_map_after_a_restart() -> None:
    store = MemoryTerminusStore()
    _sent_unsettled(_host(store), 1)
    restarted = _host(store)
    again = _client(restarted)
    again.send(Attach(name="out", handle=0, role=False, snd_settle_mode=0, rcv_settle_mode=SECOND,
                      source=Source(address="client"), target=None, unsettled={_tag(0): None},
                      initial_delivery_count=0))
    answer = again.expect(Attach)
    assert answer.target.address == "q" and answer.target.durable == UNSETTLED_STATE
    assert answer.unsettled == {_tag(0): Accepted()}


def test_after_an_incomplete_peer_map_the_broker_keeps_the_rest_and_sends_nothing_new() -> None:
    host = _host()
    client, tags = _received_unsettled(host, 3)
    _lost(client)
    again = _client(host)
    again.send(Attach(name="in", handle=1, role=True, snd_settle_mode=0, rcv_settle_mode=0,
                      source=Source(address="q", durable=UNSETTLED_STATE, expiry_policy="never"),
                      target=Target(address="client"), unsettled={tags[0]: Accepted()}, incomplete_unsettled=True))
    answer = again.expect(Attach)
    assert set(answer.unsettled) == {tags[1], tags[2]}           # absent from an incomplete map: kept
    link = _link(host, "in", LinkRole.SENDING)
    assert set(link.held) == {tags[1], tags[2]}
    again.credit(1, 10)
    assert _transfers(again) == []                              # no new deliveries
    queue = host.namespace.queue("q")
    assert queue.unacked_count == 2 and queue.message_count == 0
    again.send(Detach(handle=1, closed=False))
    again.take()
    _attach_receiver(again, unsettled={tags[1]: None, tags[2]: None})   # the rest of its map
    again.credit(1, 10)
    assert len(_transfers(again)) == 2
