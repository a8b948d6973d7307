"""``deltamq sql`` run as a user runs it, where it must fail before Spark starts: one line, non-zero."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.delta_jars import delta_artifact


def deltamq_sql(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker.cli", "sql", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def without_java(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment with a PATH holding neither java nor mvn, and no JAVA_HOME."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    return {**env, "PATH": str(empty), **extra}


def assert_one_line_error(out: subprocess.CompletedProcess[str], expected: str) -> None:
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr == f"deltamq sql: {expected}\n"


def test_a_missing_data_directory_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    out = deltamq_sql("--data-dir", str(missing), "SELECT 1")
    assert_one_line_error(out, f"no data directory at {missing} (give --data-dir DIR or set DELTAMQ_DATA_DIR)")


def test_no_java_on_path_is_one_line(tmp_path: Path) -> None:
    out = deltamq_sql("--data-dir", str(tmp_path), "SELECT 1", env=without_java(tmp_path))
    assert_one_line_error(out, "Spark needs a Java runtime (JDK 17): `java` not found on PATH"
                               " (install one, e.g. openjdk-17-jdk, or set JAVA_HOME)")


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")
def test_no_maven_while_delta_jars_are_missing_is_one_line(tmp_path: Path) -> None:
    java_bin = tmp_path / "java-bin"
    java_bin.mkdir()
    (java_bin / "java").symlink_to(Path(shutil.which("java") or "java").resolve())
    home = tmp_path / "home"                     # an empty ~/.m2 and ~/.cache
    home.mkdir()
    out = deltamq_sql("--data-dir", str(tmp_path), "SELECT 1",
                      env=without_java(tmp_path, PATH=str(java_bin), HOME=str(home)))
    assert_one_line_error(out, f"Maven is needed once, to fetch Delta Lake's jars for Spark ({delta_artifact()}):"
                               " `mvn` not found on PATH (install Maven, e.g. the maven package)")
