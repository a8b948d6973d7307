"""AMQP over TLS with unmodified clients against ``deltamq serve``, configured as a user would.

The certificates come from ``deltamq cert`` (a CA, a server certificate for
localhost, client certificates for ``app`` and ``stranger``).  One broker
serves, beside its plain port:

* ``AMQPS``: TLS only;
* ``UNIFIED``: plain and TLS on one port number (the first byte decides);
* ``MTLS``: TLS with a client certificate required, verified against the CA;
* ``HTTPS``: the REST API and console over TLS, with the key of a PKCS12
  ``FileKeyStore``.

pika, aio-pika and py-amqp connect over TLS, verifying the broker's
certificate and host name; SASL EXTERNAL logs in with a client certificate
from pika and from python-qpid-proton (AMQP 1.0); the key store's ``reload``
operation makes new connections get a renewed certificate.  An AMQP 1.0
client that opens with the TLS header (``AMQP 2 1 0 0``) is served over TLS,
built by hand with Python's ssl over a socket (proton cannot do it).  The default
configuration's AMQPS port, with its certificate generated at first start, is
tried too.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import amqp
import httpx
import pika
import pika.credentials
import pika.exceptions
import pytest

from tests.mgmt.conftest import Api, wait_for_http
from broker.protocol.amqp1_0.decoding import decode
from broker.protocol.amqp1_0.definitions import SaslInit, SaslMechanisms, SaslOutcome
from broker.protocol.amqp1_0.encoding import encode
from tests.tls_material import Pki, write_pkcs12

from .conftest import DeltaMQProcess, _free_port, _serve_command
from .support import unique

pytestmark = [pytest.mark.deltamq_only, pytest.mark.timeout(120)]


def deltamq_cert(*args: str) -> None:
    """``deltamq cert`` as a user runs it."""
    command = _serve_command()[:-1] + ["cert", *args]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


@dataclass
class TlsBroker:
    process: DeltaMQProcess
    pki: Pki
    ports: dict[str, int]
    api: Api

    def pika_tls(self, port: str, cn: str | None = None, **kw: Any) -> pika.BlockingConnection:
        context = self.pki.client_context(cn)
        params = pika.ConnectionParameters(
            host="localhost", port=self.ports[port], ssl_options=pika.SSLOptions(context, "localhost"),
            connection_attempts=1, **kw)
        return pika.BlockingConnection(params)

    def connections(self, port: str) -> list[dict[str, Any]]:
        """The connections management lists under ``port``."""
        found = self.api.ok(self.api.get(f"connection/{port}"))
        return found if isinstance(found, list) else [found]


P12_PASSWORD = "p12-secret"


def _tls_config(pki: Pki) -> dict[str, Any]:
    ports: list[dict[str, Any]] = [
        {"name": "AMQP", "port": "${deltamq.amqp_port}"},
        {"name": "AMQPS", "port": "${test.amqps_port}", "transports": ["SSL"],
         "keyStore": "server"},
        {"name": "UNIFIED", "port": "${test.unified_port}", "transports": ["TCP", "SSL"],
         "keyStore": "server"},
        {"name": "MTLS", "port": "${test.mtls_port}", "transports": ["SSL"], "keyStore": "server",
         "trustStores": ["clients"], "needClientAuth": True},
    ]
    for port in ports:
        port.update(type="AMQP", authenticationProvider="passwordFile")
    ports.append({"name": "HTTP", "type": "HTTP", "port": "${deltamq.http_port}",
                  "protocols": ["HTTP"], "authenticationProvider": "passwordFile"})
    ports.append({"name": "HTTPS", "type": "HTTP", "port": "${test.https_port}",
                  "protocols": ["HTTP"], "transports": ["SSL"], "keyStore": "pkcs12",
                  "authenticationProvider": "passwordFile"})
    ports.append({"name": "HTTPS_MTLS", "type": "HTTP", "port": "${test.https_mtls_port}",
                  "protocols": ["HTTP"], "transports": ["SSL"], "keyStore": "pkcs12",
                  "trustStores": ["pkcs12-clients"], "needClientAuth": True,
                  "authenticationProvider": "passwordFile"})
    store = write_pkcs12(pki.directory / "server.p12", pki, P12_PASSWORD)
    trust = write_pkcs12(pki.directory / "clients.p12", pki, P12_PASSWORD, with_key=False)
    return {
        "name": "tls-test",
        "authenticationproviders": [{"name": "passwordFile", "type": "PasswordFile"}],
        "keystores": [{"name": "server", "type": "NonJavaKeyStore",
                       "privateKeyUrl": str(pki.server_key), "certificateUrl": str(pki.server_cert)},
                      {"name": "pkcs12", "type": "FileKeyStore", "storeUrl": str(store),
                       "password": P12_PASSWORD, "keyStoreType": "PKCS12",
                       "keyManagerFactoryAlgorithm": "SunX509"}],
        "truststores": [{"name": "clients", "type": "NonJavaTrustStore",
                         "certificatesUrl": str(pki.ca)},
                        {"name": "pkcs12-clients", "type": "FileTrustStore",
                         "storeUrl": str(trust), "password": P12_PASSWORD}],
        "ports": ports,
        "virtualhostnodes": [{"name": "default", "type": "memory",
                              "virtualHostInitialConfiguration": {"name": "default"}}],
        "defaultVirtualHost": "default",
    }


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    base = tmp_path_factory.mktemp("tls")
    deltamq_cert("--out", str(base / "pki"), "--client", "app", "--client", "stranger")
    pki = Pki(base / "pki")
    config = base / "config.json"
    config.write_text(json.dumps(_tls_config(pki)))
    ports = {name: _free_port() for name in ("AMQPS", "UNIFIED", "MTLS", "HTTPS", "HTTPS_MTLS")}
    process = DeltaMQProcess()
    process.command += ["--config", str(config), "-D", f"test.amqps_port={ports['AMQPS']}",
                        "-D", f"test.unified_port={ports['UNIFIED']}",
                        "-D", f"test.mtls_port={ports['MTLS']}",
                        "-D", f"test.https_port={ports['HTTPS']}",
                        "-D", f"test.https_mtls_port={ports['HTTPS_MTLS']}"]
    process.start()
    api = Api(process.http_port)
    try:
        wait_for_http(process)
        api.ok(api.post("user/passwordFile", {"name": "app", "password": "app-secret"}), 201)
        yield TlsBroker(process, pki, {**ports, "AMQP": process.amqp_port}, api)
    finally:
        api.close()
        process.stop()


def _round_trip(channel: Any) -> None:
    queue = unique("tls")
    channel.queue_declare(queue, auto_delete=True)
    channel.basic_publish("", queue, b"over TLS")
    for _ in range(100):
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            assert body == b"over TLS"
            return
    raise AssertionError("the message did not come back")


@pytest.mark.parametrize("port", ["AMQPS", "UNIFIED"])
def test_pika_over_tls_verifying_the_broker(tls_broker: TlsBroker, port: str) -> None:
    with tls_broker.pika_tls(port, credentials=pika.PlainCredentials("guest", "guest")) as conn:
        _round_trip(conn.channel())
        assert [c["transport"] for c in tls_broker.connections(port)] == ["SSL"]


def test_the_unified_port_serves_plain_clients_too(tls_broker: TlsBroker) -> None:
    params = pika.ConnectionParameters(host="127.0.0.1", port=tls_broker.ports["UNIFIED"],
                                       credentials=pika.PlainCredentials("guest", "guest"))
    with pika.BlockingConnection(params) as conn:
        _round_trip(conn.channel())
        assert [c["transport"] for c in tls_broker.connections("UNIFIED")] == ["TCP"]


def test_a_plain_client_on_the_tls_port_is_refused(tls_broker: TlsBroker) -> None:
    params = pika.ConnectionParameters(host="127.0.0.1", port=tls_broker.ports["AMQPS"],
                                       connection_attempts=1,
                                       credentials=pika.PlainCredentials("guest", "guest"))
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(params)
    assert tls_broker.process.alive()


def test_a_client_that_does_not_trust_the_broker_refuses_it(tls_broker: TlsBroker) -> None:
    context = ssl.create_default_context()               # the system's CAs: not ours
    params = pika.ConnectionParameters(host="localhost", port=tls_broker.ports["AMQPS"],
                                       ssl_options=pika.SSLOptions(context, "localhost"),
                                       connection_attempts=1)
    with pytest.raises(ssl.SSLCertVerificationError):
        pika.BlockingConnection(params)


@pytest.mark.parametrize("port", ["AMQPS", "UNIFIED"])
def test_aio_pika_with_an_amqps_url(tls_broker: TlsBroker, port: str) -> None:
    import aio_pika

    async def scenario() -> None:
        url = (f"amqps://guest:guest@localhost:{tls_broker.ports[port]}/"
               f"?cafile={tls_broker.pki.ca}")
        connection = await aio_pika.connect(url, timeout=30)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(unique("aio-tls"), auto_delete=True)
            await channel.default_exchange.publish(aio_pika.Message(b"aio over TLS"),
                                                   routing_key=queue.name)
            message = await queue.get(timeout=10, fail=True)
            assert message is not None and message.body == b"aio over TLS"
            await message.ack()

    asyncio.run(scenario())


@pytest.mark.parametrize("port", ["AMQPS", "UNIFIED"])
def test_py_amqp_with_ssl(tls_broker: TlsBroker, port: str) -> None:
    conn = amqp.Connection(host=f"localhost:{tls_broker.ports[port]}", userid="guest",
                           password="guest",
                           ssl={"context": {"cafile": str(tls_broker.pki.ca), "check_hostname": True},
                                "server_hostname": "localhost"})
    conn.connect()
    try:
        channel = conn.channel()
        queue = unique("py-amqp-tls")
        channel.queue_declare(queue, auto_delete=True)
        channel.basic_publish(amqp.Message(b"py-amqp over TLS"), routing_key=queue)
        message = None
        for _ in range(100):
            message = channel.basic_get(queue, no_ack=True)
            if message is not None:
                break
        assert message is not None and message.body == b"py-amqp over TLS"
    finally:
        conn.close()


def test_a_required_client_certificate(tls_broker: TlsBroker) -> None:
    guest = pika.PlainCredentials("guest", "guest")
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        tls_broker.pika_tls("MTLS", credentials=guest).close()
    with tls_broker.pika_tls("MTLS", cn="app", credentials=guest) as conn:
        _round_trip(conn.channel())


def test_sasl_external_with_pika(tls_broker: TlsBroker) -> None:
    with tls_broker.pika_tls("MTLS", cn="app",
                             credentials=pika.credentials.ExternalCredentials()) as conn:
        _round_trip(conn.channel())
        assert [c["principal"] for c in tls_broker.connections("MTLS")] == ["app"]


def test_sasl_external_is_refused_for_an_unknown_user(tls_broker: TlsBroker) -> None:
    with pytest.raises((pika.exceptions.ProbableAuthenticationError,
                        pika.exceptions.AMQPConnectionError)):
        tls_broker.pika_tls("MTLS", cn="stranger",
                            credentials=pika.credentials.ExternalCredentials()).close()


def test_sasl_external_is_not_offered_without_a_certificate(tls_broker: TlsBroker) -> None:
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        tls_broker.pika_tls("AMQPS", credentials=pika.credentials.ExternalCredentials()).close()


def test_sasl_external_with_proton(tls_broker: TlsBroker) -> None:
    from proton import Message, SSLDomain
    from proton.utils import BlockingConnection

    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(tls_broker.pki.ca))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    domain.set_credentials(str(tls_broker.pki.client_cert("app")),
                           str(tls_broker.pki.client_key("app")), None)
    queue = unique("proton-external")
    tls_broker.api.ok(tls_broker.api.post("queue/default/default", {"name": queue}), 201)
    conn = BlockingConnection(f"amqps://localhost:{tls_broker.ports['MTLS']}", ssl_domain=domain,
                              allowed_mechs="EXTERNAL", timeout=30)
    try:
        sender = conn.create_sender(queue)
        sender.send(Message(body="proton over TLS, EXTERNAL"))
        receiver = conn.create_receiver(queue)
        received = receiver.receive(timeout=30)
        receiver.accept()
        assert received.body == "proton over TLS, EXTERNAL"
        assert [(c["principal"], c["protocol"]) for c in tls_broker.connections("MTLS")] == \
            [("app", "AMQP_1_0")]
    finally:
        conn.close()


def test_reload_serves_the_renewed_certificate(tls_broker: TlsBroker, tmp_path: Path) -> None:
    port = tls_broker.ports["AMQPS"]
    served = ssl.get_server_certificate(("localhost", port))
    assert _same_certificate(served, tls_broker.pki.server_cert)
    deltamq_cert("--out", str(tmp_path / "renewed"))
    renewed = Pki(tmp_path / "renewed")
    old_cert, old_key = tls_broker.pki.server_cert.read_bytes(), tls_broker.pki.server_key.read_bytes()
    try:
        shutil.copy(renewed.server_key, tls_broker.pki.server_key)
        shutil.copy(renewed.server_cert, tls_broker.pki.server_cert)
        assert _same_certificate(ssl.get_server_certificate(("localhost", port)),
                                 Path(_write(tmp_path / "old.pem", old_cert)))   # not yet
        tls_broker.api.ok(tls_broker.api.post("keystore/server/reload"))
        assert _same_certificate(ssl.get_server_certificate(("localhost", port)), renewed.server_cert)
        context = renewed.client_context()
        params = pika.ConnectionParameters(host="localhost", port=port,
                                           ssl_options=pika.SSLOptions(context, "localhost"),
                                           credentials=pika.PlainCredentials("guest", "guest"))
        with pika.BlockingConnection(params) as conn:
            _round_trip(conn.channel())
        tls_broker.pki.server_cert.write_text("not a certificate")
        refused = tls_broker.api.post("keystore/server/reload")
        assert 400 <= refused.status_code < 500 and "holds no PEM certificate" in refused.text
        assert _same_certificate(ssl.get_server_certificate(("localhost", port)),
                                 renewed.server_cert)                  # the one in use stays
    finally:
        tls_broker.pki.server_cert.write_bytes(old_cert)
        tls_broker.pki.server_key.write_bytes(old_key)
        tls_broker.api.ok(tls_broker.api.post("keystore/server/reload"))


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _same_certificate(served_pem: str, expected: Path) -> bool:
    return ssl.PEM_cert_to_DER_cert(served_pem) == \
        ssl.PEM_cert_to_DER_cert(expected.read_text())


def test_the_default_configuration_serves_amqps_from_a_fresh_start() -> None:
    amqps = _free_port()
    process = DeltaMQProcess()
    process.command += ["--amqps-port", str(amqps)]
    with process:
        ca = process.dir / "data" / "tls" / "amqps-ca.pem"
        assert ca.exists(), process.log_tail()
        assert process.log_tail().count("generated a self-signed development certificate") == 1
        context = ssl.create_default_context(cafile=str(ca))
        params = pika.ConnectionParameters(host="localhost", port=amqps,
                                           ssl_options=pika.SSLOptions(context, "localhost"),
                                           credentials=pika.PlainCredentials("guest", "guest"))
        with pika.BlockingConnection(params) as conn:
            _round_trip(conn.channel())


# -- HTTPS on the HTTP port ----------------------------------------------------------------

def test_the_rest_api_and_console_over_https(tls_broker: TlsBroker) -> None:
    base = f"https://localhost:{tls_broker.ports['HTTPS']}"
    context = ssl.create_default_context(cafile=str(tls_broker.pki.ca))
    with httpx.Client(base_url=base, verify=context, auth=("guest", "guest"), timeout=30) as client:
        broker = client.get("/api/latest/broker")
        assert broker.status_code == 200 and broker.json()["name"] == "tls-test"
        [https] = [p for p in client.get("/api/latest/port").json() if p["name"] == "HTTPS"]
        assert https["transports"] == ["SSL"] and https["keyStore"] == "pkcs12"
        console = client.get("/")
        assert console.status_code == 200 and 'id="login-form"' in console.text
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{base}/api/latest/broker", timeout=30)      # the system's CAs: not ours
    with pytest.raises(httpx.TransportError):                   # plain HTTP gets no answer
        httpx.get(f"http://localhost:{tls_broker.ports['HTTPS']}/api/latest/broker", timeout=30)
    assert tls_broker.process.alive()


def test_the_console_session_cookie_is_secure_over_https(tls_broker: TlsBroker) -> None:
    context = ssl.create_default_context(cafile=str(tls_broker.pki.ca))
    login = httpx.post(f"https://localhost:{tls_broker.ports['HTTPS']}/service/login",
                       data={"username": "guest", "password": "guest"}, verify=context,
                       timeout=30)
    assert login.status_code == 200, login.text
    assert "secure" in login.headers["set-cookie"].lower()


def test_https_with_a_required_client_certificate(tls_broker: TlsBroker) -> None:
    """The port's trust store is a PKCS12 FileTrustStore; the REST login is still a password."""
    url = f"https://localhost:{tls_broker.ports['HTTPS_MTLS']}/api/latest/broker"
    with_certificate = tls_broker.pki.client_context("app")
    answer = httpx.get(url, verify=with_certificate, auth=("guest", "guest"), timeout=30)
    assert answer.status_code == 200 and answer.json()["name"] == "tls-test"
    with pytest.raises(httpx.TransportError):
        httpx.get(url, verify=tls_broker.pki.client_context(), auth=("guest", "guest"),
                  timeout=30).raise_for_status()


# -- AMQP 1.0's TLS header (AMQP 1.0 part 5, 5.2.1) -----------------------------------------

TLS_HEADER = b"AMQP\x02\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


def _read(sock: socket.socket | ssl.SSLSocket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    return data


def _sasl_frame(sock: ssl.SSLSocket) -> Any:
    size = int.from_bytes(_read(sock, 4), "big")
    frame = _read(sock, size - 4)
    assert frame[1] == 1, "a SASL frame"                   # type 1: SASL
    return decode(frame[frame[0] * 4 - 4:])[0]


@pytest.mark.parametrize("port", ["AMQPS", "UNIFIED"])
def test_an_amqp_1_0_client_upgrades_to_tls_with_the_tls_header(tls_broker: TlsBroker,
                                                                port: str) -> None:
    context = ssl.create_default_context(cafile=str(tls_broker.pki.ca))
    with socket.create_connection(("localhost", tls_broker.ports[port]), timeout=30) as raw:
        raw.sendall(TLS_HEADER)
        assert _read(raw, 8) == TLS_HEADER                   # the broker agrees to TLS
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            tls.sendall(SASL_HEADER)                         # the ordinary header, inside TLS
            assert _read(tls, 8) == SASL_HEADER
            mechanisms = _sasl_frame(tls)
            assert isinstance(mechanisms, SaslMechanisms)
            assert "PLAIN" in mechanisms.sasl_server_mechanisms
            init = encode(SaslInit(mechanism="PLAIN", initial_response=b"\0guest\0guest"))
            tls.sendall((8 + len(init)).to_bytes(4, "big") + b"\x02\x01\x00\x00" + init)
            outcome = _sasl_frame(tls)
            assert isinstance(outcome, SaslOutcome) and outcome.code == 0


def test_the_tls_header_on_a_port_without_tls_gets_the_sasl_header(tls_broker: TlsBroker) -> None:
    with socket.create_connection(("localhost", tls_broker.ports["AMQP"]), timeout=30) as raw:
        raw.sendall(TLS_HEADER)
        assert _read(raw, 8) == SASL_HEADER
        assert raw.recv(1) == b""                            # and the broker closes
