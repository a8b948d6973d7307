"""Spark reads the broker's Delta tables: views, and ``deltamq sql``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from chispa import assert_df_equality

from broker.messaging.termini import LinkRole, TerminusRecord
from broker.model.config_store import ConfigurationRecord
from lakehouse import delta_jars
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


def deltamq_sql(data_dir: Path, query: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker.cli", "sql", "--data-dir", str(data_dir), query],
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def fetched_jars() -> list[Path]:
    """Delta's jars in the local Maven repository (fetched with Maven if they are not yet)."""
    return delta_jars.delta_jars()


def test_deltamq_sql_prints_a_table(data_dir: Path, fetched_jars: list[Path]) -> None:
    out = deltamq_sql(data_dir, "SELECT node, category FROM configuration WHERE category = 'Queue' ORDER BY node")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert lines == ["| node  | category |", "| alpha | Queue    |", "| beta  | Queue    |"]
    assert out.stdout.rstrip().endswith("(2 rows)")
    assert "\x1b[" not in out.stdout
    # nothing but the table: no Ivy, log4j or JVM lines, nothing fetched
    assert out.stderr == ""


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path,
              fetched_jars: list[Path]) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``deltamq sql "SET spark.jars"`` in a home with empty Maven and DeltaMQ caches.

    Its Maven fetches from a mirror that is the real local repository, which
    holds what is needed (``fetched_jars``), so the test needs no network.
    """
    home = tmp_path_factory.mktemp("home")
    (home / ".m2").mkdir()
    (home / ".m2" / "settings.xml").write_text(f"""<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors><mirror><id>test-mirror</id><mirrorOf>*</mirrorOf>
    <url>{delta_jars.maven_repository().as_uri()}</url></mirror></mirrors>
</settings>""")
    return home, deltamq_sql(data_dir, "SET spark.jars", env=dict(os.environ, HOME=str(home)))


def test_a_first_deltamq_sql_fetches_only_the_jars_pyspark_lacks(
        first_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    home, out = first_run
    assert out.returncode == 0, out.stderr
    assert "\x1b[" not in out.stdout + out.stderr
    delta_version = version("delta-spark")
    repository = home / ".m2" / "repository"
    assert out.stderr.splitlines()[0] == (
        f"deltamq sql: fetching io.delta:delta-spark_2.13:{delta_version} and the jars it needs beyond"
        f" pyspark's with Maven, once, into {repository} (Maven's output: {home}/.cache/deltamq/maven.log)")
    fetched = sorted(re.sub(r"\(.*\)", "(SIZE)", line) for line in out.stderr.splitlines()[1:-1])
    assert fetched == [f"deltamq sql: fetched io.delta:{name}:{delta_version} (SIZE) from test-mirror"
                       for name in ("delta-spark_2.13", "delta-storage")]
    assert re.fullmatch(r"deltamq sql: fetched \d+\.\d MB for Spark \(2 jars\)"
                        r"( and \d+\.\d MB of Maven's own plugins \(first use of Maven\))?;"
                        r" later runs fetch nothing", out.stderr.splitlines()[-1])
    # Spark is given those two jars and the log store's, nothing else
    value = next(line for line in out.stdout.splitlines() if line.startswith("| spark.jars "))
    jars = [Path(jar) for jar in value.split("|")[2].strip().split(",")]
    assert sorted(jar.name for jar in jars) == sorted(
        [f"delta-spark_2.13-{delta_version}.jar", f"delta-storage-{delta_version}.jar", jars[-1].name])
    assert jars[-1].name.startswith("deltamq-log-store-")
    assert all(jar.is_file() and jar.is_relative_to(repository) for jar in jars[:2])
    assert sum(jar.stat().st_size for jar in jars) < 10_000_000


def test_deltamq_sql_shows_sparks_message_for_bad_sql_and_fetches_nothing_again(
        first_run: tuple[Path, subprocess.CompletedProcess[str]], data_dir: Path, tmp_path: Path) -> None:
    home, _ = first_run
    bin_dir = tmp_path / "bin"                   # an mvn that must not run
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(f"#!/bin/sh\ntouch {tmp_path}/mvn-ran\nexit 1\n")
    (bin_dir / "mvn").chmod(0o755)
    env = dict(os.environ, HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = deltamq_sql(data_dir, "SELEC node FROM configuration", env=env)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.startswith(
        "deltamq sql: [PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'. SQLSTATE: 42601 (line 1, pos 0)\n")
    assert "== SQL ==\nSELEC node FROM configuration\n^^^" in out.stderr
    assert "Traceback" not in out.stderr and "\x1b[" not in out.stderr
    assert not (tmp_path / "mvn-ran").exists()
