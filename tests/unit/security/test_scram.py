"""The SCRAM server (RFC 5802, RFC 7677): the RFCs' example exchanges byte for byte,
the rules of the messages, wrong proofs and replays."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security.scram import (SCRAM_SHA_1, SCRAM_SHA_256, MalformedScram, ScramAlgorithm,
                                   ScramCredential, ScramServer, WrongProof, decode_saslname,
                                   derive_credential, derive_credentials, encode_saslname,
                                   saslprep)
from tests.scram_client import ScramClient

# RFC 5802 section 5: user "user", password "pencil"
RFC5802 = dict(
    algorithm=SCRAM_SHA_1, salt="QSXCR+Q6sek8bf92", server_nonce="3rfcNHYJY1ZVvWVs7j",
    client_first=b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    server_first=b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    client_final=b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,"
                 b"p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    server_final=b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")
# RFC 7677 section 3: the same user and password with SHA-256
RFC7677 = dict(
    algorithm=SCRAM_SHA_256, salt="W22ZaJ0SNY7soEsUEjb6gQ==",
    server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    client_first=b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    server_first=b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                 b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    client_final=b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                 b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    server_final=b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def rfc_server(vector: dict, password: str = "pencil") -> ScramServer:
    algorithm: ScramAlgorithm = vector["algorithm"]
    credential = derive_credential(algorithm, password, salt=base64.b64decode(vector["salt"]),
                                   iterations=4096)
    return ScramServer(algorithm, {"user": credential}.get, lambda name: credential,
                       nonce=vector["server_nonce"])


@pytest.mark.parametrize("vector", [RFC5802, RFC7677], ids=["RFC5802", "RFC7677"])
def test_the_rfc_example_exchange_byte_for_byte(vector: dict) -> None:
    server = rfc_server(vector)
    assert server.server_first(vector["client_first"]) == vector["server_first"]
    assert server.server_final(vector["client_final"]) == vector["server_final"]
    assert server.username == "user" and server.complete


@pytest.mark.parametrize("vector", [RFC5802, RFC7677], ids=["RFC5802", "RFC7677"])
def test_the_rfc_example_with_a_wrong_password_is_refused(vector: dict) -> None:
    server = rfc_server(vector, password="pen")
    assert server.server_first(vector["client_first"]) == vector["server_first"]
    with pytest.raises(WrongProof):
        server.server_final(vector["client_final"])
    assert not server.complete


def test_the_stored_keys_are_not_the_password() -> None:
    credential = derive_credential(SCRAM_SHA_256, "pencil")
    text = repr(credential.to_json())
    assert "pencil" not in text
    assert ScramCredential.from_json(credential.to_json()) == credential
    keys = derive_credentials("pencil")
    assert list(keys) == ["SCRAM-SHA-256", "SCRAM-SHA-1"]
    assert keys["SCRAM-SHA-1"].salt != keys["SCRAM-SHA-256"].salt      # a salt each
    assert len(keys["SCRAM-SHA-1"].stored_key) == 20 and len(keys["SCRAM-SHA-256"].stored_key) == 32


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-1", "SCRAM-SHA-256"])
@pytest.mark.parametrize("gs2", ["n,,", "y,,", "n,a=user,"])
def test_an_independent_client_logs_in(mechanism: str, gs2: str) -> None:
    algorithm = SCRAM_SHA_1 if mechanism == "SCRAM-SHA-1" else SCRAM_SHA_256
    credential = derive_credential(algorithm, "s3cret", iterations=1000)
    server = ScramServer(algorithm, {"user": credential}.get, lambda name: credential)
    client = ScramClient(mechanism, "user", "s3cret", gs2_header=gs2)
    client.verify(server.server_final(client.final(server.server_first(client.first()))))


def test_saslname_escapes_comma_and_equals() -> None:
    assert decode_saslname("SCRAM-SHA-1", "a=2Cb=3Dc") == "a,b=c"
    assert encode_saslname("a,b=c") == "a=2Cb=3Dc"
    with pytest.raises(MalformedScram, match="2C or 3D"):
        decode_saslname("SCRAM-SHA-1", "a=41b")
    credential = derive_credential(SCRAM_SHA_256, "pw", iterations=100)
    server = ScramServer(SCRAM_SHA_256, {"o,dd=name": credential}.get, lambda name: credential)
    client = ScramClient("SCRAM-SHA-256", "o,dd=name", "pw")
    assert b"n=o=2Cdd=3Dname," in client.first()
    client.verify(server.server_final(client.final(server.server_first(client.first()))))
    assert server.username == "o,dd=name"


def test_an_unknown_user_gets_a_salt_and_fails_at_the_proof() -> None:
    made_up = derive_credential(SCRAM_SHA_256, "whatever", iterations=4096)
    server = ScramServer(SCRAM_SHA_256, {}.get, lambda name: made_up)
    client = ScramClient("SCRAM-SHA-256", "nobody", "whatever")
    final = client.final(server.server_first(client.first()))     # answered like anyone else
    assert not server.known
    with pytest.raises(WrongProof):
        server.server_final(final)      # even the made-up credential's own password fails


def test_a_replayed_client_final_is_refused() -> None:
    credential = derive_credential(SCRAM_SHA_256, "pw", iterations=100)
    first_server = ScramServer(SCRAM_SHA_256, {"user": credential}.get, lambda n: credential)
    client = ScramClient("SCRAM-SHA-256", "user", "pw", nonce="fixedclientnonce")
    recorded_final = client.final(first_server.server_first(client.first()))
    first_server.server_final(recorded_final)
    # an eavesdropper replays the same client-first and client-final to a new exchange
    replay = ScramServer(SCRAM_SHA_256, {"user": credential}.get, lambda n: credential)
    replay.server_first(client.first())
    with pytest.raises(MalformedScram, match="nonce r=... is not the one of this exchange"):
        replay.server_final(recorded_final)
    # and a finished exchange takes no second client-final
    with pytest.raises(MalformedScram, match="second client-final"):
        first_server.server_final(recorded_final)


def test_a_wrong_proof_is_refused() -> None:
    credential = derive_credential(SCRAM_SHA_1, "right", iterations=100)
    server = ScramServer(SCRAM_SHA_1, {"user": credential}.get, lambda n: credential)
    client = ScramClient("SCRAM-SHA-1", "user", "wrong")
    with pytest.raises(WrongProof) as raised:
        server.server_final(client.final(server.server_first(client.first())))
    assert raised.value.reply_code == 403


@pytest.mark.parametrize(("client_first", "why"), [
    (b"", "is empty"),
    (b"x" * 5000, "longer than"),
    (b"\xff,,n=user,r=abc", "not UTF-8"),
    (b"n", "without a gs2 header"),
    (b"p=tls-unique,,n=user,r=abc", "channel binding is required by the client"),
    (b"q,,n=user,r=abc", "flag must be n, y or p="),
    (b"n,x=user,n=user,r=abc", "authzid must start with 'a='"),
    (b"n,a=other,n=user,r=abc", "may not act as 'other'"),
    (b"n,,m=ext,n=user,r=abc", "mandatory extension"),
    (b"n,,r=abc,n=user", "expected attributes n,r in this order"),
    (b"n,,n=user", "expected attributes n,r"),
    (b"n,,n=,r=abc", "empty user name"),
    (b"n,,n=us=41er,r=abc", "2C or 3D"),
    (b"n,,n=user,r=", "client nonce is empty"),
    (b"n,,n=user,r=ab c", "not printable"),
    (b"n,,n=user,r=abc,junk", "is not an attribute=value"),
])
def test_malformed_client_first_messages_are_refused(client_first: bytes, why: str) -> None:
    credential = derive_credential(SCRAM_SHA_256, "pw", iterations=100)
    server = ScramServer(SCRAM_SHA_256, {"user": credential}.get, lambda n: credential)
    with pytest.raises(MalformedScram) as raised:
        server.server_first(client_first)
    assert why in raised.value.text
    assert raised.value.text.startswith("Login was refused using authentication mechanism"
                                        " SCRAM-SHA-256. Malformed message: ")


@pytest.mark.parametrize(("mangle", "why"), [
    (lambda final: b"", "is empty"),
    (lambda final: final.split(b",p=")[0], "does not end with the proof"),
    (lambda final: final.replace(b"c=biws", b"c=eSws"), "does not repeat the gs2 header"),
    (lambda final: final.replace(b"c=biws", b"c=bi!ws"), "not base64"),
    (lambda final: final.replace(b"c=biws,", b""), "expected attributes c,r"),
    (lambda final: final.replace(b",r=", b",r=x"), "nonce r=... is not the one"),
    (lambda final: final.split(b",p=")[0] + b",p=AAAA", "proof is 3 bytes, not 32"),
    (lambda final: final + b",x=1", "does not end with the proof"),
])
def test_malformed_client_final_messages_are_refused(mangle, why: str) -> None:  # type: ignore[no-untyped-def]
    credential = derive_credential(SCRAM_SHA_256, "pw", iterations=100)
    server = ScramServer(SCRAM_SHA_256, {"user": credential}.get, lambda n: credential)
    client = ScramClient("SCRAM-SHA-256", "user", "pw")
    final = client.final(server.server_first(client.first()))
    with pytest.raises(MalformedScram) as raised:
        server.server_final(mangle(final))
    assert why in raised.value.text
    assert not server.complete


def test_client_final_before_client_first_and_a_second_client_first() -> None:
    credential = derive_credential(SCRAM_SHA_1, "pw", iterations=100)
    server = ScramServer(SCRAM_SHA_1, {"user": credential}.get, lambda n: credential)
    with pytest.raises(MalformedScram, match="before client-first"):
        server.server_final(b"c=biws,r=abc,p=AAAA")
    server.server_first(b"n,,n=user,r=abc")
    with pytest.raises(MalformedScram, match="second client-first"):
        server.server_first(b"n,,n=user,r=abc")


def test_saslprep_maps_and_prohibits() -> None:
    assert saslprep("I\u00adX") == "IX"                  # soft hyphen maps to nothing
    assert saslprep("user") == "user"
    assert saslprep("\u00aa") == "a"                     # NFKC
    assert saslprep("\u2168") == "IX"
    assert saslprep("a\u00a0b") == "a b"                 # non-ASCII space -> space
    with pytest.raises(ValueError, match=r"U\+0007"):
        saslprep("\u0007")
    with pytest.raises(ValueError, match="right-to-left"):
        saslprep("\u0627\u0031")


@pytest.mark.parametrize(("data", "why"), [
    ([], "must be an object"),
    ({"salt": "AA==", "iterations": 0, "storedKey": "AA==", "serverKey": "AA=="}, "iterations"),
    ({"salt": "AA==", "iterations": 4096, "storedKey": "AA=="}, "lacks"),
    ({"salt": "!!", "iterations": 4096, "storedKey": "AA==", "serverKey": "AA=="}, "base64"),
    ({"salt": "", "iterations": 4096, "storedKey": "AA==", "serverKey": "AA=="}, "empty salt"),
])
def test_a_malformed_stored_credential_is_named(data: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        ScramCredential.from_json(data)


@settings(max_examples=300, deadline=None)
@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_any_bytes_are_answered_or_refused_never_crash(first: bytes, final: bytes) -> None:
    credential = derive_credential(SCRAM_SHA_1, "pw", iterations=1)
    server = ScramServer(SCRAM_SHA_1, {"user": credential}.get, lambda n: credential)
    try:
        server.server_first(first)
        server.server_final(final)
    except (MalformedScram, WrongProof):
        pass
    assert not server.complete or server.known


@settings(max_examples=200, deadline=None)
@given(user=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1,
                    max_size=30),
       nonce=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E,
                                            blacklist_characters=","), min_size=1, max_size=40))
def test_any_user_name_and_nonce_round_trip(user: str, nonce: str) -> None:
    credential = derive_credential(SCRAM_SHA_256, "pw", iterations=1)
    server = ScramServer(SCRAM_SHA_256, {user: credential}.get, lambda n: credential)
    client = ScramClient("SCRAM-SHA-256", user, "pw", nonce=nonce)
    client.verify(server.server_final(client.final(server.server_first(client.first()))))
    assert server.username == user
