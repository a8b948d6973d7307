"""SASL exchanges of one or more steps, as the protocol engines drive them.

RFC 4422 section 3: a mechanism's server takes the client's responses one at
a time and answers each with a challenge until it is done; done, it names
the principal and may have data for the outcome (SCRAM's server-final
message).  The engines do not know the mechanisms: they ask :func:`start`
for a :class:`SaslServer`, hand it every response (off the event loop: a
step may verify a slow hash or read the password file) and send what each
:class:`SaslStep` says -- 0-8/0-9/0-9-1 in ``connection.secure``, 1.0 in
``sasl-challenge`` and ``sasl-outcome``.

PLAIN, AMQPLAIN, ANONYMOUS and EXTERNAL are one step, over the host's
``authenticate`` / ``authenticate_anonymous`` / ``authenticate_external``; every other mechanism comes
from the host's ``sasl_server`` (the port's authentication provider).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker.security import sasl

if TYPE_CHECKING:
    from broker.protocol.host import ProtocolHost

#: mechanisms the client starts (RFC 4422 section 5: without an initial response the
#: server sends an empty challenge)
CLIENT_FIRST = ("PLAIN", "AMQPLAIN", "SCRAM-SHA-1", "SCRAM-SHA-256")


@dataclass(frozen=True, slots=True)
class SaslStep:
    """What one response led to: a challenge to send, or the principal and the
    data that goes with the outcome."""

    challenge: bytes | None = None
    principal: Any = None
    additional_data: bytes = b""

    @property
    def complete(self) -> bool:
        return self.principal is not None


class SaslServer(Protocol):
    """The server side of one mechanism's exchange on one connection."""

    mechanism: str

    def respond(self, response: bytes) -> SaslStep:
        """The next step for the client's ``response``; AuthenticationFailed to refuse.

        Runs in a worker thread."""
        ...


class PasswordLogin:
    """PLAIN, AMQPLAIN, ANONYMOUS or EXTERNAL: the first response decides."""

    def __init__(self, host: ProtocolHost, mechanism: str, remote_host: str) -> None:
        self.host = host
        self.mechanism = mechanism
        self.remote_host = remote_host

    def respond(self, response: bytes) -> SaslStep:
        if self.mechanism == "ANONYMOUS":
            return SaslStep(principal=self.host.authenticate_anonymous(self.remote_host))
        if self.mechanism == "EXTERNAL":
            return SaslStep(principal=self.host.authenticate_external(response, self.remote_host))
        user, password = sasl.credentials(self.mechanism, response)
        return SaslStep(principal=self.host.authenticate(user, password, self.remote_host))


def start(host: ProtocolHost, mechanism: str, remote_host: str) -> SaslServer:
    """The server of ``mechanism`` (one the engine checked the host offers)."""
    if mechanism in ("ANONYMOUS", "EXTERNAL", *sasl.PASSWORD_MECHANISMS):
        return PasswordLogin(host, mechanism, remote_host)
    return host.sasl_server(mechanism, remote_host)
