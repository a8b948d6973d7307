"""/metrics over a model of our own: names, the place for figures other parts of the broker
add (a Broker statistic such as an alarm, a collector such as failed logins), visibility."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from broker.model import SystemConfig
from broker.model.attributes import DerivedAttribute
from broker.model.broker import Broker
from broker.model.configured_object import ConfiguredObject
from mgmt import metrics

from .conftest import memory_broker


@pytest.fixture
def system(tmp_path: Path) -> SystemConfig:
    return memory_broker(tmp_path, "metrics")


def families(broker: ConfiguredObject, **options: Any) -> dict[str, Metric]:
    text = metrics.exposition(broker, **options).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(found: dict[str, Metric], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in found[name].samples}


def test_queue_figures_carry_rabbitmq_names_and_labels(system: SystemConfig) -> None:
    namespace: Any = system.broker.virtual_hosts[0].namespace
    queue = namespace.declare_queue("orders")[0]
    queue.enqueued_messages, queue.enqueued_bytes = 7, 70
    found = families(system.broker)
    labels = (("queue", "orders"), ("vhost", "vh"))
    assert samples(found, "deltamq_queue_messages_published")[labels] == 7
    assert samples(found, "deltamq_queue_published_bytes")[labels] == 70
    assert found["deltamq_queue_messages_published"].type == "counter"
    assert samples(found, "deltamq_queue_messages")[labels] == 0
    assert samples(found, "deltamq_queues")[()] == 1
    assert "deltamq_broker_uptime" not in found and "deltamq_uptime_seconds" in found
    assert "deltamq_process_pid" not in found                  # left out: process_* say more
    # REST gives the loop's lag in milliseconds; the metric is in seconds, the base unit
    system.broker.loop_lag.max_lag = 0.25
    assert samples(families(system.broker), "deltamq_event_loop_lag_max_seconds")[()] == 0.25


def test_a_statistic_added_to_the_broker_is_exported_without_more_work(
        system: SystemConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new Broker statistic appears under a derived name, and NAMES can rename it."""
    fan: DerivedAttribute[bool] = DerivedAttribute(
        bool, lambda broker: True, "The fan is on", name="fanRunning", statistic=True)
    monkeypatch.setattr(Broker, "fan_running", fan, raising=False)
    found = families(system.broker)
    assert found["deltamq_fan_running"].type == "gauge"
    assert samples(found, "deltamq_fan_running") == {(): 1.0}
    monkeypatch.setitem(metrics.NAMES, ("Broker", "fanRunning"), metrics.Name("deltamq_fan_on"))
    renamed = families(system.broker)
    assert samples(renamed, "deltamq_fan_on") == {(): 1.0} and "deltamq_fan_running" not in renamed


def test_the_resource_alarms_and_failed_logins_carry_rabbitmq_like_names(system: SystemConfig) -> None:
    found = families(system.broker)
    for name in ("deltamq_alarms_memory_used_watermark", "deltamq_alarms_free_disk_space_watermark",
                 "deltamq_memory_used_bytes", "deltamq_disk_space_available_bytes",
                 "deltamq_auth_attempts_failed", "deltamq_auth_attempts_throttled"):
        assert name in found, name
    assert samples(found, "deltamq_alarms_memory_used_watermark") == {(): 0.0}
    assert found["deltamq_auth_attempts_failed"].type == "counter"
    assert "deltamq_memory_alarm" not in found and "deltamq_resident_memory_size" not in found


class FailedLogins:
    """A collector as the HTTP port's authenticator could hand to Management.metric_collectors."""

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("deltamq_auth_attempts_failed", "Failed logins",
                                     labels=("protocol",))
        family.add_metric(["http"], 3)
        yield family


def test_extra_collectors_and_visibility(system: SystemConfig) -> None:
    namespace: Any = system.broker.virtual_hosts[0].namespace
    namespace.declare_queue("shown")
    namespace.declare_queue("hidden")
    found = families(system.broker, extra=[FailedLogins()],
                     visible=lambda obj: obj.name != "hidden")
    assert samples(found, "deltamq_auth_attempts_failed")[(("protocol", "http"),)] == 3
    queues = {dict(labels)["queue"] for labels in samples(found, "deltamq_queue_messages_ready")}
    assert queues == {"shown"}
    assert samples(found, "deltamq_queues")[()] == 1
