"""The link registry in management: a virtual host's ``getLinks`` operation (GET or POST).

In process: a model tree with a memory node and the real messaging
namespace, the REST API called directly, links attached as an AMQP 1.0
engine attaches them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker.errors import ConfigurationError
from broker.messaging.link_registry import LinkKey
from broker.messaging.link_terminus import ExpiryPolicy, Terminus, TerminusDurability
from broker.messaging.termini import LinkRole
from broker.model import load_system_config
from mgmt.rest import RestApi
from tests.mgmt.test_mapping_unit import ANONYMOUS
from tests.unit.messaging.link_support import Endpoint

pytestmark = pytest.mark.timeout(30)



def _memory_node(tmp_path: Path, timeout: str) -> str:
    """A configuration with one memory node and the default terminus timeout ``timeout``."""
    config = {"name": "unit", "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
              "ports": [{"name": "amqp", "port": 0, "authenticationProvider": "anon"}],
              "virtualhostnodes": [{"name": "node", "type": "memory"}],
              "context": {"deltamq.link_terminus_timeout": timeout}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    system = load_system_config(_memory_node(tmp_path, "45"), {"deltamq.data_dir": str(tmp_path)})
    yield system.broker
    system.close()


def call(api: RestApi, method: str, path: str) -> Any:
    return anyio.run(api.handle, method, path, {}, b"", ANONYMOUS).body


def test_get_links_shows_the_virtual_hosts_links_and_termini(broker: Any) -> None:
    api = RestApi(broker)
    assert call(api, "GET", "/api/latest/virtualhost/node/node/getLinks") == []
    links = broker.find_virtual_host("node").namespace.links
    endpoint = Endpoint(links, "s1", "[1] 10.0.0.7:5000")
    links.attach(endpoint, LinkKey("jms-client", "sub", LinkRole.SENDING),
                 Terminus(address="amq.topic", durable=TerminusDurability.CONFIGURATION,
                          expiry_policy=ExpiryPolicy.NEVER, selector="a = 1"))
    links.attach(endpoint, LinkKey("jms-client", "producer", LinkRole.RECEIVING),
                 Terminus(address="orders"))
    links.record_unsettled(endpoint.attachments[-1].link, b"t", b"s")
    for method in ("GET", "POST"):
        shown = call(api, method, "/api/latest/virtualhost/node/node/getLinks")
        assert [(s["remoteContainerId"], s["linkName"], s["role"], s["state"]) for s in shown] == [
            ("jms-client", "producer", "receiving", "attached"),
            ("jms-client", "sub", "sending", "attached")]
        producer, sub = shown
        assert producer["connection"] == "[1] 10.0.0.7:5000" and producer["unsettledCount"] == 1
        # no timeout of its own: the virtual host's default (context variable)
        assert producer["timeout"] == 45 and producer["expiryPolicy"] == "session-end"
        assert (sub["durable"], sub["selector"], sub["address"]) == ("configuration", "a = 1", "amq.topic")
    links.session_ended("s1")
    producer = call(api, "GET", "/api/latest/virtualhost/node/node/getLinks")[0]
    assert producer["state"] == "suspended" and producer["connection"] is None
    assert isinstance(producer["expiresAt"], int)


def test_the_default_timeout_must_be_a_number_of_seconds(tmp_path: Path) -> None:
    path = _memory_node(tmp_path, "soon")
    with pytest.raises(ConfigurationError, match="context variable 'deltamq.link_terminus_timeout'"
                                                 " is 'soon'; expected a number of seconds"):
        load_system_config(path, {"deltamq.data_dir": str(tmp_path)})
