"""The Anonymous authentication provider: everyone is ``anonymous``.

For development brokers and for ports that sit behind something else that
authenticates.  It offers SASL ANONYMOUS only; a client that insists on
PLAIN (pika, for one) is refused with a text that says why.
"""

from __future__ import annotations

from broker.model.authentication import AuthenticationProvider, refused
from broker.security.principal import Principal


class AnonymousAuthenticationProvider(AuthenticationProvider):
    type_name = "Anonymous"

    @property
    def sasl_mechanisms(self) -> list[str]:
        return ["ANONYMOUS"]

    @property
    def allows_anonymous(self) -> bool:
        return True

    def authenticate(self, username: str, password: str, remote_host: str | None,
                     *, mechanism: str = "PLAIN") -> Principal:
        raise refused(mechanism, f"{self.label} accepts mechanism ANONYMOUS only.")
