"""The Broker's connection.idleTimeout (AMQP 1.0's offer): none by default, from a context
variable or the attribute itself, never negative; 0-9-1's heartbeatDelay is untouched."""

from __future__ import annotations

import pytest

from broker.errors import ConfigurationError
from tests.unit.model.conftest import Loader, minimal_config


def test_no_idle_time_out_by_default_and_the_0_9_1_heartbeat_stays_60(load: Loader) -> None:
    broker = load().broker
    assert broker.idle_timeout == 0
    assert broker.heartbeat_delay == 60
    assert broker.attributes()["connection.idleTimeout"] == 0


def test_the_context_variable_sets_it(load: Loader) -> None:
    broker = load(context={"deltamq.amqp1_0_idle_timeout": "60"}).broker
    assert broker.idle_timeout == 60
    assert "connection.idleTimeout" not in broker.attributes(actual=True)
    assert broker.heartbeat_delay == 60


def test_the_attribute_sets_it_and_may_change(load: Loader) -> None:
    config = minimal_config()
    config["connection.idleTimeout"] = 30
    broker = load(config).broker
    assert broker.idle_timeout == 30
    broker.set_attributes({"connection.idleTimeout": 5})
    assert broker.idle_timeout == 5


def test_a_negative_idle_time_out_is_refused(load: Loader) -> None:
    with pytest.raises(ConfigurationError, match="'connection.idleTimeout' must not be negative"):
        load(context={"deltamq.amqp1_0_idle_timeout": "-1"})
