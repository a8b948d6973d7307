"""What Spark needs outside Python, checked before anything slow starts.

pyspark brings Spark's jars but not a Java runtime: Spark 4 runs on Java 17
or 21, found as Spark's own launcher finds it (``$JAVA_HOME/bin/java``, else
``java`` on ``PATH``).  Maven (``mvn``) is needed only while Delta Lake's jars
are not yet in the local Maven repository (:mod:`lakehouse.delta_jars`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

#: the oldest Java major version Spark 4 runs on
JAVA_MAJOR = 17


class MissingPrerequisite(RuntimeError):
    """A program Spark needs is missing or too old; the text says which and what to do."""


def java_executable() -> Path:
    """The ``java`` Spark's launcher will run; raise :class:`MissingPrerequisite` if there is none."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise MissingPrerequisite(f"Spark needs a Java runtime (JDK {JAVA_MAJOR}):"
                                      f" JAVA_HOME is {java_home}, which has no bin/java")
        return java
    found = shutil.which("java")
    if found is None:
        raise MissingPrerequisite(f"Spark needs a Java runtime (JDK {JAVA_MAJOR}): `java` not found"
                                  " on PATH (install one, e.g. openjdk-17-jdk, or set JAVA_HOME)")
    return Path(found)


def require_java() -> Path:
    """The ``java`` Spark will run, checked to be Java 17 or later."""
    java = java_executable()
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MissingPrerequisite(f"Spark needs a Java runtime (JDK {JAVA_MAJOR}): {java} -version"
                                  f" failed ({exc})") from None
    major = java_major_version(out.stderr + out.stdout)
    if major is None:
        raise MissingPrerequisite(f"Spark needs a Java runtime (JDK {JAVA_MAJOR}): {java} -version"
                                  f" printed no version (exit status {out.returncode})")
    if major < JAVA_MAJOR:
        raise MissingPrerequisite(f"Spark needs Java {JAVA_MAJOR} or later: {java} is Java {major}"
                                  " (install a newer JDK or point JAVA_HOME at one)")
    return java


def java_major_version(version_output: str) -> int | None:
    """The major version in ``java -version``'s output (``1.8.0_392`` is 8, ``17.0.15`` is 17)."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if match is None:
        return None
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


def require_maven(why: str) -> Path:
    """``mvn`` on PATH; ``why`` says what it is needed for."""
    found = shutil.which("mvn")
    if found is None:
        raise MissingPrerequisite(f"Maven is needed {why}: `mvn` not found on PATH (install Maven,"
                                  " e.g. the maven package)")
    return Path(found)
