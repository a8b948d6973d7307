"""Who may manage what, where management may make the broker write, and login throttling.

Against ``deltamq serve`` as a user starts it: administrators (``guest`` of a
new data directory) manage the broker; other users their virtual hosts and
their own password; names and paths never lead out of the data directory;
failed logins block their source or user for a while, over REST and AMQP.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint, pika_reply
from tests.waiting import wait_until

from .conftest import Api, start_broker

VHOST = "queue/default/default"


def unique(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    message: str = response.json()["errorMessage"]
    return message


class User(Api):
    """A user with no virtual host limit who is not an administrator."""

    def __init__(self, http_port: int, name: str) -> None:
        super().__init__(http_port, auth=(name, "pw"))
        self.name = name


@pytest.fixture
def user(api: Api) -> Iterator[User]:
    name = unique("operator")
    api.ok(api.put(f"user/passwordFile/{name}", {"password": "pw"}), 201)
    client = User(int(api.base.rsplit(":", 1)[1]), name)
    yield client
    client.close()
    api.delete(f"user/passwordFile/{name}")


def test_guest_of_a_new_data_directory_is_an_administrator(api: Api) -> None:
    guest = api.ok(api.get("user/passwordFile/guest"))
    assert guest["administrator"] is True


def test_a_user_who_is_not_an_administrator_manages_no_broker_level_object(
        api: Api, user: User) -> None:
    refusals = [
        user.put(f"port/{unique('port')}", {"type": "AMQP", "port": 0,
                                              "authenticationProvider": "passwordFile"}),
        user.put(f"virtualhostnode/{unique('node')}", {"type": "memory"}),
        user.put(f"authenticationprovider/{unique('auth')}", {"type": "Anonymous"}),
        user.put(f"user/passwordFile/{unique('user')}", {"password": "x"}),
        user.put("user/passwordFile/guest", {"password": "taken"}),
        user.delete("user/passwordFile/guest"),
        user.put("broker", {"description": "mine now"}),
        user.put("virtualhost/default/default", {"maxConnections": 1}),
        user.delete("virtualhost/default/default"),
    ]
    for response in refusals:
        assert "may not" in error(response, 403)
    assert api.ok(api.get("broker"))["description"] != "mine now"
    assert api.ok(api.get("virtualhost/default/default"))["maxConnections"] == -1
    assert httpx.get(api.base + "/api/latest/broker", auth=("guest", "guest")).status_code == 200
    # reading the broker is allowed; of the users, only itself
    assert user.ok(user.get("broker"))["name"] == "deltamq"
    assert user.ok(user.get("port"))
    assert [u["name"] for u in user.ok(user.get("user"))] == [user.name]
    error(user.get("user/passwordFile/guest"), 403)
    # what the console asks to know what to offer
    assert user.ok(user.get("/service/session"))["administrator"] is False
    assert api.ok(api.get("/service/session"))["administrator"] is True


def test_a_user_manages_the_queues_of_its_virtual_hosts_and_its_own_password(
        api: Api, user: User) -> None:
    me = user.name
    queue = unique("mine")
    user.ok(user.put(f"{VHOST}/{queue}", {"durable": True}), 201)
    reached = user.ok(user.post("virtualhost/default/default/publishMessage",
                                {"message": {"address": queue, "content": "hi"}}))
    assert reached == 1
    assert user.ok(user.post(f"{VHOST}/{queue}/clearQueue")) == 1
    user.ok(user.delete(f"{VHOST}/{queue}"))
    # itself: the password, not its role nor its virtual hosts
    assert "administrator" in error(user.put(f"user/passwordFile/{me}", {"administrator": True}),
                                    403)
    error(user.put(f"user/passwordFile/{me}", {"virtualHosts": ["default"]}), 403)
    user.ok(user.put(f"user/passwordFile/{me}", {"password": "new"}))
    assert httpx.get(api.base + "/api/latest/broker", auth=(me, "new")).status_code == 200
    assert httpx.get(api.base + "/api/latest/broker", auth=(me, "pw")).status_code == 401
    user.client.auth = (me, "new")
    # once an administrator makes it one, it may
    api.ok(api.put(f"user/passwordFile/{me}", {"administrator": True}))
    node = unique("node")
    user.ok(user.put(f"virtualhostnode/{node}", {"type": "memory"}), 201)
    user.ok(user.delete(f"virtualhostnode/{node}"))


# -- paths -----------------------------------------------------------------------------------

def created_files(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def test_names_and_paths_never_lead_out_of_the_data_directory(
        api: Api, broker_process: DeltaMQProcess) -> None:
    data_dir = broker_process.dir / "data"
    escaped = unique("f4_escaped")
    outside = Path("/tmp") / escaped
    siblings = set(broker_process.dir.iterdir())
    for name in (f"..%2F..%2F{escaped}", f"..%2F{escaped}", "%2E%2E", f"a%5C{escaped}",
                 f"x%00{escaped}", f"x%1B{escaped}"):
        message = error(api.put(f"virtualhostnode/{name}", {"type": "delta"}), 422)
        assert "attribute 'name'" in message, message
    message = error(api.put(f"virtualhostnode/{escaped}", {"type": "delta",
                                                            "storePath": str(outside)}), 422)
    assert "attribute 'storePath'" in message and "outside the data directory" in message
    message = error(api.put(f"virtualhostnode/{escaped}", {
        "type": "delta", "storePath": "${deltamq.data_dir}/../" + escaped}), 422)
    assert "attribute 'storePath'" in message
    message = error(api.put(f"authenticationprovider/{escaped}", {
        "type": "PasswordFile", "path": str(outside / "passwords")}), 422)
    assert "attribute 'path'" in message
    error(api.put("authenticationprovider/passwordFile", {"path": str(outside / "pw")}), 422)
    # nor through a context variable management may set
    error(api.put("broker", {"context": {"deltamq.data_dir": str(outside)}}), 422)
    assert "deltamq.data_dir" not in api.ok(api.get("broker"))["context"]
    error(api.get(f"virtualhostnode/{escaped}"), 404)
    assert not outside.exists() and not (broker_process.dir / escaped).exists()
    assert set(broker_process.dir.iterdir()) == siblings
    assert not any(escaped in str(path) for path in created_files(data_dir))
    # inside the data directory: fine
    inside = str(data_dir / "nodes" / escaped)
    created = api.ok(api.put(f"virtualhostnode/{escaped}", {"type": "delta",
                                                             "storePath": inside}), 201)
    assert created["storePath"] == inside and Path(inside).is_dir()
    api.ok(api.delete(f"virtualhostnode/{escaped}"))


# -- login throttling ---------------------------------------------------------------------

BLOCK = 2.0


@pytest.fixture(scope="module")
def throttled() -> Iterator[DeltaMQProcess]:
    """A broker of its own with small limits: 3 failures per user, 4 per address."""
    process = start_broker({"deltamq.login.max_failures": "3",
                            "deltamq.login.max_source_failures": "4",
                            "deltamq.login.block": f"{BLOCK}"})
    yield process
    process.stop()


def from_address(process: DeltaMQProcess, address: str,
                 auth: tuple[str, str] | None) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{process.http_port}", auth=auth, timeout=30,
                        transport=httpx.HTTPTransport(local_address=address))


def broker_get(process: DeltaMQProcess, auth: tuple[str, str],
               address: str = "127.0.0.1") -> httpx.Response:
    with from_address(process, address, auth) as client:
        return client.get("/api/latest/broker")


def test_wrong_passwords_block_the_user_even_with_the_right_one_until_the_block_passes(
        throttled: DeltaMQProcess) -> None:
    admin = Api(throttled.http_port)
    try:
        name = unique("victim")
        admin.ok(admin.put(f"user/passwordFile/{name}", {"password": "right"}), 201)
        for _ in range(3):
            error(broker_get(throttled, (name, "wrong")), 401)
        started = time.monotonic()
        refused = broker_get(throttled, (name, "right"))
        assert "Too many failed logins for user" in error(refused, 429)
        assert 1 <= int(refused.headers["retry-after"]) <= BLOCK
        # from another address too (it is the user that is blocked) ...
        error(broker_get(throttled, (name, "right"), "127.0.0.2"), 429)
        # ... and over AMQP: 403 ACCESS_REFUSED, as for a wrong password
        amqp = BrokerEndpoint(host="127.0.0.1", port=throttled.amqp_port, user=name,
                              password="right")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
            amqp.pika()
        code, text = pika_reply(info.value)
        assert code == 403 and "Too many failed logins" in text
        # another user, from the same address, is not affected
        assert broker_get(throttled, ("guest", "guest")).status_code == 200
        # once the block has passed, the right password works again
        answer = wait_until(lambda: (a := broker_get(throttled, (name, "right"))).status_code != 429 and a,
                            BLOCK + 10, interval=0.2, what="the login block to pass")
        assert answer.status_code == 200 and time.monotonic() - started >= BLOCK - 0.5
        statistics: dict[str, Any] = admin.ok(admin.get("broker"))["statistics"]
        assert statistics["loginFailures"] >= 3 and statistics["loginsThrottled"] >= 3
        metrics = admin.get("/metrics").text
        assert "deltamq_auth_attempts_failed_total" in metrics
        assert "deltamq_auth_attempts_throttled_total" in metrics
    finally:
        admin.close()


def test_failures_across_users_block_the_address(throttled: DeltaMQProcess) -> None:
    admin = Api(throttled.http_port)
    try:
        name = unique("bystander")
        admin.ok(admin.put(f"user/passwordFile/{name}", {"password": "right"}), 201)
        for _ in range(4):                          # a different unknown user each time
            error(broker_get(throttled, (unique("guess"), "x"), "127.0.0.3"), 401)
        assert "for address 127.0.0.3" in error(broker_get(throttled, (name, "right"),
                                                           "127.0.0.3"), 429)
        # the same user from another address: fine
        assert broker_get(throttled, (name, "right"), "127.0.0.4").status_code == 200
        # the console's login form is throttled alike
        with from_address(throttled, "127.0.0.3", None) as browser:
            login = browser.post("/service/login", json={"username": name, "password": "right"})
            assert login.status_code == 429 and "retry-after" in login.headers
    finally:
        admin.close()
