"""Protocol header detection (0-9-1 spec 4.2.2, 1.0 spec 2.2)."""

from __future__ import annotations

import pytest

from broker.protocol.detect import PREFERRED_HEADER, AmqpVersion, detect

ALL_0_9_1_FAMILY = frozenset({AmqpVersion.V0_8, AmqpVersion.V0_9, AmqpVersion.V0_9_1})


@pytest.mark.parametrize("header,version", [
    (b"AMQP\x01\x01\x08\x00", AmqpVersion.V0_8),
    (b"AMQP\x01\x01\x00\x09", AmqpVersion.V0_9),
    (b"AMQP\x00\x00\x09\x01", AmqpVersion.V0_9_1),
])
def test_supported_headers_select_their_version(header: bytes, version: AmqpVersion) -> None:
    assert detect(header, ALL_0_9_1_FAMILY).version is version


@pytest.mark.parametrize("header", [
    b"AMQP\x01\x01\x00\x0a",      # 0-10, not served yet
    b"AMQP\x00\x01\x00\x00",      # 1.0
    b"AMQP\x00\x00\x09\x07",      # no such version
    b"GET / HT",                   # not AMQP at all
])
def test_anything_else_is_answered_with_the_preferred_header(header: bytes) -> None:
    detected = detect(header, ALL_0_9_1_FAMILY)
    assert detected.version is None
    assert detected.reply == PREFERRED_HEADER == b"AMQP\x00\x00\x09\x01"


def test_a_port_without_0_9_1_prefers_what_it_has() -> None:
    detected = detect(b"AMQP\x00\x00\x09\x01", frozenset({AmqpVersion.V0_8}))
    assert detected.version is None and detected.reply == b"AMQP\x01\x01\x08\x00"


def test_short_header_is_a_caller_error() -> None:
    with pytest.raises(ValueError):
        detect(b"AMQP", ALL_0_9_1_FAMILY)


WITH_1_0 = ALL_0_9_1_FAMILY | {AmqpVersion.V1_0, AmqpVersion.V1_0_SASL}


def test_the_1_0_tls_header_without_tls_gets_the_1_0_header_the_port_serves() -> None:
    """AMQP 1.0 part 5, 5.2.1 and part 2, 2.2: a port without TLS answers the TLS header
    with a 1.0 header it supports (SASL), then closes -- not with 0-9-1's."""
    detected = detect(b"AMQP\x02\x01\x00\x00", WITH_1_0, PREFERRED_HEADER)
    assert detected.version is None and detected.reply == b"AMQP\x03\x01\x00\x00"
    # a port without 1.0 answers with what it has
    assert detect(b"AMQP\x02\x01\x00\x00", ALL_0_9_1_FAMILY).reply == PREFERRED_HEADER
