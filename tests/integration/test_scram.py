"""SCRAM-SHA-1 and SCRAM-SHA-256 against `deltamq serve`, started as a user starts it.

AMQP 1.0: Qpid JMS (unmodified, from Maven Central) logs in with each mechanism, chosen with
its own URI option ``amqp.saslMechanisms``.  python-qpid-proton's wheel has no Cyrus SASL:
its built-in SASL speaks PLAIN, ANONYMOUS and EXTERNAL only, so it picks PLAIN from the
broker's list (checked below).  AMQP 0-9-1: none of pika, py-amqp, aio-pika (aiormq) or
amqplib speaks SCRAM, so the 0-9-1 exchange is driven over a real socket by this suite's
own client (tests/scram_client.py, written from RFC 5802).
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pika
import pytest
from pamqp import commands

from tests.amqp1_0_clients.drivers import Outcome, compile_jms, jms_fetched, run_jms
from tests.mgmt.conftest import start_broker
from tests.scram_client import ScramClient
from tests.waiting import wait_until

from .conftest import DeltaMQProcess
from .support import PROTOCOL_HEADER_0_9_1, RawAMQP

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-1"]
needs_jms = pytest.mark.skipif(not jms_fetched(), reason="Qpid JMS is not fetched")


@pytest.fixture(scope="module")
def broker() -> Iterator[DeltaMQProcess]:
    proc = start_broker()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return compile_jms(tmp_path_factory.mktemp("jms"))


def rest(broker: DeltaMQProcess) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{broker.http_port}", auth=("guest", "guest"),
                        timeout=10)


def create_user(broker: DeltaMQProcess, password: str) -> str:
    """A user created over REST, as an operator creates one."""
    name = f"scram-{uuid.uuid4().hex[:8]}"
    with rest(broker) as api:
        response = api.put(f"/api/latest/user/passwordFile/{name}", json={"password": password})
        assert response.status_code == 201, response.text
    return name


def failed_logins(broker: DeltaMQProcess) -> float:
    with rest(broker) as api:
        text = api.get("/metrics").text
    found = re.search(r"^deltamq_auth_attempts_failed_total(?:\{[^}]*\})? ([0-9.e+]+)$", text,
                      re.MULTILINE)
    assert found, text[:2000]
    return float(found.group(1))


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def scram_0_9_1(broker: DeltaMQProcess, mechanism: str, user: str, password: str) -> Any:
    """An RFC 5802 login over connection.start-ok / secure / secure-ok; the final frame."""
    raw = RawAMQP("127.0.0.1", broker.amqp_port)
    client = ScramClient(mechanism, user, password)
    raw.send(PROTOCOL_HEADER_0_9_1)
    start = raw.expect(commands.Connection.Start)
    assert _bytes(start.mechanisms).split()[:2] == [b"SCRAM-SHA-256", b"SCRAM-SHA-1"]
    raw.send_method(0, commands.Connection.StartOk(
        client_properties={"capabilities": {"authentication_failure_close": True}},
        mechanism=mechanism, response=client.first().decode()))
    server_first = _bytes(raw.expect(commands.Connection.Secure).challenge)
    raw.send_method(0, commands.Connection.SecureOk(response=client.final(server_first).decode()))
    answer = raw.read_frame()
    assert answer is not None
    if isinstance(answer[1], commands.Connection.Close):
        raw.close()
        return answer[1]
    assert isinstance(answer[1], commands.Connection.Secure), answer
    client.verify(_bytes(answer[1].challenge))
    raw.send_method(0, commands.Connection.SecureOk(response=""))
    tune = raw.expect(commands.Connection.Tune)
    raw.send_method(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                  frame_max=tune.frame_max))
    raw.send_method(0, commands.Connection.Open(virtual_host="/"))
    opened = raw.expect(commands.Connection.OpenOk)
    raw.close()
    return opened


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_0_9_1_scram_login_over_a_socket(broker: DeltaMQProcess, mechanism: str) -> None:
    user = create_user(broker, "p4ss,word=")
    assert isinstance(scram_0_9_1(broker, mechanism, user, "p4ss,word="),
                      commands.Connection.OpenOk)


def test_0_9_1_scram_wrong_password_is_refused_and_counted(broker: DeltaMQProcess) -> None:
    user = create_user(broker, "right")
    before = failed_logins(broker)
    close = scram_0_9_1(broker, "SCRAM-SHA-256", user, "wrong")
    assert close.reply_code == 403
    assert failed_logins(broker) == before + 1


def test_a_user_from_before_scram_is_told_in_the_log(broker: DeltaMQProcess) -> None:
    from broker.security.passwords import PasswordFile, UserEntry, hash_password

    file = PasswordFile(broker.dir / "data" / "passwords")
    users = file.load()
    users["legacy"] = UserEntry(hash_password("old"))       # as files were written before
    file.save(users)
    offset = broker.log_size()
    close = scram_0_9_1(broker, "SCRAM-SHA-1", "legacy", "old")
    assert close.reply_code == 403
    wait_until(lambda: "must be set again" in broker.log_since(offset), 10,
               what="the log line telling to set the password again")
    assert "user 'legacy' has no SCRAM-SHA-1 keys" in broker.log_since(offset)


def _jms(java: list[str], broker: DeltaMQProcess, mechanism: str, user: str,
         password: str) -> Outcome:
    queue = f"scram.{uuid.uuid4().hex[:8]}"
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as c:
        c.channel().queue_declare(queue)
    return run_jms(java, broker.amqp_port, "send-receive", queue,
                   "--count", "3", "--user", user, "--password", password,
                   "--sasl-mechanisms", mechanism)


@needs_jms
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_qpid_jms_logs_in_with_scram(broker: DeltaMQProcess, java: list[str],
                                     mechanism: str) -> None:
    user = create_user(broker, "jms-s3cret")
    out = _jms(java, broker, mechanism, user, "jms-s3cret")
    assert out.ok, f"{out.result}\n{out.stderr[-3000:]}"
    assert out.result["received"] == 3


@needs_jms
def test_qpid_jms_scram_wrong_password_is_refused_and_counted(broker: DeltaMQProcess,
                                                              java: list[str]) -> None:
    user = create_user(broker, "right")
    before = failed_logins(broker)
    out = _jms(java, broker, "SCRAM-SHA-256", user, "wrong")
    assert not out.ok
    assert "SASL" in out.result.get("error", "") or "authentic" in out.result.get("error", "").lower()
    assert failed_logins(broker) == before + 1


def test_python_qpid_proton_has_no_scram_and_picks_plain(broker: DeltaMQProcess) -> None:
    proton = pytest.importorskip("proton")
    from proton.utils import BlockingConnection

    if proton.SASL.extended():
        pytest.skip("this proton has Cyrus SASL; the PyPI wheel has not")
    from broker.security.passwords import PasswordFile, UserEntry, hash_password

    # a user without SCRAM keys logs in only if the client chose PLAIN
    file = PasswordFile(broker.dir / "data" / "passwords")
    users = file.load()
    users["proton-user"] = UserEntry(hash_password("pr0ton"))
    file.save(users)
    url = f"amqp://proton-user:pr0ton@127.0.0.1:{broker.amqp_port}"
    BlockingConnection(url, timeout=20).close()
    # told to use SCRAM only, it has nothing to log in with
    with pytest.raises(Exception):
        BlockingConnection(url, timeout=20, allowed_mechs="SCRAM-SHA-256").close()


def test_the_password_file_holds_no_password(broker: DeltaMQProcess) -> None:
    create_user(broker, "n0t-in-the-file")
    text = Path(broker.dir / "data" / "passwords").read_text()
    assert "n0t-in-the-file" not in text and '"storedKey"' in text


def test_plain_offered_only_where_configured(broker: DeltaMQProcess) -> None:
    """secureOnlyMechanisms: a plain TCP port stops offering PLAIN and AMQPLAIN; pika, which
    speaks nothing else, is refused, and SCRAM goes on working."""
    def offered() -> list[bytes]:
        with RawAMQP("127.0.0.1", broker.amqp_port) as raw:
            raw.send(PROTOCOL_HEADER_0_9_1)
            return _bytes(raw.expect(commands.Connection.Start).mechanisms).split()

    user = create_user(broker, "tcp-only")
    with rest(broker) as api:
        response = api.put("/api/latest/authenticationprovider/passwordFile",
                           json={"secureOnlyMechanisms": ["PLAIN", "AMQPLAIN"]})
        assert response.status_code == 200, response.text
    try:
        assert offered() == [b"SCRAM-SHA-256", b"SCRAM-SHA-1"]
        with pytest.raises(pika.exceptions.AMQPError):
            pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", broker.amqp_port, credentials=pika.PlainCredentials(user, "tcp-only")))
        assert isinstance(scram_0_9_1(broker, "SCRAM-SHA-1", user, "tcp-only"),
                          commands.Connection.OpenOk)
    finally:
        with rest(broker) as api:
            api.put("/api/latest/authenticationprovider/passwordFile",
                    json={"secureOnlyMechanisms": []})
    assert offered() == [b"SCRAM-SHA-256", b"SCRAM-SHA-1", b"PLAIN", b"AMQPLAIN"]
