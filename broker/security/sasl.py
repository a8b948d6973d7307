"""SASL responses: parsing PLAIN and AMQPLAIN, and handing them to a provider.

Every AMQP version authenticates through SASL: 0-8/0-9/0-9-1 carry the
response in ``connection.start-ok``, 0-10 in ``connection.start-ok`` too, 1.0
in ``sasl-init``.  :func:`authenticate` is what all three engines call.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from broker.errors import AuthenticationFailed

if TYPE_CHECKING:
    from broker.model.authentication import AuthenticationProvider
    from broker.security.principal import Principal

#: longest response accepted; RFC 4616 asks for 255 octets per field at least
MAX_RESPONSE = 65535


def _malformed(mechanism: str, why: str) -> AuthenticationFailed:
    return AuthenticationFailed(f"Login was refused using authentication mechanism {mechanism}."
                                f" Malformed response: {why}")


def parse_plain(response: bytes) -> tuple[str, str, str]:
    """``[authzid] NUL authcid NUL passwd`` (RFC 4616 section 2) -> (authzid, user, password).

    Raises :class:`AuthenticationFailed` when there are not exactly two NULs,
    the user or the password is empty, or a field is not UTF-8.
    """
    if len(response) > MAX_RESPONSE:
        raise _malformed("PLAIN", f"longer than {MAX_RESPONSE} bytes")
    parts = bytes(response).split(b"\x00")
    if len(parts) != 3:
        raise _malformed("PLAIN", "expected [authzid] NUL authcid NUL passwd")
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise _malformed("PLAIN", "not UTF-8") from None
    if not user:
        raise _malformed("PLAIN", "empty user name")
    if not password:
        raise _malformed("PLAIN", "empty password")
    return authzid, user, password


def parse_amqplain(response: bytes) -> tuple[str, str]:
    """RabbitMQ's AMQPLAIN: a field table without its length prefix, holding
    ``LOGIN`` and ``PASSWORD`` as long strings -> (user, password)."""
    fields: dict[str, str] = {}
    offset, size = 0, len(response)
    if size > MAX_RESPONSE:
        raise _malformed("AMQPLAIN", f"longer than {MAX_RESPONSE} bytes")
    try:
        while offset < size:
            name_length = response[offset]
            name = response[offset + 1:offset + 1 + name_length].decode("utf-8")
            offset += 1 + name_length
            kind = response[offset:offset + 1]
            if kind != b"S":
                raise _malformed("AMQPLAIN", f"field '{name}' is not a long string")
            (value_length,) = struct.unpack_from(">I", response, offset + 1)
            start = offset + 5
            if start + value_length > size:
                raise _malformed("AMQPLAIN", f"field '{name}' is truncated")
            fields[name] = response[start:start + value_length].decode("utf-8")
            offset = start + value_length
    except (IndexError, struct.error):
        raise _malformed("AMQPLAIN", "truncated field table") from None
    except UnicodeDecodeError:
        raise _malformed("AMQPLAIN", "not UTF-8") from None
    user, password = fields.get("LOGIN"), fields.get("PASSWORD")
    if not user or password is None:
        raise _malformed("AMQPLAIN", "LOGIN and PASSWORD are required")
    return user, password


#: mechanisms whose response carries a user name and password (:func:`credentials`)
PASSWORD_MECHANISMS = ("PLAIN", "AMQPLAIN")


def credentials(mechanism: str, response: bytes) -> tuple[str, str]:
    """The (user, password) a PLAIN or AMQPLAIN ``response`` carries.

    PLAIN with an authzid other than the user is refused: the broker does not
    act on behalf of another identity.
    """
    if mechanism == "PLAIN":
        authzid, user, password = parse_plain(response)
        if authzid and authzid != user:
            raise AuthenticationFailed("Login was refused using authentication mechanism PLAIN."
                                       f" User '{user}' may not act as '{authzid}'.")
        return user, password
    if mechanism == "AMQPLAIN":
        return parse_amqplain(response)
    raise AuthenticationFailed(f"Login was refused: mechanism {mechanism!r} carries no password")


def authenticate(provider: AuthenticationProvider, mechanism: str, response: bytes,
                 remote_host: str | None) -> Principal:
    """Authenticate a SASL ``response`` for ``mechanism`` with ``provider``.

    The mechanism must be one the provider offers; see :func:`credentials`.
    """
    if mechanism not in provider.sasl_mechanisms:
        offered = " ".join(provider.sasl_mechanisms)
        raise AuthenticationFailed(f"Login was refused: unsupported authentication mechanism"
                                   f" {mechanism!r}; the broker offers: {offered}")
    if mechanism == "ANONYMOUS":
        return provider.authenticate_anonymous(remote_host)
    if mechanism in PASSWORD_MECHANISMS:
        user, password = credentials(mechanism, response)
        return provider.authenticate(user, password, remote_host, mechanism=mechanism)
    raise AuthenticationFailed(f"Login was refused: mechanism {mechanism!r} is not implemented")
