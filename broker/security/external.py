"""SASL EXTERNAL (RFC 4422 appendix A): the TLS client certificate is the credential.

Offered -- first, as the strongest -- only on a TLS connection whose client
presented a certificate the port's trust stores verified
(:func:`offered`); on any other connection a client naming it is refused
like any mechanism not offered.  The user name comes from the certificate
(:func:`user_name`), as Broker-J's External provider makes it: with the
port's ``useFullDN`` the subject's full distinguished name (RFC 4514 text,
``CN=app1,O=Example``); otherwise its CN, followed by ``@`` and the domain
components joined with dots when the subject has any (``CN=app1,DC=example,
DC=com`` -> ``app1@example.com``).

The name must be a user of the port's authentication provider (RabbitMQ's
rule for certificate logins): that user's virtual hosts and administrator
flag then apply, and the loopback rule too (``guest`` only from localhost).
No password is checked and none can be guessed, so the login throttle is not
involved.  The client's response is an optional authorization identity
(RFC 4422): empty, or the very user name the certificate gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.errors import AuthenticationFailed

if TYPE_CHECKING:
    from broker.model.authentication import AuthenticationProvider
    from broker.security.principal import Principal
    from broker.transport.tls import PeerCertificate

MECHANISM = "EXTERNAL"


def offered(mechanisms: Sequence[str], peer: PeerCertificate | None) -> list[str]:
    """``mechanisms`` (the provider's), with EXTERNAL first when there is a verified client
    certificate and never otherwise."""
    others = [m for m in mechanisms if m != MECHANISM]
    return [MECHANISM, *others] if peer is not None else others


def user_name(peer: PeerCertificate, use_full_dn: bool) -> str:
    """The user a client certificate names (see the module docstring)."""
    if use_full_dn or not peer.common_name:
        return peer.subject
    if peer.domain_components:
        return f"{peer.common_name}@{'.'.join(peer.domain_components)}"
    return peer.common_name


def _refused(why: str) -> AuthenticationFailed:
    return AuthenticationFailed(f"Login was refused using authentication mechanism {MECHANISM}."
                                f" {why}")


def authenticate(provider: AuthenticationProvider, peer: PeerCertificate | None,
                 response: bytes, remote_host: str | None, *, use_full_dn: bool) -> Principal:
    """The principal the client certificate names; AuthenticationFailed otherwise."""
    from broker.security.principal import Principal

    if peer is None:
        raise _refused("The connection presented no trusted client certificate.")
    name = user_name(peer, use_full_dn)
    try:
        authzid = bytes(response).decode("utf-8")
    except UnicodeDecodeError:
        raise _refused("Malformed response: not UTF-8.") from None
    if authzid and authzid != name:
        raise _refused(f"User '{name}' may not act as '{authzid}'.")
    if provider.user(name) is None:
        raise _refused(f"The client certificate names user '{name}', whom"
                       f" {provider.label} does not know.")
    provider.check_loopback(name, remote_host, MECHANISM)
    return Principal(name, provider.name)
