"""Ports created over REST listen at once; deleted ones stop and close their connections."""

from __future__ import annotations

import os
import signal
import socket
import uuid
from collections.abc import Iterator

import httpx
import pika
import pika.exceptions
import pytest

from tests.integration.conftest import DeltaMQProcess
from tests.integration.support import BrokerEndpoint
from tests.waiting import wait_until

from .conftest import Api, start_broker, wait_for_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PROVIDER = "passwordFile"


def unique(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def create_port(api: Api, name: str, **attributes: object) -> dict[str, object]:
    body = {"type": "AMQP", "port": 0, "authenticationProvider": PROVIDER, **attributes}
    created = api.ok(api.put(f"port/{name}", body), 201)
    assert isinstance(created, dict)
    return created


@pytest.fixture
def cleanup(api: Api) -> Iterator[list[str]]:
    """Names of ports to delete after the test, whatever happened."""
    names: list[str] = []
    yield names
    for name in names:
        api.delete(f"port/{name}")


def test_amqp_port_created_over_rest_listens_at_once(api: Api, cleanup: list[str]) -> None:
    name, queue = unique("amqp"), unique("q")
    cleanup.append(name)
    created = create_port(api, name)
    bound = created["boundPort"]
    assert isinstance(bound, int) and bound > 0 and created["port"] == 0
    assert created["state"] == "ACTIVE" and created["pendingRestart"] == ""
    endpoint = BrokerEndpoint(host="127.0.0.1", port=bound)
    with endpoint.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=True)
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"through the new port")
        _, _, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"through the new port"
        shown = api.ok(api.get(f"port/{name}"))
        assert shown["boundPort"] == bound and shown["statistics"]["connectionCount"] == 1


def test_deleting_an_amqp_port_closes_its_connections_and_refuses_new_ones(
        api: Api, amqp: BrokerEndpoint, cleanup: list[str]) -> None:
    name = unique("amqp")
    cleanup.append(name)
    bound = create_port(api, name)["boundPort"]
    assert isinstance(bound, int)
    connection = BrokerEndpoint(host="127.0.0.1", port=bound).pika()
    bystander = amqp.pika()                     # on the broker's own AMQP port
    try:
        connection.channel()
        api.ok(api.delete(f"port/{name}"))
        with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
            for _ in range(20):
                connection.process_data_events(time_limit=0.5)
        assert closed.value.reply_code == 320
        assert refused(bound)
        api.ok(api.get(f"port/{name}"), 404)
        assert bystander.is_open
        bystander.channel().queue_declare("", exclusive=True)      # still served
    finally:
        for each in (connection, bystander):
            if each.is_open:
                each.close()


def test_http_port_created_over_rest_serves_management_until_deleted(
        api: Api, cleanup: list[str]) -> None:
    name = unique("http")
    cleanup.append(name)
    created = create_port(api, name, type="HTTP")
    bound = created["boundPort"]
    assert isinstance(bound, int) and bound > 0 and created["protocols"] == ["HTTP"]
    other = Api(bound)
    try:
        broker = other.ok(other.get("broker"))
        assert broker["name"] == api.ok(api.get("broker"))["name"]
        # deleted through itself: the answer still comes, then the port stops
        other.ok(other.delete(f"port/{name}"))
    finally:
        other.close()
    wait_until(lambda: refused(bound), 10.0, what="the deleted HTTP port to stop listening")
    api.ok(api.get(f"port/{name}"), 404)
    assert api.ok(api.get("broker"))["state"] == "ACTIVE"     # the broker's own port serves on


def test_a_port_number_in_use_is_refused_and_nothing_is_created(
        api: Api, broker_process: DeltaMQProcess) -> None:
    with socket.create_server(("0.0.0.0", 0)) as taken:
        number = taken.getsockname()[1]
        for kind in ("AMQP", "HTTP"):
            name = unique(kind.lower())
            response = api.put(f"port/{name}", {"type": kind, "port": number,
                                                "authenticationProvider": PROVIDER})
            assert response.status_code == 422, response.text
            message = response.json()["errorMessage"]
            assert f"cannot listen on *:{number}" in message and "in use" in message
            api.ok(api.get(f"port/{name}"), 404)
    # the number of a port of the broker: refused before binding
    response = api.post("port", {"name": unique("amqp"), "type": "AMQP",
                                 "port": broker_process.amqp_port,
                                 "authenticationProvider": PROVIDER})
    assert response.status_code == 422 and "already used by Port 'AMQP'" in response.text


def test_a_port_naming_an_unimplemented_protocol_is_refused(api: Api, cleanup: list[str]) -> None:
    implemented = "this broker implements AMQP_0_8, AMQP_0_9, AMQP_0_9_1, AMQP_1_0"
    name = unique("amqp")
    response = api.put(f"port/{name}", {"type": "AMQP", "port": 0, "authenticationProvider": PROVIDER,
                                        "protocols": ["AMQP_0_9_1", "AMQP_0_10"]})
    assert response.status_code == 422, response.text
    message = response.json()["errorMessage"]
    assert "'protocols' names AMQP_0_10, which is not implemented" in message and implemented in message
    api.ok(api.get(f"port/{name}"), 404)
    cleanup.append(name)
    created = create_port(api, name, protocols=["AMQP_0_9_1"])
    assert created["protocols"] == ["AMQP_0_9_1"]
    response = api.put(f"port/{name}", {"protocols": ["AMQP_0_10"]})
    assert response.status_code == 422 and implemented in response.json()["errorMessage"]
    assert api.ok(api.get(f"port/{name}"))["protocols"] == ["AMQP_0_9_1"]     # unchanged
    with BrokerEndpoint(host="127.0.0.1", port=int(created["boundPort"])).pika() as connection:
        assert connection.is_open


def test_a_new_port_number_takes_effect_after_a_restart(api: Api, cleanup: list[str]) -> None:
    name = unique("amqp")
    cleanup.append(name)
    bound = create_port(api, name)["boundPort"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        wanted = probe.getsockname()[1]
    updated = api.ok(api.put(f"port/{name}", {"port": wanted}))
    assert updated["port"] == wanted and updated["boundPort"] == bound
    assert updated["pendingRestart"] == (f"'port' {wanted} takes effect after a broker restart;"
                                         f" listening on *:{bound} until then")
    with BrokerEndpoint(host="127.0.0.1", port=int(bound)).pika() as connection:   # as before
        assert connection.is_open
    reverted = api.ok(api.put(f"port/{name}", {"port": 0}))
    assert reverted["pendingRestart"] == ""


def stop_keeping_data(process: DeltaMQProcess) -> None:
    """SIGTERM the broker and wait, leaving its data directory in place."""
    assert process.proc is not None
    os.killpg(process.proc.pid, signal.SIGTERM)
    process.proc.wait(timeout=20)


def test_a_port_created_over_rest_listens_again_after_a_restart() -> None:
    process = start_broker()
    try:
        api = Api(process.http_port)
        name = unique("durable")
        create_port(api, name)
        api.close()
        stop_keeping_data(process)
        process.start()
        wait_for_http(process)
        api = Api(process.http_port)
        try:
            shown = api.ok(api.get(f"port/{name}"))
            bound = shown["boundPort"]
            assert isinstance(bound, int) and bound > 0
            with BrokerEndpoint(host="127.0.0.1", port=bound).pika() as connection:
                assert connection.is_open
        finally:
            api.close()
    finally:
        process.stop()


def test_ports_of_the_configuration_listen_again_after_a_restart() -> None:
    process = start_broker()
    try:
        stop_keeping_data(process)
        process.start()
        wait_for_http(process)
        api = Api(process.http_port)
        try:
            ports = {p["name"]: p for p in api.ok(api.get("port"))}
            assert ports["AMQP"]["boundPort"] == process.amqp_port
            assert ports["HTTP"]["boundPort"] == process.http_port
        finally:
            api.close()
        assert httpx.get(f"http://127.0.0.1:{process.http_port}/metrics").status_code == 401
    finally:
        process.stop()
