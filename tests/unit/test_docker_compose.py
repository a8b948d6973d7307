"""docker-compose.yml, the Dockerfile and the image's entrypoint hold together.

Where Docker Compose is installed (``docker compose`` or ``docker-compose``;
no daemon is needed) it validates and resolves the file itself, and the
checks below run on its result too.  Everywhere, the file is read as YAML
and its variables resolved with their defaults as Compose resolves them, and
the checks say what ``docker compose up`` relies on: every service has an
image or the build of this clone, ports do not clash, volumes are declared,
``depends_on`` waits for healthchecks that exist, every service that talks
to the object store has the same endpoint and credentials as the store
itself, the bucket created is the one the broker's ``storePath`` and the
Spark side use, and the broker's configuration file is the one the image
holds.  The object-store code paths the stack relies on are exercised
against a real S3 API server in ``tests/lakehouse/test_object_storage.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
SERVICES = {"minio", "create-bucket", "broker", "spark-master", "spark-worker", "spark-connect", "notebooks"}
DELTAMQ_SERVICES = SERVICES - {"minio", "create-bucket"}
WORKDIR = "/opt/deltamq"
_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """``value`` with Compose's ``${NAME}``, ``${NAME:-default}`` and ``$$`` resolved against ``env``."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(3)
        return env.get(name) or (match.group(2) or "")

    return _VARIABLE.sub(one, value)


def _normalise(model: dict[str, Any]) -> dict[str, Any]:
    """The parts the checks read, in one shape whether YAML or ``docker compose config`` made them."""
    services = {}
    for name, service in model["services"].items():
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) for item in environment)
        ports = []
        for port in service.get("ports") or ():
            if isinstance(port, dict):
                ports.append((str(port.get("published")), str(port["target"])))
            else:
                host, _, container = str(port).rpartition(":")
                ports.append((host, container.removesuffix("/tcp")))
        volumes = []
        for volume in service.get("volumes") or ():
            if isinstance(volume, dict):
                volumes.append((volume.get("type"), volume.get("source"), volume.get("target")))
            else:
                source, target = volume.split(":")[:2]
                volumes.append(("volume" if not source.startswith((".", "/")) else "bind", source, target))
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {dependency: {"condition": "service_started"} for dependency in depends}
        build = service.get("build")
        if isinstance(build, dict):
            build = build.get("context")
        command = service.get("command")
        services[name] = {
            "image": service.get("image"), "build": build, "command": command,
            "entrypoint": service.get("entrypoint"), "environment": {k: str(v) for k, v in environment.items()},
            "ports": ports, "volumes": volumes, "depends_on": depends,
            "healthcheck": service.get("healthcheck"), "restart": service.get("restart"),
            "hostname": service.get("hostname")}
    return {"services": services, "volumes": set(model.get("volumes") or {})}


def yaml_model(env: dict[str, str] | None = None) -> dict[str, Any]:
    return _normalise(interpolate(yaml.safe_load(COMPOSE.read_text()), env or {}))


def compose_command() -> list[str] | None:
    """``docker compose`` if that plugin answers, else ``docker-compose``, else None."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        try:
            probe = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return command
    return None


def models() -> list[tuple[str, dict[str, Any]]]:
    found = [("yaml", yaml_model())]
    command = compose_command()
    if command is not None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DELTAMQ_", "COMPOSE_"))}
        done = subprocess.run([*command, "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env=env)
        assert done.returncode == 0, f"{' '.join(command)} config refused docker-compose.yml:\n{done.stderr}"
        found.append((" ".join(command), _normalise(yaml.safe_load(done.stdout))))
    return found


@pytest.fixture(scope="module", params=["yaml", "compose"])
def model(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "yaml":
        return yaml_model()
    resolved = [m for how, m in models() if how != "yaml"]
    if not resolved:
        pytest.skip("Docker Compose is not installed here (neither `docker compose` nor `docker-compose`)")
    return resolved[0]


def _host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    assert parsed.hostname and parsed.port, url
    return parsed.hostname, parsed.port


def _listens(service: dict[str, Any], port: int) -> bool:
    """The service's container listens on ``port``: a port it publishes, or one its command names."""
    command = " ".join(service["command"] or [])
    return str(port) in {container for _host, container in service["ports"]} or str(port) in command.split() \
        or f":{port}" in command


# -- the file ---------------------------------------------------------------------------

def test_compose_config_accepts_the_file_where_compose_is_installed() -> None:
    command = compose_command()
    if command is None:
        pytest.skip("Docker Compose is not installed here (neither `docker compose` nor `docker-compose`)")
    assert [how for how, _model in models()] == ["yaml", " ".join(command)]


def test_the_stack_has_every_service(model: dict[str, Any]) -> None:
    services = model["services"]
    assert set(services) == SERVICES
    for name in DELTAMQ_SERVICES:                    # the image this clone's Dockerfile builds
        build = services[name]["build"]
        assert build is not None and Path(ROOT, build).resolve() == ROOT, (name, build)
        assert services[name]["image"] == "deltamq:latest"
    for name in SERVICES - DELTAMQ_SERVICES:         # third-party images, pinned to a release
        image = services[name]["image"]
        assert image and re.search(r":RELEASE\.\d{4}-\d\d-\d\dT", image), (name, image)


def test_ports_do_not_clash_and_volumes_are_declared(model: dict[str, Any]) -> None:
    published = [host for service in model["services"].values() for host, _container in service["ports"]]
    assert len(published) == len(set(published)), published
    for name, service in model["services"].items():
        for kind, source, _target in service["volumes"]:
            assert kind != "bind", f"{name} mounts {source} from the host"
            assert source in model["volumes"], f"{name} uses undeclared volume {source}"
    assert model["services"]["broker"]["ports"] == [("5672", "5672"), ("5671", "5671"), ("5673", "5673"),
                                                    ("8080", "8080")]


def _config_ports(config: dict[str, Any]) -> dict[str, int]:
    """Port name -> number, ``${deltamq.*}`` resolved from the configuration's context."""
    context = config["context"]
    return {port["name"]: int(re.sub(r"\$\{([\w.]+)\}", lambda v: context[v.group(1)], port["port"]))
            for port in config["ports"]}


def _exposed() -> set[int]:
    text = DOCKERFILE.read_text()
    return {int(port) for line in text.splitlines() if line.startswith("EXPOSE ") for port in line.split()[1:]}


def test_every_port_of_the_brokers_configurations_is_published_and_exposed(model: dict[str, Any]) -> None:
    """The stack's broker (conf/docker-compose.json) and the image's default (``deltamq serve``, the
    embedded conf/config.json) listen on AMQP, AMQPS, WebSocket and HTTP; compose publishes every port
    of the first, the Dockerfile exposes every port of both."""
    broker = model["services"]["broker"]
    command = broker["command"]
    stack = json.loads((ROOT / command[command.index("--config") + 1][len(WORKDIR) + 1:]).read_text())
    default = json.loads((ROOT / "broker" / "model" / "default_config.json").read_text())
    for config in (stack, default):
        assert _config_ports(config) == {"AMQP": 5672, "AMQPS": 5671, "WebSocket": 5673, "HTTP": 8080}
        assert set(_config_ports(config).values()) <= _exposed()
    assert {int(container) for _host, container in broker["ports"]} == set(_config_ports(stack).values())


def test_the_development_certificate_is_made_in_the_data_volume_for_the_brokers_host_name(
        model: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """AMQPS uses the AutoGeneratedSelfSigned key store, whose files go under ``deltamq.data_dir``:
    /data, the volume the image makes writable for its user and compose keeps; the certificate
    names the machine's host name, which compose sets to the service's name (other containers reach
    it as ``broker``)."""
    from broker.model.keystore import AUTO_GENERATED, AutoGeneratedSelfSignedKeyStore
    from broker.security import cert_generation

    broker = model["services"]["broker"]
    command = broker["command"]
    stack = json.loads((ROOT / command[command.index("--config") + 1][len(WORKDIR) + 1:]).read_text())
    amqps = next(port for port in stack["ports"] if port["name"] == "AMQPS")
    assert amqps["transports"] == ["SSL"]
    store = next(store for store in stack["keystores"] if store["name"] == amqps["keyStore"])
    assert store["type"] == AUTO_GENERATED and not set(store) & {"privateKeyUrl", "certificateUrl"}
    for attribute in ("private_key_url", "certificate_url", "ca_certificate_url"):
        assert getattr(AutoGeneratedSelfSignedKeyStore, attribute).default.startswith("${deltamq.data_dir}/tls/")
    data_dir = stack["context"]["deltamq.data_dir"]
    assert data_dir == "/data" and command[command.index("--data-dir") + 1] == data_dir
    assert ("volume", "broker-data", data_dir) in broker["volumes"]
    text = DOCKERFILE.read_text()
    assert re.search(r"chown -R deltamq:deltamq /data\b", text) and 'VOLUME ["/data"]' in text
    assert broker["hostname"] == "broker"
    monkeypatch.setattr(cert_generation.socket, "gethostname", lambda: broker["hostname"])
    assert "broker" in cert_generation.default_hostnames()


def test_every_service_waits_for_what_it_needs(model: dict[str, Any]) -> None:
    services = model["services"]
    for name, service in services.items():
        for dependency, how in service["depends_on"].items():
            assert dependency in services, (name, dependency)
            condition = how.get("condition")
            if condition == "service_healthy":
                assert services[dependency]["healthcheck"], f"{name} waits for {dependency}'s missing healthcheck"
            else:
                assert condition == "service_completed_successfully", (name, dependency, condition)
                assert services[dependency]["restart"] in (None, "no"), dependency
    assert set(services["broker"]["depends_on"]) == {"create-bucket"}
    assert set(services["spark-connect"]["depends_on"]) == {"broker", "spark-worker"}
    assert set(services["notebooks"]["depends_on"]) == {"spark-connect"}


def test_healthchecks_probe_what_the_service_serves(model: dict[str, Any]) -> None:
    for name, service in model["services"].items():
        if name == "create-bucket":
            assert service["healthcheck"] is None       # a one-shot job
            continue
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD", (name, test)
        text = " ".join(test)
        if name == "spark-connect":
            # its port opens before the views exist: ready is what `serve --status` says, for the
            # data directory it serves
            command = service["command"]
            assert test[1:5] == ["deltamq", "spark", "serve", "--status"], test
            assert test[test.index("--data-dir") + 1] == command[command.index("--data-dir") + 1]
            continue
        probed = re.search(r"\('([\w.-]+)', (\d+)\)", text)
        if probed is None:
            assert test[1:] == ["mc", "ready", "local"], (name, test)    # MinIO's own readiness probe
            continue
        host, port = probed.group(1), int(probed.group(2))
        assert host in ("127.0.0.1", name), (name, host)
        assert _listens(service, port), f"{name}'s healthcheck probes port {port}, which it does not serve"
        compile(test[-1], f"{name} healthcheck", "exec")


def test_object_store_settings_agree_everywhere(model: dict[str, Any]) -> None:
    services = model["services"]
    store = services["minio"]["environment"]
    users = {name: service["environment"] for name, service in services.items()
             if "AWS_ENDPOINT_URL" in service["environment"]}
    assert set(users) == {"create-bucket", "broker", "spark-worker", "spark-connect", "notebooks"}
    for name, env in users.items():
        host, port = _host_port(env["AWS_ENDPOINT_URL"])
        assert host == "minio" and _listens(services["minio"], port), (name, env["AWS_ENDPOINT_URL"])
        assert env["AWS_ACCESS_KEY_ID"] == store["MINIO_ROOT_USER"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == store["MINIO_ROOT_PASSWORD"], name
        assert env["AWS_ALLOW_HTTP"] == "true" and env["AWS_REGION"], name     # delta-rs needs both
    assert len(store["MINIO_ROOT_PASSWORD"]) >= 8           # MinIO refuses shorter ones


def test_the_bucket_created_is_the_one_the_broker_and_spark_use(model: dict[str, Any]) -> None:
    services = model["services"]
    bucket = services["create-bucket"]["environment"]["DELTAMQ_BUCKET"]
    script = " ".join(services["create-bucket"]["command"] or []).replace("$$", "$")   # as the shell gets it
    assert 'mc mb --ignore-existing "store/$DELTAMQ_BUCKET"' in script
    assert 'mc alias set store "$AWS_ENDPOINT_URL"' in script
    # the broker resolves deltamq.bucket from DELTAMQ_BUCKET (the shell spelling of the variable)
    broker = services["broker"]
    assert broker["environment"]["DELTAMQ_BUCKET"] == bucket
    command = broker["command"]
    config_path = command[command.index("--config") + 1]
    assert config_path.startswith(WORKDIR + "/")
    config = json.loads((ROOT / config_path[len(WORKDIR) + 1:]).read_text())
    nodes = config["virtualhostnodes"]
    assert [node["type"] for node in nodes] == ["delta"]
    store_path = nodes[0]["storePath"].replace("${deltamq.bucket}", bucket).replace("${this:name}", nodes[0]["name"])
    assert store_path == f"s3://{bucket}/nodes/default"
    for name in ("spark-connect", "notebooks"):
        env = services[name]["environment"]
        assert env["DELTAMQ_DATA_DIR"] == f"s3://{bucket}/nodes", name       # the nodes' parent
        assert f"s3://{bucket}/nodes" in " ".join(services[name]["command"]) or name == "notebooks"


def test_spark_services_find_each_other(model: dict[str, Any]) -> None:
    services = model["services"]
    master = services["spark-master"]
    for name in ("spark-worker", "spark-connect", "notebooks"):
        urls = [value for value in services[name]["environment"].values() if value.startswith("spark://")]
        urls += [arg for arg in services[name]["command"] if arg.startswith("spark://")]
        assert urls, f"{name} names no Spark master"
        for url in urls:
            host, port = _host_port(url)
            assert host == "spark-master" and _listens(master, port), (name, url)
    connect = services["spark-connect"]
    assert connect["command"][:3] == ["deltamq", "spark", "serve"]
    host, port = _host_port(services["notebooks"]["environment"]["SPARK_REMOTE"].replace("sc://", "http://"))
    assert host == "spark-connect" and _listens(connect, port)


# -- the image --------------------------------------------------------------------------

def test_the_dockerfile_installs_this_clone_with_java_and_runs_the_broker() -> None:
    text = DOCKERFILE.read_text()
    instructions = [line.split(None, 1) for line in re.sub(r"\\\n", " ", text).splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
    kinds = [kind for kind, _rest in instructions]
    assert kinds[0] == "FROM" and instructions[0][1].startswith("python:3.")
    assert ("WORKDIR", WORKDIR) in [(k, r.strip()) for k, r in instructions]
    runs = " ".join(rest for kind, rest in instructions if kind == "RUN")
    assert "openjdk-17-jdk-headless" in runs                    # Spark 4 on Java 17, javac for the log store
    assert re.search(r"pip install \"\.\[notebooks\]\"", runs)  # this clone, with the notebooks' extra
    for kind, rest in instructions:
        if kind == "COPY":
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    entrypoint = json.loads(dict(instructions)["ENTRYPOINT"])
    assert entrypoint[-1] == f"{WORKDIR}/docker/entrypoint.sh"
    assert json.loads(dict(instructions)["CMD"])[:2] == ["deltamq", "serve"]
    script = ROOT / "docker" / "entrypoint.sh"
    assert script.stat().st_mode & stat.S_IXUSR, "docker/entrypoint.sh is not executable"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "data", "tests"} <= set(ignored)


def test_the_entrypoint_adds_the_stack_user_then_runs_the_command(tmp_path: Path) -> None:
    """``docker/entrypoint.sh``: the user exists (an administrator) with the given password, at every start."""
    from broker.security.passwords import PasswordFile, verify_password

    bin_dir = Path(sys.executable).parent
    deltamq = bin_dir / "deltamq"
    if not deltamq.exists():
        pytest.skip("no deltamq console script beside this Python")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", DELTAMQ_DATA_DIR=str(tmp_path),
               DELTAMQ_USER="stack", DELTAMQ_PASSWORD="first")
    marker = tmp_path / "ran"
    script = str(ROOT / "docker" / "entrypoint.sh")
    for password in ("first", "second"):                      # a restart with a changed password
        env["DELTAMQ_PASSWORD"] = password
        done = subprocess.run([script, "touch", str(marker)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert marker.exists()
        users = PasswordFile(tmp_path / "passwords").load()
        assert users["stack"].administrator
        assert verify_password(password, users["stack"].password)
        marker.unlink()
