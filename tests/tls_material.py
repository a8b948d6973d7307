"""Certificates for the TLS tests: a CA, a server certificate for localhost, client certificates."""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from broker.security import cert_generation as generation

SERVER_NAMES = ["localhost", "127.0.0.1", "::1"]


@dataclass(frozen=True)
class Pki:
    """PEM files under one directory: ``ca.pem``, ``server[-key].pem``, ``client-<CN>[-key].pem``."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server-key.pem"

    def client_cert(self, cn: str) -> Path:
        return self.directory / f"client-{cn}.pem"

    def client_key(self, cn: str) -> Path:
        return self.directory / f"client-{cn}-key.pem"

    def client_context(self, cn: str | None = None) -> ssl.SSLContext:
        """A client's context trusting the CA, presenting client ``cn``'s certificate if given."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if cn is not None:
            context.load_cert_chain(str(self.client_cert(cn)), str(self.client_key(cn)))
        return context


def make_pki(directory: Path, clients: tuple[str, ...] = ("app",), *,
             ca_name: str = "Test CA") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = generation.certificate_authority(ca_name)
    generation.write_issued(ca, directory / "ca-key.pem", directory / "ca.pem")
    server = generation.issue(ca, "localhost", server=True, hostnames=SERVER_NAMES)
    generation.write_issued(server, directory / "server-key.pem", directory / "server.pem")
    for cn in clients:
        client = generation.issue(ca, cn, server=False)
        generation.write_issued(client, directory / f"client-{cn}-key.pem",
                                directory / f"client-{cn}.pem")
    return Pki(directory)


def expired_certificate(key_path: Path, cert_path: Path) -> None:
    """A self-signed certificate that expired yesterday, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "expired")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=30))
                   .not_valid_after(now - datetime.timedelta(days=1))
                   .sign(key, hashes.SHA256()))
    generation.write_file(key_path, generation.key_pem(key), private=True)
    generation.write_file(cert_path, generation.certificate_pem(certificate), private=False)


def write_pkcs12(path: Path, pki: Pki, password: str, *, with_key: bool = True) -> Path:
    """A PKCS12 store made by cryptography: the server's key and chain (alias ``server``) and
    the CA's certificate (alias ``ca``), or only the latter."""
    ca = pkcs12.PKCS12Certificate(x509.load_pem_x509_certificate(pki.ca.read_bytes()), b"ca")
    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), None) if with_key \
        else None
    cert = x509.load_pem_x509_certificate(pki.server_cert.read_bytes()) if with_key else None
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server" if with_key else None, key, cert, [ca],  # type: ignore[arg-type]
        serialization.BestAvailableEncryption(password.encode())))
    return path
