"""Finding the warm server of a data directory, and the jars its server needs; no JVM here.

The record ``deltamq spark serve`` publishes names a live process or is
ignored; ``$DELTAMQ_SPARK_REMOTE`` wins over it; a server that does not
answer makes ``deltamq sql`` say so and use a local session.  Spark
Connect's jar comes with pyspark 4.0 (nothing fetched); a Spark without it
gets it from Maven once, reported like Delta's jars, then from the cache.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from lakehouse import delta_jars, sql_command
from lakehouse.connect_server import REMOTE_VARIABLE, ConnectServer, find_server, record_path, \
    recorded_server, remove_record, write_record


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home: records go to its ~/.cache/deltamq."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(REMOTE_VARIABLE, raising=False)
    return home


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ended_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def server_of(data_dir: Path, pid: int, port: int = 15002) -> ConnectServer:
    return ConnectServer("127.0.0.1", port, "secret-token", pid, str(data_dir.resolve()), "2026-01-01T00:00:00+00:00")


def test_a_record_names_the_server_of_its_directory_only(home: Path, tmp_path: Path) -> None:
    data, other = tmp_path / "data", tmp_path / "other"
    data.mkdir()
    other.mkdir()
    server = server_of(data, os.getpid())
    path = write_record(server)
    assert path.parent == home / ".cache" / "deltamq" / "spark-connect"
    assert path.stat().st_mode & 0o777 == 0o600
    assert recorded_server(data) == server
    assert recorded_server(tmp_path / "." / "data") == server       # the same directory, spelled otherwise
    assert recorded_server(other) is None
    remove_record(data, os.getpid() + 1)                              # another process's removal: kept
    assert recorded_server(data) == server
    remove_record(data, os.getpid())
    assert not path.exists() and recorded_server(data) is None


def test_an_object_store_location_has_a_record_of_its_own(home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """docker-compose.yml serves s3://bucket/nodes: the URI is the key, never a local path."""
    from broker import cli

    monkeypatch.chdir(tmp_path)
    uri = "s3://bucket/nodes"
    assert record_path(uri) == record_path(uri + "/") != record_path("s3://bucket/other")
    assert record_path(uri) != record_path(tmp_path / "s3:" / "bucket" / "nodes")
    server = ConnectServer("127.0.0.1", 15002, None, os.getpid(), uri, "2026-01-01T00:00:00+00:00")
    write_record(server)
    assert recorded_server(uri) == server and recorded_server(tmp_path / "s3:/bucket/nodes") is None
    remove_record(uri, os.getpid())
    assert cli.main(["spark", "serve", "--status", "--data-dir", uri]) == 1
    assert f"no Spark Connect server serves {uri}" in capsys.readouterr().out


def test_the_record_of_a_process_that_ended_is_ignored(home: Path, tmp_path: Path) -> None:
    write_record(server_of(tmp_path, ended_pid()))
    assert record_path(tmp_path).exists()
    assert recorded_server(tmp_path) is None and find_server(tmp_path) is None


def test_a_server_named_in_the_environment_wins(home: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    write_record(server_of(tmp_path, os.getpid()))
    monkeypatch.setenv(REMOTE_VARIABLE, "sc://spark-connect:15003/;token=abc")
    found = find_server(tmp_path)
    assert found == ConnectServer("spark-connect", 15003, "abc")
    assert (found.address, found.url) == ("sc://spark-connect:15003", "sc://spark-connect:15003/;token=abc")
    monkeypatch.setenv(REMOTE_VARIABLE, "http://spark:15002")
    with pytest.raises(ValueError, match="is not a Spark Connect address"):
        find_server(tmp_path)


def test_loopback_and_wildcard_servers_are_reached_as_localhost() -> None:
    # pyspark's client sends a token without TLS only to "localhost"
    for host in ("127.0.0.1", "0.0.0.0", "::1", "localhost"):
        assert ConnectServer(host, 15002, "t").url == "sc://localhost:15002/;token=t"
    assert ConnectServer("10.0.0.5", 15002).url == "sc://10.0.0.5:15002"


def test_deltamq_sql_skips_a_server_that_does_not_answer(home: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    write_record(server_of(tmp_path, os.getpid(), port))             # a live process, nothing listening
    assert sql_command._remote_session(tmp_path) is None
    assert capsys.readouterr().err == (f"deltamq sql: the Spark Connect server at sc://localhost:{port}"
                                       " does not answer: using a local Spark session\n")


def test_deltamq_sql_without_a_server_starts_no_client(home: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert sql_command._remote_session(tmp_path) is None
    assert capsys.readouterr().err == ""


# -- Spark Connect's server jar --------------------------------------------------------------

def test_pyspark_ships_spark_connect_so_nothing_is_fetched(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(home))        # no mvn: it must not be needed
    monkeypatch.delenv("SPARK_HOME", raising=False)
    lines: list[str] = []
    assert delta_jars.connect_jars(lines.append) == []
    assert lines == []
    assert delta_jars.connect_artifact() == f"org.apache.spark:spark-connect_2.13:{version('pyspark')}"


def overlay(real: Path, target: Path, extra: Path) -> None:
    """``target``: a repository with ``real``'s contents (linked) and ``extra``'s (relative path kept)."""
    for part_count in range(len(extra.parts)):
        here = target.joinpath(*extra.parts[:part_count])
        source = real.joinpath(*extra.parts[:part_count])
        here.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            for child in source.iterdir():
                if child.name != extra.parts[part_count] and not (here / child.name).exists():
                    (here / child.name).symlink_to(child)
    target.joinpath(*extra.parts).mkdir(parents=True, exist_ok=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("mvn") is None, reason="needs Maven")
def test_a_spark_without_spark_connect_fetches_it_once_with_maven(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A SPARK_HOME without the jar; a mirror (a file repository) that has it; an empty ~/.m2."""
    pyspark_jars = delta_jars.spark_jars_dir()
    connect_jar = next(pyspark_jars.glob("spark-connect_2.13-*.jar"))
    spark_home = tmp_path / "spark"
    (spark_home / "jars").mkdir(parents=True)
    for jar in pyspark_jars.glob("*.jar"):
        if jar != connect_jar:
            (spark_home / "jars" / jar.name).symlink_to(jar)
    ver = version("pyspark")
    relative = Path("org/apache/spark/spark-connect_2.13") / ver
    mirror = tmp_path / "mirror"
    overlay(delta_jars.maven_repository(), mirror, relative)
    shutil.copy(connect_jar, mirror / relative / f"spark-connect_2.13-{ver}.jar")
    (mirror / relative / f"spark-connect_2.13-{ver}.pom").write_text(f"""<project>
  <modelVersion>4.0.0</modelVersion><groupId>org.apache.spark</groupId>
  <artifactId>spark-connect_2.13</artifactId><version>{ver}</version>
</project>""")
    home = tmp_path / "home"
    (home / ".m2").mkdir(parents=True)
    (home / ".m2" / "settings.xml").write_text(f"""<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors><mirror><id>test-mirror</id><mirrorOf>*</mirrorOf><url>{mirror.as_uri()}</url></mirror></mirrors>
</settings>""")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    lines: list[str] = []
    jars = delta_jars.connect_jars(lines.append)
    repository = home / ".m2" / "repository"
    assert [jar.name for jar in jars] == [f"spark-connect_2.13-{ver}.jar"]
    assert jars[0].is_relative_to(repository) and jars[0].stat().st_size == connect_jar.stat().st_size
    assert lines[0] == (f"fetching org.apache.spark:spark-connect_2.13:{ver} and the jars it needs beyond"
                        f" pyspark's with Maven, once, into {repository} (Maven's output:"
                        f" {home}/.cache/deltamq/maven.log)")
    assert re.sub(r"\(.*\)", "(SIZE)", lines[1]) == \
        f"fetched org.apache.spark:spark-connect_2.13:{ver} (SIZE) from test-mirror"
    assert re.fullmatch(r"fetched \d+\.\d MB for Spark \(1 jar\).*; later runs fetch nothing", lines[-1])
    # remembered: a second call neither fetches nor starts Maven
    monkeypatch.setenv("PATH", str(tmp_path))
    again: list[str] = []
    assert delta_jars.connect_jars(again.append) == jars and again == []
