"""The team-server deployment files are valid and consistent with each other and the code."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # jsonschema ships no types
import pytest
import yaml

from relaybus.shared.settings import Settings
from tests.support.deploy_files import (
    COMPOSE,
    DEPLOY,
    ROOT,
    compose_variables,
    env_example_names,
    interpolate,
    load_yaml,
)

TLS_OVERRIDE = DEPLOY / "compose.redis-tls.yml"
SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "compose-spec.json").read_text())
#: The values an operator must set in .env; everything else has a default.
REQUIRED_ENV = {"REDIS_PASSWORD": "s3cret", "RELAYBUS_TOKENS": "tok"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(interpolate(COMPOSE.read_text(), REQUIRED_ENV)))


def _container_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    return {str(k): str(v) for k, v in env.items()}


def _bind_mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each short-syntax volume entry."""
    mounts = []
    for entry in service.get("volumes", []):
        parts = str(entry).split(":")
        mounts.append((parts[0], parts[1], parts[2] if len(parts) > 2 else "rw"))
    return mounts


def test_compose_file_validates_against_the_compose_schema() -> None:
    """docker-compose.yml, raw and interpolated, is valid per the Compose Specification."""
    validator = jsonschema.Draft7Validator(SCHEMA)
    raw = load_yaml(COMPOSE)
    interpolated = yaml.safe_load(interpolate(COMPOSE.read_text(), REQUIRED_ENV))
    for doc in (raw, interpolated):
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert errors == []


def test_every_interpolated_variable_is_documented_in_env_example() -> None:
    """Each ${VAR} of docker-compose.yml and its TLS override appears in .env.example."""
    for path in (COMPOSE, TLS_OVERRIDE):
        missing = compose_variables(path.read_text()) - env_example_names()
        assert missing == set(), path.name


def test_tls_override_publishes_only_a_tls_port_with_the_same_durability(
    compose: dict[str, Any],
) -> None:
    """deploy/compose.redis-tls.yml is valid, keeps AOF and the password, adds a TLS port
    from mounted certificates and publishes only that port."""
    validator = jsonschema.Draft7Validator(SCHEMA)
    text = interpolate(TLS_OVERRIDE.read_text(), REQUIRED_ENV)
    override = yaml.safe_load(text)
    assert [e.message for e in validator.iter_errors(override)] == []
    redis = override["services"]["redis"]
    base = compose["services"]["redis"]["command"]
    assert redis["command"][: len(base)] == base
    extra = redis["command"][len(base) :]
    flags = dict(zip(extra[::2], extra[1::2], strict=True))
    assert flags["--tls-port"] == "6380"
    assert redis["ports"] == ["0.0.0.0:6380:6380"]
    tls_mount = [m for m in _bind_mounts(redis) if m[1] == "/tls"]
    assert tls_mount == [("./deploy/tls", "/tls", "ro")]
    assert (ROOT / "deploy" / "tls").is_dir()
    for flag in ("--tls-cert-file", "--tls-key-file", "--tls-ca-cert-file"):
        assert flags[flag].startswith("/tls/")


def test_required_secrets_have_no_default() -> None:
    """Without REDIS_PASSWORD or RELAYBUS_TOKENS, interpolation fails instead of running open."""
    for name in REQUIRED_ENV:
        env = {k: v for k, v in REQUIRED_ENV.items() if k != name}
        with pytest.raises(KeyError, match=name):
            interpolate(COMPOSE.read_text(), env)


def test_env_example_documents_every_setting() -> None:
    """.env.example names every RELAYBUS_<FIELD> of the settings."""
    names = env_example_names()
    missing = {f"RELAYBUS_{f.upper()}" for f in Settings.model_fields} - names
    assert missing == set()


def test_services_volumes_and_dependencies_exist(compose: dict[str, Any]) -> None:
    """Every depends_on names a service; every named volume is declared and used."""
    services = compose["services"]
    assert set(services) == {
        "redis",
        "gateway",
        "nginx",
        "collector",
        "prometheus",
        "grafana",
        "certs",
    }
    declared = set(compose["volumes"])
    used = set()
    for name, svc in services.items():
        assert set(svc.get("depends_on", {})) <= set(services), name
        for source, _target, _mode in _bind_mounts(svc):
            if not source.startswith(("/", ".", "~")):
                used.add(source)
    assert used == declared


def test_build_contexts_and_mounted_files_exist(compose: dict[str, Any]) -> None:
    """Every build context, Dockerfile and mounted repository file exists."""
    for name, svc in compose["services"].items():
        if "build" in svc:
            build = svc["build"]
            context = ROOT / str(build["context"] if isinstance(build, dict) else build)
            assert (context / "Dockerfile").is_file(), name
        for source, _target, _mode in _bind_mounts(svc):
            if source.startswith("./"):
                assert (ROOT / source).exists(), source


def test_redis_is_private_durable_and_password_protected(compose: dict[str, Any]) -> None:
    """Redis: AOF fsync every second on a named volume, a password, no host port."""
    redis = compose["services"]["redis"]
    command = " ".join(redis["command"])
    assert redis["command"][0] == "valkey-server"  # exec form: the entrypoint drops root
    assert "--appendonly yes" in command
    assert "--appendfsync everysec" in command
    assert "--requirepass s3cret" in command
    assert "ports" not in redis
    assert ("redis-data", "/data", "rw") in _bind_mounts(redis)
    for role in ("gateway", "collector"):
        url = _container_env(compose["services"][role])["RELAYBUS_REDIS_URL"]
        assert url == "redis://:s3cret@redis:6379/0"


def test_gateways_are_replicated_behind_nginx_on_one_published_port(
    compose: dict[str, Any],
) -> None:
    """Two gateway replicas, unpublished; nginx publishes the one port and proxies to them."""
    services = compose["services"]
    gateway = services["gateway"]
    assert gateway["deploy"]["replicas"] == 2
    assert "ports" not in gateway and "container_name" not in gateway
    gateway_port = _container_env(gateway)["RELAYBUS_GATEWAY_PORT"]
    published = [svc_name for svc_name, svc in services.items() if "ports" in svc]
    assert sorted(published) == ["grafana", "nginx", "prometheus"]
    assert services["nginx"]["ports"] == ["8080:8080"]
    nginx_conf = (DEPLOY / "nginx.conf").read_text()
    assert re.search(rf"^\s*set \$gateway_url http://gateway:{gateway_port};", nginx_conf, re.M)
    assert re.search(r"^\s*resolver 127\.0\.0\.11 valid=2s\b", nginx_conf, re.M)  # Docker's DNS
    assert re.search(r"^\s*listen 8080 ssl;", nginx_conf, re.M)
    assert ("./deploy/nginx.conf", "/etc/nginx/nginx.conf", "ro") in _bind_mounts(services["nginx"])


def test_collector_reads_the_server_claude_dir_read_only(compose: dict[str, Any]) -> None:
    """The collector mounts ~/.claude read-only where RELAYBUS_CLAUDE_DIR points."""
    collector = compose["services"]["collector"]
    env = _container_env(collector)
    assert ("~/.claude", env["RELAYBUS_CLAUDE_DIR"], "ro") in _bind_mounts(collector)
    assert env["RELAYBUS_HOST_ID"] == "team-server"


def test_monitoring_is_an_opt_in_profile_scraping_the_services(compose: dict[str, Any]) -> None:
    """Prometheus and Grafana run only with --profile monitoring; DNS SD names real services."""
    services = compose["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
    for name in ("redis", "gateway", "nginx", "collector"):
        assert "profiles" not in services[name]
    prom = load_yaml(DEPLOY / "prometheus.yml")
    ports = {
        "gateway": _container_env(services["gateway"])["RELAYBUS_GATEWAY_PORT"],
        "collector": _container_env(services["collector"])["RELAYBUS_COLLECTOR_METRICS_PORT"],
    }
    sd = {
        name: str(cfg["port"])
        for job in prom["scrape_configs"]
        for cfg in job.get("dns_sd_configs", [])
        for name in cfg["names"]
    }
    assert sd == ports
    mounts = _bind_mounts(services["prometheus"])
    assert ("./deploy/prometheus.yml", "/etc/prometheus/prometheus.yml", "ro") in mounts


def test_grafana_provisioning_points_at_the_mounted_dashboard_and_prometheus(
    compose: dict[str, Any],
) -> None:
    """The provisioned datasource is the compose Prometheus; the provider path is the mount."""
    grafana_mounts = {src: tgt for src, tgt, _ in _bind_mounts(compose["services"]["grafana"])}
    provisioning = DEPLOY / "grafana" / "provisioning"
    provider = load_yaml(provisioning / "dashboards" / "relaybus.yml")["providers"][0]
    assert provider["options"]["path"] == grafana_mounts["./deploy/grafana/dashboards"]
    assert grafana_mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    datasource = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090"
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "relaybus.json").read_text())
    uids = {str(t["datasource"]["uid"]) for p in dashboard["panels"] for t in p["targets"]} | {
        str(p["datasource"]["uid"]) for p in dashboard["panels"]
    }
    assert uids == {datasource["uid"]}


def test_dockerfile_is_multistage_slim_non_root_with_readyz_healthcheck() -> None:
    """The image: slim Python stages (an overridable base), a non-root user, a /readyz
    health check, and no `# syntax=` line (BuildKit would fetch a frontend from a registry)."""
    text = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"^#\s*syntax\s*=", text, re.M | re.I)
    default = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert default is not None and re.fullmatch(r"python:3\.\d+-slim", default.group(1))
    bases = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert len(bases) >= 2
    assert set(bases) == {"${PYTHON_IMAGE}"}
    final = text.rsplit("\nFROM ", 1)[1]
    users = re.findall(r"^USER\s+(\S+)", final, re.M)
    assert users and users[-1] not in ("root", "0")
    assert "COPY --from=build" in final
    assert "CA_CERTS" not in final  # extra CAs serve the build stage only
    assert "\nHEALTHCHECK " in final
    assert "/readyz" in final.split("\nHEALTHCHECK ", 1)[1].split("\n\n")[0]


def test_dockerignore_allows_only_what_the_dockerfile_copies() -> None:
    """.dockerignore is an allow-list: everything is excluded, then exactly the COPY sources
    are let back in (no .env, .git or tests in the build context)."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:] for line in lines if line.startswith("!")}
    sources = {
        source.rstrip("/")
        for line in re.findall(r"^COPY\s+(?!--from)(.+)$", text, re.M)
        for source in line.split()[:-1]
    }
    assert sources == allowed
    for source in sources:
        assert (ROOT / source).exists(), source


def test_compose_parses_on_v1_and_hands_each_service_only_its_secrets(
    compose: dict[str, Any],
) -> None:
    """Compose v1 (1.29) syntax: no top-level `name:` (COMPOSE_PROJECT_NAME is in
    .env.example), plain env_file lists of files that exist; the collector never gets the
    client tokens or Grafana's password, the gateway never Grafana's."""
    assert "name" not in compose
    assert "COMPOSE_PROJECT_NAME" in env_example_names()
    services = compose["services"]
    for name in ("gateway", "collector"):
        env_files = services[name]["env_file"]
        assert all(isinstance(f, str) for f in env_files), name
        assert ".env" not in env_files
        for f in env_files:
            assert (ROOT / f).is_file(), f
            assert "=" not in "".join(  # shipped without settings, so without secrets
                line for line in (ROOT / f).read_text().splitlines() if not line.startswith("#")
            )
    collector = _container_env(services["collector"])
    gateway = _container_env(services["gateway"])
    assert "RELAYBUS_TOKENS" not in collector and "RELAYBUS_NOTIFY_URLS" not in collector
    assert gateway["RELAYBUS_TOKENS"] == "tok"
    for env in (collector, gateway):
        assert not any("GRAFANA" in k or "GF_" in k for k in env)


def test_collector_sees_host_processes_with_nothing_else() -> None:
    """The collector shares the host's PID namespace (sessions/<pid>.json liveness) and gives
    up every capability, privilege gain and a writable root."""
    collector = load_yaml(COMPOSE)["services"]["collector"]
    assert collector["pid"] == "host"
    assert collector["cap_drop"] == ["ALL"] and "cap_add" not in collector
    assert collector["security_opt"] == ["no-new-privileges:true"]
    assert collector["read_only"] is True
    assert collector["environment"]["RELAYBUS_APPROVAL_PORT"] == "0"
    assert "privileged" not in collector


def test_base_images_are_overridable_with_the_documented_defaults() -> None:
    """Every image: is ${<NAME>_IMAGE:-default} (a mirror or offline copy may replace it)."""
    services = load_yaml(COMPOSE)["services"]
    for name, svc in services.items():
        if "build" in svc:
            continue
        assert re.fullmatch(r"\$\{[A-Z]+_IMAGE:-[a-z/]+:[\w.-]+\}", svc["image"]), name
    args = services["gateway"]["build"]["args"]
    assert args["PYTHON_IMAGE"] == "${PYTHON_IMAGE:-python:3.11-slim}"
    assert set(args) == {"PYTHON_IMAGE", "PIP_INDEX_URL", "CA_CERTS"}
    assert services["collector"]["build"] == services["gateway"]["build"]


def _compose_clients() -> list[list[str]]:
    """The Compose implementations on this machine: v1 `docker-compose`, v2 `docker compose`."""
    found = []
    if shutil.which("docker-compose"):
        found.append(["docker-compose"])
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        found.append([docker, "compose"])
    return found


def test_compose_implementations_accept_the_file_with_the_documented_env(tmp_path: Path) -> None:
    """`docker-compose config` (v1) and `docker compose config` (v2), where installed, accept
    docker-compose.yml and its TLS override with .env.example plus the two required secrets."""
    clients = _compose_clients()
    if not clients:
        pytest.skip("neither docker-compose nor docker compose is installed")
    env = ROOT.joinpath(".env.example").read_text()
    for name, value in REQUIRED_ENV.items():
        env = env.replace(f"\n{name}=\n", f"\n{name}={value}\n")
    (tmp_path / "env").write_text(env)
    for client in clients:
        for files in ([COMPOSE], [COMPOSE, TLS_OVERRIDE]):
            argv = [*client, "--env-file", str(tmp_path / "env")]
            argv += [arg for f in files for arg in ("-f", str(f))]
            out = subprocess.run(
                [*argv, "config"], capture_output=True, text=True, timeout=60, cwd=tmp_path
            )
            assert out.returncode == 0, (client, out.stderr)
            config = yaml.safe_load(out.stdout)
            assert config["services"]["gateway"]["environment"]["RELAYBUS_TOKENS"] == "tok"
            assert config["services"]["collector"]["pid"] == "host"


def test_nginx_starts_after_its_certificate_is_made(compose: dict[str, Any]) -> None:
    """`docker compose up` alone serves HTTPS: a one-shot certs service (no network) runs
    `relaybus tls make` into the folder nginx mounts, and nginx waits for it to succeed."""
    services = compose["services"]
    certs, nginx = services["certs"], services["nginx"]
    assert nginx["depends_on"]["certs"] == {"condition": "service_completed_successfully"}
    assert certs["network_mode"] == "none"
    assert "relaybus tls make --dir /certs" in certs["entrypoint"][-1]
    folder = "./deploy/certs"  # RELAYBUS_CERTS_DIR unset
    assert f"{folder}:/certs" in certs["volumes"]
    assert f"{folder}:/etc/nginx/certs:ro" in nginx["volumes"]
