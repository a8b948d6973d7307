"""A receiver's ranged disposition is applied as runs per link (outcome_runs.py): every delivery it
names gets its outcome, and where the receiver settles second the broker answers with one
disposition per range of consecutive ids -- cut where a delivery is missing or another link's."""

from __future__ import annotations

import pytest

from broker.messaging.link_registry import LinkKey
from broker.messaging.termini import LinkRole
from broker.protocol.amqp1_0.definitions import (Accepted, Attach, Disposition, Modified, Rejected, Released,
                                                 Source, Target, Transfer)
from broker.protocol.amqp1_0.outcome_runs import id_ranges

from .engine_client import Client10, message_payload

SECOND = 1


@pytest.mark.parametrize(("ids", "ranges"), [
    ([], []),
    ([7], [(7, 7)]),
    ([1, 2, 3, 5, 6, 9], [(1, 3), (5, 6), (9, 9)]),
    ([0xFFFFFFFE, 0xFFFFFFFF, 0, 1, 3], [(0xFFFFFFFE, 1), (3, 3)]),
    ([4, 3], [(4, 4), (3, 3)]),
    ([2, 2], [(2, 2), (2, 2)]),
])
def test_ids_make_runs_of_consecutive_ids_in_serial_arithmetic(ids: list[int], ranges: list[tuple[int, int]]) -> None:
    assert list(id_ranges(ids)) == ranges


def _client(*queues: str) -> Client10:
    client = Client10()
    for queue in queues:
        client.host.namespace.declare_queue(queue)
    client.handshake()
    client.begin()
    client.take()
    return client


def _publish(client: Client10, queue: str, count: int, first_id: int) -> None:
    """``count`` pre-settled messages to ``queue`` on a link of their own (handle 20 + ...)."""
    handle = 20 + first_id
    client.send(Attach(name=f"filler-{first_id}", handle=handle, role=False, snd_settle_mode=1,
                       source=Source(address="c"), target=Target(address=queue), initial_delivery_count=0))
    for i in range(count):
        client.transfer(handle, first_id + i, message_payload(f"{queue}-{i}".encode()), settled=True)


def _receive(client: Client10, queue: str, handle: int, credit: int, rcv_settle_mode: int) -> None:
    client.send(Attach(name=f"in-{handle}", handle=handle, role=True, snd_settle_mode=0,
                       rcv_settle_mode=rcv_settle_mode, source=Source(address=queue), target=Target(address="c")))
    client.credit(handle, credit)


def _transfers(client: Client10) -> list[Transfer]:
    return [v for v in client.values() if isinstance(v, Transfer)]


def _dispositions(client: Client10) -> list[tuple[bool, int, int | None, bool, type]]:
    return [(d.role, d.first, d.last, d.settled, type(d.state)) for d in client.values()
            if isinstance(d, Disposition)]


def _unsettled(client: Client10, handle: int) -> dict[bytes, bytes]:
    link = client.host.namespace.links.get(LinkKey("test-client", f"in-{handle}", LinkRole.SENDING))
    assert link is not None
    return dict(link.unsettled)


def test_a_ranged_disposition_in_mode_second_is_answered_with_one_ranged_disposition() -> None:
    client = _client("q")
    _publish(client, "q", 5, 100)
    _receive(client, "q", 1, 5, SECOND)
    ids = [t.delivery_id for t in _transfers(client)]
    assert len(ids) == 5
    client.send(Disposition(role=True, first=ids[0], last=ids[-1], settled=False, state=Accepted()))
    assert _dispositions(client) == [(False, ids[0], ids[-1], True, Accepted)]
    queue = client.host.namespace.queue("q")
    assert queue.unacked_count == 0 and queue.message_count == 0
    assert _unsettled(client, 1) == {}
    client.send(Disposition(role=True, first=ids[0], last=ids[-1], settled=True, state=Accepted()))
    assert _dispositions(client) == []            # settled by the broker already: nothing more


def test_a_range_with_a_delivery_settled_before_is_answered_around_it() -> None:
    client = _client("q")
    _publish(client, "q", 5, 100)
    _receive(client, "q", 1, 5, SECOND)
    ids = [t.delivery_id for t in _transfers(client)]
    client.send(Disposition(role=True, first=ids[2], settled=False, state=Accepted()))
    assert _dispositions(client) == [(False, ids[2], None, True, Accepted)]
    client.send(Disposition(role=True, first=ids[0], last=ids[-1], settled=False, state=Accepted()))
    assert _dispositions(client) == [(False, ids[0], ids[1], True, Accepted), (False, ids[3], ids[4], True, Accepted)]
    assert client.host.namespace.queue("q").unacked_count == 0


@pytest.mark.parametrize(("state", "ready"), [(Released(), 4), (Modified(delivery_failed=True), 4),
                                              (Rejected(), 0), (Accepted(), 0)])
def test_a_ranged_settled_outcome_applies_to_every_delivery(state: object, ready: int) -> None:
    client = _client("q")
    _publish(client, "q", 4, 100)
    _receive(client, "q", 1, 4, 0)
    ids = [t.delivery_id for t in _transfers(client)]
    client.send(Disposition(role=True, first=ids[0], last=ids[-1], settled=True, state=state))
    queue = client.host.namespace.queue("q")
    assert (queue.message_count, queue.unacked_count) == (ready, 0)
    assert _unsettled(client, 1) == {}
    assert _dispositions(client) == []            # settled by the receiver: no answer


def test_a_range_over_two_links_settles_each_delivery_on_its_own_link() -> None:
    client = _client("a", "b")
    _receive(client, "a", 1, 3, SECOND)
    _receive(client, "b", 2, 3, SECOND)
    client.take()
    for i in range(3):                            # deliveries alternate: a, b, a, b, ...
        _publish(client, "a", 1, 100 + 2 * i)
        _publish(client, "b", 1, 101 + 2 * i)
    transfers = _transfers(client)
    by_link = {t.delivery_id: t.handle for t in transfers}
    assert [by_link[i] for i in sorted(by_link)] == [1, 2, 1, 2, 1, 2]
    first, last = min(by_link), max(by_link)
    client.send(Disposition(role=True, first=first, last=last, settled=False, state=Rejected()))
    # the receiver left them unsettled: the broker settles each, alone (the other link's lie between)
    assert _dispositions(client) == [(False, i, None, True, Rejected) for i in sorted(by_link)]
    for name, handle in (("a", 1), ("b", 2)):
        queue = client.host.namespace.queue(name)
        assert (queue.message_count, queue.unacked_count) == (0, 0)
        assert _unsettled(client, handle) == {}
