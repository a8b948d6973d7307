"""Clients' host names for ACL ``from_hostname``: looked up off the loop, cached, bounded in time;
until known a rule that needs the name does not match (deny by default, as Broker-J)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from broker.errors import AccessRefused, ConnectionAccessRefused
from broker.protocol.amqp0_9_1 import methods as m
from broker.security.access_control import AccessControl
from broker.security.acl_file import parse
from broker.security.host_names import HostNames, reverse_lookup
from tests.unit.protocol.harness import Client, FakeClock, FakeHost
from tests.waiting import wait_until_async

RULES = ('ACL ALLOW guest ACCESS VIRTUALHOST from_hostname="local.*"\n'
         'ACL ALLOW guest PUBLISH EXCHANGE from_hostname="local.*"\n'
         "ACL DENY ALL ALL ALL\n")


def _localhost_named() -> bool:
    try:
        return socket.gethostbyaddr("127.0.0.1")[0] == "localhost"
    except OSError:
        return False


@pytest.mark.timeout(30)
@pytest.mark.skipif(not _localhost_named(), reason="127.0.0.1 is not named localhost here")
def test_127_0_0_1_is_looked_up_as_localhost_in_a_worker_thread() -> None:
    loop_thread: list[int] = []
    lookup_threads: list[int] = []

    def resolve(address: str) -> str | None:
        lookup_threads.append(threading.get_ident())
        return reverse_lookup(address)

    async def scenario() -> None:
        loop_thread.append(threading.get_ident())
        names = HostNames(resolve)
        heard: list[str | None] = []
        names.look_up("127.0.0.1")
        assert names.when_known("127.0.0.1", heard.append)
        names.look_up("127.0.0.1")                      # one look-up per address at a time
        await wait_until_async(lambda: heard, timeout=10)
        assert heard == ["localhost"] and names.known("127.0.0.1") == (True, "localhost")
        assert names.lookups == 1 and not names.pending("127.0.0.1")
        names.close()

    asyncio.run(scenario())
    assert lookup_threads and lookup_threads[0] != loop_thread[0]


def test_a_look_up_that_does_not_answer_in_time_fails_and_its_late_answer_is_dropped() -> None:
    release = threading.Event()

    def slow(address: str) -> str | None:
        release.wait(10)
        return "late.example"

    async def scenario() -> None:
        clock = FakeClock()
        names = HostNames(slow, timeout=0.1, failed_ttl=60, clock=clock)
        heard: list[str | None] = []
        names.look_up("10.0.0.9")
        names.when_known("10.0.0.9", heard.append)
        await wait_until_async(lambda: heard, timeout=5)
        assert heard == [None] and names.known("10.0.0.9") == (True, None)
        assert names.failures == 1
        release.set()
        await asyncio.sleep(0.05)
        assert names.known("10.0.0.9") == (True, None)          # the late answer is not kept
        clock.now += 61
        assert names.known("10.0.0.9") == (False, None)        # failures are forgotten too
        names.close()

    asyncio.run(scenario())


def test_answers_expire_and_look_ups_are_bounded() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        release = threading.Event()
        names = HostNames(lambda a: "h.example" if release.wait(10) else None, ttl=300,
                          max_pending=2, clock=clock)
        for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
            names.look_up(address)
        assert names.pending("10.0.0.1") and names.pending("10.0.0.2")
        assert not names.pending("10.0.0.3")                    # too many running
        release.set()
        await wait_until_async(lambda: not names.pending("10.0.0.2"), timeout=5)
        assert names.known("10.0.0.1") == (True, "h.example")
        clock.now += 301
        assert names.known("10.0.0.1") == (False, None)
        names.close()

    asyncio.run(scenario())


def test_look_ups_that_timed_out_keep_their_place_until_the_resolver_returns() -> None:
    """A name server that hangs while new addresses keep connecting: the threads' work stays
    bounded (timed-out look-ups are not replaced by more queued behind them)."""
    release = threading.Event()

    async def scenario() -> None:
        names = HostNames(lambda a: "h.example" if release.wait(10) else None, timeout=0.05,
                          max_pending=2)
        names.look_up("10.0.0.1")
        names.look_up("10.0.0.2")
        await wait_until_async(lambda: names.failures == 2, timeout=5)      # both timed out
        names.look_up("10.0.0.3")
        assert not names.pending("10.0.0.3") and names.lookups == 2 and names.running == 2
        release.set()
        await wait_until_async(lambda: names.running == 0, timeout=5)
        names.look_up("10.0.0.3")
        assert names.pending("10.0.0.3") and names.lookups == 3
        names.close()

    try:
        asyncio.run(scenario())
    finally:
        release.set()


def test_a_name_that_does_not_resolve_back_to_the_address_is_no_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever runs a client's reverse zone may name it anything: the name counts only when it
    resolves back to the client's address (forward-confirmed, as Java's look-up)."""
    def claims_localhost(address: str) -> tuple[str, list[str], list[str]]:
        return "localhost", [], [address]

    monkeypatch.setattr(socket, "gethostbyaddr", claims_localhost)
    localhost = {info[4][0] for info in socket.getaddrinfo("localhost", None)}
    assert "192.0.2.7" not in localhost
    assert reverse_lookup("192.0.2.7") is None                  # the reverse zone's claim
    if "127.0.0.1" in localhost:
        assert reverse_lookup("127.0.0.1") == "localhost"       # confirmed
        assert reverse_lookup("::ffff:127.0.0.1") == "localhost"


def _control(resolve: object = lambda address: "localhost") -> AccessControl:
    control = AccessControl()
    control.host_names = HostNames(resolve)  # type: ignore[arg-type]
    control.configure([parse(RULES).rule_set()], {})
    return control


def test_only_rules_with_from_hostname_make_names_looked_up() -> None:
    assert _control().uses_hostnames
    control = AccessControl()
    control.configure([parse("ACL ALLOW ALL ALL ALL from_network=127.0.0.1").rule_set()], {})
    assert not control.uses_hostnames


def test_until_the_name_is_known_a_from_hostname_rule_does_not_match() -> None:
    async def scenario() -> None:
        control = _control()
        early = control.connection_access("guest", "127.0.0.1", "default")
        with pytest.raises(ConnectionAccessRefused):       # not looked up yet: deny by default
            early.check_access()
        control.host_names.look_up("127.0.0.1")
        waiting = control.connection_access("guest", "127.0.0.1", "default")   # opened meanwhile
        assert waiting.subject.hostname is None
        with pytest.raises(AccessRefused):
            waiting.check_publish("amq.direct", "k")
        await wait_until_async(lambda: control.host_names.known("127.0.0.1")[0], timeout=5)
        assert waiting.subject.hostname == "localhost"      # told when the answer came
        waiting.check_publish("amq.direct", "k")             # the cached refusal is not kept
        later = control.connection_access("guest", "127.0.0.1", "default")
        assert later.subject.hostname == "localhost"
        later.check_access()
        other = control.connection_access("guest", "127.0.0.2", "default")
        with pytest.raises(ConnectionAccessRefused):        # its own address: not looked up
            other.check_access()
        control.host_names.close()

    asyncio.run(scenario())


def _open(host: FakeHost) -> m.Method:
    client = Client(host)
    client.open_connection()
    return client.take()[-1][1]


def test_a_0_9_1_client_is_let_in_by_from_hostname_once_its_name_is_known() -> None:
    async def scenario() -> None:
        host = FakeHost()
        host.access_control = _control()
        refused = _open(host)
        assert isinstance(refused, m.ConnectionClose) and refused.reply_code == 403
        host.access_control.host_names.look_up("127.0.0.1")     # the harness's client address
        await wait_until_async(lambda: host.access_control.host_names.known("127.0.0.1")[0],
                               timeout=5)
        assert isinstance(_open(host), m.ConnectionOpenOk)
        host.access_control.host_names.close()

    asyncio.run(scenario())
