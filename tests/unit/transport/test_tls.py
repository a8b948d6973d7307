"""The TLS layer, sans-IO: two in-memory SSL objects talk through their byte streams only.

The server is the broker's layer with a context made by
:func:`broker.security.certificates.server_context`; the client is the same
layer with a client context (what pika, aio-pika and proton do over a socket).
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol.amqp0_9_1 import methods as m
from broker.security.certificates import key_material, load_certificates, server_context
from broker.transport.layers import LayerChain
from broker.transport.tcp import ConnectionRegistry
from broker.transport.tls import (AMQP_TLS_HEADER, HANDSHAKE_FAILURE_ALERT, PeerCertificate, TlsLayer, TlsStart,
                                  layer_factory, tls_session)
from tests.tls_material import Pki, make_pki

from ..protocol.harness import Client, FakeHost
from .test_layers import HEADER_0_9_1, methods
from .test_tcp_protocol import _accepted

ALERT = 0x15


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("app",))


def _server_context(pki: Pki, *, need: bool = False, want: bool = False) -> ssl.SSLContext:
    material = key_material(str(pki.server_key), str(pki.server_cert), "", "", "test")
    return server_context(material, load_certificates(str(pki.ca), "ca"),
                          need_client_auth=need, want_client_auth=want)


def _client(pki: Pki, cn: str | None = None) -> TlsLayer:
    return TlsLayer(pki.client_context(cn), server_side=False, server_hostname="localhost")


def _pump(client: TlsLayer, server: TlsLayer, chunks: list[int] | None = None) -> tuple[bytes, bytes]:
    """Exchange output until both are quiet; bytes cut into ``chunks`` sizes (cycled) on the
    way.  Returns (what reached the server's top, what reached the client's top)."""
    to_server, to_client = bytearray(), bytearray()
    sizes = chunks or [1 << 20]
    turn = 0
    for _ in range(200):
        out_c, out_s = client.data_to_send(), server.data_to_send()
        if not out_c and not out_s:
            break
        for data, layer, sink in ((out_c, server, to_server), (out_s, client, to_client)):
            offset = 0
            while offset < len(data):
                size = sizes[turn % len(sizes)]
                turn += 1
                sink += layer.receive_data(data[offset:offset + size])
                offset += size
    return bytes(to_server), bytes(to_client)


def test_a_handshake_then_data_both_ways(pki: Pki) -> None:
    server, client = TlsLayer(_server_context(pki)), _client(pki)
    assert client.send_data(HEADER_0_9_1) == b""            # before the handshake: kept
    assert client.buffered_bytes == len(HEADER_0_9_1)
    up, _down = _pump(client, server)
    assert up == HEADER_0_9_1                               # sent once the handshake finished
    assert server.handshake_complete and client.handshake_complete
    assert server.session is not None and server.session.version in ("TLSv1.2", "TLSv1.3")
    assert server.session.peer is None                      # no client certificate asked for
    assert client.session is not None and client.session.peer is not None
    assert client.session.peer.common_name == "localhost"
    records = server.send_data(b"connection.start")
    assert records[0] == 0x17 and b"connection.start" not in records    # application data, encrypted
    assert client.receive_data(records) == b"connection.start"
    assert server.receive_data(client.send_data(b"x" * 100_000)) == b"x" * 100_000
    assert server.buffered_bytes == 0 and not server.closed


@settings(max_examples=40, deadline=None)
@given(chunks=st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=8),
       payload=st.binary(min_size=1, max_size=5000))
def test_the_handshake_and_data_survive_any_split(pki: Pki, chunks: list[int],
                                                  payload: bytes) -> None:
    server, client = TlsLayer(_server_context(pki)), _client(pki)
    client.send_data(payload)
    up, _ = _pump(client, server, chunks)
    assert up == payload and server.handshake_complete and not server.closed
    wire = server.send_data(payload[::-1])
    down = b"".join(client.receive_data(wire[i:i + chunks[0]]) for i in range(0, len(wire), chunks[0]))
    assert down == payload[::-1]


@pytest.mark.parametrize("garbage", [
    HEADER_0_9_1,                                           # a plain AMQP client on a TLS port
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01\x00\x05hello, not a ClientHello",       # a handshake record that is not one
    bytes(range(256)),
])
def test_garbage_closes_the_layer_with_an_alert_not_an_exception(pki: Pki, garbage: bytes) -> None:
    server = TlsLayer(_server_context(pki))
    assert server.receive_data(garbage) == b""
    assert server.closed and server.close_reason.startswith("TLS handshake failed")
    alert = server.data_to_send()
    assert alert[0] == ALERT and alert[5] == 2              # a fatal alert record
    assert server.receive_data(b"more") == b"" and server.send_data(b"x") == b""


def test_an_alert_of_our_own_only_for_a_peer_that_never_spoke_tls(pki: Pki) -> None:
    server = TlsLayer(_server_context(pki))
    server.receive_data(HEADER_0_9_1)
    assert server.data_to_send() == HANDSHAKE_FAILURE_ALERT


def test_a_corrupted_record_after_the_handshake_closes_with_an_alert(pki: Pki) -> None:
    server, client = TlsLayer(_server_context(pki)), _client(pki)
    _pump(client, server)
    record = bytearray(client.send_data(b"frame"))
    record[-1] ^= 0xFF                                      # the authentication tag fails
    assert server.receive_data(bytes(record)) == b""
    assert server.closed and server.close_reason.startswith("TLS error")
    assert client.receive_data(server.data_to_send()) == b"" and client.closed   # it got the alert


def test_close_notify_is_answered_and_ends_the_stream(pki: Pki) -> None:
    server, client = TlsLayer(_server_context(pki)), _client(pki)
    _pump(client, server)
    goodbye = client.end_stream()
    assert goodbye and client.end_stream() == b""           # said once
    assert server.receive_data(goodbye) == b""
    assert server.closed and "close_notify" in server.close_reason
    answer = server.data_to_send()
    assert answer                                           # (TLS 1.3 encrypts the alert)
    client.receive_data(answer)
    assert client.closed and "close_notify" in client.close_reason   # ours reached it


def test_our_end_stream_reaches_the_peer_as_close_notify(pki: Pki) -> None:
    server, client = TlsLayer(_server_context(pki)), _client(pki)
    _pump(client, server)
    assert client.receive_data(server.send_data(b"close-ok") + server.end_stream()) == b"close-ok"
    assert client.closed and "close_notify" in client.close_reason
    assert server.send_data(b"after") == b""                # nothing after our goodbye


def test_required_client_certificate_without_one_fails_the_handshake(pki: Pki) -> None:
    server, client = TlsLayer(_server_context(pki, need=True)), _client(pki)
    client.send_data(HEADER_0_9_1)
    up, _ = _pump(client, server)
    assert up == b""
    assert server.closed or client.closed
    assert "certificate" in (server.close_reason + client.close_reason).lower()


def test_required_client_certificate_reaches_the_session(pki: Pki) -> None:
    server, client = TlsLayer(_server_context(pki, need=True)), _client(pki, "app")
    client.send_data(HEADER_0_9_1)
    up, _ = _pump(client, server)
    assert up == HEADER_0_9_1
    assert server.session is not None and server.session.peer is not None
    assert server.session.peer.common_name == "app"
    assert server.session.peer.subject == "CN=app,O=DeltaMQ"
    assert tls_session([server]) is server.session


def test_wanted_client_certificate_is_optional(pki: Pki) -> None:
    context = _server_context(pki, want=True)
    without, with_cert = TlsLayer(context), TlsLayer(context)
    assert _pump(_client(pki), without) is not None and without.handshake_complete
    assert without.session is not None and without.session.peer is None
    _pump(_client(pki, "app"), with_cert)
    assert with_cert.session is not None and with_cert.session.peer is not None


def test_a_client_certificate_from_another_ca_is_refused(pki: Pki, tmp_path: Path) -> None:
    stranger = make_pki(tmp_path / "other", clients=("app",), ca_name="Other CA")
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(stranger.client_cert("app")), str(stranger.client_key("app")))
    server = TlsLayer(_server_context(pki, want=True))
    client = TlsLayer(context, server_side=False, server_hostname="localhost")
    client.send_data(HEADER_0_9_1)
    up, _ = _pump(client, server)
    assert up == b"" and server.closed and "certificate" in server.close_reason


def test_peer_certificate_names() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "com"),
                      x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "person")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(1).not_valid_before(now)
                   .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    peer = PeerCertificate.from_der(certificate.public_bytes(Encoding.DER))
    assert peer.subject == "CN=person,O=Example,DC=example,DC=com"
    assert peer.common_name == "person" and peer.domain_components == ("example", "com")


# -- port unification ------------------------------------------------------------------------

def _unified(pki: Pki, *, plain: bool = True, upgrade: bool = False) -> TlsStart:
    return TlsStart(lambda: TlsLayer(_server_context(pki)), plain=plain, upgrade=upgrade)


def test_unification_passes_a_plain_client_through_untouched(pki: Pki) -> None:
    layer = _unified(pki)
    assert not layer.transparent
    assert layer.receive_data(HEADER_0_9_1) == HEADER_0_9_1
    assert layer.transparent and layer.session is None
    assert layer.send_data(b"answer") == b"answer" and layer.data_to_send() == b""


def test_unification_serves_a_tls_client_by_its_first_byte(pki: Pki) -> None:
    layer = _unified(pki)
    client = _client(pki)
    client.send_data(HEADER_0_9_1)
    hello = client.data_to_send()
    assert hello[0] == 0x16
    assert layer.receive_data(hello[:1]) == b""             # one byte decides
    assert not layer.transparent and layer.tls is not None
    layer.receive_data(hello[1:])
    client.receive_data(layer.data_to_send())
    up = layer.receive_data(client.data_to_send())
    assert up == HEADER_0_9_1 and layer.session is not None


def test_layer_factory_by_transports(pki: Pki) -> None:
    context = _server_context(pki)
    assert layer_factory(["TCP"], lambda: context)() == ()
    [only] = layer_factory(["SSL"], lambda: context)()
    assert isinstance(only, TlsLayer)
    [unified] = layer_factory(["TCP", "SSL"], lambda: context)()
    assert isinstance(unified, TlsStart)
    [upgradable] = layer_factory(["SSL"], lambda: context, upgrade=True)()
    assert isinstance(upgradable, TlsStart)


# -- AMQP 1.0's TLS header (AMQP 1.0 part 5, 5.2.1) -----------------------------------------

HEADER_1_0_SASL = b"AMQP\x03\x01\x00\x00"


def _upgrade(layer: TlsStart, pki: Pki, first: bytes) -> bytes:
    """A 1.0 client's TLS header (sent as ``first`` then the rest), the handshake, then its
    SASL header inside TLS: what reaches the layer above (the check of the answer is here)."""
    assert layer.receive_data(first) == b""
    assert layer.receive_data(AMQP_TLS_HEADER[len(first):]) == b""
    assert layer.data_to_send() == AMQP_TLS_HEADER          # the same header answers
    assert layer.tls is not None and not layer.transparent
    client = _client(pki)
    client.send_data(HEADER_1_0_SASL)
    up, _ = _pump(client, layer)  # type: ignore[arg-type]
    assert client.handshake_complete and layer.session is not None
    return up


@pytest.mark.parametrize("split", range(len(AMQP_TLS_HEADER)))
@pytest.mark.parametrize("plain", [True, False])
def test_the_tls_header_is_answered_then_tls_carries_the_header(pki: Pki, split: int,
                                                                plain: bool) -> None:
    layer = _unified(pki, plain=plain, upgrade=True)
    assert _upgrade(layer, pki, AMQP_TLS_HEADER[:split]) == HEADER_1_0_SASL


def test_a_client_hello_right_behind_the_tls_header_is_served(pki: Pki) -> None:
    layer = _unified(pki, plain=False, upgrade=True)
    client = _client(pki)
    client.send_data(HEADER_1_0_SASL)
    assert layer.receive_data(AMQP_TLS_HEADER + client.data_to_send()) == b""
    answer = layer.data_to_send()
    assert answer.startswith(AMQP_TLS_HEADER) and answer[len(AMQP_TLS_HEADER)] == 0x16
    client.receive_data(answer[len(AMQP_TLS_HEADER):])
    up, _ = _pump(client, layer)  # type: ignore[arg-type]
    assert up == HEADER_1_0_SASL


def test_with_the_upgrade_a_plain_header_still_passes_on_a_unified_port(pki: Pki) -> None:
    layer = _unified(pki, upgrade=True)
    assert layer.receive_data(HEADER_0_9_1[:4]) == b""       # "AMQP": may be the TLS header
    assert layer.buffered_bytes == 4
    assert layer.receive_data(HEADER_0_9_1[4:]) == HEADER_0_9_1
    assert layer.transparent and layer.data_to_send() == b""


def test_without_the_upgrade_the_tls_header_is_not_answered(pki: Pki) -> None:
    layer = _unified(pki)
    assert layer.receive_data(AMQP_TLS_HEADER) == AMQP_TLS_HEADER   # detection refuses it
    assert layer.transparent and layer.data_to_send() == b""


def test_a_plain_header_on_a_tls_only_port_with_the_upgrade_gets_an_alert(pki: Pki) -> None:
    layer = _unified(pki, plain=False, upgrade=True)
    assert layer.receive_data(HEADER_1_0_SASL) == b""
    assert layer.closed and layer.data_to_send() == HANDSHAKE_FAILURE_ALERT


def test_a_chain_ends_with_the_tls_goodbye(pki: Pki) -> None:
    server, client = TlsLayer(_server_context(pki)), _client(pki)
    _pump(client, server)
    chain = LayerChain([server])
    client.receive_data(chain.end())
    assert client.closed and "close_notify" in client.close_reason


# -- the transport with the real engine above ---------------------------------------------

@pytest.mark.timeout(30)
@pytest.mark.parametrize("transports", [["SSL"], ["TCP", "SSL"]])
def test_the_engine_serves_through_tls(pki: Pki, transports: list[str]) -> None:
    async def scenario() -> None:
        host = FakeHost()
        context = _server_context(pki)
        proto, transport = _accepted(host, ConnectionRegistry(
            layers=layer_factory(transports, lambda: context)))
        client = _client(pki)
        client.send_data(HEADER_0_9_1)
        received = bytearray()
        for _ in range(20):                                 # the handshake, record by record
            out = client.data_to_send()
            if out:
                proto.data_received(out)
            written = bytes(transport.written)
            transport.written.clear()
            received += client.receive_data(written)
            if received:
                break
        assert isinstance(methods(bytes(received))[0], m.ConnectionStart)
        assert proto._chain is not None                     # TLS is never bypassed
        enc = Client(host)
        proto.data_received(client.send_data(enc.encode(0, m.ConnectionClose(reply_code=200))))
        plain = client.receive_data(bytes(transport.written))
        assert m.ConnectionCloseOk() in methods(plain)
        assert client.closed and "close_notify" in client.close_reason   # the broker's goodbye

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_a_plain_client_on_a_unified_port_bypasses_the_chain(pki: Pki) -> None:
    async def scenario() -> None:
        context = _server_context(pki)
        proto, transport = _accepted(FakeHost(), ConnectionRegistry(
            layers=layer_factory(["TCP", "SSL"], lambda: context)))
        proto.data_received(HEADER_0_9_1)
        assert proto._chain is None and proto.engine is not None
        assert isinstance(methods(bytes(transport.written))[0], m.ConnectionStart)

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_a_plain_client_on_a_tls_port_gets_an_alert_and_is_closed(
        pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        context = _server_context(pki)
        proto, transport = _accepted(FakeHost(), ConnectionRegistry(
            layers=layer_factory(["SSL"], lambda: context)))
        proto.data_received(HEADER_0_9_1)
        assert bytes(transport.written)[0] == ALERT and transport.closed
        assert proto.engine is None

    with caplog.at_level("INFO"):
        asyncio.run(scenario())
    assert "TLS handshake failed" in caplog.text
