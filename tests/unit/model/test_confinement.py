"""Names and paths management may give: inside the data directory, unless the operator says so."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.errors import ConfigurationError
from broker.model.confinement import check_name, check_path, parse_roots
from broker.model.system_config import SystemConfig, load_system_config


def write_config(tmp_path: Path, **extra: Any) -> str:
    config = {
        "name": "confined",
        "authenticationproviders": [{"name": "passwordFile", "type": "PasswordFile"}],
        "ports": [],
        "virtualhostnodes": [{"name": "default", "type": "memory"}],
        **extra,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def system(tmp_path: Path, data_dir: Path) -> Iterator[SystemConfig]:
    system = load_system_config(write_config(tmp_path), {"deltamq.data_dir": str(data_dir)})
    yield system
    system.close()


@pytest.mark.parametrize("name", ["../../escaped", "a/b", "a\\b", "..", ".", "a\x00b", "tab\there"])
def test_a_node_name_that_is_not_one_path_component_is_refused(system: SystemConfig,
                                                               name: str) -> None:
    with pytest.raises(ConfigurationError, match="attribute 'name' must not"):
        system.broker.create_child("VirtualHostNode", {"name": name, "type": "memory"})
    assert system.broker.child("VirtualHostNode", name) is None


def test_control_characters_are_refused_in_every_configured_name(system: SystemConfig) -> None:
    provider = system.broker.child("AuthenticationProvider", "passwordFile")
    assert provider is not None
    with pytest.raises(ConfigurationError, match=r"control characters \(found U\+001B\)"):
        provider.create_child("User", {"name": "evil\x1b[2J", "password": "pw"})
    # a user name is no path: a slash is fine there
    assert provider.create_child("User", {"name": "team/alice", "password": "pw"}).name \
        == "team/alice"


@pytest.mark.parametrize("store_path", ["/tmp/deltamq-escaped-node", "${deltamq.data_dir}/../x",
                                        "${deltamq.data_dir}", "s3://bucket/node"])
def test_a_store_path_outside_the_data_directory_is_refused(system: SystemConfig,
                                                            store_path: str) -> None:
    with pytest.raises(ConfigurationError, match="attribute 'storePath' is .* outside the data"
                                                 " directory"):
        system.broker.create_child("VirtualHostNode", {"name": "n", "type": "memory",
                                                       "storePath": store_path})
    node = system.broker.create_child("VirtualHostNode", {"name": "inside", "type": "memory",
                                                          "storePath": "${deltamq.data_dir}/a/b"})
    with pytest.raises(ConfigurationError, match="'storePath'"):
        node.set_attributes({"storePath": store_path})
    assert node.attributes(actual=True)["storePath"] == "${deltamq.data_dir}/a/b"


def test_a_link_out_of_the_data_directory_leads_out(system: SystemConfig, data_dir: Path,
                                                    tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    data_dir.mkdir(exist_ok=True)
    os.symlink(tmp_path / "outside", data_dir / "link")
    with pytest.raises(ConfigurationError, match="'storePath'"):
        system.broker.create_child("VirtualHostNode", {"name": "n", "type": "memory",
                                                       "storePath": str(data_dir / "link" / "n")})


def test_a_password_file_outside_the_data_directory_is_refused(system: SystemConfig,
                                                               tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "passwords"
    with pytest.raises(ConfigurationError, match="attribute 'path' is"):
        system.broker.create_child("AuthenticationProvider", {"name": "more", "type":
                                                              "PasswordFile", "path": str(outside)})
    provider = system.broker.child("AuthenticationProvider", "passwordFile")
    assert provider is not None
    with pytest.raises(ConfigurationError, match="attribute 'path' is"):
        provider.set_attributes({"path": str(outside)})
    assert not outside.parent.exists()


def test_a_context_change_that_moves_a_path_out_is_refused(system: SystemConfig,
                                                           tmp_path: Path) -> None:
    broker = system.broker
    elsewhere = {"deltamq.data_dir": str(tmp_path / "elsewhere")}
    with pytest.raises(ConfigurationError, match="(VirtualHostNode 'default': attribute"
                                                 " 'storePath'|passwordFile': attribute 'path')"
                                                 " is .*/elsewhere/"):
        broker.set_attributes({"context": elsewhere})
    assert broker.attributes(actual=True).get("context", {}) == {}
    # nor can an object's context add a root: only the operator's sources do
    with pytest.raises(ConfigurationError, match="'storePath'"):
        broker.create_child("VirtualHostNode", {
            "name": "n", "type": "memory", "storePath": str(tmp_path / "n"),
            "context": {"deltamq.path_roots": str(tmp_path)}})


def test_the_operator_may_add_roots_and_configure_paths_anywhere(tmp_path: Path,
                                                                 data_dir: Path) -> None:
    outside = tmp_path / "operator-chose-this"
    config = write_config(tmp_path, virtualhostnodes=[
        {"name": "default", "type": "memory", "storePath": str(outside)}])
    system = load_system_config(config, {"deltamq.data_dir": str(data_dir),
                                         "deltamq.path_roots": f"{tmp_path / 'more'}, s3://b/dq"})
    try:
        node = system.broker.child("VirtualHostNode", "default")
        assert node is not None and node.attributes()["storePath"] == str(outside)
        for store_path in (str(tmp_path / "more" / "n"), "s3://b/dq/n"):
            name = f"n{len(system.broker.children('VirtualHostNode'))}"
            system.broker.create_child("VirtualHostNode", {"name": name, "type": "memory",
                                                           "storePath": store_path})
        with pytest.raises(ConfigurationError, match="'storePath'"):
            system.broker.create_child("VirtualHostNode", {"name": "x", "type": "memory",
                                                           "storePath": "s3://b/dq/../x"})
    finally:
        system.close()


def test_path_checks_in_isolation(tmp_path: Path) -> None:
    roots = parse_roots(str(tmp_path), " s3://bucket/a ,")
    assert roots == [str(tmp_path), "s3://bucket/a"]
    check_path(str(tmp_path / "x"), roots, "L", "p")
    check_path(f"file://{tmp_path}/x", roots, "L", "p")
    check_path("s3://bucket/a/x", roots, "L", "p")
    for bad in (str(tmp_path), f"{tmp_path}/x/../..", "s3://bucket/ab", "s3://bucket/a",
                "file:///etc/x", f"{tmp_path}/a\x00b"):
        with pytest.raises(ConfigurationError, match="attribute 'p'"):
            check_path(bad, roots, "L", "p")
    check_name("queue/with/slashes", "L", joined_to_paths=False)


def test_a_place_another_object_writes_to_is_refused(system: SystemConfig, data_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.model import virtualhost

    # memory nodes keep nothing at their storePath; pretend these do, as delta nodes
    monkeypatch.setattr(virtualhost, "keeps_data", lambda store_class: True)
    broker = system.broker
    broker.create_child("VirtualHostNode", {"name": "one", "type": "memory",
                                            "storePath": str(data_dir / "stores" / "one")})
    for taken, how in ((data_dir / "stores" / "one", "is"),
                       (data_dir / "stores" / "one" / "journal", "is inside"),
                       (data_dir / "stores", "holds"), (data_dir / "passwords", "is")):
        with pytest.raises(ConfigurationError, match=f"which {how} the (storePath|path) of"):
            broker.create_child("VirtualHostNode", {"name": "two", "type": "memory",
                                                    "storePath": str(taken)})
    provider = broker.child("AuthenticationProvider", "passwordFile")
    assert provider is not None
    with pytest.raises(ConfigurationError, match="is inside the storePath of VirtualHostNode"
                                                 " 'one'"):
        provider.set_attributes({"path": str(data_dir / "stores" / "one" / "passwords")})
    # its own place, unchanged, is no clash
    provider.set_attributes({"path": str(data_dir / "passwords"), "description": "same place"})


def test_memory_nodes_keep_nothing_so_share_no_place(system: SystemConfig,
                                                     data_dir: Path) -> None:
    for name in ("a", "b"):
        system.broker.create_child("VirtualHostNode", {"name": name, "type": "memory",
                                                       "storePath": str(data_dir / "same")})
