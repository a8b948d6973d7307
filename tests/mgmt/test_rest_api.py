"""The REST API of a running broker: every category, the query options, every error class."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx
import pytest

from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint

from .conftest import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

VHOST = "queue/default/default"


def unique(kind: str) -> str:
    return f"mgmt.{kind}.{uuid.uuid4().hex[:12]}"


# -- reading every category -------------------------------------------------------------

def test_broker_is_one_object_with_its_statistics(api: Api) -> None:
    broker = api.ok(api.get("broker"))
    assert broker["name"] == "deltamq"
    assert broker["state"] == "ACTIVE"
    assert uuid.UUID(broker["id"])
    stats = broker["statistics"]
    assert stats["uptime"] > 0
    assert {"messagesIn", "bytesIn", "messagesOut", "bytesOut", "messagesInRate"} <= set(stats)
    # statistics are not mixed into the attributes
    assert "uptime" not in broker and "messagesIn" not in broker


def test_ports_list_both_ports_with_their_bound_numbers(api: Api,
                                                        broker_process: DeltaMQProcess) -> None:
    ports = {p["name"]: p for p in api.ok(api.get("port"))}
    assert ports["AMQP"]["port"] == broker_process.amqp_port
    assert ports["HTTP"]["port"] == broker_process.http_port
    assert ports["HTTP"]["type"] == "HTTP" and ports["HTTP"]["protocols"] == ["HTTP"]
    one = api.ok(api.get("port/HTTP"))
    assert one["id"] == ports["HTTP"]["id"]


def test_authentication_provider_and_users_never_show_passwords(api: Api) -> None:
    providers = api.ok(api.get("authenticationprovider"))
    assert [p["name"] for p in providers] == ["passwordFile"]
    assert providers[0]["type"] == "PasswordFile"
    guest = api.ok(api.get("user/passwordFile/guest"))
    assert guest["name"] == "guest"
    assert "password" not in guest
    deep = api.ok(api.get("authenticationprovider/passwordFile", depth=1))
    assert all("password" not in user for user in deep["users"])
    assert "guest" in [user["name"] for user in deep["users"]]


def test_virtual_host_node_and_virtual_host_paths(api: Api) -> None:
    node = api.ok(api.get("virtualhostnode/default"))
    assert node["type"] == "delta"
    vhost = api.ok(api.get("virtualhost/default/default"))
    assert vhost["name"] == "default"
    assert vhost["statistics"]["exchangeCount"] >= 6
    assert api.ok(api.get("virtualhost/default"))[0]["id"] == vhost["id"]
    assert api.ok(api.get("virtualhost"))[0]["id"] == vhost["id"]


def test_exchanges_list_standard_ones_and_show_bindings(api: Api) -> None:
    names = {e["name"] for e in api.ok(api.get("exchange/default/default"))}
    assert {"amq.direct", "amq.fanout", "amq.topic", "amq.headers", "<default>"} <= names
    queue = unique("bound")
    api.ok(api.put(f"{VHOST}/{queue}", {}), 201)
    api.ok(api.post("exchange/default/default/amq.topic/bind",
                    {"destination": queue, "bindingKey": "a.#"}))
    topic = api.ok(api.get("exchange/default/default/amq.topic"))
    assert {"destination": queue, "bindingKey": "a.#", "arguments": {}} in topic["bindings"]
    assert topic["type"] == "topic" and topic["durable"] is True


def test_depth_nests_children_under_plural_category_names(api: Api) -> None:
    queue = unique("nested")
    api.ok(api.put(f"{VHOST}/{queue}", {}), 201)
    broker = api.ok(api.get("broker", depth=3))
    nodes = broker["virtualhostnodes"]
    vhosts = nodes[0]["virtualhosts"]
    assert queue in [q["name"] for q in vhosts[0]["queues"]]
    assert {"ports", "authenticationproviders"} <= set(broker)
    shallow = api.ok(api.get("broker"))
    assert "virtualhostnodes" not in shallow


def test_wildcards_and_id_address_objects(api: Api) -> None:
    queue = unique("wild")
    created = api.ok(api.put(f"{VHOST}/{queue}", {}), 201)
    by_wildcard = api.ok(api.get(f"queue/*/*/{queue}"))
    assert [q["id"] for q in by_wildcard] == [created["id"]]
    by_id = api.ok(api.get("queue", id=created["id"]))
    assert [q["name"] for q in by_id] == [queue]
    assert api.ok(api.get("queue", id=str(uuid.uuid4()))) == []
    # and as a filter on any attribute
    durable = api.ok(api.get("queue/default/default", name=queue, durable="true"))
    assert len(durable) == 1


def test_actuals_oversize_and_inherited_context(api: Api) -> None:
    node_actual = api.ok(api.get("virtualhostnode/default", actuals="true"))
    assert node_actual["storePath"] == "${deltamq.data_dir}/${this:name}"
    node = api.ok(api.get("virtualhostnode/default"))
    assert "${" not in node["storePath"] and node["storePath"].endswith("/default")
    cut = api.ok(api.get("virtualhostnode/default", oversize=5))
    assert cut["storePath"] == node["storePath"][:5] + "..."
    inherited = api.ok(api.get("virtualhostnode/default", excludeInheritedContext="false"))
    assert inherited["context"]["deltamq.http_port"] == "8080"   # conf/config.json's default
    assert api.ok(api.get("virtualhostnode/default"))["context"] == {}


def test_api_v1_is_the_same_api(api: Api) -> None:
    assert api.ok(api.get("/api/v1/broker"))["id"] == api.ok(api.get("broker"))["id"]


# -- creating, updating, deleting -------------------------------------------------------

def test_put_creates_with_location_then_updates(api: Api) -> None:
    name = unique("user")
    response = api.put(f"user/passwordFile/{name}", {"password": "s3cret"})
    created = api.ok(response, 201)
    assert response.headers["location"] == f"/api/latest/user/passwordFile/{name}"
    assert created["name"] == name and "password" not in created
    # the new user can log in over HTTP with that password
    assert httpx.get(api.base + "/api/latest/broker", auth=(name, "s3cret")).status_code == 200
    updated = api.ok(api.put(f"user/passwordFile/{name}", {"virtualHosts": ["default"]}))
    assert updated["virtualHosts"] == ["default"]
    assert api.ok(api.get(f"user/passwordFile/{name}"))["virtualHosts"] == ["default"]
    api.ok(api.delete(f"user/passwordFile/{name}"))
    api.ok(api.get(f"user/passwordFile/{name}"), 404)
    assert httpx.get(api.base + "/api/latest/broker", auth=(name, "s3cret")).status_code == 401


def test_post_to_parent_creates_exchange_and_queue(api: Api) -> None:
    exchange, queue = unique("x"), unique("q")
    response = api.post("exchange/default/default",
                        {"name": exchange, "type": "fanout", "durable": False})
    created = api.ok(response, 201)
    assert response.headers["location"].endswith(f"/exchange/default/default/{exchange}")
    assert created["type"] == "fanout" and created["durable"] is False
    q = api.ok(api.post(VHOST, {"name": queue, "lifetimePolicy": "DELETE_ON_NO_OUTBOUND_LINKS",
                                "arguments": {"x-max-priority": 5}}), 201)
    assert q["autoDelete"] is True and q["type"] == "priority"
    assert q["arguments"] == {"x-max-priority": 5}


def test_update_of_unchanged_representation_is_accepted(api: Api) -> None:
    queue = unique("same")
    shown = api.ok(api.put(f"{VHOST}/{queue}", {}), 201)
    again = api.ok(api.put(f"{VHOST}/{queue}", shown))
    assert again["id"] == shown["id"]
    refused = api.put(f"{VHOST}/{queue}", {**shown, "durable": False})
    assert refused.status_code == 422
    assert "'durable' cannot be changed" in refused.json()["errorMessage"]


def test_broker_attribute_update_is_applied(api: Api) -> None:
    before = api.ok(api.get("broker"))["description"]
    try:
        after = api.ok(api.put("broker", {"description": "managed over REST"}))
        assert after["description"] == "managed over REST"
        assert api.ok(api.get("broker"))["description"] == "managed over REST"
    finally:
        api.ok(api.put("broker", {"description": before}))


def test_delete_by_id(api: Api) -> None:
    queue = unique("byid")
    created = api.ok(api.put(f"{VHOST}/{queue}", {}), 201)
    api.ok(api.delete("queue", id=created["id"]))
    api.ok(api.get(f"{VHOST}/{queue}"), 404)


def test_names_with_slashes_are_percent_encoded(api: Api) -> None:
    queue = unique("a/b")
    encoded = queue.replace("/", "%2F")
    response = api.client.put(f"/api/latest/{VHOST}/{encoded}", json={})
    assert response.status_code == 201, response.text
    assert response.headers["location"] == f"/api/latest/{VHOST}/{encoded}"
    assert api.client.get(f"/api/latest/{VHOST}/{encoded}").json()["name"] == queue


def test_a_star_sent_as_2A_is_a_name_and_delete_takes_no_wildcard(api: Api) -> None:
    other = unique("bystander")
    assert api.client.put(f"/api/latest/{VHOST}/{other}", json={}).status_code == 201
    assert api.client.put(f"/api/latest/{VHOST}/%2A", json={}).status_code == 201
    try:
        star = api.client.get(f"/api/latest/{VHOST}/%2A")
        assert star.status_code == 200 and star.json()["name"] == "*"        # one object, not a list
        refused = api.client.delete(f"/api/latest/{VHOST}/*")
        assert refused.status_code == 422, refused.text
        assert "wildcard" in refused.json()["errorMessage"]
        assert api.client.delete(f"/api/latest/{VHOST}/%2A").status_code == 200
        names = {q["name"] for q in api.ok(api.get(VHOST))}
        assert "*" not in names and other in names                         # only the star went
    finally:
        api.client.delete(f"/api/latest/{VHOST}/%2A")
        api.client.delete(f"/api/latest/{VHOST}/{other}")


# -- errors --------------------------------------------------------------------------------

def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"errorMessage"}
    return str(body["errorMessage"])


def test_404_for_unknown_objects_categories_versions_and_operations(api: Api) -> None:
    assert "nope" in error(api.get(f"{VHOST}/nope"), 404)
    assert "unknown category 'widget'" in error(api.get("widget"), 404)
    assert "unknown API version" in error(api.get("/api/v99/broker"), 404)
    assert "no operation 'explode'" in error(api.post("virtualhost/default/default/explode"), 404)
    error(api.delete(f"{VHOST}/nope"), 404)
    assert api.ok(api.get("queue/nonode")) == []
    error(api.post("queue/nonode/default", {"name": "q"}), 404)


def test_409_for_an_existing_name_and_for_an_object_in_use(api: Api) -> None:
    queue = unique("dup")
    api.ok(api.post(VHOST, {"name": queue}), 201)
    assert "already has a Queue named" in error(api.post(VHOST, {"name": queue}), 409)
    assert "used by port" in error(api.delete("authenticationprovider/passwordFile"), 409)


def test_422_names_the_invalid_attribute_and_why(api: Api) -> None:
    message = error(api.post(VHOST, {"name": unique("bad"), "durable": "perhaps"}), 422)
    assert "'durable'" in message and "true or false" in message
    message = error(api.post("exchange/default/default", {"name": unique("x"), "type": "fan"}), 422)
    assert "'type'" in message and "fanout" in message
    message = error(api.post(VHOST, {"name": unique("bad"), "colour": "red"}), 422)
    assert "unknown attribute 'colour'" in message
    message = error(api.post(VHOST, {"durable": True}), 422)
    assert "'name' is mandatory" in message
    message = error(api.post(VHOST, {"name": "amq.mine"}), 422)
    assert "'name'" in message and "amq." in message
    message = error(api.put("broker", {"maxChannels": 0}), 422)
    assert "'maxChannels'" in message
    message = error(api.post(VHOST, {"name": unique("bad"),
                                     "arguments": {"x-max-length": "lots"}}), 422)
    assert "x-max-length" in message
    message = error(api.post(VHOST, {"name": unique("bad"), "type": "priority"}), 422)
    assert "'type'" in message
    assert "cannot be changed" in error(api.put("broker", {"name": "other"}), 422)


def test_400_for_malformed_json_and_bad_query_parameters(api: Api) -> None:
    response = api.client.put(f"/api/latest/{VHOST}/{unique('j')}", content=b"{not json",
                              headers={"content-type": "application/json"})
    assert "malformed JSON" in error(response, 400)
    assert "'depth'" in error(api.get("broker", depth="deep"), 400)
    assert "'actuals'" in error(api.get("broker", actuals="maybe"), 400)
    assert "JSON object" in error(api.client.post(f"/api/latest/{VHOST}", json=[1, 2]), 422)


def test_401_without_or_with_wrong_credentials(api: Api) -> None:
    anonymous = httpx.get(api.base + "/api/latest/broker")
    error(anonymous, 401)
    assert anonymous.headers["www-authenticate"].startswith("Basic")
    error(httpx.get(api.base + "/api/latest/broker", auth=("guest", "wrong")), 401)
    error(httpx.get(api.base + "/api/latest/broker", headers={"authorization": "Basic !!"}), 401)
    error(httpx.get(api.base + "/metrics"), 401)


def test_403_for_a_user_limited_to_another_virtual_host(api: Api, amqp: BrokerEndpoint) -> None:
    name = unique("limited")
    api.ok(api.put(f"user/passwordFile/{name}", {"password": "pw", "virtualHosts": ["elsewhere"]}),
           201)
    limited = Api(int(api.base.rsplit(":", 1)[1]), auth=(name, "pw"))
    client = unique("hidden")
    try:
        # a connection is a child of its port, yet belongs to the virtual host it opened
        with amqp.pika(client_properties={"connection_name": client}):
            mine = [c for c in api.ok(api.get("connection")) if c["clientId"] == client]
            assert len(mine) == 1 and mine[0]["virtualHost"] == "default"
            assert client not in [c["clientId"] for c in limited.ok(limited.get("connection"))]
            path = f"connection/{mine[0]['port']}/{quote(mine[0]['name'], safe='')}"
            error(limited.get(path), 403)
            error(limited.delete(path), 403)
            error(limited.get("virtualhost/default/default/getConnections"), 403)
        queue = unique("guarded")
        api.ok(api.put(f"{VHOST}/{queue}", {}), 201)
        assert "may not" in error(limited.get(f"{VHOST}/{queue}"), 403)
        error(limited.delete(f"{VHOST}/{queue}"), 403)
        error(limited.post(VHOST, {"name": unique("q")}), 403)
        error(limited.put("broker", {"description": "x"}), 403)
        # what it may not see is left out of lists; broker-wide objects stay readable
        assert queue not in [q["name"] for q in limited.ok(limited.get("queue"))]
        assert limited.ok(limited.get("broker"))["name"] == "deltamq"
    finally:
        limited.close()
        api.delete(f"user/passwordFile/{name}")


def test_session_cookie_from_login_then_logout(api: Api) -> None:
    with httpx.Client(base_url=api.base) as browser:
        error(browser.get("/api/latest/broker"), 401)
        error(browser.get("/service/session"), 401)
        error(browser.post("/service/login", json={"username": "guest", "password": "no"}), 401)
        login = browser.post("/service/login", json={"username": "guest", "password": "guest"})
        assert login.status_code == 200
        assert set(login.json()) == {"user", "csrfToken", "administrator"}
        assert login.json()["administrator"] is True
        assert login.json()["user"] == "guest" and len(login.json()["csrfToken"]) >= 32
        assert "httponly" in login.headers["set-cookie"].lower()
        assert browser.get("/api/latest/broker").status_code == 200
        assert browser.get("/service/session").json() == login.json()
        browser.get("/service/logout")
        error(browser.get("/api/latest/broker"), 401)
        error(browser.get("/service/session"), 401)


def test_cookie_session_changes_need_the_csrf_token(api: Api) -> None:
    queue = unique("csrf")
    with httpx.Client(base_url=api.base) as browser:
        token = browser.post("/service/login", json={"username": "guest",
                                                     "password": "guest"}).json()["csrfToken"]
        # the cookie alone (what a forged cross-site form sends) changes nothing
        refused = browser.put(f"/api/latest/{VHOST}/{queue}", json={})
        message = error(refused, 403)
        assert "session cookie DELTAMQ_SESSION" in message and "X-DeltaMQ-CSRF" in message
        assert refused.headers["x-deltamq-csrf"] == "required"
        assert "token" in error(browser.put(f"/api/latest/{VHOST}/{queue}", json={},
                                            headers={"X-DeltaMQ-CSRF": "guessed"}), 403)
        error(browser.post("/api/latest/virtualhost/default/default/publishMessage",
                           json={"message": {"address": queue}}), 403)
        error(browser.delete("/api/latest/queue/default/default/x"), 403)
        error(api.get(f"{VHOST}/{queue}"), 404)
        # reading needs no token
        assert browser.get(f"/api/latest/{VHOST}").status_code == 200
        # with the token: works
        with_token = {"X-DeltaMQ-CSRF": token}
        assert browser.put(f"/api/latest/{VHOST}/{queue}", json={},
                           headers=with_token).status_code == 201
        assert browser.delete(f"/api/latest/{VHOST}/{queue}", headers=with_token).status_code \
            == 200
        # a page of another site cannot make the browser do it, token or not
        assert "another site" in error(browser.put(
            f"/api/latest/{VHOST}/{queue}", json={},
            headers={**with_token, "Sec-Fetch-Site": "cross-site"}), 403)
        # Basic credentials need no token, even next to the cookie
        assert browser.put(f"/api/latest/{VHOST}/{queue}", json={},
                           auth=("guest", "guest")).status_code == 201
    api.ok(api.delete(f"{VHOST}/{queue}"))
    # curl-style Basic requests: no token, no cookie
    api.ok(api.put(f"{VHOST}/{queue}", {}), 201)
    api.ok(api.delete(f"{VHOST}/{queue}"))
