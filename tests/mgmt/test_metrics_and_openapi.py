"""/metrics for Prometheus and the OpenAPI description at /apidocs."""

from __future__ import annotations

import re
import uuid

import pika
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from broker import __version__
from tests.integration.support import BrokerEndpoint
from tests.waiting import wait_until

from .conftest import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def scrape(api: Api) -> dict[str, Metric]:
    """/metrics parsed by prometheus_client's own parser, by family name."""
    response = api.client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def value(families: dict[str, Metric], sample_name: str, **labels: str) -> float:
    """The one sample of ``sample_name`` with exactly these labels."""
    family_name = (sample_name if sample_name in families
                   else re.sub(r"_(total|bucket|count|sum)$", "", sample_name))
    found = [s.value for s in families[family_name].samples
             if s.name == sample_name and s.labels == labels]
    assert len(found) == 1, (sample_name, labels, families[family_name].samples[:5])
    return float(found[0])


def test_metrics_use_rabbitmq_names_units_types_and_labels(api: Api,
                                                           amqp: BrokerEndpoint) -> None:
    queue = f"mgmt.metrics.{uuid.uuid4().hex[:8]}"
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"12345")
        channel.basic_publish("", queue, b"678")
        families = scrape(api)                              # while this connection is open
    labels = {"vhost": "default", "queue": queue}
    kinds = {name: family.type for name, family in families.items()}
    for name in ("deltamq_queue_messages_ready", "deltamq_queue_messages_unacked",
                 "deltamq_queue_messages", "deltamq_queue_messages_ready_bytes",
                 "deltamq_queue_consumers", "deltamq_connections", "deltamq_channels",
                 "deltamq_consumers", "deltamq_queues", "deltamq_uptime_seconds",
                 "deltamq_vhost_messages_ready", "deltamq_port_connections",
                 "process_resident_memory_bytes", "process_open_fds", "process_max_fds"):
        assert kinds.get(name) == "gauge", (name, kinds.get(name))
    for name in ("deltamq_queue_messages_published", "deltamq_queue_published_bytes",
                 "deltamq_queue_messages_delivered", "deltamq_messages_published",
                 "deltamq_vhost_messages_published", "deltamq_journal_commits",
                 "deltamq_journal_written_bytes", "process_cpu_seconds"):
        assert kinds.get(name) == "counter", (name, kinds.get(name))
    for name in ("deltamq_journal_commit_seconds", "deltamq_journal_commit_rows"):
        assert kinds.get(name) == "histogram", (name, kinds.get(name))
    assert kinds.get("deltamq_build_info") == "gauge"              # an info, in text 0.0.4
    assert not [name for name in kinds if "queue_queue" in name or "_count_" in name
                or name.endswith("_count")]
    assert value(families, "deltamq_queue_messages_ready", **labels) == 2
    assert value(families, "deltamq_queue_messages_ready_bytes", **labels) == 8
    assert value(families, "deltamq_queue_messages_published_total", **labels) == 2
    assert value(families, "deltamq_queue_published_bytes_total", **labels) == 8
    assert value(families, "deltamq_connections") >= 1
    assert value(families, "deltamq_channels") >= 1
    assert value(families, "deltamq_vhost_connections", vhost="default") >= 1
    assert value(families, "deltamq_port_connections", port="AMQP") >= 1
    assert value(families, "deltamq_uptime_seconds") > 0
    assert value(families, "process_resident_memory_bytes") > 10 * 1024 * 1024
    assert value(families, "process_open_fds") > 0
    assert value(families, "deltamq_build_info", version=__version__) == 1
    buckets = [s for s in families["deltamq_journal_commit_seconds"].samples
               if s.name.endswith("_bucket") and s.labels["vhost"] == "default"]
    assert buckets[-1].labels["le"] == "+Inf"
    assert [s.value for s in buckets] == sorted(s.value for s in buckets)   # cumulative


def test_metric_values_follow_traffic(api: Api, amqp: BrokerEndpoint) -> None:
    queue = f"mgmt.metrics.{uuid.uuid4().hex[:8]}"
    labels = {"vhost": "default", "queue": queue}
    before = scrape(api)
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        for number in range(5):
            channel.basic_publish("", queue, b"x" * 100,
                                  pika.BasicProperties(delivery_mode=2, message_id=str(number)))
        channel.basic_qos(prefetch_count=2)
        channel.basic_consume(queue, lambda *args: None)
        wait_until(lambda: value(scrape(api), "deltamq_queue_messages_unacked", **labels) == 2,
                   what="two unacknowledged deliveries")
        during = scrape(api)
        consumers = value(during, "deltamq_consumers")
    after = wait_until(lambda: (lambda f: f if value(f, "deltamq_queue_messages_unacked",
                                                     **labels) == 0 else None)(scrape(api)),
                       what="the closed consumer's deliveries requeued")
    assert value(during, "deltamq_queue_messages_ready", **labels) == 3
    assert value(during, "deltamq_queue_messages", **labels) == 5
    assert value(during, "deltamq_queue_consumers", **labels) == 1
    assert consumers >= 1
    assert value(during, "deltamq_queue_messages_delivered_total", **labels) == 2
    published = "deltamq_messages_published_total"
    assert value(during, published) - value(before, published) >= 5
    # the consumer's connection closed: its two messages are ready again
    assert value(after, "deltamq_queue_messages_unacked", **labels) == 0
    assert value(after, "deltamq_queue_messages_ready", **labels) == 5
    # five persistent messages, confirmed: journal commits of at least five enqueue rows
    vhost = {"vhost": "default"}
    commits = value(during, "deltamq_journal_commits_total", **vhost)
    assert commits > value(before, "deltamq_journal_commits_total", **vhost)
    assert value(during, "deltamq_journal_commit_seconds_count", **vhost) == commits
    assert (value(during, "deltamq_journal_commit_seconds_sum", **vhost)
            > value(before, "deltamq_journal_commit_seconds_sum", **vhost))
    assert (value(during, "deltamq_journal_commit_rows_sum", **vhost)
            - value(before, "deltamq_journal_commit_rows_sum", **vhost)) >= 5
    assert (value(during, "deltamq_journal_written_bytes_total", **vhost)
            - value(before, "deltamq_journal_written_bytes_total", **vhost)) >= 500
    assert value(during, "deltamq_journal_pending_rows", **vhost) >= 0
    assert value(after, "process_cpu_seconds_total") >= value(before, "process_cpu_seconds_total")


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
