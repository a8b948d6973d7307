from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.model import DurableConfigurationStore, SystemConfig, load_system_config, registry


class FakeNamespace:
    """Stands in for broker.messaging.namespace.Namespace."""

    def __init__(self, vhost_name: str) -> None:
        self.vhost_name = vhost_name


def minimal_config(**broker_attributes: Any) -> dict[str, Any]:
    """A small broker: one Anonymous provider, one AMQP port, one memory node."""
    config: dict[str, Any] = {
        "name": "test-broker",
        "context": {"test.port": "5999"},
        "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
        "ports": [{"name": "amqp", "port": "${test.port}", "authenticationProvider": "anon"}],
        "virtualhostnodes": [{"name": "node", "type": "memory"}],
    }
    config.update(broker_attributes)
    return config


Loader = Callable[..., SystemConfig]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No context variable leaks in from the environment the tests run in."""
    for name in list(os.environ):
        if name.lower().startswith(("deltamq.", "deltamq_", "test.", "test_")):
            monkeypatch.delenv(name)


@pytest.fixture
def load(tmp_path: Path) -> Loader:
    """Write a config dict to a file and load it, data under tmp_path."""

    def loader(config: dict[str, Any] | None = None, context: dict[str, str] | None = None,
               store: DurableConfigurationStore | None = None) -> SystemConfig:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config if config is not None else minimal_config()))
        overrides = {"deltamq.data_dir": str(tmp_path / "data"), **(context or {})}
        return load_system_config(str(path), overrides, store=store,
                                  namespace_factory=FakeNamespace)

    return loader


#: registers an entry point: (group, name, "module:attribute")
PluginInstaller = Callable[[str, str, str], None]


@pytest.fixture
def install_plugin(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginInstaller]:
    """Register entry points the way an installed distribution does (a dist-info on sys.path)."""
    site = tmp_path_factory.mktemp("site")
    dist_info = site / "deltamq_test_plugins-0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: deltamq-test-plugins\nVersion: 0\n")
    groups: dict[str, list[str]] = {}

    def install(group: str, name: str, target: str) -> None:
        groups.setdefault(group, []).append(f"{name} = {target}")
        (dist_info / "entry_points.txt").write_text("".join(
            f"[{g}]\n" + "\n".join(lines) + "\n\n" for g, lines in groups.items()))
        registry.forget_plugins()

    monkeypatch.syspath_prepend(str(site))
    yield install
    registry.forget_plugins()
