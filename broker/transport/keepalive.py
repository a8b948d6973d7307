"""TCP keepalive on accepted sockets: finding half-open connections without AMQP heartbeats.

A client whose host crashed, lost power or was cut off by the network leaves a
socket that looks open for ever: nothing arrives, and as long as the broker
has nothing to send, nothing fails.  AMQP heartbeats find it only when they
were negotiated -- and AMQP 1.0's ``idle-time-out`` is off by default (see
:mod:`broker.protocol.amqp1_0.connection`), as is a 0-9-1 client's that vetoes
heartbeats.  So every accepted socket gets ``SO_KEEPALIVE``: after
``idle`` seconds without traffic the kernel sends a probe, then one every
``interval`` seconds, and after ``count`` unanswered probes it resets the
connection; the transport sees the socket close and the connection is torn
down as if the client had gone away.  With the defaults (60, 10, 3) a dead
peer is found within 90 s of its last packet -- sooner than the 120 s the
0-9-1 heartbeat's default (60 s, dropped after two intervals) takes.  The
probes are empty segments the peer's kernel answers, so they cost a live
client nothing, and they keep NAT and firewall state fresh too.

The spec asks for it: "Implementations SHOULD make use of TCP keep-alive
wherever possible in order to be good citizens" (AMQP 1.0, 2.4.5).  Neither
peer broker names the values: Apache Qpid Broker-J 9.2 sets only
``TCP_NODELAY`` and the buffer sizes on an accepted socket and has no
keepalive setting; RabbitMQ has ``tcp_listen_options.keepalive`` (off by
default, the kernel's timers, which wait two hours before the first probe).

Context variables (``-D``, the environment, a port's ``context``), read when a
port starts listening and when its context changes:

- ``deltamq.tcp_keepalive``: ``true`` (default) or ``false``;
- ``deltamq.tcp_keepalive_idle``: seconds of silence before the first probe (60);
- ``deltamq.tcp_keepalive_interval``: seconds between probes (10);
- ``deltamq.tcp_keepalive_count``: unanswered probes that end the connection (3).

Keepalive probes are sent only while the broker has no data in flight to the
peer; a peer that vanished while the broker was sending to it is found by the
kernel's retransmission limit (``net.ipv4.tcp_retries2``, about 15 minutes by
default), or sooner by an AMQP heartbeat when one was negotiated.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import ConfigurationError

ENABLED_VARIABLE = "deltamq.tcp_keepalive"
IDLE_VARIABLE = "deltamq.tcp_keepalive_idle"
INTERVAL_VARIABLE = "deltamq.tcp_keepalive_interval"
COUNT_VARIABLE = "deltamq.tcp_keepalive_count"

#: the built-in values of the context variables (merged into the system context)
CONTEXT_DEFAULTS = {
    ENABLED_VARIABLE: "true",
    IDLE_VARIABLE: "60",
    INTERVAL_VARIABLE: "10",
    COUNT_VARIABLE: "3",
}

#: what Linux accepts (TCP_KEEPIDLE and TCP_KEEPINTVL: 1..32767 s; TCP_KEEPCNT: 1..127)
MAX_SECONDS = 32767
MAX_COUNT = 127
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


@dataclass(frozen=True, slots=True)
class TcpKeepAlive:
    """The keepalive an accepted socket gets (``enabled`` False: the socket is left alone)."""

    enabled: bool = True
    idle: int = int(CONTEXT_DEFAULTS[IDLE_VARIABLE])
    interval: int = int(CONTEXT_DEFAULTS[INTERVAL_VARIABLE])
    count: int = int(CONTEXT_DEFAULTS[COUNT_VARIABLE])

    @property
    def detection_seconds(self) -> int:
        """The longest a dead peer of an idle connection goes unnoticed."""
        return self.idle + self.interval * self.count if self.enabled else 0

    @classmethod
    def resolved(cls, resolve: Callable[[str], str]) -> TcpKeepAlive:
        """The settings from the context variables, as ``resolve`` expands ``${name}``."""
        text = resolve("${%s}" % ENABLED_VARIABLE).strip().lower()
        if text not in _TRUE | _FALSE:
            raise ConfigurationError(f"context variable '{ENABLED_VARIABLE}' must be true or"
                                     f" false, not '{text}'")

        def whole(variable: str, most: int) -> int:
            value = resolve("${%s}" % variable).strip()
            if not value.isdigit() or not 1 <= int(value) <= most:
                raise ConfigurationError(f"context variable '{variable}' must be a whole number"
                                         f" from 1 to {most}, not '{value}'")
            return int(value)

        return cls(text in _TRUE, whole(IDLE_VARIABLE, MAX_SECONDS),
                   whole(INTERVAL_VARIABLE, MAX_SECONDS), whole(COUNT_VARIABLE, MAX_COUNT))

    def apply(self, sock: socket.socket) -> None:
        """Set the options on an accepted TCP socket (not TCP: nothing; disabled: nothing)."""
        if not self.enabled or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        # the per-socket timers exist on Linux and most BSDs; elsewhere the system's apply
        for option, value in (("TCP_KEEPIDLE", self.idle), ("TCP_KEEPINTVL", self.interval),
                              ("TCP_KEEPCNT", self.count)):
            number = getattr(socket, option, None)
            if number is not None:
                sock.setsockopt(socket.IPPROTO_TCP, number, value)
