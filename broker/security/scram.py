"""SCRAM-SHA-1 and SCRAM-SHA-256 (RFC 5802, RFC 7677): the server side, sans-IO.

A SCRAM login is two round trips::

    client-first   n,,n=user,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<proof>
    server-final   v=<server signature>

The server keeps, per user and hash, only what RFC 5802 section 3 calls the
stored credentials: the salt, the iteration count, ``StoredKey`` =
H(HMAC(SaltedPassword, "Client Key")) and ``ServerKey`` =
HMAC(SaltedPassword, "Server Key") -- never the password, nor anything that
logs in by itself (``StoredKey`` cannot produce a proof).

:class:`ScramServer` parses and checks the messages and computes the answers;
it knows nothing of users, files or AMQP: a lookup function gives it a user's
:class:`ScramCredential`, and the caller (:mod:`broker.security.scram_login`)
counts failures and names the principal.  Channel binding is not offered:
a gs2 header of ``n`` (the client does not support it) or ``y`` (it does,
but thinks the server does not) is accepted; ``p=`` (the client requires
it) is refused, as RFC 5802 section 6 asks of a server without it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import stringprep
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import AuthenticationFailed

#: Broker-J's default, and RFC 7677's minimum recommendation for SCRAM-SHA-256
DEFAULT_ITERATIONS = 4096
#: iteration counts accepted from a stored credential (a bigger one costs the client, not us)
MIN_ITERATIONS, MAX_ITERATIONS = 1, 10_000_000
SALT_BYTES = 16
NONCE_BYTES = 18
#: longest SCRAM message accepted
MAX_MESSAGE = 4096


@dataclass(frozen=True, slots=True)
class ScramAlgorithm:
    """One SCRAM mechanism: its SASL name and the hash it is built on."""

    mechanism: str
    hash_name: str

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(Normalize(password), salt, i) of RFC 5802 section 2.2: PBKDF2 with HMAC-H."""
        return hashlib.pbkdf2_hmac(self.hash_name, saslprep(password).encode("utf-8"), salt,
                                   iterations)


SCRAM_SHA_1 = ScramAlgorithm("SCRAM-SHA-1", "sha1")
SCRAM_SHA_256 = ScramAlgorithm("SCRAM-SHA-256", "sha256")
#: the SCRAM mechanisms, most preferred first
ALGORITHMS: dict[str, ScramAlgorithm] = {a.mechanism: a for a in (SCRAM_SHA_256, SCRAM_SHA_1)}
MECHANISMS = tuple(ALGORITHMS)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and one hash (RFC 5802 section 3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, object]:
        return {"salt": _b64(self.salt), "iterations": self.iterations,
                "storedKey": _b64(self.stored_key), "serverKey": _b64(self.server_key)}

    @classmethod
    def from_json(cls, data: object) -> ScramCredential:
        """The credential a password file holds; ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a SCRAM credential must be an object")
        iterations = data.get("iterations")
        if not isinstance(iterations, int) or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"SCRAM 'iterations' must be an integer from {MIN_ITERATIONS} to"
                             f" {MAX_ITERATIONS}, not {iterations!r}")
        try:
            salt, stored, server = (base64.b64decode(str(data[k]), validate=True)
                                    for k in ("salt", "storedKey", "serverKey"))
        except KeyError as exc:
            raise ValueError(f"SCRAM credential lacks {exc}") from None
        except binascii.Error:
            raise ValueError("SCRAM credential: a value is not base64") from None
        if not salt or not stored or len(stored) != len(server):
            raise ValueError("SCRAM credential: empty salt or keys of different lengths")
        return cls(salt, iterations, stored, server)


def derive_credential(algorithm: ScramAlgorithm, password: str, *, salt: bytes | None = None,
                      iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """The stored credential for ``password`` (a new random salt unless one is given)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"SCRAM iteration count must be from {MIN_ITERATIONS} to"
                         f" {MAX_ITERATIONS}, not {iterations}")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = algorithm.salted_password(password, salt, iterations)
    client_key = algorithm.hmac(salted, b"Client Key")
    return ScramCredential(salt, iterations, algorithm.hash(client_key),
                           algorithm.hmac(salted, b"Server Key"))


def derive_credentials(password: str, iterations: int = DEFAULT_ITERATIONS
                       ) -> dict[str, ScramCredential]:
    """A credential for every SCRAM mechanism, by mechanism name (each with its own salt)."""
    return {name: derive_credential(algorithm, password, iterations=iterations)
            for name, algorithm in ALGORITHMS.items()}


# -- SASLprep (RFC 4013), the Normalize() of RFC 5802 section 2.2 ------------------------

def saslprep(text: str) -> str:
    """``text`` prepared as RFC 4013 says; ValueError for prohibited characters."""
    mapped = "".join(" " if stringprep.in_table_c12(ch) else ch
                     for ch in text if not stringprep.in_table_b1(ch))
    normal = unicodedata.normalize("NFKC", mapped)
    if not normal:
        return normal
    prohibited = (stringprep.in_table_c12, stringprep.in_table_c21_c22, stringprep.in_table_c3,
                  stringprep.in_table_c4, stringprep.in_table_c5, stringprep.in_table_c6,
                  stringprep.in_table_c7, stringprep.in_table_c8, stringprep.in_table_c9)
    for ch in normal:
        if any(table(ch) for table in prohibited):
            raise ValueError(f"prohibited character U+{ord(ch):04X}")
    if any(stringprep.in_table_d1(ch) for ch in normal):     # RFC 3454 section 6
        if any(stringprep.in_table_d2(ch) for ch in normal) or not (
                stringprep.in_table_d1(normal[0]) and stringprep.in_table_d1(normal[-1])):
            raise ValueError("mixed or misplaced right-to-left characters")
    return normal


# -- the messages ------------------------------------------------------------------------

class MalformedScram(AuthenticationFailed):
    """A SCRAM message that breaks RFC 5802's grammar or its rules (the text says which)."""

    def __init__(self, mechanism: str, why: str) -> None:
        super().__init__(f"Login was refused using authentication mechanism {mechanism}."
                         f" Malformed message: {why}")
        self.why = why


class WrongProof(AuthenticationFailed):
    """The client's proof does not match the stored key: a wrong password (or unknown user)."""


def decode_saslname(mechanism: str, text: str) -> str:
    """``saslname`` of RFC 5802 section 5.1: ``=2C`` is ',' and ``=3D`` is '='; any other
    '=' is malformed."""
    parts = text.split("=")
    out = [parts[0]]
    for part in parts[1:]:
        if part[:2] == "2C":
            out.append("," + part[2:])
        elif part[:2] == "3D":
            out.append("=" + part[2:])
        else:
            raise MalformedScram(mechanism, "'=' in a user name not followed by 2C or 3D")
    return "".join(out)


def encode_saslname(name: str) -> str:
    """The inverse of :func:`decode_saslname` (for clients)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _printable_nonce(nonce: str) -> bool:
    # printable = %x21-2B / %x2D-7E (RFC 5802 section 7): ASCII without space and ','
    return bool(nonce) and all(0x21 <= ord(ch) <= 0x7E and ch != "," for ch in nonce)


def _attributes(mechanism: str, message: str, names: str, what: str) -> list[tuple[str, str]]:
    """``a=value`` pairs of ``message``, the first ones named by ``names`` in order."""
    pairs = []
    for item in message.split(","):
        if len(item) < 2 or item[1] != "=" or not item[0].isalpha():
            raise MalformedScram(mechanism, f"{what}: '{item[:40]}' is not an attribute=value")
        pairs.append((item[0], item[2:]))
    found = "".join(name for name, _ in pairs[:len(names)])
    if found != names:
        raise MalformedScram(mechanism, f"{what}: expected attributes {','.join(names)} in this"
                                        f" order, got {','.join(n for n, _ in pairs)}")
    return pairs


class ScramServer:
    """The server side of one SCRAM exchange.

    ``lookup(user)`` gives the user's credential, or None for a user without
    one; the exchange then goes on with ``fallback(user)`` (a made-up
    credential, so that the server-first message does not tell whether the
    user exists, RFC 5802 section 9) and fails at the proof.
    """

    def __init__(self, algorithm: ScramAlgorithm,
                 lookup: Callable[[str], ScramCredential | None],
                 fallback: Callable[[str], ScramCredential], *, nonce: str | None = None) -> None:
        self.algorithm = algorithm
        self.lookup = lookup
        self.fallback = fallback
        self.server_nonce = nonce if nonce is not None else _b64(secrets.token_bytes(NONCE_BYTES))
        if not _printable_nonce(self.server_nonce):
            raise ValueError("a server nonce must be printable ASCII without ','")
        self.username = ""
        self.known = False
        self.complete = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    @property
    def mechanism(self) -> str:
        return self.algorithm.mechanism

    def _text(self, message: bytes, what: str) -> str:
        if len(message) > MAX_MESSAGE:
            raise MalformedScram(self.mechanism, f"{what} longer than {MAX_MESSAGE} bytes")
        if not message:
            raise MalformedScram(self.mechanism, f"{what} is empty")
        try:
            return bytes(message).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedScram(self.mechanism, f"{what} is not UTF-8") from None

    def server_first(self, client_first: bytes) -> bytes:
        """Answer the client-first message (RFC 5802 section 7: client-first-message)."""
        mechanism = self.mechanism
        if self._credential is not None:
            raise MalformedScram(mechanism, "a second client-first message")
        text = self._text(client_first, "client-first message")
        flag, sep, rest = text.partition(",")
        if not sep:
            raise MalformedScram(mechanism, "client-first message without a gs2 header")
        if flag.startswith("p="):
            raise MalformedScram(mechanism, "channel binding is required by the client but"
                                            " not supported by this server")
        if flag not in ("n", "y"):
            raise MalformedScram(mechanism, f"gs2 channel binding flag must be n, y or p=...,"
                                            f" not '{flag[:20]}'")
        authzid, sep, bare = rest.partition(",")
        if not sep:
            raise MalformedScram(mechanism, "client-first message: gs2 header not ended by ','")
        if authzid and not authzid.startswith("a="):
            raise MalformedScram(mechanism, "gs2 authzid must start with 'a='")
        if bare.startswith("m="):
            raise MalformedScram(mechanism, "mandatory extension 'm' is not supported")
        pairs = _attributes(mechanism, bare, "nr", "client-first message")
        username = decode_saslname(mechanism, pairs[0][1])
        if not username:
            raise MalformedScram(mechanism, "empty user name")
        acting_as = decode_saslname(mechanism, authzid[2:]) if authzid else username
        if acting_as != username:
            raise MalformedScram(mechanism, f"user '{username}' may not act as '{acting_as}'")
        client_nonce = pairs[1][1]
        if not _printable_nonce(client_nonce):
            raise MalformedScram(mechanism, "client nonce is empty or not printable ASCII")
        self.username = username
        credential = self.lookup(username)
        self.known = credential is not None
        self._credential = credential if credential is not None else self.fallback(username)
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self.server_nonce
        self._server_first = (f"r={self._nonce},s={_b64(self._credential.salt)},"
                              f"i={self._credential.iterations}")
        return self._server_first.encode("ascii")

    def server_final(self, client_final: bytes) -> bytes:
        """Check the client-final message; the server-final message if the proof is right.

        Raises :class:`MalformedScram` for a message that breaks the rules and
        :class:`WrongProof` for a proof that does not match.
        """
        mechanism, algorithm, credential = self.mechanism, self.algorithm, self._credential
        if credential is None:
            raise MalformedScram(mechanism, "client-final message before client-first")
        if self.complete:
            raise MalformedScram(mechanism, "a second client-final message")
        text = self._text(client_final, "client-final message")
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep or "," in proof_text:
            raise MalformedScram(mechanism, "client-final message does not end with the proof"
                                            " p=...")
        pairs = _attributes(mechanism, without_proof, "cr", "client-final message")
        try:
            binding = base64.b64decode(pairs[0][1], validate=True)
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:             # binascii.Error, or a character that is not ASCII
            raise MalformedScram(mechanism, "channel binding or proof is not base64") from None
        if binding != self._gs2_header.encode("utf-8"):
            raise MalformedScram(mechanism, "channel binding c=... does not repeat the gs2"
                                            " header of the client-first message")
        if not hmac.compare_digest(pairs[1][1].encode("utf-8"), self._nonce.encode("utf-8")):
            raise MalformedScram(mechanism, "nonce r=... is not the one of this exchange")
        if len(proof) != algorithm.digest_size:
            raise MalformedScram(mechanism, f"proof is {len(proof)} bytes, not"
                                            f" {algorithm.digest_size}")
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode("utf-8")
        client_signature = algorithm.hmac(credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        # constant time: how far the hashes agree tells an attacker nothing
        matches = hmac.compare_digest(algorithm.hash(client_key), credential.stored_key)
        if not matches or not self.known:
            raise WrongProof(f"Login was refused using authentication mechanism {mechanism}."
                             " For details see the broker logfile.")
        self.complete = True
        server_signature = algorithm.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
