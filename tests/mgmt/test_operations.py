"""Operations through real HTTP: queue messages, bindings, publishing, closing connections.

Messages are put in with pika and taken out with pika, so every check is
what a client sees, not what the API says about itself.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import uuid
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions
import pytest
from deltalake import DeltaTable

from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint
from tests.waiting import wait_until

from .conftest import Api, start_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

VHOST = "queue/default/default"


def unique(kind: str) -> str:
    return f"mgmt.{kind}.{uuid.uuid4().hex[:12]}"


def publish(amqp: BrokerEndpoint, routing_key: str, bodies: list[bytes], persistent: bool = False,
            exchange: str = "", **properties: Any) -> None:
    """Publish ``bodies`` with confirms (to a queue by name through the default exchange)."""
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish(exchange, routing_key, body, pika.BasicProperties(
                delivery_mode=2 if persistent else 1, **properties))


def drain(amqp: BrokerEndpoint, queue: str) -> list[bytes]:
    got: list[bytes] = []
    with amqp.pika() as connection:
        channel = connection.channel()
        while True:
            method, _, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            got.append(body)


def new_queue(api: Api, durable: bool = False) -> str:
    name = unique("q")
    api.ok(api.put(f"{VHOST}/{name}", {"durable": durable}), 201)
    return name


def ids(api: Api, queue: str) -> list[int]:
    return [info["id"] for info in api.ok(api.get(f"{VHOST}/{queue}/getMessageInfo"))]


def test_clear_queue(api: Api, amqp: BrokerEndpoint) -> None:
    queue = new_queue(api)
    publish(amqp, queue, [b"1", b"2", b"3"])
    assert api.ok(api.post(f"{VHOST}/{queue}/clearQueue")) == 3
    assert drain(amqp, queue) == []
    assert api.ok(api.get(f"{VHOST}/{queue}"))["statistics"]["queueDepthMessages"] == 0


def test_get_message_info_in_delivery_order_with_positions_and_headers(
        api: Api, amqp: BrokerEndpoint) -> None:
    queue = new_queue(api)
    publish(amqp, queue, [b"a", b"bb", b"ccc"], content_type="text/plain", message_id="m",
            headers={"n": 7})
    infos = api.ok(api.get(f"{VHOST}/{queue}/getMessageInfo", includeHeaders="true"))
    assert [i["size"] for i in infos] == [1, 2, 3]
    assert infos[0]["contentType"] == "text/plain" and infos[0]["messageId"] == "m"
    assert infos[0]["headers"] == {"n": 7} and infos[0]["state"] == "Available"
    assert infos[0]["messageFormat"] == "amqp-0-9-1"         # published over 0-9-1
    assert len({i["id"] for i in infos}) == 3
    window = api.ok(api.post(f"{VHOST}/{queue}/getMessageInfo", {"first": 1, "last": 1}))
    assert [i["size"] for i in window] == [2] and "headers" not in window[0]
    # browsing takes nothing: a client still gets all three, in order
    assert drain(amqp, queue) == [b"a", b"bb", b"ccc"]


def test_get_message_content(api: Api, amqp: BrokerEndpoint) -> None:
    queue = new_queue(api)
    publish(amqp, queue, [b'{"k": [1, 2]}', b"\x00\x01binary"], content_type="application/json")
    first, second = ids(api, queue)
    raw = api.get(f"{VHOST}/{queue}/getMessageContent", messageId=second)
    assert raw.status_code == 200 and raw.content == b"\x00\x01binary"
    assert raw.headers["content-type"].startswith("application/json")
    limited = api.get(f"{VHOST}/{queue}/getMessageContent", messageId=second, limit=2)
    assert limited.content == b"\x00\x01"
    parsed = api.ok(api.post(f"{VHOST}/{queue}/getMessageContent",
                             {"messageId": first, "returnJson": True}))
    assert parsed == {"k": [1, 2]}
    missing = api.get(f"{VHOST}/{queue}/getMessageContent", messageId=10 ** 12)
    assert missing.status_code == 404
    not_json = api.post(f"{VHOST}/{queue}/getMessageContent",
                        {"messageId": second, "returnJson": True})
    assert not_json.status_code == 422
    # an operation that changes the broker cannot be run with GET
    assert api.get(f"{VHOST}/{queue}/clearQueue").status_code == 405


def test_move_messages_by_id_keeps_order_and_leaves_the_rest(api: Api,
                                                             amqp: BrokerEndpoint) -> None:
    source, target = new_queue(api), new_queue(api)
    publish(amqp, source, [b"0", b"1", b"2", b"3", b"4"])
    numbers = ids(api, source)
    moved = api.ok(api.post(f"{VHOST}/{source}/moveMessages",
                            {"destination": target, "messageIds": [numbers[3], numbers[1]]}))
    assert sorted(moved) == sorted([numbers[1], numbers[3]])
    assert drain(amqp, target) == [b"1", b"3"]
    assert drain(amqp, source) == [b"0", b"2", b"4"]


def test_copy_and_delete_messages_with_limit(api: Api, amqp: BrokerEndpoint) -> None:
    source, target = new_queue(api), new_queue(api)
    publish(amqp, source, [b"a", b"b", b"c"])
    copied = api.ok(api.post(f"{VHOST}/{source}/copyMessages",
                             {"destination": target, "limit": 2}))
    assert len(copied) == 2
    deleted = api.ok(api.post(f"{VHOST}/{source}/deleteMessages", {"limit": 1}))
    assert len(deleted) == 1
    assert drain(amqp, target) == [b"a", b"b"]
    assert drain(amqp, source) == [b"b", b"c"]


def test_move_copy_and_delete_take_a_jms_selector(api: Api, amqp: BrokerEndpoint) -> None:
    source, target = new_queue(api), new_queue(api)
    for n in range(6):
        publish(amqp, source, [str(n).encode()], headers={"n": n})
    moved = api.ok(api.post(f"{VHOST}/{source}/moveMessages",
                            {"destination": target, "selector": "n % 2 = 0"}))
    assert len(moved) == 3
    copied = api.ok(api.post(f"{VHOST}/{source}/copyMessages",
                             {"destination": target, "selector": "n > 2", "limit": 1}))
    assert len(copied) == 1
    deleted = api.ok(api.post(f"{VHOST}/{source}/deleteMessages", {"selector": "n = 1"}))
    assert len(deleted) == 1
    assert drain(amqp, target) == [b"0", b"2", b"4", b"3"]
    assert drain(amqp, source) == [b"3", b"5"]


def test_bad_operation_parameters_are_422(api: Api) -> None:
    queue = new_queue(api)
    response = api.post(f"{VHOST}/{queue}/moveMessages", {"destination": queue})
    assert response.status_code == 422 and "another queue" in response.json()["errorMessage"]
    response = api.post(f"{VHOST}/{queue}/moveMessages", {})
    assert response.status_code == 422 and "'destination' is mandatory" in response.text
    response = api.post(f"{VHOST}/{queue}/deleteMessages", {"selector": "a ="})
    assert response.status_code == 422 and "'selector'" in response.text and "position 3" in response.text
    response = api.post(f"{VHOST}/{queue}/deleteMessages", {"messageIds": "x,y"})
    assert response.status_code == 422 and "'messageIds'" in response.text
    response = api.post(f"{VHOST}/{queue}/clearQueue", {"force": True})
    assert response.status_code == 422 and "unknown parameter 'force'" in response.text


def test_bind_and_unbind_route_what_clients_publish(api: Api, amqp: BrokerEndpoint) -> None:
    queue = new_queue(api)
    key = unique("key")
    assert api.ok(api.post("exchange/default/default/amq.direct/bind",
                           {"destination": queue, "bindingKey": key})) is True
    assert api.ok(api.post("exchange/default/default/amq.direct/bind",
                           {"destination": queue, "bindingKey": key})) is False
    publish(amqp, key, [b"routed"], exchange="amq.direct")
    assert drain(amqp, queue) == [b"routed"]
    assert api.ok(api.post("exchange/default/default/amq.direct/unbind",
                           {"destination": queue, "bindingKey": key})) is True
    publish(amqp, key, [b"lost"], exchange="amq.direct")
    assert drain(amqp, queue) == []
    missing = api.post("exchange/default/default/amq.direct/bind", {"destination": "nowhere"})
    assert missing.status_code == 422 and "'destination'" in missing.text


def test_publish_message_reaches_clients_with_its_properties(api: Api,
                                                             amqp: BrokerEndpoint) -> None:
    queue = new_queue(api, durable=True)
    reached = api.ok(api.post("virtualhost/default/default/publishMessage", {"message": {
        "address": queue, "content": "hello", "mimeType": "text/plain", "persistent": True,
        "headers": {"h": "v"}, "messageId": "id-1", "priority": 3}}))
    assert reached == 1
    binary = base64.b64encode(b"\xff\x00").decode()
    api.ok(api.post("virtualhost/default/default/publishMessage", {"message": {
        "address": "", "routingKey": queue, "content": binary,
        "contentTransferEncoding": "base64"}}))
    with amqp.pika() as connection:
        channel = connection.channel()
        method, props, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"hello"
        assert props.content_type == "text/plain" and props.delivery_mode == 2
        assert props.headers == {"h": "v"} and props.message_id == "id-1" and props.priority == 3
        assert channel.basic_get(queue, auto_ack=True)[2] == b"\xff\x00"
    bad = api.post("virtualhost/default/default/publishMessage",
                   {"message": {"address": "no-such-thing"}})
    assert bad.status_code == 422 and "'address'" in bad.text
    bad = api.post("virtualhost/default/default/publishMessage", {"message": {"colour": 1}})
    assert bad.status_code == 422 and "'colour'" in bad.text


def test_connection_session_consumer_are_listed_and_delete_closes_the_connection(
        api: Api, amqp: BrokerEndpoint) -> None:
    queue = new_queue(api)
    tag = unique("ctag")
    connection = pika.BlockingConnection(amqp.pika_params(
        client_properties={"connection_name": tag}))
    try:
        channel = connection.channel()
        channel.basic_consume(queue, lambda *a: None, consumer_tag=tag)
        # the virtual host lists the connections that opened it (Broker-J's getConnections)
        found = wait_until(lambda: [c for c in api.ok(api.get(
            "virtualhost/default/default/getConnections")) if c["clientId"] == tag],
            what="the connection")
        name = found[0]["name"]
        assert re.fullmatch(r"\[\d+\] 127\.0\.0\.1:\d+", name), name
        assert found[0]["principal"] == "guest" and found[0]["statistics"]["sessionCount"] == 1
        assert found[0]["virtualHost"] == "default" and found[0]["port"] == "AMQP"
        vhost = api.ok(api.get("virtualhost/default/default"))
        assert vhost["statistics"]["connectionCount"] >= 1
        # a connection is a child of its port, a session of its connection
        path = f"AMQP/{quote(name, safe='')}"
        assert api.ok(api.get(f"connection/{path}"))["id"] == found[0]["id"]
        assert name in [c["name"] for c in api.ok(api.get("connection/AMQP"))]
        sessions = api.ok(api.get(f"session/{path}"))
        assert [s["channelId"] for s in sessions] == [channel.channel_number]
        assert sessions[0]["statistics"]["consumerCount"] == 1
        # a consumer is a child of its queue, and names its session and connection
        consumers = api.ok(api.get(f"consumer/default/default/{queue}"))
        assert [(c["name"], c["queue"], c["session"], c["connection"]) for c in consumers] == \
            [(tag, queue, str(channel.channel_number), name)]
        assert api.ok(api.get(f"consumer/default/default/{queue}/{tag}"))["id"] == \
            consumers[0]["id"]
        assert api.ok(api.get(f"{VHOST}/{queue}"))["statistics"]["consumerCount"] == 1
        api.ok(api.delete(f"connection/{path}"))
        with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
            connection.process_data_events(time_limit=5)
            connection.process_data_events(time_limit=5)
        assert closed.value.reply_code == 320
        wait_until(lambda: api.get(f"connection/{path}").status_code == 404,
                   what="the connection gone from the model")
        assert api.ok(api.get(f"consumer/default/default/{queue}")) == []
        assert tag not in [c["clientId"] for c in api.ok(api.get(
            "virtualhost/default/default/getConnections"))]
    finally:
        if connection.is_open:
            connection.close()


def test_deleting_a_virtual_host_node_closes_the_connections_of_its_virtual_host(
        api: Api, amqp: BrokerEndpoint) -> None:
    node = unique("node").replace(".", "-")
    api.ok(api.put(f"virtualhostnode/{node}", {"type": "memory"}), 201)
    connection = pika.BlockingConnection(amqp.pika_params(virtual_host=node))
    try:
        wait_until(lambda: api.ok(api.get(f"virtualhost/{node}/{node}"))["statistics"][
            "connectionCount"] == 1, what="the connection counted by its virtual host")
        api.ok(api.delete(f"virtualhostnode/{node}"))
        with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
            connection.process_data_events(time_limit=5)
            connection.process_data_events(time_limit=5)
        assert closed.value.reply_code == 320
        wait_until(lambda: all(c["virtualHost"] != node for c in api.ok(api.get("connection"))),
                   what="the connection gone from its port")
    finally:
        if connection.is_open:
            connection.close()


# -- atomicity and durability (a broker of their own) ---------------------------------------

def journal_rows(data_dir: str) -> list[dict[str, Any]]:
    table = DeltaTable(os.path.join(data_dir, "default", "journal"))
    return table.to_pyarrow_table(
        columns=["event", "queue", "message_id", "tx_id", "outcome"]).to_pylist()


def test_move_is_one_journal_transaction_durable_before_the_answer() -> None:
    first = start_broker()
    second: DeltaMQProcess | None = None
    try:
        api = Api(first.http_port)
        amqp = BrokerEndpoint(host="127.0.0.1", port=first.amqp_port)
        source, target = new_queue(api, durable=True), new_queue(api, durable=True)
        publish(amqp, source, [b"a", b"b", b"c", b"d"], persistent=True)
        numbers = ids(api, source)
        moved = api.ok(api.post(f"{VHOST}/{source}/moveMessages",
                                {"destination": target, "messageIds": numbers[1:3]}))
        assert len(moved) == 2
        data_dir = str(first.dir / "data")
        # the answer came after the commit: the move is in the table already
        rows = journal_rows(data_dir)
        move = [r for r in rows if (r["queue"] == source and r["outcome"] == "purged")
                or (r["queue"] == target and r["event"] == "enqueue")]
        assert len(move) == 4
        assert {r["tx_id"] for r in move} != {None} and len({r["tx_id"] for r in move}) == 1
        api.close()
        # and it survives kill -9
        assert first.proc is not None
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=10)
        second = DeltaMQProcess()
        second.command[second.command.index("--data-dir") + 1] = data_dir
        second.start()
        amqp = BrokerEndpoint(host="127.0.0.1", port=second.amqp_port)
        assert drain(amqp, target) == [b"b", b"c"]
        assert drain(amqp, source) == [b"a", b"d"]
    finally:
        if second is not None:
            second.stop()
        first.stop()
