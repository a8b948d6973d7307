"""Spark over a broker whose tables are on object storage (a node's ``storePath`` ``s3://bucket/prefix``).

The broker writes its tables there with delta-rs, configured by the standard
``AWS_*`` environment variables (``docs/tables.md``, "Object storage").  A
Spark session reads the same tables given the same variables:

* Hadoop's S3A file system serves ``s3://`` and ``s3a://`` paths.  pyspark
  ships Hadoop's client but not ``hadoop-aws``: :func:`object_store_jars`
  fetches it once with Maven (like Delta's jars, :mod:`lakehouse.delta_jars`),
  with the few AWS SDK modules S3A uses instead of the SDK's 600 MB bundle.
* :func:`s3a_settings` turns the environment into S3A settings: endpoint
  (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``; path-style requests, as
  MinIO and moto serve them), region, and the credentials.  The credentials
  are passed as settings so that executors on other machines (a standalone
  cluster) read with them too.
* :func:`object_store_tables` lists the nodes under a data location (every
  ``<location>/<node>/<table>/_delta_log``) with pyarrow's S3 file system,
  configured from the same variables; it runs in the client, so it works for
  a Spark Connect session as well.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from lakehouse.delta_jars import Progress, cache_dir, cached_jars, fetch_artifacts, spark_jars_dir, write_stderr

#: URI schemes of object-store locations Spark reads through S3A
SCHEMES = ("s3", "s3a")
#: the AWS SDK v2 release of those modules: hadoop-aws 3.4.1 was built with 2.24.6, whose
#: s3-transfer-manager was never published; 2.25.0 is the next release that has them all
AWS_SDK_VERSION = "2.25.0"
#: the SDK modules S3A uses (its ``bundle`` holds them and 300 more: excluded)
AWS_SDK_MODULES = ("s3", "s3-transfer-manager", "sts")


def is_object_store(location: str | os.PathLike[str] | None) -> bool:
    """True for an ``s3://`` or ``s3a://`` location."""
    if location is None or isinstance(location, os.PathLike):
        return False
    return urlparse(location).scheme in SCHEMES and "://" in location


def hadoop_version(jars_dir: Path | None = None) -> str:
    """The Hadoop release pyspark ships (``hadoop-client-api-3.4.1.jar``: ``3.4.1``)."""
    jars_dir = jars_dir or spark_jars_dir()
    for jar in sorted(jars_dir.glob("hadoop-client-api-*.jar")):
        match = re.fullmatch(r"hadoop-client-api-(\d[\w.]*)\.jar", jar.name)
        if match:
            return match.group(1)
    raise FileNotFoundError(f"no hadoop-client-api jar in {jars_dir}: cannot tell which hadoop-aws Spark needs")


def object_store_artifacts(hadoop: str) -> list[str]:
    """The Maven coordinates of S3A for Hadoop ``hadoop``."""
    return [f"org.apache.hadoop:hadoop-aws:{hadoop}",
            *(f"software.amazon.awssdk:{module}:{AWS_SDK_VERSION}" for module in AWS_SDK_MODULES)]


def object_store_jars(progress: Progress = write_stderr) -> list[Path]:
    """hadoop-aws and the AWS SDK modules it uses: fetched once, then listed in a manifest."""
    hadoop = hadoop_version()
    manifest = cache_dir() / f"s3a-jars-hadoop-{hadoop}-sdk-{AWS_SDK_VERSION}.txt"
    return cached_jars(manifest, lambda: fetch_artifacts(
        object_store_artifacts(hadoop), f"Hadoop's S3A file system for Spark (hadoop-aws {hadoop})", progress,
        excluded={"bundle"}))


def _endpoint(env: Mapping[str, str]) -> str | None:
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def _region(env: Mapping[str, str]) -> str | None:
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


def s3a_settings(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Spark settings that make ``s3://`` and ``s3a://`` paths read as the broker's delta-rs writes them."""
    env = os.environ if env is None else env
    settings = [("spark.hadoop.fs.s3.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem"),
                ("spark.hadoop.fs.s3a.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem")]
    endpoint = _endpoint(env)
    if endpoint:
        settings += [("spark.hadoop.fs.s3a.endpoint", endpoint),
                     ("spark.hadoop.fs.s3a.path.style.access", "true"),
                     ("spark.hadoop.fs.s3a.connection.ssl.enabled", str(urlparse(endpoint).scheme == "https").lower())]
    region = _region(env)
    if region:
        settings.append(("spark.hadoop.fs.s3a.endpoint.region", region))
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        settings += [("spark.hadoop.fs.s3a.access.key", env["AWS_ACCESS_KEY_ID"]),
                     ("spark.hadoop.fs.s3a.secret.key", env["AWS_SECRET_ACCESS_KEY"])]
        if env.get("AWS_SESSION_TOKEN"):
            settings += [("spark.hadoop.fs.s3a.session.token", env["AWS_SESSION_TOKEN"]),
                         ("spark.hadoop.fs.s3a.aws.credentials.provider",
                          "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider")]
    return settings


def object_store_tables(location: str, table: str, env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(node name, table URI) for every node under ``location`` holding ``table`` (a Delta log)."""
    from pyarrow import fs

    env = os.environ if env is None else env
    options: dict[str, object] = {}
    endpoint = _endpoint(env)
    if endpoint:
        parsed = urlparse(endpoint)
        options["endpoint_override"] = parsed.netloc or parsed.path
        options["scheme"] = parsed.scheme or "https"
    region = _region(env)
    if region:
        options["region"] = region
    store = fs.S3FileSystem(**options)   # credentials: the AWS SDK's default chain (the environment first)
    scheme, rest = location.split("://", 1)
    root = rest.strip("/")
    found = []
    for entry in store.get_file_info(fs.FileSelector(root, allow_not_found=True)):
        if entry.type != fs.FileType.Directory:
            continue
        log = store.get_file_info(f"{entry.path}/{table}/_delta_log")
        if log.type == fs.FileType.Directory:
            found.append((entry.base_name, f"{scheme}://{entry.path}/{table}"))
    return sorted(found)
