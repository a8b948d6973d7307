"""Java key stores as Broker-J's ``FileKeyStore`` and ``FileTrustStore`` read them: PKCS12.

A PKCS12 file (``keytool -genkeypair -storetype PKCS12``, ``openssl pkcs12
-export``; PKCS12 has been keytool's default since Java 9) is opened with
``cryptography``, which checks the store's integrity MAC with the password.
Its entries are named by aliases (the certificates' friendly names).  A key
store gives one private key and its certificate chain
(:class:`~broker.security.certificates.KeyMaterial`): the entry named by
``certificateAlias``, or the first key entry; a trust store gives every
certificate it holds.

The older JKS format (and JCEKS) has no maintained Python reader, so such a
file is refused with a configuration error that says how to convert it with
keytool.  A store whose type says ``JKS`` but whose file is PKCS12 is read, as
Java's own JKS keystore type reads PKCS12 files.  Wrong password, an alias
the store does not hold, an alias of a certificate without its key, a store
with no key at all: each is a :class:`~broker.errors.ConfigurationError`
naming the store, the file and what to do.  Aliases are matched without regard
to case, as Java's PKCS12 key store does (keytool keeps an alias's case in the
file, and Broker-J finds ``MyKey`` under ``mykey``).

``cryptography`` returns the first key of a store; a store that holds several
(``certificateAlias`` picks one) is walked here, just far enough to find each
key entry's alias and encrypted key (the PKCS12 structure of RFC 7292: PFX ->
AuthenticatedSafe -> SafeContents -> SafeBag), and the key is decrypted with
the store's password, as Broker-J requires the key's password to be the
store's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import types
from cryptography.hazmat.primitives.serialization import pkcs12

from broker.errors import ConfigurationError
from broker.security.certificates import KeyMaterial, read_location, same_public_key

#: the store types accepted (Java's names, any case); JKS only when the file is PKCS12
STORE_TYPES = ("PKCS12", "JKS")
#: Java's key and trust manager algorithms: accepted, with no effect (OpenSSL verifies)
MANAGER_ALGORITHMS = ("SunX509", "NewSunX509", "PKIX")
#: how the files of the formats nobody reads in Python begin
_JAVA_MAGIC = {b"\xfe\xed\xfe\xed": "JKS", b"\xce\xce\xce\xce": "JCEKS"}

# DER contents of the object identifiers walked (RFC 7292, PKCS #7, PKCS #9)
_DATA = bytes.fromhex("2a864886f70d010701")                   # 1.2.840.113549.1.7.1
_KEY_BAG = bytes.fromhex("2a864886f70d010c0a0101")            # 1.2.840.113549.1.12.10.1.1
_SHROUDED_KEY_BAG = bytes.fromhex("2a864886f70d010c0a0102")   # 1.2.840.113549.1.12.10.1.2
_FRIENDLY_NAME = bytes.fromhex("2a864886f70d010914")          # 1.2.840.113549.1.9.20
_SEQUENCE, _SET, _OCTETS, _OID, _INTEGER, _BMP, _EXPLICIT_0 = (
    0x30, 0x31, 0x04, 0x06, 0x02, 0x1E, 0xA0)


def check_store_type(store_type: str, attribute: str, what: str) -> None:
    if store_type.upper() not in STORE_TYPES:
        raise ConfigurationError(f"{what}: attribute '{attribute}' must be PKCS12 or JKS; got"
                                 f" '{store_type}' (convert other stores to PKCS12 with keytool"
                                 " -importkeystore -deststoretype PKCS12)")


def check_manager_algorithm(algorithm: str, attribute: str, what: str) -> None:
    if algorithm not in MANAGER_ALGORITHMS:
        raise ConfigurationError(f"{what}: attribute '{attribute}' must be one of"
                                 f" {', '.join(MANAGER_ALGORITHMS)}; got '{algorithm}'")


@dataclass(frozen=True)
class _Store:
    data: bytes
    opened: pkcs12.PKCS12KeyAndCertificates

    def certificates(self) -> list[pkcs12.PKCS12Certificate]:
        first = [self.opened.cert] if self.opened.cert is not None else []
        return first + list(self.opened.additional_certs)


def _shown(location: str) -> str:
    """``location`` for an error message (a data: URL is not repeated whole)."""
    return "data: URL" if location.startswith("data:") else f"'{location}'"


def _open(location: str, password: str, what: str) -> _Store:
    data = read_location(location, what)
    shown = _shown(location)
    java = _JAVA_MAGIC.get(data[:4])
    if java is not None:
        raise ConfigurationError(
            f"{what}: {shown} is a {java} key store, which DeltaMQ cannot read; convert it"
            " to PKCS12 (keytool -importkeystore -srckeystore <it> -destkeystore <it>.p12"
            " -deststoretype PKCS12), then name the .p12 file and type PKCS12")
    try:
        opened = pkcs12.load_pkcs12(data, password.encode("utf-8") or None)
    except ValueError:
        if _pfx_contents(data) is None:
            raise ConfigurationError(f"{what}: {shown} is not a PKCS12 key store") from None
        raise ConfigurationError(f"{what}: the password does not open {shown} (set the store's"
                                 " 'password'; a key's password must be the store's)") from None
    except Exception as exc:              # an algorithm OpenSSL does not offer (cryptography's errors)
        raise ConfigurationError(f"{what}: cannot open {shown}: {exc}") from None
    return _Store(data, opened)


def _alias(certificate: pkcs12.PKCS12Certificate) -> str:
    name = certificate.friendly_name
    return name.decode("utf-8", "replace") if name else ""


def key_material(location: str, password: str, alias: str, what: str) -> KeyMaterial:
    """The private key of entry ``alias`` ("": the first key entry) and its chain."""
    store = _open(location, password, what)
    certificates = [c.certificate for c in store.certificates()]
    first = _alias(store.opened.cert) if store.opened.cert is not None else ""
    key: types.PrivateKeyTypes | None
    if store.opened.key is not None and (not alias or alias.lower() == first.lower()):
        key = store.opened.key
    else:
        key = _key_of(store, alias, password, what) if alias else None
    if key is None:
        raise ConfigurationError(f"{what}: {_shown(location)} holds no private key, only certificates"
                                 " (a key store needs a key entry: keytool -genkeypair, or"
                                 " openssl pkcs12 -export -inkey)")
    leaf = next((c for c in certificates if same_public_key(key, c)), None)
    if leaf is None:
        raise ConfigurationError(f"{what}: {_shown(location)} holds no certificate for the private key"
                                 f" of entry '{alias or first}'")
    return KeyMaterial(key, _chain(leaf, certificates))


def _key_of(store: _Store, alias: str, password: str, what: str) -> types.PrivateKeyTypes:
    """The key of entry ``alias`` (not the store's first): found by walking the store."""
    bags = {name.lower(): bag for name, bag in _key_bags(store.data)}
    if alias.lower() not in bags:
        aliases = sorted({name for name in (_alias(c) for c in store.certificates()) if name}
                         | {name for name, _bag in _key_bags(store.data)})
        if alias.lower() in {name.lower() for name in aliases}:
            raise ConfigurationError(f"{what}: entry '{alias}' is a certificate without a"
                                     " private key; 'certificateAlias' must name a key entry")
        raise ConfigurationError(f"{what}: the store has no entry '{alias}' (attribute"
                                 f" 'certificateAlias'); its entries: {', '.join(aliases) or 'none'}")
    der, encrypted = bags[alias.lower()]
    try:
        return serialization.load_der_private_key(
            der, password.encode("utf-8") if encrypted else None)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"{what}: the key of entry '{alias}' does not open with the"
                                 f" store's password: {exc}") from None
    except Exception as exc:              # an encryption cryptography does not offer
        raise ConfigurationError(f"{what}: cannot read the key of entry '{alias}': {exc}") from None


def _chain(leaf: x509.Certificate, certificates: Sequence[x509.Certificate]
           ) -> tuple[x509.Certificate, ...]:
    """``leaf`` and the issuers the store holds for it, up to a self-signed one."""
    chain = [leaf]
    while chain[-1].issuer != chain[-1].subject and len(chain) < len(certificates):
        issuer = next((c for c in certificates
                       if c.subject == chain[-1].issuer and c not in chain), None)
        if issuer is None:
            break
        chain.append(issuer)
    return tuple(chain)


def trusted_certificates(location: str, password: str, what: str) -> list[x509.Certificate]:
    """Every certificate of the store at ``location`` (at least one)."""
    store = _open(location, password, what)
    found = [c.certificate for c in store.certificates()]
    if not found:
        raise ConfigurationError(f"{what}: {_shown(location)} holds no certificate")
    return found


# -- just enough DER to find the key entries (RFC 7292) ---------------------------------

class _Malformed(Exception):
    pass


def _elements(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(tag, element start, value start, value end) of each DER element in ``data[start:end]``."""
    pos = start
    while pos < end:
        if pos + 2 > end:
            raise _Malformed
        tag, length, value = data[pos], data[pos + 1], pos + 2
        if length & 0x80:
            size = length & 0x7F
            if not 0 < size <= 4 or value + size > end:
                raise _Malformed          # indefinite (BER) or absurd lengths
            length = int.from_bytes(data[value:value + size], "big")
            value += size
        if value + length > end:
            raise _Malformed
        yield tag, pos, value, value + length
        pos = value + length


def _children(data: bytes, start: int, end: int, *tags: int) -> list[tuple[int, int, int, int]]:
    found = list(_elements(data, start, end))
    if tags and tuple(t for t, *_ in found[:len(tags)]) != tags:
        raise _Malformed
    return found


def _data_contents(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    """The octets of a ContentInfo of type data (None for another type)."""
    (_, _, oid, oid_end), (_, _, inner, inner_end) = _children(data, start, end, _OID,
                                                               _EXPLICIT_0)[:2]
    if data[oid:oid_end] != _DATA:
        return None
    [(tag, _, octets, octets_end)] = _children(data, inner, inner_end)
    if tag != _OCTETS:
        raise _Malformed
    return octets, octets_end


def _pfx_contents(data: bytes) -> tuple[int, int] | None:
    """Where the AuthenticatedSafe of a PFX is (None: not a PFX this walk can read)."""
    try:
        [(tag, _, start, end)] = _children(data, 0, len(data))
        if tag != _SEQUENCE:
            return None
        _, (_, _, info, info_end) = _children(data, start, end, _INTEGER, _SEQUENCE)[:2]
        return _data_contents(data, info, info_end)
    except (_Malformed, ValueError):
        return None


def _key_bags(data: bytes) -> Iterator[tuple[str, tuple[bytes, bool]]]:
    """(alias, (key DER, encrypted)) of every key entry outside encrypted contents."""
    contents = _pfx_contents(data)
    if contents is None:
        return
    try:
        [(_, _, safe, safe_end)] = _children(data, *contents, _SEQUENCE)
        for _, _, info, info_end in _children(data, safe, safe_end):
            bags = _data_contents(data, info, info_end)
            if bags is None:
                continue                  # encrypted contents: the certificates, as a rule
            [(_, _, seq, seq_end)] = _children(data, *bags, _SEQUENCE)
            for _, _, bag, bag_end in _children(data, seq, seq_end):
                found = _key_bag(data, bag, bag_end)
                if found is not None:
                    yield found
    except (_Malformed, ValueError):
        return


def _key_bag(data: bytes, start: int, end: int) -> tuple[str, tuple[bytes, bool]] | None:
    parts = _children(data, start, end, _OID, _EXPLICIT_0)
    (_, _, oid, oid_end), (_, _, value, value_end) = parts[:2]
    kind = data[oid:oid_end]
    if kind not in (_KEY_BAG, _SHROUDED_KEY_BAG):
        return None
    [(_, key_start, _, key_end)] = _children(data, value, value_end)
    alias = ""
    if len(parts) > 2 and parts[2][0] == _SET:
        for _, _, attribute, attribute_end in _children(data, parts[2][2], parts[2][3]):
            (_, _, a_oid, a_oid_end), (_, _, values, values_end) = _children(
                data, attribute, attribute_end, _OID, _SET)[:2]
            if data[a_oid:a_oid_end] == _FRIENDLY_NAME:
                tag, _, text, text_end = _children(data, values, values_end)[0]
                if tag == _BMP:
                    alias = data[text:text_end].decode("utf-16-be", "replace")
    return alias, (data[key_start:key_end], kind == _SHROUDED_KEY_BAG)
