"""/metrics for Prometheus and the OpenAPI description at /apidocs."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.integration.support import BrokerEndpoint

from .conftest import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_metrics_exposition_has_broker_vhost_and_queue_families(api: Api,
                                                                amqp: BrokerEndpoint) -> None:
    queue = f"mgmt.metrics.{uuid.uuid4().hex[:8]}"
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"12345")
        channel.basic_publish("", queue, b"678")
        response = api.client.get("/metrics")               # while this connection is open
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    labels = f'virtualhostnode="default",virtualhost="default",queue="{queue}"'
    assert f"deltamq_queue_queue_depth_messages{{{labels}}} 2\n" in text
    assert f"deltamq_queue_queue_depth_bytes{{{labels}}} 8\n" in text
    assert f"deltamq_queue_messages_in_total{{{labels}}} 2\n" in text
    assert "# TYPE deltamq_queue_messages_in_total counter" in text
    assert "# TYPE deltamq_queue_queue_depth_messages gauge" in text
    assert re.search(r"^deltamq_broker_uptime [0-9.]+$", text, re.M)
    assert re.search(r'^deltamq_virtualhost_messages_in_total\{virtualhostnode="default",'
                     r'virtualhost="default"\} [1-9][0-9]*$', text, re.M)
    # connections are counted by the virtual host they opened (they are children of ports)
    assert re.search(r'^deltamq_virtualhost_connection_count\{virtualhostnode="default",'
                     r'virtualhost="default"\} [1-9][0-9]*$', text, re.M)
    # every sample line is NAME{labels} VALUE
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r"[a-z_]+(\{[^}]*\})? -?[0-9.e+]+", line), line


def test_openapi_describes_generated_paths_operations_and_schemas(api: Api) -> None:
    response = api.client.get("/apidocs/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    paths = spec["paths"]
    queue_path = "/api/latest/queue/{virtualhostnode}/{virtualhost}/{queue}"
    assert set(paths[queue_path]) >= {"get", "put", "post", "delete"}
    move = paths[queue_path + "/moveMessages"]["post"]
    body = move["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["destination"]
    assert body["properties"]["messageIds"]["type"] == "array"
    assert "getMessageInfo" in " ".join(paths)
    assert "get" in paths[queue_path + "/getMessageInfo"]           # read-only: GET too
    assert "post" in paths["/api/latest/virtualhost/{virtualhostnode}/{virtualhost}/publishMessage"]
    assert "/api/latest/user/{authenticationprovider}/{user}" in paths
    # runtime objects where Broker-J 7 has them
    assert "/api/latest/connection/{port}/{connection}" in paths
    assert "/api/latest/session/{port}/{connection}/{session}" in paths
    assert "/api/latest/consumer/{virtualhostnode}/{virtualhost}/{queue}/{consumer}" in paths
    get_connections = paths["/api/latest/virtualhost/{virtualhostnode}/{virtualhost}"
                            "/getConnections"]
    assert {"get", "post"} <= set(get_connections)
    answer = get_connections["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer["items"] == {"$ref": "#/components/schemas/Connection"}
    assert "virtualHost" in spec["components"]["schemas"]["Connection"]["properties"]
    schemas = spec["components"]["schemas"]
    queue = schemas["Queue"]["properties"]
    assert queue["statistics"]["properties"]["queueDepthMessages"]["type"] == "integer"
    assert "messagesInRate" in queue["statistics"]["properties"]
    assert queue["durable"]["readOnly"] is True
    assert schemas["User"]["properties"]["password"]["writeOnly"] is True
    port = schemas["Port"]["properties"]
    assert "HTTP" in port["protocols"]["items"]["enum"]
    schemes = spec["components"]["securitySchemes"]
    assert schemes["basic"]["scheme"] == "basic"
    assert schemes["session"] == {"type": "apiKey", "in": "cookie", "name": "DELTAMQ_SESSION",
                                  "description": schemes["session"]["description"]}
    assert schemes["csrf"]["in"] == "header" and schemes["csrf"]["name"] == "X-DeltaMQ-CSRF"
    assert spec["security"] == [{"basic": []}, {"session": [], "csrf": []}]
    assert "get" in paths["/service/session"]
    page = api.client.get("/apidocs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # rendered on the server from the same document, with nothing loaded from elsewhere
    assert "/api/latest/queue/{virtualhostnode}/{virtualhost}/{queue}/moveMessages" in page.text
    assert "http://" not in page.text and "https://" not in page.text and "<script" not in page.text
