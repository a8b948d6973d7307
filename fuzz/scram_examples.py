"""SCRAM logins the engine harnesses' seeds can carry whole: the RFCs' examples.

The engines' hosts in the harnesses offer SCRAM-SHA-256 and SCRAM-SHA-1 (as
a PasswordFile provider does) besides PLAIN and AMQPLAIN; their exchange is
the real :class:`~broker.security.scram.ScramServer` with the RFC example's
user (``user``, password ``pencil``, its salt and iterations) and the
server nonce of the example (RFC 5802 section 5, RFC 7677 section 3).  So a
seed that sends the example's client-first and client-final messages logs
in byte for byte, and the fuzzer starts from inputs that reach the
multi-step exchange (0-9-1 ``connection.secure`` / ``secure-ok``, 1.0
``sasl-challenge`` / ``sasl-response``) and what follows it.
"""

from __future__ import annotations

from typing import Any

from broker.errors import AuthenticationFailed
from broker.security.sasl_exchange import SaslStep
from broker.security.scram import ScramServer
from fuzz.harnesses.sasl_scram import CREDENTIALS, EXAMPLES
from tests.unit.protocol.harness import User

#: mechanism -> (client-first, client-final) of its example
MESSAGES = {algorithm.mechanism: (first, final) for algorithm, _salt, _nonce, first, final in EXAMPLES}
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-1"]


class ExampleScramLogin:
    """One connection's SCRAM exchange (a :class:`~broker.security.sasl_exchange.SaslServer`)."""

    def __init__(self, mechanism: str) -> None:
        which = next(i for i, example in enumerate(EXAMPLES) if example[0].mechanism == mechanism)
        algorithm, _salt, nonce, _first, _final = EXAMPLES[which]
        credential = CREDENTIALS[which]
        self.mechanism = mechanism
        self.server = ScramServer(algorithm, {"user": credential}.get, lambda name: credential,
                                  nonce=nonce)

    def respond(self, response: bytes) -> SaslStep:
        server = self.server
        if not server.username:
            return SaslStep(challenge=server.server_first(response))
        final = server.server_final(response)
        return SaslStep(principal=User(server.username), additional_data=final)


class ScramExamples:
    """Mixed into a harness's host: SCRAM first among its mechanisms, logins as above."""

    def sasl_mechanisms(self, remote_host: str) -> list[str]:
        return MECHANISMS + super().sasl_mechanisms(remote_host)  # type: ignore[misc]

    def sasl_server(self, mechanism: str, remote_host: str) -> Any:
        if mechanism not in MESSAGES:
            raise AuthenticationFailed(f"mechanism {mechanism!r} is not offered")
        return ExampleScramLogin(mechanism)
