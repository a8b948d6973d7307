"""What a broker does with a table it must not write: at start-up, and when Delta Spark upgraded it.

* a virtual host node whose ``config`` or ``link_termini`` table is refused
  goes to ERRORED with the refusal as its error; the other nodes run;
* a virtual host whose ``journal`` is refused goes to ERRORED; its node runs;
* the broker's own configuration table refused: ``deltamq serve`` does not
  start (exit code 2) and says why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from broker.model import load_system_config
from broker.model.configured_object import State
from lakehouse.config_store import CONFIG_SCHEMA
from lakehouse.delta_table import AppendOnlyTable
from lakehouse.table_features import UnsupportedTable


def write_config(tmp_path: Path, nodes: list[str]) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "b", "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
        "ports": [{"name": "amqp", "port": "5999", "authenticationProvider": "anon"}],
        "virtualhostnodes": [{"name": name, "type": "delta", "storePath": str(tmp_path / name)}
                             for name in nodes]}))
    return config


def started(config: Path, tmp_path: Path) -> Any:
    return load_system_config(str(config), {"deltamq.data_dir": str(tmp_path)})


def first_start(tmp_path: Path, nodes: list[str]) -> Path:
    """Start a broker with ``nodes`` once (their tables are created), then stop it."""
    config = write_config(tmp_path, nodes)
    system = started(config, tmp_path)
    for node in nodes:
        system.broker.find_virtual_host(node).namespace.declare_queue("orders", durable=True)
    system.close()
    return config


def add_constraint(table: Path) -> None:
    DeltaTable(str(table)).alter.add_constraint({"named": "seq IS NOT NULL"})


def nodes_of(system: Any) -> dict[str, Any]:
    return {node.name: node for node in system.broker.virtual_host_nodes}


def test_a_node_with_a_refused_config_table_is_errored_and_the_others_run(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = first_start(tmp_path, ["upgraded", "plain"])
    add_constraint(tmp_path / "upgraded" / "config")
    log_before = sorted((tmp_path / "upgraded" / "config" / "_delta_log").iterdir())
    with caplog.at_level(logging.ERROR):
        system = started(config, tmp_path)
    try:
        nodes = nodes_of(system)
        assert nodes["upgraded"].state is State.ERRORED
        error = nodes["upgraded"].last_error
        assert isinstance(error, UnsupportedTable)
        assert (error.table, error.feature) == ("config", "checkConstraints")
        assert f"Delta table 'config' at {tmp_path / 'upgraded' / 'config'}" in str(error)
        # logged once, with the refusal's own words and no traceback
        logged = [r for r in caplog.records if "could not be opened" in r.getMessage()]
        assert len(logged) == 1 and "checkConstraints" in logged[0].getMessage()
        assert not logged[0].exc_info
        assert nodes["plain"].state is State.ACTIVE
        system.broker.find_virtual_host("plain").namespace.declare_queue("more", durable=True)
        assert system.broker.find_virtual_host("upgraded") is None
    finally:
        system.close()
    assert sorted((tmp_path / "upgraded" / "config" / "_delta_log").iterdir()) == log_before


def test_a_refused_link_termini_table_errors_its_node(tmp_path: Path) -> None:
    config = first_start(tmp_path, ["upgraded", "plain"])
    add_constraint(tmp_path / "upgraded" / "link_termini")
    system = started(config, tmp_path)
    try:
        nodes = nodes_of(system)
        assert nodes["upgraded"].state is State.ERRORED
        assert isinstance(nodes["upgraded"].last_error, UnsupportedTable)
        assert nodes["upgraded"].last_error.table == "link_termini"
        assert nodes["plain"].state is State.ACTIVE
    finally:
        system.close()


def test_a_refused_journal_errors_its_virtual_host(tmp_path: Path) -> None:
    config = first_start(tmp_path, ["upgraded", "plain"])
    DeltaTable(str(tmp_path / "upgraded" / "journal")).alter.add_constraint({"named": "queue IS NOT NULL"})
    system = started(config, tmp_path)
    try:
        nodes = nodes_of(system)
        assert nodes["upgraded"].state is State.ACTIVE
        vhost = nodes["upgraded"].virtual_host
        assert vhost is not None and vhost.state is State.ERRORED
        assert isinstance(vhost.last_error, UnsupportedTable) and vhost.last_error.table == "journal"
        assert system.broker.find_virtual_host("plain").state is State.ACTIVE
    finally:
        system.close()


def test_the_broker_does_not_start_on_a_refused_configuration_table_of_its_own(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from broker.server import serve

    config = write_config(tmp_path, [])
    context = {"deltamq.data_dir": str(tmp_path / "data")}
    system = load_system_config(str(config), context, store_type=None)
    own = system.store.table.path
    system.close()
    add_constraint(own)
    with caplog.at_level(logging.ERROR):
        assert serve(str(config), context) == 2
    assert any(r.getMessage().startswith("cannot start: Delta table 'config'")
               and "checkConstraints" in r.getMessage() for r in caplog.records)


# -- tables upgraded by Delta Spark -------------------------------------------------------

@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from lakehouse.spark import spark_session

    session = spark_session()
    yield session
    session.stop()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_deletion_vectors_enabled_by_delta_spark(spark: Any, tmp_path: Path) -> None:
    config = first_start(tmp_path, ["upgraded", "plain"])
    table = tmp_path / "upgraded" / "config"
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableDeletionVectors'=true)")
    protocol = DeltaTable(str(table)).protocol()
    assert "deletionVectors" in (protocol.writer_features or ())      # Spark really upgraded it
    log_before = sorted((table / "_delta_log").iterdir())

    with pytest.raises(UnsupportedTable, match="'deletionVectors'") as caught:
        AppendOnlyTable(table, CONFIG_SCHEMA, name="config").open()
    assert "REORG TABLE" in str(caught.value)
    system = started(write_config(tmp_path, ["upgraded", "plain"]), tmp_path)
    try:
        nodes = nodes_of(system)
        assert nodes["upgraded"].state is State.ERRORED
        assert isinstance(nodes["upgraded"].last_error, UnsupportedTable)
        assert nodes["plain"].state is State.ACTIVE
    finally:
        system.close()
    assert sorted((table / "_delta_log").iterdir()) == log_before

    # what the refusal says to do: deletion vectors off, none in the files -- then it opens
    # (an append-only table has none to purge: REORG ... APPLY (PURGE) is not needed here)
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableDeletionVectors'=false)")
    system = started(write_config(tmp_path, ["upgraded"]), tmp_path)
    try:
        assert nodes_of(system)["upgraded"].state is State.ACTIVE
        system.broker.find_virtual_host("upgraded").namespace.declare_queue("after", durable=True)
    finally:
        system.close()
    names = {row["name"] for row in spark.sql(
        f"SELECT get_json_object(attributes, '$.name') AS name FROM delta.`{table}`").collect()}
    assert {"orders", "after"} <= names                            # Spark reads what DeltaMQ wrote


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_check_constraint_added_by_delta_spark(spark: Any, tmp_path: Path) -> None:
    journal = AppendOnlyTable(tmp_path / "t", pa.schema([pa.field("id", pa.int64())]), name="journal")
    journal.open()
    journal.append(pa.table({"id": [1, 2]}))
    spark.sql(f"ALTER TABLE delta.`{journal.path}` ADD CONSTRAINT positive CHECK (id > 0)")
    with pytest.raises(UnsupportedTable, match="delta.constraints.positive"):
        journal.append(pa.table({"id": [-1]}))                     # appended to while it changed
    with pytest.raises(UnsupportedTable, match="'checkConstraints'"):
        AppendOnlyTable(journal.path, journal.schema, name="journal").open()
    assert spark.sql(f"SELECT COUNT(*) AS n FROM delta.`{journal.path}`").collect()[0]["n"] == 2
