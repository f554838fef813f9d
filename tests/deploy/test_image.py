"""The container health checks (Dockerfile for the gateway, compose for the collector)
run against real processes: healthy when serving, unhealthy when not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.collector_proc import CollectorProc
from tests.support.deploy_files import COMPOSE, ROOT
from tests.support.gateway_server import GatewayProc
from tests.support.servers import RedisServer, free_port


def _dockerfile_healthcheck() -> str:
    """The shell command of the Dockerfile's HEALTHCHECK (continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    match = re.search(r"^HEALTHCHECK .*? CMD (.+)$", text, re.M)
    assert match is not None
    return match.group(1).strip()


def _run_shell(command: str, env: dict[str, str]) -> int:
    # In the image `python` is the venv's interpreter; here it is this test's.
    bindir = str(Path(sys.executable).parent)
    full_env = {**os.environ, **env, "PATH": f"{bindir}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", command], env=full_env, capture_output=True, timeout=60)
    return out.returncode


def test_gateway_healthcheck_follows_readyz(server: RedisServer, namespace: str) -> None:
    """The image's HEALTHCHECK succeeds against a ready gateway on RELAYBUS_GATEWAY_PORT and
    fails when nothing answers there."""
    command = _dockerfile_healthcheck()
    assert "/readyz" in command
    with GatewayProc(redis_url=server.url, namespace=namespace) as gateway:
        assert _run_shell(command, {"RELAYBUS_GATEWAY_PORT": str(gateway.port)}) == 0
    assert _run_shell(command, {"RELAYBUS_GATEWAY_PORT": str(free_port())}) != 0


def test_collector_healthcheck_follows_its_metrics_endpoint(
    server: RedisServer, namespace: str, claude_dir: Path
) -> None:
    """The compose collector's health check passes while its /metrics answers, fails after."""
    check = yaml.safe_load(COMPOSE.read_text())["services"]["collector"]["healthcheck"]["test"]
    assert check[0] == "CMD"
    port = free_port()
    argv = [sys.executable if a == "python" else a.replace("9464", str(port)) for a in check[1:]]
    env = {"RELAYBUS_COLLECTOR_METRICS_PORT": str(port)}
    with CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir, env=env):
        assert subprocess.run(argv, timeout=60).returncode == 0
    assert subprocess.run(argv, capture_output=True, timeout=60).returncode != 0
