"""The AMQP 1.0 link registry: attach, resume, recover, steal, suspend, destroy, expire.

In memory: a namespace with a fake clock (its timer is run by the test), link
endpoints that record what the registry told them (:mod:`.link_support`), and
a memory terminus store.  AMQP 1.0 sections named are of the core spec.
"""

from __future__ import annotations

import pytest

from broker.errors import NotFound
from broker.messaging.link_registry import AttachKind, LinkRegistry
from broker.messaging.link_terminus import ExpiryPolicy, TerminusDurability
from broker.messaging.namespace import Namespace
from broker.messaging.termini import LinkRole, MemoryTerminusStore, TerminusRecord

from .link_support import Endpoint, key, terminus
from .support import FakeClock

pytestmark = pytest.mark.timeout(30)

NONE, CONFIGURATION, UNSETTLED = (TerminusDurability.NONE, TerminusDurability.CONFIGURATION,
                                  TerminusDurability.UNSETTLED_STATE)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ns(clock: FakeClock) -> Namespace:
    return Namespace("v", clock=clock, wall_clock=lambda: 1_700_000_000.0)


@pytest.fixture
def store() -> MemoryTerminusStore:
    return MemoryTerminusStore()


@pytest.fixture
def links(ns: Namespace, store: MemoryTerminusStore) -> LinkRegistry:
    ns.links.open(store)
    return ns.links


def stored(store: MemoryTerminusStore) -> dict[tuple[LinkRole, str, str], dict[str, object]]:
    return {r.key: dict(r.terminus) for r in store.recover()}


# -- attach, resume, recover ------------------------------------------------------------------

def test_a_first_attach_establishes_the_link_with_the_peers_terminus(links: LinkRegistry) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    wanted = terminus()
    links.attach(endpoint, key(), wanted)
    [attachment] = endpoint.attachments
    assert attachment.kind is AttachKind.ESTABLISHED and not attachment.stolen
    assert attachment.link.terminus == wanted and attachment.link.state == "attached"
    assert links.get(key()) is attachment.link
    # the same name from the other side, or another container, is another link
    other = Endpoint(links, "s1", "c1")
    links.attach(other, key(role=LinkRole.RECEIVING), wanted)
    links.attach(other, key(container="client-2"), wanted)
    assert [a.kind for a in other.attachments] == [AttachKind.ESTABLISHED] * 2
    assert len(links) == 3


def test_a_suspended_link_resumes_with_its_terminus_and_unsettled_map(links: LinkRegistry) -> None:
    first = Endpoint(links, "s1", "c1")
    kept = terminus(ExpiryPolicy.NEVER)
    links.attach(first, key(), kept)
    link = first.link
    links.record_unsettled(link, b"tag-1", b"\x00\x53\x24\x45")
    links.record_unsettled(link, b"tag-2", b"state-2")
    links.settled(link, b"tag-2")
    links.detach(link, first, closed=False)                 # suspended (2.6.3)
    assert link.state == "suspended" and links.get(key()) is link
    second = Endpoint(links, "s2", "c2")
    asked = terminus(ExpiryPolicy.NEVER, address="elsewhere")
    links.attach(second, key(), asked)
    [attachment] = second.attachments
    assert attachment.kind is AttachKind.RESUMED and attachment.link is link
    assert attachment.link.terminus == kept and attachment.requested == asked
    assert link.unsettled == {b"tag-1": b"\x00\x53\x24\x45"}
    # the engine may take the new terminus; the unsettled map stays
    links.update_terminus(link, asked)
    assert link.terminus == asked and link.unsettled == {b"tag-1": b"\x00\x53\x24\x45"}


def test_a_null_source_recovers_the_terminus_by_link_name(links: LinkRegistry) -> None:
    first = Endpoint(links, "s1", "c1")
    kept = terminus(ExpiryPolicy.NEVER, CONFIGURATION, selector="colour = 'red'")
    links.attach(first, key(), kept)
    links.detach(first.link, first, closed=False)
    second = Endpoint(links, "s2", "c2")
    links.attach(second, key(), None)
    [attachment] = second.attachments
    assert attachment.kind is AttachKind.RECOVERED and attachment.requested is None
    assert attachment.link.terminus == kept


def test_a_null_target_with_nothing_kept_is_not_found(links: LinkRegistry) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    with pytest.raises(NotFound, match="no receiving link 'lost' of container 'client-1'"):
        links.attach(endpoint, key("lost", role=LinkRole.RECEIVING), None)
    assert endpoint.attachments == [] and len(links) == 0


# -- detach: suspend or destroy ------------------------------------------------------------------

@pytest.mark.parametrize("policy", list(ExpiryPolicy))
def test_detach_with_closed_destroys_the_link_whatever_its_policy(
        links: LinkRegistry, store: MemoryTerminusStore, policy: ExpiryPolicy) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    links.attach(endpoint, key(), terminus(policy, CONFIGURATION))
    assert key().terminus_key in stored(store)
    links.detach(endpoint.link, endpoint, closed=True)
    assert links.get(key()) is None and stored(store) == {}
    # attaching again starts afresh
    again = Endpoint(links, "s1", "c1")
    links.attach(again, key(), terminus(policy))
    assert again.attachments[0].kind is AttachKind.ESTABLISHED


def test_a_detach_from_an_endpoint_that_lost_the_link_changes_nothing(links: LinkRegistry) -> None:
    old = Endpoint(links, "s1", "c1", release_on_steal=True)
    links.attach(old, key(), terminus())
    new = Endpoint(links, "s2", "c2")
    links.attach(new, key(), terminus())
    links.detach(new.link, old, closed=True)                # the old peer's late close
    assert links.get(key()) is new.link and new.link.endpoint is new


# -- expiry, per policy (3.5.6) --------------------------------------------------------------------

#: policy -> the first event of detach, session end, connection close that starts its timer
STARTS = {ExpiryPolicy.LINK_DETACH: 0, ExpiryPolicy.SESSION_END: 1,
          ExpiryPolicy.CONNECTION_CLOSE: 2, ExpiryPolicy.NEVER: None}


@pytest.mark.parametrize("policy", list(ExpiryPolicy))
def test_each_policy_starts_the_expiry_timer_on_its_own_event(
        links: LinkRegistry, ns: Namespace, clock: FakeClock, store: MemoryTerminusStore,
        policy: ExpiryPolicy) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    links.attach(endpoint, key(), terminus(policy, CONFIGURATION, timeout=30))
    link = endpoint.link
    events = [lambda: links.detach(link, endpoint, closed=False),
              lambda: links.session_ended("s1"), lambda: links.connection_closed("c1")]
    for number, event in enumerate(events):
        clock.advance(1)
        event()
        started = STARTS[policy] is not None and number >= STARTS[policy]
        assert (links.next_deadline() is not None) == started, f"after event {number}"
    if STARTS[policy] is None:
        assert ns.next_deadline() is None
        clock.advance(10 ** 6)
        ns.run_due(clock())
        assert links.get(key()) is link and key().terminus_key in stored(store)
        return
    deadline = 1000.0 + 1 + STARTS[policy] + 30
    assert links.next_deadline() == ns.next_deadline() == deadline
    ns.run_due(deadline - 0.001)
    assert links.get(key()) is link                          # kept for the timeout
    ns.run_due(deadline)
    assert links.get(key()) is None and stored(store) == {}  # then removed, from the store too
    assert ns.next_deadline() is None


def test_attaching_again_before_expiry_stops_the_timer(links: LinkRegistry, ns: Namespace,
                                                        clock: FakeClock) -> None:
    first = Endpoint(links, "s1", "c1")
    links.attach(first, key(), terminus(ExpiryPolicy.LINK_DETACH, timeout=30))
    links.detach(first.link, first, closed=False)
    clock.advance(29)
    second = Endpoint(links, "s2", "c1")
    links.attach(second, key(), terminus(ExpiryPolicy.LINK_DETACH, timeout=30))
    assert second.attachments[0].kind is AttachKind.RESUMED
    assert ns.next_deadline() is None
    ns.run_due(clock.advance(60))
    assert links.get(key()) is second.link
    # detached again, the timer starts from the whole timeout
    links.detach(second.link, second, closed=False)
    assert links.next_deadline() == clock() + 30


def test_a_link_detach_timer_already_running_is_not_restarted_by_the_session_ending(
        links: LinkRegistry, clock: FakeClock) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    links.attach(endpoint, key(), terminus(ExpiryPolicy.LINK_DETACH, timeout=30))
    links.detach(endpoint.link, endpoint, closed=False)
    clock.advance(20)
    links.session_ended("s1")
    assert links.next_deadline() == 1000.0 + 30


def test_a_timeout_of_zero_expires_at_the_trigger(links: LinkRegistry) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    links.attach(endpoint, key(), terminus(ExpiryPolicy.SESSION_END, timeout=0))
    links.detach(endpoint.link, endpoint, closed=False)
    assert links.get(key()) is not None
    links.session_ended("s1")
    assert links.get(key()) is None


def test_a_terminus_without_a_timeout_gets_the_virtual_hosts_default(
        ns: Namespace, store: MemoryTerminusStore, clock: FakeClock) -> None:
    ns.links.open(store, default_timeout=120)
    endpoint = Endpoint(ns.links, "s1", "c1")
    ns.links.attach(endpoint, key(), terminus(ExpiryPolicy.LINK_DETACH, timeout=None))
    ns.links.detach(endpoint.link, endpoint, closed=False)
    assert ns.next_deadline() == clock() + 120


def test_ending_a_session_detaches_its_links_and_leaves_other_sessions_alone(
        links: LinkRegistry) -> None:
    a = Endpoint(links, "s1", "c1")
    b = Endpoint(links, "s2", "c1")
    links.attach(a, key("a"), terminus(ExpiryPolicy.SESSION_END, timeout=0))
    links.attach(b, key("b"), terminus(ExpiryPolicy.SESSION_END, timeout=0))
    links.session_ended("s1")
    assert links.get(key("a")) is None and links.get(key("b")) is b.link
    links.connection_closed("c1")
    assert len(links) == 0


# -- stealing (2.6.1) ------------------------------------------------------------------------------

def test_an_attach_of_an_attached_link_steals_it_once_the_old_endpoint_let_go(
        links: LinkRegistry) -> None:
    old = Endpoint(links, "s1", "c1")
    links.attach(old, key(), terminus(ExpiryPolicy.LINK_DETACH, timeout=0))
    link = old.link
    links.record_unsettled(link, b"t", b"s")
    thief = Endpoint(links, "s2", "c2")
    links.attach(thief, key(), terminus(ExpiryPolicy.LINK_DETACH, timeout=0))
    assert old.stolen == [link] and thief.attachments == []  # not before the old one let go
    assert link.state == "stealing" and link.endpoint is old
    links.detach(link, old, closed=False)                    # its detach (amqp:link:stolen) is sent
    [attachment] = thief.attachments
    assert attachment.stolen and attachment.kind is AttachKind.RESUMED and attachment.link is link
    # the handover is no detach: a link-detach terminus with no timeout is still there
    assert links.get(key()) is link and link.endpoint is thief and link.unsettled == {b"t": b"s"}


def test_an_old_endpoint_that_lets_go_at_once_hands_over_before_attach_returns(
        links: LinkRegistry) -> None:
    old = Endpoint(links, "s1", "c1", release_on_steal=True)
    links.attach(old, key(), terminus())
    thief = Endpoint(links, "s2", "c1")                      # another session, same connection
    links.attach(thief, key(), None)                        # a steal that recovers the terminus
    assert [a.kind for a in thief.attachments] == [AttachKind.RECOVERED]
    assert old.stolen and old.link.endpoint is thief


def test_attaches_arriving_during_a_steal_steal_in_turn(links: LinkRegistry) -> None:
    first = Endpoint(links, "s1", "c1")
    links.attach(first, key(), terminus())
    second = Endpoint(links, "s2", "c2")
    third = Endpoint(links, "s3", "c3")
    links.attach(second, key(), terminus())
    links.attach(third, key(), terminus())
    assert len(first.stolen) == 1 and second.stolen == []   # one steal at a time
    link = first.stolen[0]
    links.detach(link, first, closed=False)
    assert len(second.attachments) == 1 and second.stolen == [link]  # got it, and is asked next
    assert third.attachments == []
    links.detach(link, second, closed=False)
    assert len(third.attachments) == 1 and link.endpoint is third and third.stolen == []


def test_a_waiting_attach_whose_session_ends_is_dropped(links: LinkRegistry) -> None:
    old = Endpoint(links, "s1", "c1")
    links.attach(old, key(), terminus(ExpiryPolicy.NEVER))
    thief = Endpoint(links, "s2", "c2")
    links.attach(thief, key(), terminus(ExpiryPolicy.NEVER))
    links.session_ended("s2")
    links.detach(old.link, old, closed=False)
    assert thief.attachments == [] and old.link.state == "suspended"


def test_an_old_connection_closing_instead_of_detaching_hands_the_link_over(
        links: LinkRegistry) -> None:
    old = Endpoint(links, "s1", "c1")
    links.attach(old, key(), terminus(ExpiryPolicy.CONNECTION_CLOSE, timeout=0))
    thief = Endpoint(links, "s2", "c2")
    links.attach(thief, key(), terminus(ExpiryPolicy.CONNECTION_CLOSE, timeout=0))
    links.connection_closed("c1")
    assert thief.attachments and thief.link.endpoint is thief
    assert links.get(key()) is thief.link                    # handed over, not expired


def test_an_old_endpoint_closing_while_stolen_still_hands_the_link_over(links: LinkRegistry) -> None:
    old = Endpoint(links, "s1", "c1")
    links.attach(old, key(), terminus())
    thief = Endpoint(links, "s2", "c2")
    links.attach(thief, key(), None)
    links.detach(old.link, old, closed=True)                 # its peer closed meanwhile
    assert [a.kind for a in thief.attachments] == [AttachKind.RECOVERED]


# -- what is stored ------------------------------------------------------------------------------

@pytest.mark.parametrize("durable, row, with_unsettled", [
    (NONE, False, False), (CONFIGURATION, True, False), (UNSETTLED, True, True)])
def test_durability_decides_what_is_stored(links: LinkRegistry, store: MemoryTerminusStore,
                                           durable: TerminusDurability, row: bool,
                                           with_unsettled: bool) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    links.attach(endpoint, key(), terminus(ExpiryPolicy.NEVER, durable, selector="a > 1",
                                           capabilities=("topic",), distribution_mode="copy"))
    links.record_unsettled(endpoint.link, b"\x01\x02", b"\xff")
    found = stored(store)
    assert (key().terminus_key in found) == row
    if row:
        record = found[key().terminus_key]
        assert record["address"] == "orders" and record["durable"] == int(durable)
        assert record["expiry-policy"] == "never" and record["selector"] == "a > 1"
        assert record["capabilities"] == ["topic"] and record["distribution-mode"] == "copy"
        assert ("unsettled" in record) == with_unsettled
        if with_unsettled:
            assert record["unsettled"] == [["AQI=", "/w=="]]
    # the unsettled map is kept in memory whatever the durability
    links.detach(endpoint.link, endpoint, closed=False)
    assert links.get(key()).unsettled == {b"\x01\x02": b"\xff"}  # type: ignore[union-attr]


def test_a_terminus_made_non_durable_leaves_the_store(links: LinkRegistry,
                                                     store: MemoryTerminusStore) -> None:
    endpoint = Endpoint(links, "s1", "c1")
    links.attach(endpoint, key(), terminus(ExpiryPolicy.NEVER, CONFIGURATION))
    links.update_terminus(endpoint.link, terminus(ExpiryPolicy.NEVER, NONE))
    assert stored(store) == {}


def test_opening_recovers_stored_termini_as_suspended_links(ns: Namespace, clock: FakeClock) -> None:
    store = MemoryTerminusStore()
    store.save([
        TerminusRecord(LinkRole.SENDING, "c", "durable-sub",
                       {"address": "amq.topic", "durable": 2, "expiry-policy": "never",
                        "unsettled": [["AQ==", "Ag=="]], "subscription-queue": "q1"}),
        TerminusRecord(LinkRole.RECEIVING, "c", "session-bound",
                       {"address": "in", "durable": 1, "expiry-policy": "session-end", "timeout": 60,
                        "unsettled": [["AQ==", "Ag=="]]}),
        TerminusRecord(LinkRole.RECEIVING, "c", "broken", {"durable": 7}),
    ])
    ns.links.open(store)
    durable = ns.links.get(key("durable-sub", "c"))
    assert durable is not None and durable.state == "suspended"
    assert durable.unsettled == {b"\x01": b"\x02"} and durable.subscription_queue == "q1"
    bound = ns.links.get(key("session-bound", "c", LinkRole.RECEIVING))
    assert bound is not None and bound.unsettled == {}       # configuration: no unsettled map
    assert ns.links.get(key("broken", "c", LinkRole.RECEIVING)) is None
    # the broker's stopping ended the session: its timer runs from the start
    assert ns.next_deadline() == clock() + 60
    ns.run_due(clock.advance(60))
    assert ns.links.get(key("session-bound", "c", LinkRole.RECEIVING)) is None
    assert {r.link_name for r in store.recover()} == {"durable-sub", "broken"}


# -- management's view -----------------------------------------------------------------------------

def test_describe_shows_every_link_with_its_terminus(links: LinkRegistry, clock: FakeClock) -> None:
    a = Endpoint(links, "s1", "c1")
    links.attach(a, key("b-link"), terminus(ExpiryPolicy.LINK_DETACH, CONFIGURATION, timeout=30))
    links.attach(a, key("a-link", role=LinkRole.RECEIVING), terminus(timeout=None))
    links.record_unsettled(a.link, b"1", b"2")
    links.detach(links.get(key("b-link")), a, closed=False)  # type: ignore[arg-type]
    shown = links.describe()
    assert [(s["linkName"], s["role"], s["state"]) for s in shown] == [
        ("a-link", "receiving", "attached"), ("b-link", "sending", "suspended")]
    assert shown[0]["connection"] == "c1" and shown[0]["unsettledCount"] == 1
    assert shown[0]["timeout"] == 0 and shown[0]["expiresAt"] is None
    assert shown[1]["durable"] == "configuration" and shown[1]["expiryPolicy"] == "link-detach"
    assert shown[1]["expiresAt"] == (1_700_000_000 + 30) * 1000 and shown[1]["stored"] is True
    assert shown[1]["connection"] is None
