"""Management permissions decided on a model in memory: administrators, users, anonymous."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.model.configured_object import ConfiguredObject
from broker.model.system_config import SystemConfig, load_system_config
from broker.security.principal import Principal
from mgmt.security import Action, ManagementPermissions

pytestmark = pytest.mark.timeout(60)

ADMIN = Principal("guest", "passwordFile")
ALICE = Principal("alice", "passwordFile")
FILE_ANONYMOUS = Principal("anonymous", "passwordFile", anonymous=True)
ANONYMOUS = Principal("anonymous", "anon", anonymous=True)


@pytest.fixture
def system(tmp_path: Path) -> Iterator[SystemConfig]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "perm",
        "authenticationproviders": [
            {"name": "passwordFile", "type": "PasswordFile", "allowAnonymous": True},
            {"name": "anon", "type": "Anonymous"}],
        "ports": [],
        "virtualhostnodes": [{"name": "default", "type": "memory"},
                             {"name": "other", "type": "memory"}]}))
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path / "data")})
    provider = system.broker.child("AuthenticationProvider", "passwordFile")
    assert provider is not None
    provider.create_child("User", {"name": "alice", "password": "pw",
                                   "virtualHosts": ["default"]})
    yield system
    system.close()


def find(system: SystemConfig, *path: tuple[str, str]) -> ConfiguredObject:
    obj: ConfiguredObject | None = system.broker
    for category, name in path:
        assert obj is not None
        obj = obj.child(category, name)
    assert obj is not None
    return obj


def test_who_may_do_what(system: SystemConfig) -> None:
    allowed = ManagementPermissions().allowed
    broker = system.broker
    vhost = find(system, ("VirtualHostNode", "default"), ("VirtualHost", "default"))
    other = find(system, ("VirtualHostNode", "other"), ("VirtualHost", "other"))
    alice = find(system, ("AuthenticationProvider", "passwordFile"), ("User", "alice"))
    guest = find(system, ("AuthenticationProvider", "passwordFile"), ("User", "guest"))
    provider = alice.parent
    assert provider is not None
    for principal in (ADMIN, ANONYMOUS):             # guest of a new file; Anonymous' users
        assert allowed(principal, Action.CREATE, broker, "Port")
        assert allowed(principal, Action.UPDATE, guest, "User", ["administrator"])
    for principal in (ALICE, FILE_ANONYMOUS):
        assert allowed(principal, Action.READ, broker, "Broker")
        assert not allowed(principal, Action.UPDATE, broker, "Broker", ["description"])
        assert not allowed(principal, Action.CREATE, broker, "VirtualHostNode")
        assert not allowed(principal, Action.CREATE, provider, "User")
        assert not allowed(principal, Action.UPDATE, guest, "User", ["password"])
        assert not allowed(principal, Action.READ, guest, "User")
        assert not allowed(principal, Action.DELETE, vhost, "VirtualHost")
        assert not allowed(principal, Action.UPDATE, vhost, "VirtualHost", ["maxConnections"])
    assert allowed(ALICE, Action.CREATE, vhost, "Queue")
    assert allowed(ALICE, Action.INVOKE, vhost, "VirtualHost")
    assert not allowed(ALICE, Action.CREATE, other, "Queue")     # not one of her virtual hosts
    assert allowed(ALICE, Action.READ, alice, "User")
    assert allowed(ALICE, Action.UPDATE, alice, "User", ["password"])
    assert not allowed(ALICE, Action.UPDATE, alice, "User", ["password", "administrator"])
    assert not allowed(ALICE, Action.UPDATE, alice, "User", ["virtualHosts"])
    assert not allowed(ALICE, Action.DELETE, alice, "User")
