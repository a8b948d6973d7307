"""Which SASL mechanisms a port offers, as Broker-J decides it.

An authentication provider knows some mechanisms (its type's
``sasl_mechanisms``, most preferred first: SCRAM-SHA-256, SCRAM-SHA-1, then
PLAIN...).  Two of its attributes narrow what a port offers:

* ``disabledMechanisms`` -- never offered, on any port;
* ``secureOnlyMechanisms`` -- offered only on connections that are secure
  (TLS): a mechanism that sends the password itself (PLAIN, AMQPLAIN)
  belongs here where the network cannot be trusted.

A port whose provider leaves it nothing to offer is refused, as Broker-J
refuses it: every mechanism disabled, or (for a port that takes connections
without TLS) every remaining one secure-only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from broker.errors import ConfigurationError

#: the transports on which a connection is secure (Broker-J's Transport.isSecure)
SECURE_TRANSPORTS = frozenset({"SSL", "WSS"})


def available(known: Sequence[str], disabled: Iterable[str], secure_only: Iterable[str],
              secure: bool) -> list[str]:
    """``known`` without the disabled mechanisms and, unless ``secure``, the secure-only
    ones; the order (the preference) kept."""
    dropped = set(disabled)
    if not secure:
        dropped.update(secure_only)
    return [mechanism for mechanism in known if mechanism not in dropped]


def is_secure(transports: Iterable[str]) -> bool:
    """Is every connection through a port with these transports secure?"""
    names = [str(getattr(t, "value", t)) for t in transports]
    return bool(names) and all(name in SECURE_TRANSPORTS for name in names)


def check_port(port_label: str, provider_label: str, known: Sequence[str],
               disabled: Iterable[str], secure_only: Iterable[str],
               transports: Iterable[str]) -> None:
    """ConfigurationError if the port would offer no mechanism."""
    names = [str(getattr(t, "value", t)) for t in transports]
    if known and not available(known, disabled, (), secure=True):
        raise ConfigurationError(f"{port_label}: every authentication mechanism of"
                                 f" {provider_label} is disabled")
    plain = any(name not in SECURE_TRANSPORTS for name in names)
    if known and plain and not available(known, disabled, secure_only, secure=False):
        raise ConfigurationError(f"{port_label} takes connections without TLS, but every"
                                 f" mechanism {provider_label} leaves enabled is secure-only")
