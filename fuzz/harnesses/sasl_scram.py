"""SCRAM-SHA-1 and SCRAM-SHA-256, the server side (``security/scram.py``).

The first byte steers: bit 0 picks the hash (0: SHA-1, 1: SHA-256), bit 1
the message (0: the rest is a client-first message; 1: the server has
answered its RFC's example client-first, and the rest is the client-final
message).  The user ``user`` has the password ``pencil`` with the RFC's
salt, and the server the RFC's nonce (RFC 5802 section 5, RFC 7677 section
3), so the examples log in byte for byte.

Only ``AuthenticationFailed`` may come out.  A client-first that is taken is
answered ``r=<client nonce><server nonce>,s=<salt>,i=<iterations>``, in
ASCII; a client-final that is taken (a right proof of a known user) is
answered ``v=`` and the server signature, and completes the exchange.
"""

from __future__ import annotations

import base64

from broker.errors import AuthenticationFailed
from broker.security.scram import SCRAM_SHA_1, SCRAM_SHA_256, ScramServer, derive_credential
from fuzz.contract import ContractViolation, agree

#: per hash: the salt, the server nonce, the example client-first and client-final
EXAMPLES = (
    (SCRAM_SHA_1, "QSXCR+Q6sek8bf92", "3rfcNHYJY1ZVvWVs7j", b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
     b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="),
    (SCRAM_SHA_256, "W22ZaJ0SNY7soEsUEjb6gQ==", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
     b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
     b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="),
)
CREDENTIALS = tuple(derive_credential(algorithm, "pencil", salt=base64.b64decode(salt), iterations=4096)
                    for algorithm, salt, *_ in EXAMPLES)


def one_input(data: bytes) -> None:
    if not data:
        return
    which, final, message = data[0] & 1, data[0] >> 1 & 1, data[1:]
    algorithm, _, nonce, client_first, _ = EXAMPLES[which]
    credential = CREDENTIALS[which]
    server = ScramServer(algorithm, {"user": credential}.get, lambda name: credential, nonce=nonce)
    try:
        if final:
            server.server_first(client_first)
            answer = server.server_final(message)
        else:
            answer = server.server_first(message)
    except AuthenticationFailed:
        if final and server.complete:
            raise ContractViolation("a refused client-final completed the exchange") from None
        return
    if final:
        if not (server.complete and server.known and answer.startswith(b"v=")):
            raise ContractViolation(f"client-final taken with {answer!r}, complete={server.complete}")
        agree("the server signature's length", len(base64.b64decode(answer[2:], validate=True)),
              algorithm.digest_size)
        return
    text = answer.decode("ascii")
    if not (text.startswith("r=") and text.endswith(",i=4096") and nonce + ",s=" in text and server.username):
        raise ContractViolation(f"client-first answered with {answer!r}")


def seeds() -> list[bytes]:
    found = []
    for which, (_, _, _, client_first, client_final) in enumerate(EXAMPLES):
        found += [bytes([which]) + client_first, bytes([which | 2]) + client_final,
                  bytes([which]) + client_first.replace(b"n,,", b"y,a=user,"),
                  bytes([which]) + b"n,,n=us=2Cer=3D,r=abc"]
    return found
