"""Delta Lake's jars for Spark: only what pyspark lacks, fetched once with Maven.

Delta Spark's jars are not on PyPI.  pyspark ships Spark's own jars (Scala's
library and ANTLR's runtime among them), so a session needs only
``io.delta:delta-spark_2.13`` (the version of the installed ``delta-spark``
package) and those of its dependencies pyspark does not ship: with
delta-spark 4.0.0, ``io.delta:delta-storage``; 2 jars, 7.8 MB.

They are resolved by Maven itself, from a generated POM that depends on
delta-spark and excludes every artifact pyspark ships: one ``mvn`` run that
downloads those jars into the local Maven repository (``~/.m2/repository``,
or ``<localRepository>`` of ``~/.m2/settings.xml``; mirrors and proxies of
the settings apply) and lists their paths.  ``mvn dependency:get`` was used
before: it resolved delta-spark's *provided* dependencies too (all of Spark,
Hadoop and the AWS SDK: 694 MB) for the 3 jars it used.

The paths are remembered in ``~/.cache/deltamq/delta-jars-<delta>-pyspark-<pyspark>.txt``:
while those files exist, nothing is fetched and Maven is not started.  Each
jar fetched is reported as a line (``fetched io.delta:delta-spark_2.13:4.0.0
(7.7 MB) from central``); Maven's own output goes to
``~/.cache/deltamq/maven.log``.

Spark Connect's server (``deltamq spark serve``) needs
``org.apache.spark:spark-connect_2.13`` of the installed pyspark: pyspark
4.0 ships it among its own jars, so :func:`connect_jars` fetches nothing
then; a pyspark (or ``SPARK_HOME``) without it gets it the same way, once,
remembered in ``~/.cache/deltamq/spark-connect-jars-pyspark-<pyspark>.txt``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from urllib.parse import urlparse

from lakehouse.prerequisites import require_maven

SCALA_VERSION = "2.13"
#: the plugin that lists the resolved jars; pinned, so every Maven fetches the same
#: (Maven 3.8's default version: 7 MB of plugin on a first use of Maven, none after)
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:2.8"
_PROJECT = "deltamq-delta-jars"

Progress = Callable[[str], None]


def delta_artifact() -> str:
    """The Maven coordinate of the Delta Spark jar matching the installed delta-spark."""
    return f"io.delta:delta-spark_{SCALA_VERSION}:{version('delta-spark')}"


def connect_artifact() -> str:
    """The Maven coordinate of Spark Connect's server jar matching the installed pyspark."""
    return f"org.apache.spark:spark-connect_{SCALA_VERSION}:{version('pyspark')}"


def cache_dir() -> Path:
    """Where DeltaMQ keeps what it builds or fetches for Spark, and those steps' logs."""
    return Path.home() / ".cache" / "deltamq"


def maven_repository() -> Path:
    """The local Maven repository: ``~/.m2/settings.xml``'s ``localRepository``, else ``~/.m2/repository``."""
    settings = Path.home() / ".m2" / "settings.xml"
    try:
        root = ElementTree.parse(settings).getroot()
    except (OSError, ElementTree.ParseError):
        root = None
    if root is not None:
        for element in root.iter():
            if element.tag.rsplit("}", 1)[-1] == "localRepository" and element.text and element.text.strip():
                text = element.text.strip().replace("${user.home}", str(Path.home()))
                return Path(text).expanduser()
    return Path.home() / ".m2" / "repository"


def spark_jars_dir() -> Path:
    """The directory of the jars Spark runs with (pyspark's own, unless SPARK_HOME says otherwise)."""
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        return Path(spark_home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def bundled_artifact_ids(jars_dir: Path) -> set[str]:
    """The artifact ids of the jars in ``jars_dir`` (``scala-library-2.13.16.jar``: ``scala-library``)."""
    names = set()
    for jar in jars_dir.glob("*.jar"):
        match = re.fullmatch(r"(.+)-\d[^-]*(?:-.*)?\.jar", jar.name)
        if match is not None:
            names.add(match.group(1))
    return names


def manifest_path() -> Path:
    return cache_dir() / f"delta-jars-{version('delta-spark')}-pyspark-{version('pyspark')}.txt"


def write_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def connect_manifest_path() -> Path:
    return cache_dir() / f"spark-connect-jars-pyspark-{version('pyspark')}.txt"


def delta_jars(progress: Progress = write_stderr) -> list[Path]:
    """The jars a Spark session needs for Delta beyond pyspark's: fetched unless already present."""
    return cached_jars(manifest_path(), lambda: fetch(progress))


def connect_jars(progress: Progress = write_stderr) -> list[Path]:
    """The jars Spark Connect's server needs beyond pyspark's: none when pyspark ships it (4.0 does)."""
    artifact = connect_artifact()
    if artifact.split(":")[1] in bundled_artifact_ids(spark_jars_dir()):
        return []
    return cached_jars(connect_manifest_path(),
                       lambda: fetch_artifacts([artifact], "Spark Connect's server jar", progress))


def cached_jars(manifest: Path, fetcher: Callable[[], list[Path]]) -> list[Path]:
    """The jars listed in ``manifest`` while they all exist; else ``fetcher()``'s, then listed there."""
    try:
        jars = [Path(line) for line in manifest.read_text().splitlines() if line.strip()]
    except OSError:
        jars = []
    if jars and all(jar.is_file() for jar in jars):
        return jars
    jars = fetcher()
    manifest.parent.mkdir(parents=True, exist_ok=True)
    temp = manifest.with_suffix(f".{os.getpid()}.tmp")
    temp.write_text("".join(f"{jar}\n" for jar in jars))
    os.replace(temp, manifest)
    return jars


class FetchFailed(RuntimeError):
    """Maven could not fetch the jars; the text names its log."""


def fetch(progress: Progress = write_stderr) -> list[Path]:
    """Resolve and download Delta's jars with Maven; report each jar fetched through ``progress``."""
    artifact = delta_artifact()
    return fetch_artifacts([artifact], f"Delta Lake's jars for Spark ({artifact})", progress)


def fetch_artifacts(artifacts: list[str], what: str, progress: Progress = write_stderr,
                    excluded: Iterable[str] = ()) -> list[Path]:
    """Resolve and download ``artifacts`` and what they need beyond pyspark's jars (and ``excluded``)."""
    artifact = ", ".join(artifacts)
    mvn = require_maven(f"once, to fetch {what}")
    repository = maven_repository()
    log_path = cache_dir() / "maven.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    progress(f"fetching {artifact} and the jars {'they need' if len(artifacts) > 1 else 'it needs'}"
             f" beyond pyspark's with Maven, once, into {repository} (Maven's output: {log_path})")
    # Maven reads ~/.m2/settings.xml from the JVM's user.home (the account's home,
    # not $HOME): make it the same home this process uses
    env = dict(os.environ, MAVEN_OPTS=f"{os.environ.get('MAVEN_OPTS', '')} -Duser.home={Path.home()}".strip())
    with tempfile.TemporaryDirectory(prefix="deltamq-delta-jars-") as work:
        pom, classpath = Path(work) / "pom.xml", Path(work) / "classpath.txt"
        pom.write_text(delta_pom(artifacts, bundled_artifact_ids(spark_jars_dir()) | set(excluded)))
        command = [str(mvn), "-B", "-Dstyle.color=never", f"-Dmaven.repo.local={repository}",
                   "-f", str(pom), f"{DEPENDENCY_PLUGIN}:build-classpath", f"-Dmdep.outputFile={classpath}"]
        transfers = MavenTransfers(repository, progress)
        with open(log_path, "w", encoding="utf-8") as log:
            log.write(" ".join(command) + "\n")
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=work,
                                  env=env, text=True, errors="replace") as mvn_process:
                assert mvn_process.stdout is not None
                for line in mvn_process.stdout:
                    log.write(line)
                    transfers.feed(line)
            status = mvn_process.returncode
        if status != 0 or not classpath.is_file():
            reason = transfers.first_error or f"exit status {status}"
            raise FetchFailed(f"Maven could not fetch {artifact}: {reason} (its output: {log_path})")
        jars = [Path(entry) for entry in classpath.read_text().strip().split(os.pathsep) if entry]
    transfers.finish(jars)
    return jars


def delta_pom(artifacts: str | Iterable[str], excluded: Iterable[str]) -> str:
    """A POM depending on ``artifacts`` without any of the ``excluded`` artifact ids (any group)."""
    exclusions = "".join(f"<exclusion><groupId>*</groupId><artifactId>{_xml(a)}</artifactId></exclusion>"
                         for a in sorted(excluded))
    dependencies = []
    for artifact in [artifacts] if isinstance(artifacts, str) else artifacts:
        group, name, ver = artifact.split(":")
        dependencies.append(f"""
    <dependency>
      <groupId>{_xml(group)}</groupId><artifactId>{_xml(name)}</artifactId><version>{_xml(ver)}</version>
      <exclusions>{exclusions}</exclusions>
    </dependency>""")
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.deltamq</groupId><artifactId>{_PROJECT}</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>{"".join(dependencies)}
  </dependencies>
</project>
"""


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_DOWNLOADED = re.compile(r"Downloaded from (?P<repo>[^:\s]+): (?P<url>\S+) \((?P<size>[\d.,]+) (?P<unit>[kMG]?B)")
_UNITS = {"B": 1, "kB": 1000, "MB": 1000**2, "GB": 1000**3}


@dataclass
class MavenTransfers:
    """Follows Maven's batch-mode output: one progress line per jar of ours it downloads.

    Maven resolves the project's dependencies (ours) after printing ``Building
    <project>`` and before the plugin's first ``--- plugin:goal`` header; the
    plugin's own dependencies, downloaded on a first use of Maven, come outside
    that stretch and are summed up, not listed.
    """

    repository: Path
    progress: Progress
    in_project: bool = False
    first_error: str | None = None
    reported: set[str] = field(default_factory=set)
    #: jars downloaded outside that stretch: file name -> (progress line, bytes)
    elsewhere: dict[str, tuple[str, int]] = field(default_factory=dict)
    project_bytes: int = 0
    maven_bytes: int = 0

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        if f"Building {_PROJECT}" in line:
            self.in_project = True
        elif self.in_project and line.startswith("[INFO] --- "):
            self.in_project = False
        elif line.startswith("[ERROR] ") and self.first_error is None:
            self.first_error = line.removeprefix("[ERROR] ").strip()
        match = _DOWNLOADED.search(line)
        if match is None:
            return
        size = int(float(match["size"].replace(",", "")) * _UNITS[match["unit"]])
        path = urlparse(match["url"]).path
        name = path.rsplit("/", 1)[-1]
        report = f"fetched {self.coordinate(path)} ({match['size']} {match['unit']}) from {match['repo']}"
        if not self.in_project:
            self.maven_bytes += size
            if name.endswith(".jar"):
                self.elsewhere[name] = (report, size)
            return
        self.project_bytes += size
        if name.endswith(".jar"):
            self.reported.add(name)
            self.progress(report)

    def coordinate(self, url_path: str) -> str:
        """``group:artifact:version`` of a repository path, the group found where the local copy lives."""
        parts = [p for p in url_path.split("/") if p]
        artifact, ver = parts[-3], parts[-2]
        for start in range(len(parts) - 3):
            if self.repository.joinpath(*parts[start:-1]).is_dir():
                return ":".join([".".join(parts[start:-3]), artifact, ver])
        return f"{artifact}:{ver}"

    def finish(self, jars: list[Path]) -> None:
        """Report jars fetched outside the stretch we expected them in, then the totals."""
        for jar in jars:
            if jar.name not in self.reported and jar.name in self.elsewhere:
                report, size = self.elsewhere[jar.name]
                self.progress(report)
                self.project_bytes += size
                self.maven_bytes -= size
        if not self.project_bytes and not self.maven_bytes:
            return
        summary = f"fetched {_megabytes(self.project_bytes)} for Spark ({len(jars)} jar{'s' * (len(jars) != 1)})"
        if self.maven_bytes:
            summary += f" and {_megabytes(self.maven_bytes)} of Maven's own plugins (first use of Maven)"
        self.progress(summary + "; later runs fetch nothing")


def _megabytes(size: int) -> str:
    return f"{size / 1000**2:.1f} MB"
