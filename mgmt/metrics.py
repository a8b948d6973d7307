"""``/metrics``: the broker, its virtual hosts, queues, journals and process, for Prometheus.

Written by ``prometheus_client`` (text exposition format 0.0.4) from collectors
built per scrape, so each user sees the objects they may read.  Names follow
RabbitMQ's Prometheus plugin where it has one, and Prometheus' conventions:
base units in the name (``_bytes``, ``_seconds``), counters ending in
``_total``, the kind of object as a prefix, labels naming it (RabbitMQ's
``vhost`` and ``queue``, and ``port``):

- broker-wide: ``deltamq_connections``, ``deltamq_channels``,
  ``deltamq_consumers``, ``deltamq_queues``, ``deltamq_messages_published_total``,
  ``deltamq_messages_delivered_total`` (and ``..._bytes_total``),
  ``deltamq_uptime_seconds``, ``deltamq_build_info``;
- per virtual host ``deltamq_vhost_*``, per queue ``deltamq_queue_*``
  (``messages_ready``, ``messages_unacked``, ``messages``, ``consumers``, ...),
  per port ``deltamq_port_connections``;
- per journal (virtual hosts of ``delta`` nodes) ``deltamq_journal_*``: commit
  latency and rows per commit as histograms, commits, failed commits, bytes
  written, rows pending, the age of the commit in flight and of the last
  checkpoint;
- the process: ``process_*`` (resident memory, CPU seconds, open and maximum
  descriptors, start time), ``python_*`` (garbage collector, version).

A statistic added to the model (a derived attribute marked ``statistic`` or
``counter``) is exported without further work, as
``deltamq_<prefix>_<statistic in snake case>`` (``_total`` for counters);
:data:`NAMES` gives it a better name, or leaves it out.  Figures that are not
statistics of a model object (say, failed logins counted by the HTTP port's
authenticator) come as an extra collector handed to :func:`exposition`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, \
    HistogramMetricFamily, InfoMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from broker import __version__
from broker.model.attributes import DerivedAttribute, derived_attributes
from broker.model.configured_object import ConfiguredObject

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

Visible = Callable[[ConfiguredObject], bool]

_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake_case(name: str) -> str:
    return _BOUNDARY.sub("_", name).lower()


@dataclass(frozen=True, slots=True)
class Name:
    """How one statistic of the model is exported: its metric name (no ``_total``)
    and the factor that turns the statistic into the metric's base unit."""

    metric: str
    scale: float = 1.0


#: metric names of the model's statistics, by (category, statistic); None: not exported
NAMES: dict[tuple[str, str], Name | None] = {
    ("Broker", "uptime"): Name("deltamq_uptime_seconds", 0.001),    # REST: milliseconds
    ("Broker", "processPid"): None,                                   # process_* say more
    ("Broker", "connectionCount"): Name("deltamq_connections"),
    ("Broker", "messagesIn"): Name("deltamq_messages_published"),
    ("Broker", "bytesIn"): Name("deltamq_published_bytes"),
    ("Broker", "messagesOut"): Name("deltamq_messages_delivered"),
    ("Broker", "bytesOut"): Name("deltamq_delivered_bytes"),
    # the resource alarms (RabbitMQ: rabbitmq_alarms_*, rabbitmq_disk_space_available_bytes)
    ("Broker", "memoryUsed"): Name("deltamq_memory_used_bytes"),
    ("Broker", "residentMemorySize"): None,                           # process_resident_memory_bytes
    ("Broker", "memoryAlarm"): Name("deltamq_alarms_memory_used_watermark"),
    ("Broker", "diskFree"): Name("deltamq_disk_space_available_bytes"),
    ("Broker", "diskAlarm"): Name("deltamq_alarms_free_disk_space_watermark"),
    # failed logins (RabbitMQ: rabbitmq_auth_attempts_failed_total)
    ("Broker", "loginFailures"): Name("deltamq_auth_attempts_failed"),
    ("Broker", "loginsThrottled"): Name("deltamq_auth_attempts_throttled"),
    ("Broker", "eventLoopLagMax"): Name("deltamq_event_loop_lag_max_seconds", 0.001),  # REST: ms
    ("VirtualHost", "connectionCount"): Name("deltamq_vhost_connections"),
    ("VirtualHost", "queueCount"): Name("deltamq_vhost_queues"),
    ("VirtualHost", "exchangeCount"): Name("deltamq_vhost_exchanges"),
    ("VirtualHost", "totalDepthOfQueuesMessages"): Name("deltamq_vhost_messages_ready"),
    ("VirtualHost", "totalDepthOfQueuesBytes"): Name("deltamq_vhost_messages_ready_bytes"),
    ("VirtualHost", "messagesIn"): Name("deltamq_vhost_messages_published"),
    ("VirtualHost", "bytesIn"): Name("deltamq_vhost_published_bytes"),
    ("VirtualHost", "messagesOut"): Name("deltamq_vhost_messages_delivered"),
    ("VirtualHost", "bytesOut"): Name("deltamq_vhost_delivered_bytes"),
    ("Queue", "queueDepthMessages"): Name("deltamq_queue_messages_ready"),
    ("Queue", "queueDepthBytes"): Name("deltamq_queue_messages_ready_bytes"),
    ("Queue", "unacknowledgedMessages"): Name("deltamq_queue_messages_unacked"),
    ("Broker", "flowingToDisk"): Name("deltamq_flowing_to_disk"),                        # flow to disk
    ("Queue", "messagesPagedOut"): Name("deltamq_queue_messages_paged_out"),
    ("Queue", "messageBytesPagedOut"): Name("deltamq_queue_message_bytes_paged_out"),
    ("Queue", "consumerCount"): Name("deltamq_queue_consumers"),
    ("Queue", "messagesIn"): Name("deltamq_queue_messages_published"),
    ("Queue", "bytesIn"): Name("deltamq_queue_published_bytes"),
    ("Queue", "messagesOut"): Name("deltamq_queue_messages_delivered"),
    ("Queue", "bytesOut"): Name("deltamq_queue_delivered_bytes"),
    ("Queue", "queueFlowStopped"): Name("deltamq_queue_flow_stopped"),   # producer flow control
    ("Port", "connectionCount"): Name("deltamq_port_connections"),
}

#: the prefix of a category's metrics that :data:`NAMES` does not name
PREFIXES = {"Broker": "deltamq", "VirtualHost": "deltamq_vhost", "Queue": "deltamq_queue",
            "Port": "deltamq_port"}


def metric_name(category: str, statistic: DerivedAttribute[Any]) -> Name | None:
    """The name ``statistic`` of ``category`` is exported under (None: it is not)."""
    key = (category, statistic.name)
    if key in NAMES:
        return NAMES[key]
    return Name(f"{PREFIXES[category]}_{snake_case(statistic.name)}")


def exposition(broker: ConfiguredObject, visible: Visible = lambda obj: True,
               extra: Sequence[Collector] = ()) -> bytes:
    """The text Prometheus scrapes: what ``visible`` lets the caller read, and the process."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ModelCollector(broker, visible))
    registry.register(JournalCollector(broker, visible))
    for collector in extra:
        registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return generate_latest(registry)


# -- the model's statistics ----------------------------------------------------------------

class ModelCollector(Collector):
    """The statistics of the broker, its ports, virtual hosts and queues."""

    def __init__(self, broker: ConfiguredObject, visible: Visible) -> None:
        self.broker = broker
        self.visible = visible

    def collect(self) -> Iterator[Metric]:
        broker: Any = self.broker
        if not self.visible(broker):
            return
        yield from _families("Broker", [(broker, ())], ())
        info = InfoMetricFamily("deltamq_build", "The broker's version")
        info.add_metric([], {"version": __version__})
        yield info
        ports = [(port, (port.name,)) for port in broker.ports() if self.visible(port)]
        yield from _families("Port", ports, ("port",))
        hosts = [host for host in broker.virtual_hosts if self.visible(host)]
        yield from _families("VirtualHost", [(host, (host.name,)) for host in hosts], ("vhost",))
        queues = [(queue, (host.name, queue.name)) for host in hosts
                  for queue in host.children("Queue") if self.visible(queue)]
        yield from _families("Queue", queues, ("vhost", "queue"))
        yield from _queue_totals(queues)
        yield from _broker_totals(broker, queues)


def _families(category: str, members: Sequence[tuple[ConfiguredObject, tuple[str, ...]]],
              labels: tuple[str, ...]) -> Iterator[Metric]:
    """One family per statistic of ``category``, a sample per member."""
    if not members:
        return
    kind = type(members[0][0])
    for statistic in derived_attributes(kind).values():
        if not statistic.statistic:
            continue
        name = metric_name(category, statistic)
        if name is None:
            continue
        family: GaugeMetricFamily | CounterMetricFamily = (
            CounterMetricFamily if statistic.counter else GaugeMetricFamily)(
            name.metric, statistic.description, labels=labels)
        for obj, values in members:
            value = statistic.__get__(obj, kind)
            if isinstance(value, (int, float)):         # booleans (an alarm) as 0 and 1
                family.add_metric(list(values), float(value) * name.scale)
        yield family


def _queue_totals(queues: Sequence[tuple[Any, tuple[str, ...]]]) -> Iterator[Metric]:
    if not queues:
        return
    family = GaugeMetricFamily("deltamq_queue_messages", "Messages ready and unacknowledged",
                               labels=("vhost", "queue"))
    for queue, values in queues:
        family.add_metric(list(values), queue.queue_depth_messages
                          + queue.unacknowledged_messages)
    yield family


def _broker_totals(broker: Any, queues: Sequence[tuple[Any, tuple[str, ...]]]
                   ) -> Iterator[Metric]:
    """RabbitMQ's broker-wide counts that no single statistic of the Broker holds."""
    channels = sum(int(connection.session_count) for port in broker.ports()
                   for connection in port.children("Connection"))
    yield GaugeMetricFamily("deltamq_channels", "Channels (sessions) open", value=channels)
    yield GaugeMetricFamily("deltamq_consumers", "Consumers on the queues shown",
                            value=sum(int(queue.consumer_count) for queue, _ in queues))
    yield GaugeMetricFamily("deltamq_queues", "Queues shown", value=len(queues))


# -- the journals --------------------------------------------------------------------------

class JournalCollector(Collector):
    """Each virtual host's message journal: commits, their latency and size, what is pending."""

    def __init__(self, broker: ConfiguredObject, visible: Visible,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.visible = visible
        self.clock = clock
        self.wall_clock = wall_clock

    def collect(self) -> Iterator[Metric]:
        broker: Any = self.broker
        journals = [(host.name, host.journal) for host in broker.virtual_hosts
                    if self.visible(host) and getattr(host.journal, "figures", None) is not None]
        if not journals:
            return
        labels = ("vhost",)
        latency = HistogramMetricFamily(
            "deltamq_journal_commit_seconds",
            "Time from handing a group of rows to the writer to its durable commit",
            labels=labels)
        rows = HistogramMetricFamily("deltamq_journal_commit_rows",
                                     "Rows per journal commit (group commit size)",
                                     labels=labels)
        commits = CounterMetricFamily("deltamq_journal_commits",
                                      "Journal commits made durable", labels=labels)
        failed = CounterMetricFamily("deltamq_journal_failed_commits",
                                     "Journal commits that failed", labels=labels)
        written = CounterMetricFamily("deltamq_journal_written_bytes",
                                      "Bytes of rows handed to journal commits, as encoded"
                                      " for the writer", labels=labels)
        pending = GaugeMetricFamily("deltamq_journal_pending_rows",
                                    "Rows reported and not yet durable", labels=labels)
        in_flight = GaugeMetricFamily("deltamq_journal_commit_in_flight_seconds",
                                      "How long the commit in flight has been waited for"
                                      " (0: none in flight)", labels=labels)
        checkpoint = GaugeMetricFamily("deltamq_journal_checkpoint_age_seconds",
                                       "Time since the journal table's last Delta checkpoint",
                                       labels=labels)
        now, wall = self.clock(), self.wall_clock()
        for vhost, journal in journals:
            figures = journal.figures
            values = [vhost]
            latency.add_metric(values, _buckets(figures.commit_seconds), figures.commit_seconds.sum)
            rows.add_metric(values, _buckets(figures.group_rows), figures.group_rows.sum)
            commits.add_metric(values, figures.commit_seconds.count)
            failed.add_metric(values, figures.failed_commits)
            written.add_metric(values, figures.written_bytes)
            pending.add_metric(values, journal.pending_rows)
            in_flight.add_metric(values, figures.in_flight_seconds(now))
            last = journal.last_checkpoint_time()
            if last is not None:
                checkpoint.add_metric(values, max(wall - last, 0.0))
        yield from (latency, rows, commits, failed, written, pending, in_flight, checkpoint)


def _buckets(histogram: Any) -> list[tuple[str, float]]:
    return [("+Inf" if bound == float("inf") else _bound_text(bound), count)
            for bound, count in histogram.cumulative()]


def _bound_text(bound: float) -> str:
    return repr(float(bound))

