"""Who a connection authenticated as."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated identity.

    ``name`` is the user name (``anonymous`` for ANONYMOUS logins);
    ``provider`` names the authentication provider that vouched for it.
    """

    name: str
    provider: str
    anonymous: bool = False

    def __str__(self) -> str:
        return self.name
