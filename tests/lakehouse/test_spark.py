"""Spark reads the broker's Delta tables: views, and ``deltamq sql``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from chispa import assert_df_equality

from broker.messaging.termini import LinkRole, TerminusRecord
from broker.model.config_store import ConfigurationRecord
from lakehouse.config_store import DeltaConfigurationStore
from lakehouse.termini_store import DeltaTerminusStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    for node, queue in (("alpha", "orders"), ("beta", "billing")):
        store = DeltaConfigurationStore(str(root / node))
        store.open()
        store.save([ConfigurationRecord(f"{node}-vh", "VirtualHost", None, {"name": node})])
        store.save([ConfigurationRecord(f"{node}-q", "Queue", f"{node}-vh", {"name": queue, "durable": True})])
        store.save([ConfigurationRecord(f"{node}-tmp", "Queue", f"{node}-vh", {"name": "gone"})])
        store.remove([f"{node}-tmp"])
        store.close()
        termini = DeltaTerminusStore(root / node)
        termini.open()
        termini.save([TerminusRecord(LinkRole.SENDING, "c1", f"{node}-link", {"address": queue})])
        termini.close()
    return root


@pytest.fixture(scope="module")
def spark(data_dir: Path) -> Iterator[object]:
    from lakehouse.spark import spark_session

    session = spark_session(data_dir)
    yield session
    session.stop()


def test_configuration_view_is_the_current_configuration(spark: object, data_dir: Path) -> None:
    actual = spark.sql(  # type: ignore[attr-defined]
        "SELECT node, category, get_json_object(attributes, '$.name') AS name FROM configuration")
    expected = spark.createDataFrame(  # type: ignore[attr-defined]
        [("alpha", "Queue", "orders"), ("alpha", "VirtualHost", "alpha"),
         ("beta", "Queue", "billing"), ("beta", "VirtualHost", "beta")],
        "node string, category string, name string")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_config_history_keeps_every_change(spark: object) -> None:
    rows = spark.sql(  # type: ignore[attr-defined]
        "SELECT node, op, count(*) AS n FROM config_history GROUP BY node, op ORDER BY node, op").collect()
    assert [tuple(r) for r in rows] == [("alpha", "remove", 1), ("alpha", "save", 3),
                                        ("beta", "remove", 1), ("beta", "save", 3)]


def test_link_termini_view(spark: object) -> None:
    rows = spark.sql("SELECT node, role, link_name FROM link_termini ORDER BY node").collect()  # type: ignore[attr-defined]
    assert [tuple(r) for r in rows] == [("alpha", "sending", "alpha-link"), ("beta", "sending", "beta-link")]


def test_deltamq_sql_prints_a_table(data_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "broker.cli", "sql", "--data-dir", str(data_dir),
         "SELECT node, category FROM configuration WHERE category = 'Queue' ORDER BY node"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert lines == ["| node  | category |", "| alpha | Queue    |", "| beta  | Queue    |"]
    assert out.stdout.rstrip().endswith("(2 rows)")


def test_deltamq_sql_reports_bad_sql_without_a_traceback(data_dir: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "broker.cli", "sql", "--data-dir", str(data_dir),
                          "SELECT nope FROM configuration"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    assert "deltamq sql:" in out.stderr and "Traceback" not in out.stderr
