"""Delta's jars for Spark: what is fetched, how it is reported, when nothing is; Spark's prerequisites."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from lakehouse import delta_jars
from lakehouse.delta_jars import MavenTransfers, bundled_artifact_ids, delta_pom
from lakehouse.prerequisites import MissingPrerequisite, java_major_version, require_java, require_maven


@pytest.mark.parametrize(("output", "major"), [
    ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
    ('openjdk version "21" 2023-09-19', 21),
    ('java version "1.8.0_392"', 8),
    ('openjdk version "11.0.2" 2019-01-15', 11),
    ("Error: could not find libjava.so", None),
])
def test_java_major_version(output: str, major: int | None) -> None:
    assert java_major_version(output) == major


def test_a_java_older_than_17_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", "")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingPrerequisite, match=r"Spark needs Java 17 or later: .*java is Java 11"):
        require_java()


def test_java_home_without_java_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(MissingPrerequisite, match=f"JAVA_HOME is {tmp_path}, which has no bin/java"):
        require_java()


def test_missing_maven_says_what_it_is_needed_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingPrerequisite, match=r"Maven is needed once, to fetch X: `mvn` not found on PATH"):
        require_maven("once, to fetch X")


def test_bundled_artifact_ids_strip_the_version(tmp_path: Path) -> None:
    for name in ("scala-library-2.13.16.jar", "antlr4-runtime-4.13.1.jar", "log4j-1.2-api-2.24.3.jar",
                 "spark-core_2.13-4.0.1.jar", "netty-transport-native-epoll-4.1.118.Final-linux-x86_64.jar",
                 "README.txt"):
        (tmp_path / name).touch()
    assert bundled_artifact_ids(tmp_path) == {"scala-library", "antlr4-runtime", "log4j-1.2-api",
                                              "spark-core_2.13", "netty-transport-native-epoll"}


def test_the_pom_excludes_what_spark_ships_from_any_group() -> None:
    pom = ElementTree.fromstring(delta_pom("io.delta:delta-spark_2.13:4.0.0", {"scala-library", "a<b"}))
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    dependency = pom.find("m:dependencies/m:dependency", ns)
    assert dependency is not None
    assert [dependency.findtext(f"m:{tag}", namespaces=ns) for tag in ("groupId", "artifactId", "version")] \
        == ["io.delta", "delta-spark_2.13", "4.0.0"]
    exclusions = [(e.findtext("m:groupId", namespaces=ns), e.findtext("m:artifactId", namespaces=ns))
                  for e in dependency.iterfind("m:exclusions/m:exclusion", ns)]
    assert exclusions == [("*", "a<b"), ("*", "scala-library")]


# Maven 3.8's batch-mode output of a first fetch, shortened (its plugin's own
# downloads come before the project's header and after the plugin's)
_MAVEN_OUTPUT = """\
[INFO] Downloading from central: https://repo.maven.apache.org/maven2/org/apache/maven/plugins/maven-dependency-plugin/2.8/maven-dependency-plugin-2.8.pom
[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/org/apache/maven/plugins/maven-dependency-plugin/2.8/maven-dependency-plugin-2.8.pom (11 kB at 5.6 kB/s)
[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/org/apache/maven/plugins/maven-dependency-plugin/2.8/maven-dependency-plugin-2.8.jar (153 kB at 598 kB/s)
[INFO] -------------------< io.deltamq:deltamq-delta-jars >--------------------
[INFO] Building deltamq-delta-jars 1
[INFO] --------------------------------[ pom ]---------------------------------
[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/io/delta/delta-spark_2.13/4.0.0/delta-spark_2.13-4.0.0.pom (6.2 kB at 32 kB/s)
[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/io/delta/delta-storage/4.0.0/delta-storage-4.0.0.jar (70 kB at 113 kB/s)
[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/io/delta/delta-spark_2.13/4.0.0/delta-spark_2.13-4.0.0.jar (7.7 MB at 2.9 MB/s)
[INFO]
[INFO] --- maven-dependency-plugin:2.8:build-classpath (default-cli) @ deltamq-delta-jars ---
[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/org/codehaus/plexus/plexus-utils/3.0.15/plexus-utils-3.0.15.jar (239 kB at 1.2 MB/s)
[INFO] BUILD SUCCESS
"""


def _repository_with(tmp_path: Path, *paths: str) -> Path:
    repository = tmp_path / "repository"
    for path in paths:
        (repository / path).mkdir(parents=True)
    return repository


def test_each_jar_maven_fetches_for_spark_is_one_line_and_its_plugin_a_total(tmp_path: Path) -> None:
    repository = _repository_with(tmp_path, "io/delta/delta-spark_2.13/4.0.0", "io/delta/delta-storage/4.0.0",
                                  "org/apache/maven/plugins/maven-dependency-plugin/2.8")
    lines: list[str] = []
    transfers = MavenTransfers(repository, lines.append)
    for line in _MAVEN_OUTPUT.splitlines(keepends=True):
        transfers.feed(line)
    transfers.finish([repository / "io/delta/delta-spark_2.13/4.0.0/delta-spark_2.13-4.0.0.jar",
                      repository / "io/delta/delta-storage/4.0.0/delta-storage-4.0.0.jar"])
    assert lines == [
        "fetched io.delta:delta-storage:4.0.0 (70 kB) from central",
        "fetched io.delta:delta-spark_2.13:4.0.0 (7.7 MB) from central",
        "fetched 7.8 MB for Spark (2 jars) and 0.4 MB of Maven's own plugins (first use of Maven);"
        " later runs fetch nothing",
    ]


def test_a_jar_of_ours_maven_fetched_out_of_the_expected_order_is_still_reported(tmp_path: Path) -> None:
    repository = _repository_with(tmp_path, "io/delta/delta-storage/4.0.0")
    lines: list[str] = []
    transfers = MavenTransfers(repository, lines.append)
    transfers.feed("[INFO] Downloaded from mirror: file:///srv/m2/io/delta/delta-storage/4.0.0/"
                   "delta-storage-4.0.0.jar (70 kB at 1 MB/s)\n")
    assert lines == []
    transfers.finish([repository / "io/delta/delta-storage/4.0.0/delta-storage-4.0.0.jar"])
    assert lines == ["fetched io.delta:delta-storage:4.0.0 (70 kB) from mirror",
                     "fetched 0.1 MB for Spark (1 jar); later runs fetch nothing"]


def test_a_run_that_fetched_nothing_reports_nothing(tmp_path: Path) -> None:
    lines: list[str] = []
    transfers = MavenTransfers(tmp_path, lines.append)
    for line in ("[INFO] Building deltamq-delta-jars 1\n", "[INFO] --- maven-dependency-plugin:2.8 ---\n"):
        transfers.feed(line)
    transfers.finish([tmp_path / "delta-spark_2.13-4.0.0.jar"])
    assert lines == []


def test_jars_already_fetched_need_no_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))          # no mvn
    jars = [tmp_path / "delta-spark_2.13-4.0.0.jar", tmp_path / "delta-storage-4.0.0.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    delta_jars.manifest_path().parent.mkdir(parents=True)
    delta_jars.manifest_path().write_text("".join(f"{jar}\n" for jar in jars))
    assert delta_jars.delta_jars(progress=pytest.fail) == jars
    jars[1].unlink()                                               # gone: fetched again, which needs mvn
    with pytest.raises(MissingPrerequisite, match="Maven is needed once, to fetch Delta Lake's jars"):
        delta_jars.delta_jars(progress=lambda line: None)


def test_maven_repository_follows_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert delta_jars.maven_repository() == tmp_path / ".m2" / "repository"
    (tmp_path / ".m2").mkdir()
    (tmp_path / ".m2" / "settings.xml").write_text(
        '<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">'
        "<localRepository>${user.home}/m2-elsewhere</localRepository></settings>")
    assert delta_jars.maven_repository() == tmp_path / "m2-elsewhere"
    assert os.fspath(delta_jars.cache_dir()).startswith(str(tmp_path))
