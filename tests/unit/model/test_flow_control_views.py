"""Flow control and limits as management sees them: queue attributes, the resume limit from
context, the broker's connection limits and its channel/frame bounds from context."""

from __future__ import annotations

import json
from pathlib import Path

from broker.messaging.flow_control import PublisherFlow
from broker.messaging.message import Message
from broker.model import SystemConfig, load_system_config

from .conftest import minimal_config


def _system(tmp_path: Path, context: dict[str, str] | None = None,
            node_context: dict[str, str] | None = None) -> SystemConfig:
    config = minimal_config(virtualhostnodes=[{"name": "node", "type": "memory",
                                               "context": node_context or {}}])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_system_config(str(path), {"deltamq.data_dir": str(tmp_path / "data"), **(context or {})})


def test_the_queue_view_shows_the_policy_its_maximums_and_whether_it_blocks(tmp_path: Path) -> None:
    vhost = _system(tmp_path).broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    ns = vhost.namespace
    ns.declare_queue("flow", arguments={"overflowPolicy": "PRODUCER_FLOW_CONTROL",
                                        "maximumQueueDepthBytes": 3})
    ns.declare_queue("ring", arguments={"x-max-length": 7})
    ns.declare_queue("plain")
    views = {name: vhost.child("Queue", name) for name in ("flow", "ring", "plain")}
    attrs = {name: view.attributes() for name, view in views.items() if view is not None}
    assert [(a["overflowPolicy"], a["maximumQueueDepthMessages"], a["maximumQueueDepthBytes"])
            for a in attrs.values()] == [("PRODUCER_FLOW_CONTROL", -1, 3), ("RING", 7, -1), ("NONE", -1, -1)]
    assert attrs["flow"]["queueFlowStopped"] is False and attrs["flow"]["blockedPublishers"] == 0
    message = Message(exchange="", routing_key="flow", body=b"four", arrival=0.0)
    queues = ns.route("", message)
    queues[0].enqueue(message)
    ns.flow.published(PublisherFlow(), queues)
    flow = views["flow"]
    assert flow is not None
    assert flow.attributes()["queueFlowStopped"] is True and flow.attributes()["blockedPublishers"] == 1


def test_the_resume_limit_and_rate_limits_come_from_the_virtual_host_context(tmp_path: Path) -> None:
    vhost = _system(tmp_path, {"deltamq.publish_rate_limit_per_virtual_host": "5000"},
                    node_context={"queue.queueFlowResumeLimit": "55",
                                  "deltamq.publish_rate_limit_per_connection": "200"}
                    ).broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    flow = vhost.namespace.flow
    assert flow.resume_percent == 55.0
    assert (flow.rates.per_publisher, flow.rates.per_virtual_host) == (200.0, 5000.0)


def test_channel_and_frame_bounds_come_from_context(tmp_path: Path) -> None:
    broker = _system(tmp_path, {"deltamq.channel_max": "16", "deltamq.frame_max": "8192"}).broker
    assert (broker.max_channels, broker.max_frame_size) == (16, 8192)
    (tmp_path / "defaults").mkdir()
    defaults = _system(tmp_path / "defaults").broker
    assert (defaults.max_channels, defaults.max_frame_size) == (2047, 131072)


def test_the_broker_counts_connections_per_user_and_refusals(tmp_path: Path) -> None:
    broker = _system(tmp_path).broker
    limits = broker.connection_limits
    connection = object()
    limits.opened(connection, "AMQP", "guest")
    statistics = broker.attributes()
    assert statistics["connectionsPerUser"] == {"guest": 1} and statistics["connectionsRefused"] == 0
    limits.closed(connection)
    assert broker.attributes()["connectionsPerUser"] == {}
