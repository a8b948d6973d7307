"""A SCRAM client (RFC 5802 section 3 and 7) for tests, written from the RFC on its own:
it shares no code with the broker's server, so that the two check each other."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

HASHES = {"SCRAM-SHA-1": "sha1", "SCRAM-SHA-256": "sha256"}


class ScramClient:
    """``first()`` -> client-first; ``final(server_first)`` -> client-final;
    ``verify(server_final)`` checks the server's signature (AssertionError if wrong)."""

    def __init__(self, mechanism: str, user: str, password: str, *, nonce: str | None = None,
                 gs2_header: str = "n,,") -> None:
        self.hash = HASHES[mechanism]
        self.user = user
        self.password = password
        self.nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self.gs2_header = gs2_header
        self.bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return (self.gs2_header + self.bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = dict(item.split("=", 1) for item in text.split(","))
        assert fields["r"].startswith(self.nonce), "the server's nonce must extend ours"
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c={base64.b64encode(self.gs2_header.encode()).decode()},r={fields['r']}"
        auth_message = f"{self.bare},{text},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self.server_signature = hmac.new(server_key, auth_message, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        assert server_final == b"v=" + base64.b64encode(self.server_signature), \
            f"server signature {server_final!r} does not prove the server knows the password"
