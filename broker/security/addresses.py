"""Telling loopback peers from remote ones."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped ``::ffff:127.x.y.z``.

    ``host`` is the peer's address as text, optionally bracketed (``[::1]``),
    with a zone (``fe80::1%eth0``) or an IPv4 port (``127.0.0.1:5672``).
    Names are not resolved: anything that is not an address literal, and an
    unknown peer (None or ""), counts as remote.
    """
    if not host:
        return False
    text = host.strip()
    if text.startswith("["):
        text = text[1:text.find("]")] if "]" in text else text[1:]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    text = text.partition("%")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
