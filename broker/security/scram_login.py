"""A SCRAM login against an authentication provider that keeps SCRAM keys.

:class:`ScramLogin` is the :class:`~broker.security.sasl_exchange.SaslServer`
the port's host hands an engine for ``SCRAM-SHA-1`` or ``SCRAM-SHA-256``.
It wraps :class:`~broker.security.scram.ScramServer` with what the broker
adds: the login throttle is asked once the user name is known (a blocked
source or user is refused before the server-first message), a failed proof
or a malformed client-final message counts as a failed login, a correct one
forgets the user's failures, and the loopback rule (``guest``) applies as
for PLAIN.

A user unknown to the provider, and a user created before the provider kept
SCRAM keys (whose password was never set since), get a made-up salt --
derived from the name under a per-process key, so that asking twice gives
the same one -- and fail at the proof; the log says which, and for the
second what to do: set the password again (PLAIN still works for them).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from typing import TYPE_CHECKING

from broker.errors import AuthenticationFailed
from broker.security.principal import Principal
from broker.security.sasl_exchange import SaslStep
from broker.security.scram import ALGORITHMS, DEFAULT_ITERATIONS, SALT_BYTES, MalformedScram, \
    ScramAlgorithm, ScramCredential, ScramServer, WrongProof

if TYPE_CHECKING:
    from broker.model.authentication import AuthenticationProvider

log = logging.getLogger(__name__)

_FAKE_SALT_KEY = secrets.token_bytes(32)


def sasl_server(provider: AuthenticationProvider, mechanism: str,
                remote_host: str | None) -> ScramLogin:
    """The exchange of ``mechanism`` with ``provider``; AuthenticationFailed if it is not SCRAM
    or the provider does not offer it."""
    algorithm = ALGORITHMS.get(mechanism)
    if algorithm is None or mechanism not in provider.sasl_mechanisms:
        raise AuthenticationFailed(f"Login was refused: mechanism {mechanism!r} is not"
                                   f" implemented by {provider.label}")
    return ScramLogin(provider, algorithm, remote_host)


def made_up_credential(algorithm: ScramAlgorithm, username: str,
                       iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """A credential no password matches, the same for the same name within this process."""
    digest = hmac.new(_FAKE_SALT_KEY, f"{algorithm.mechanism}\0{username}".encode("utf-8"),
                      hashlib.sha256).digest()
    size = algorithm.digest_size
    return ScramCredential(digest[:SALT_BYTES], iterations, secrets.token_bytes(size),
                           secrets.token_bytes(size))


class ScramLogin:
    """One connection's SCRAM exchange with ``provider``."""

    def __init__(self, provider: AuthenticationProvider, algorithm: ScramAlgorithm,
                 remote_host: str | None, *, nonce: str | None = None) -> None:
        self.provider = provider
        self.algorithm = algorithm
        self.mechanism = algorithm.mechanism
        self.remote_host = remote_host
        #: why the user has no credential ("" while unknown or when it has one)
        self.missing = ""
        self.server = ScramServer(algorithm, self._lookup, self._made_up, nonce=nonce)

    def respond(self, response: bytes) -> SaslStep:
        server = self.server
        if not server.username:
            challenge = server.server_first(response)
            return SaslStep(challenge=challenge)
        try:
            server_final = server.server_final(response)
            self.provider.check_loopback(server.username, self.remote_host, self.mechanism)
        except AuthenticationFailed as exc:
            self._refused(exc)
            raise
        self.provider.login_throttle.succeeded(server.username)
        return SaslStep(principal=Principal(server.username, self.provider.name),
                        additional_data=server_final)

    def _lookup(self, username: str) -> ScramCredential | None:
        provider = self.provider
        # a blocked source or user gets no salt: refused before anything is looked at
        provider.login_throttle.admit(username, self.remote_host, self.mechanism)
        credential = provider.scram_credential(username, self.mechanism)
        if credential is None:
            if provider.user(username) is None:
                self.missing = "no such user"
            else:
                self.missing = (f"user '{username}' has no {self.mechanism} keys: its password"
                                " was set before the broker kept SCRAM keys and must be set"
                                " again (deltamq user passwd, or over management); PLAIN"
                                " logins still work")
        return credential

    def _made_up(self, username: str) -> ScramCredential:
        # the iteration count new passwords get: what most users' keys have
        iterations = getattr(self.provider, "scram_iterations", DEFAULT_ITERATIONS)
        return made_up_credential(self.algorithm, username, int(iterations))

    def _refused(self, exc: AuthenticationFailed) -> None:
        username, provider = self.server.username, self.provider
        provider.login_throttle.failed(username, self.remote_host)
        if self.missing.startswith("user "):
            log.warning("%s: %s login of '%s' from %s refused: %s", provider.label,
                        self.mechanism, username, self.remote_host, self.missing)
            return
        if isinstance(exc, MalformedScram):
            why = exc.why
        elif isinstance(exc, WrongProof):
            why = self.missing or "wrong password"
        else:
            why = exc.text
        log.info("%s: %s login of '%s' from %s refused: %s", provider.label, self.mechanism,
                 username, self.remote_host, why)
