"""SASL response parsing (RFC 4616 PLAIN, RabbitMQ AMQPLAIN) and dispatch."""

from __future__ import annotations

import struct

import pytest

from broker.errors import AuthenticationFailed
from broker.security.addresses import is_loopback
from broker.security.sasl import parse_amqplain, parse_plain


@pytest.mark.parametrize(("response", "expected"), [
    (b"\x00guest\x00guest", ("", "guest", "guest")),
    (b"admin\x00admin\x00pw", ("admin", "admin", "pw")),
    ("\x00j\u00fcrgen\x00p\u00e4ss".encode(), ("", "j\u00fcrgen", "p\u00e4ss")),
    (b"\x00user\x00pass word with spaces", ("", "user", "pass word with spaces")),
])
def test_parse_plain(response: bytes, expected: tuple[str, str, str]) -> None:
    assert parse_plain(response) == expected


@pytest.mark.parametrize(("response", "why"), [
    (b"", "expected"),
    (b"guest", "expected"),
    (b"\x00guest", "expected"),
    (b"\x00guest\x00guest\x00extra", "expected"),
    (b"\x00\x00password", "empty user"),
    (b"\x00guest\x00", "empty password"),
    (b"\x00gu\xffest\x00pw", "UTF-8"),
    (b"\x00" + b"u" * 70000 + b"\x00pw", "longer than"),
])
def test_parse_plain_refuses_malformed(response: bytes, why: str) -> None:
    with pytest.raises(AuthenticationFailed) as raised:
        parse_plain(response)
    assert why in raised.value.text
    assert raised.value.reply_code == 403
    assert raised.value.reply_text.startswith("ACCESS_REFUSED - Login was refused")


def amqplain(**fields: str) -> bytes:
    out = b""
    for name, value in fields.items():
        encoded = value.encode()
        out += bytes([len(name)]) + name.encode() + b"S" + struct.pack(">I", len(encoded)) + encoded
    return out


def test_parse_amqplain() -> None:
    assert parse_amqplain(amqplain(LOGIN="guest", PASSWORD="secret")) == ("guest", "secret")
    assert parse_amqplain(amqplain(PASSWORD="p", LOGIN="u")) == ("u", "p")


@pytest.mark.parametrize("response", [
    b"",
    amqplain(LOGIN="guest"),
    amqplain(LOGIN="guest", PASSWORD="secret")[:-2],
    b"\x05LOGINI\x00\x00\x00\x01",
    b"\x05LOG",
])
def test_parse_amqplain_refuses_malformed(response: bytes) -> None:
    with pytest.raises(AuthenticationFailed, match="AMQPLAIN"):
        parse_amqplain(response)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("::ffff:127.0.0.1", True), ("127.0.0.1:5672", True), ("[::1]:5672", True),
    ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("192.168.1.1:5672", False),
    ("2001:db8::1", False), ("localhost", False), ("", False), (None, False),
    ("fe80::1%eth0", False),
])
def test_is_loopback(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback
