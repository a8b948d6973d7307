"""The Anonymous authentication provider: everyone is ``anonymous``.

For development brokers and for ports that sit behind something else that
authenticates.  It offers SASL ANONYMOUS only; a client that insists on
PLAIN (pika, for one) is refused with a text that says why.  Whoever it lets
in is an administrator: choosing it for a port means that anyone who can
reach the port may do anything (Broker-J without an access control
provider).
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

    def check_credentials(self, username: str, password: str, remote_host: str | None,
                     *, mechanism: str = "PLAIN") -> Principal:
        raise refused(mechanism, f"{self.label} accepts mechanism ANONYMOUS only.")

    def is_administrator(self, principal: Principal) -> bool:
        return principal.provider == self.name
