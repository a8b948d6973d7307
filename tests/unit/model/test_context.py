"""${context} variables: where they are looked up, in which order, and the errors."""

from __future__ import annotations

import pytest

from broker.errors import ConfigurationError
from broker.model import Port
from broker.model.context import environment_value, expand
from tests.unit.model.conftest import Loader, minimal_config


def test_file_context_is_the_default(load: Loader) -> None:
    assert load().broker.ports()[0].port == 5999


def test_environment_beats_file_default(load: Loader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("test.port", "6001")
    assert load().broker.ports()[0].port == 6001


def test_shell_spelling_of_dotted_names(load: Loader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_PORT", "6002")
    assert load().broker.ports()[0].port == 6002


def test_undotted_names_are_not_upper_cased() -> None:
    assert environment_value("user", {"USER": "root"}) is None
    assert environment_value("a.b", {"A_B": "1"}) == "1"
    assert environment_value("a.b", {"a.b": "exact", "A_B": "shell"}) == "exact"


def test_command_line_beats_environment(load: Loader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("test.port", "6001")
    assert load(context={"test.port": "6003"}).broker.ports()[0].port == 6003


def test_object_context_beats_command_line_and_ancestors(load: Loader) -> None:
    config = minimal_config()
    config["ports"][0]["context"] = {"test.port": "6004"}
    config["ports"].append({"name": "other", "port": "${test.port}",
                            "authenticationProvider": "anon"})
    broker = load(config, context={"test.port": "6005"}).broker
    ports = {port.name: port.port for port in broker.ports()}
    assert ports == {"amqp": 6004, "other": 6005}


def test_ancestor_context_is_inherited(load: Loader) -> None:
    system = load()
    broker = system.broker
    broker.set_attributes({"context": {"test.port": "6006"}})
    port = broker.create_child("Port", {"name": "late", "port": "${test.port}",
                                        "authenticationProvider": "anon"})
    assert isinstance(port, Port) and port.port == 6006


def test_nested_references_resolve(load: Loader) -> None:
    config = minimal_config()
    config["context"] = {"test.base": "59", "test.port": "${test.base}${test.tail}",
                         "test.tail": "98"}
    assert load(config).broker.ports()[0].port == 5998


def test_undefined_variable_is_named(load: Loader) -> None:
    config = minimal_config()
    config["ports"][0]["port"] = "${no.such.variable}"
    with pytest.raises(ConfigurationError) as raised:
        load(config)
    text = str(raised.value)
    assert "no.such.variable" in text and "is not defined" in text
    assert "Port 'amqp': attribute 'port'" in text


def test_nested_undefined_variable_is_named(load: Loader) -> None:
    config = minimal_config()
    config["context"] = {"test.port": "${test.missing}"}
    with pytest.raises(ConfigurationError, match="'test.missing' is not defined"):
        load(config)


def test_circular_reference_is_an_error(load: Loader) -> None:
    config = minimal_config()
    config["context"] = {"test.port": "${test.a}", "test.a": "${test.b}", "test.b": "${test.a}"}
    with pytest.raises(ConfigurationError, match="refers to itself"):
        load(config)


def test_this_refers_to_own_attribute(load: Loader) -> None:
    node = load().broker.virtual_host_nodes[0]
    assert node.store_path.endswith("/data/node")
    assert node.attributes(actual=False)["storePath"] == node.store_path


def test_actual_values_keep_references(load: Loader) -> None:
    port = load().broker.ports()[0]
    assert port.attributes(actual=True)["port"] == "${test.port}"
    assert port.attributes()["port"] == 5999


def test_expand_works_inside_lists_and_dicts() -> None:
    lookup = {"a": "1", "b": "${a}2"}.get
    assert expand(["${a}", {"k": "${b}"}, 3], lookup) == ["1", {"k": "12"}, 3]
    assert expand("no references", lookup) == "no references"


def test_resolve_text_on_an_object(load: Loader) -> None:
    port = load(context={"deltamq.data_dir": "/srv/mq"}).broker.ports()[0]
    assert port.resolve("${deltamq.data_dir}/x") == "/srv/mq/x"
    assert port.resolve("${this:name}") == "amqp"


def test_builtin_defaults_apply_without_any_file_context(load: Loader) -> None:
    config = minimal_config()
    config["context"] = {}
    config["ports"][0]["port"] = "${deltamq.amqp_port}"
    port = load(config).broker.ports()[0]
    assert port.port == 5672
