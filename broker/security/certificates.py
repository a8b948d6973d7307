"""PEM keys and certificates: reading them, checking them, and making a server's TLS context.

A key store (:mod:`broker.model.keystore`) names a private key and the
certificate (chain) that goes with it; a trust store names the CA
certificates that client certificates must chain to.  Both are PEM files
(Broker-J's ``NonJavaKeyStore`` / ``NonJavaTrustStore``), read with
``cryptography``, and every problem is a
:class:`~broker.errors.ConfigurationError` that names the file and what is
wrong with it: missing, unreadable, not PEM, a key that does not belong to the
certificate.  An expired (or not yet valid) certificate is loaded, but
:func:`validity_problem` says so, for the caller to log.

A location is a path, a ``file:`` URL, or a ``data:`` URL holding the PEM
text (base64 or percent-encoded), as Broker-J accepts for uploads.

:func:`server_context` turns what was read into an :class:`ssl.SSLContext`.
The standard library loads a certificate chain only from a file, so the chain
and the key are written to a temporary file for the moment of loading, the
key encrypted under a one-time random password: the key is never on disk in
clear.
"""

from __future__ import annotations

import base64
import datetime
import os
import secrets
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa, types
from cryptography.x509.oid import NameOID

from broker.errors import ConfigurationError

#: the TLS versions a port may allow, oldest first (their ssl.TLSVersion)
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
#: a port's default: TLS 1.2 and newer
DEFAULT_TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
#: largest key or certificate file read (a PEM chain is a few KiB)
MAX_PEM_BYTES = 1 << 20


def read_location(location: str, what: str) -> bytes:
    """The bytes at ``location`` (a path, ``file:`` or ``data:`` URL); ``what`` names it in errors."""
    if not location:
        raise ConfigurationError(f"{what}: no file is named")
    if location.startswith("data:"):
        header, comma, payload = location.partition(",")
        if not comma:
            raise ConfigurationError(f"{what}: a data: URL needs a ',' before its content")
        try:
            return base64.b64decode(payload, validate=True) if header.endswith(";base64") \
                else unquote(payload).encode("utf-8")
        except ValueError:
            raise ConfigurationError(f"{what}: the data: URL is not valid base64") from None
    path = _path(location)
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_PEM_BYTES + 1)
    except FileNotFoundError:
        raise ConfigurationError(f"{what}: file '{path}' does not exist") from None
    except OSError as exc:
        raise ConfigurationError(f"{what}: cannot read '{path}': {exc.strerror or exc}") from None
    if len(data) > MAX_PEM_BYTES:
        raise ConfigurationError(f"{what}: '{path}' is larger than {MAX_PEM_BYTES} bytes,"
                                 " not a PEM file")
    return data


def location_exists(location: str) -> bool:
    """True when ``location`` names data (a data: URL) or a file that exists."""
    if location.startswith("data:"):
        return True
    path = _path(location)
    return bool(path) and os.path.exists(path)


def _path(location: str) -> str:
    """The file a path or ``file:`` URL names."""
    return unquote(urlsplit(location).path) if location.startswith("file:") else location


def load_certificates(location: str, what: str) -> list[x509.Certificate]:
    """Every certificate of the PEM file at ``location`` (at least one)."""
    data = read_location(location, what)
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConfigurationError(f"{what}: '{_short(location)}' holds no PEM certificate"
                                 " (expected -----BEGIN CERTIFICATE-----)") from None
    return certificates


def load_private_key(location: str, password: str, what: str) -> types.PrivateKeyTypes:
    """The PEM private key at ``location`` (``password`` for an encrypted one, "" for none)."""
    data = read_location(location, what)
    try:
        key = serialization.load_pem_private_key(data, password.encode("utf-8") or None)
    except TypeError as exc:              # encrypted without a password, or the reverse
        text = "is encrypted: set the key store's 'password'" if "encrypted" in str(exc) \
            and password == "" else "is not encrypted: leave the key store's 'password' empty"
        raise ConfigurationError(f"{what}: the private key in '{_short(location)}' {text}") from None
    except ValueError:
        raise ConfigurationError(f"{what}: '{_short(location)}' holds no PEM private key, or"
                                 " the password does not decrypt it") from None
    except Exception as exc:              # an unsupported key type (cryptography's own errors)
        raise ConfigurationError(f"{what}: cannot load the private key in '{_short(location)}':"
                                 f" {exc}") from None
    return key


@dataclass(frozen=True)
class KeyMaterial:
    """A private key and its certificate chain (the server's own certificate first)."""

    key: types.PrivateKeyTypes
    chain: tuple[x509.Certificate, ...]

    @property
    def certificate(self) -> x509.Certificate:
        return self.chain[0]


def key_material(private_key_url: str, certificate_url: str, intermediate_url: str,
                 password: str, what: str) -> KeyMaterial:
    """Read and check a key store's files: the key must belong to the first certificate."""
    key = load_private_key(private_key_url, password, what)
    chain = load_certificates(certificate_url, what)
    if intermediate_url:
        chain += load_certificates(intermediate_url, what)
    if not same_public_key(key, chain[0]):
        raise ConfigurationError(f"{what}: the private key in '{_short(private_key_url)}' does"
                                 f" not belong to the certificate of '{subject_name(chain[0])}'"
                                 f" in '{_short(certificate_url)}'")
    return KeyMaterial(key, tuple(chain))


def same_public_key(key: types.PrivateKeyTypes, certificate: x509.Certificate) -> bool:
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return bool(key.public_key().public_bytes(der, spki)
                == certificate.public_key().public_bytes(der, spki))


def subject_name(certificate: x509.Certificate) -> str:
    """The subject as RFC 4514 text (``CN=broker,O=Example``)."""
    return certificate.subject.rfc4514_string()


def common_name(name: x509.Name) -> str:
    """The first CN of ``name``; "" when it has none."""
    found = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return attribute_text(found[0].value) if found else ""


def attribute_text(value: str | bytes) -> str:
    """A name attribute's value as text (a few types are bytes)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def validity_problem(certificate: x509.Certificate,
                     now: datetime.datetime | None = None) -> str:
    """Why ``certificate`` is not valid now ("" when it is): expired, or not valid yet."""
    at = now or datetime.datetime.now(datetime.timezone.utc)
    if at > certificate.not_valid_after_utc:
        return f"certificate '{subject_name(certificate)}' expired on" \
               f" {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if at < certificate.not_valid_before_utc:
        return f"certificate '{subject_name(certificate)}' is not valid before" \
               f" {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    return ""


def describe(certificate: x509.Certificate) -> dict[str, str]:
    """What management shows of a certificate."""
    return {"subjectName": subject_name(certificate),
            "issuerName": certificate.issuer.rfc4514_string(),
            "serialNumber": format(certificate.serial_number, "x"),
            "validFrom": certificate.not_valid_before_utc.isoformat(),
            "validUntil": certificate.not_valid_after_utc.isoformat()}


def pem(certificates: Sequence[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def check_protocols(protocols: Sequence[str], what: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """The (oldest, newest) TLS version ``protocols`` allows."""
    unknown = [p for p in protocols if p not in TLS_VERSIONS]
    if unknown or not protocols:
        raise ConfigurationError(
            f"{what}: attribute 'tlsProtocolAllowList' must name TLS versions among"
            f" {', '.join(TLS_VERSIONS)}; got {', '.join(map(repr, unknown)) or 'none'}")
    versions = sorted(TLS_VERSIONS[p] for p in protocols)
    return versions[0], versions[-1]


def server_context(material: KeyMaterial, trusted: Sequence[x509.Certificate], *,
                   need_client_auth: bool, want_client_auth: bool,
                   protocols: Sequence[str] = DEFAULT_TLS_PROTOCOLS,
                   cipher_suites: Sequence[str] = (), what: str = "TLS") -> ssl.SSLContext:
    """A server-side TLS context: the key store's key and chain, client certificates verified
    against ``trusted`` when required (``need``) or asked for (``want``)."""
    oldest, newest = check_protocols(protocols, what)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.minimum_version, context.maximum_version = oldest, newest
    except (ValueError, ssl.SSLError) as exc:
        raise ConfigurationError(f"{what}: this OpenSSL cannot use {', '.join(protocols)}:"
                                 f" {exc}") from None
    if cipher_suites:
        try:
            context.set_ciphers(":".join(cipher_suites))
        except ssl.SSLError:
            raise ConfigurationError(f"{what}: attribute 'tlsCipherSuiteAllowList' names no"
                                     f" cipher suite OpenSSL knows: {', '.join(cipher_suites)}"
                                     ) from None
    _load_chain(context, material, what)
    if need_client_auth or want_client_auth:
        if not trusted:
            raise ConfigurationError(f"{what}: client certificates are asked for, but no trust"
                                     " store names a CA certificate to verify them with")
        context.load_verify_locations(cadata=pem(trusted).decode("ascii"))
        # a trust store may hold a peer's own certificate, not only the CA that issued it
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        context.verify_mode = ssl.CERT_REQUIRED if need_client_auth else ssl.CERT_OPTIONAL
    return context


def _load_chain(context: ssl.SSLContext, material: KeyMaterial, what: str) -> None:
    password = secrets.token_urlsafe(24)
    encrypted = material.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password.encode("ascii")))
    with tempfile.TemporaryDirectory(prefix="deltamq-tls-") as directory:
        path = os.path.join(directory, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(pem(material.chain) + encrypted)
        try:
            context.load_cert_chain(path, password=password)
        except ssl.SSLError as exc:
            raise ConfigurationError(f"{what}: OpenSSL refuses the key or certificate:"
                                     f" {exc.reason or exc}") from None


def key_algorithm(key: types.PrivateKeyTypes) -> str:
    """``EC P-256``, ``RSA 2048``, ``Ed25519``: for logs and management."""
    if isinstance(key, rsa.RSAPrivateKey):
        return f"RSA {key.key_size}"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return f"EC {key.curve.name}"
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "Ed25519"
    if isinstance(key, ed448.Ed448PrivateKey):
        return "Ed448"
    return type(key).__name__


def _short(location: str) -> str:
    return "data: URL" if location.startswith("data:") else location
