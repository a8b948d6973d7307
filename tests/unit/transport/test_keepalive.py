"""TCP keepalive on accepted sockets (broker.transport.keepalive): the context variables,
and the options a socket accepted by the broker's own acceptor really carries."""

from __future__ import annotations

import asyncio
import socket

import pytest

from broker.errors import ConfigurationError
from broker.model.system_config import BUILTIN_CONTEXT
from broker.protocol.detect import AmqpVersion
from broker.transport.accept import Acceptor
from broker.transport.keepalive import CONTEXT_DEFAULTS, TcpKeepAlive
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="Linux socket options")


def _resolver(**overrides: str):  # type: ignore[no-untyped-def]
    values = {**CONTEXT_DEFAULTS, **{f"deltamq.{k}": v for k, v in overrides.items()}}
    return lambda text: values[text[2:-1]]


def test_the_defaults_are_in_the_brokers_context_and_find_a_dead_peer_in_90_s() -> None:
    for name, value in CONTEXT_DEFAULTS.items():
        assert BUILTIN_CONTEXT[name] == value
    settings = TcpKeepAlive.resolved(_resolver())
    assert settings == TcpKeepAlive(True, 60, 10, 3) == TcpKeepAlive()
    assert settings.detection_seconds == 90


def test_the_context_variables_are_read() -> None:
    settings = TcpKeepAlive.resolved(_resolver(tcp_keepalive="false", tcp_keepalive_idle="30",
                                               tcp_keepalive_interval="5", tcp_keepalive_count="4"))
    assert settings == TcpKeepAlive(False, 30, 5, 4)
    assert settings.detection_seconds == 0


@pytest.mark.parametrize("variable, value", [
    ("tcp_keepalive", "maybe"), ("tcp_keepalive_idle", "0"), ("tcp_keepalive_idle", "1.5"),
    ("tcp_keepalive_interval", "-1"), ("tcp_keepalive_interval", "40000"),
    ("tcp_keepalive_count", "128"), ("tcp_keepalive_count", "three"),
])
def test_bad_values_are_refused_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=f"deltamq.{variable}"):
        TcpKeepAlive.resolved(_resolver(**{variable: value}))


async def _accepted_socket_options(keepalive: TcpKeepAlive) -> tuple[int, int, int, int]:
    """Accept one connection with the broker's acceptor and protocol; the options its socket has."""
    registry = ConnectionRegistry(keepalive=keepalive)
    made: asyncio.Future[AmqpProtocol] = asyncio.get_running_loop().create_future()

    def protocol() -> AmqpProtocol:
        proto = AmqpProtocol(lambda v, h, p: None, frozenset({AmqpVersion.V0_9_1}), registry)  # type: ignore
        original = proto.connection_made

        def connection_made(transport: asyncio.BaseTransport) -> None:
            original(transport)
            made.set_result(proto)
        proto.connection_made = connection_made  # type: ignore[method-assign]
        return proto

    listener = socket.create_server(("127.0.0.1", 0))
    acceptor = Acceptor(listener, protocol, "test")
    acceptor.start()
    client = socket.create_connection(listener.getsockname())
    try:
        proto = await asyncio.wait_for(made, 10)
        assert proto.transport is not None
        sock = proto.transport.get_extra_info("socket")
        options = (sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                   sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                   sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                   sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT))
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        proto.transport.abort()
        return options
    finally:
        client.close()
        acceptor.close()
        listener.close()


def test_an_accepted_socket_has_keepalive_with_the_configured_timers() -> None:
    options = asyncio.run(_accepted_socket_options(TcpKeepAlive(True, 42, 7, 5)))
    assert options[0] != 0
    assert options[1:] == (42, 7, 5)


def test_the_default_timers_reach_the_socket() -> None:
    options = asyncio.run(_accepted_socket_options(TcpKeepAlive()))
    assert options[0] != 0
    assert options[1:] == (60, 10, 3)


def test_disabled_keepalive_leaves_the_socket_alone() -> None:
    with socket.socket() as probe:                # what a fresh socket has: the kernel's own
        untouched = probe.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
    options = asyncio.run(_accepted_socket_options(TcpKeepAlive(False, 42, 7, 5)))
    assert options[0] == 0
    assert options[1] == untouched != 42


def test_a_unix_socket_is_not_touched() -> None:
    left, right = socket.socketpair()
    with left, right:
        TcpKeepAlive(True, 42, 7, 5).apply(left)
        assert left.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
