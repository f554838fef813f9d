"""deploy/nginx.conf serves HTTPS on the published port with the certificate `relaybus tls
make` writes; a client trusting only that root reaches the gateway through it."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.deploy_procs import NGINX, Nginx
from tests.support.gateway_client import WsClient
from tests.support.servers import RedisServer
from tests.support.web import GatewayProc

pytestmark = pytest.mark.skipif(not Path(NGINX).exists(), reason="nginx is not installed")


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    subprocess.run(
        [sys.executable, "-m", "relaybus.cli", "tls", "make", "--dir", str(directory),
         "--name", "relay.lan", "--name", "192.168.7.7"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return directory


@pytest.fixture
def nginx(tmp_path: Path, certs: Path, server: RedisServer, namespace: str) -> Iterator[Nginx]:
    gateway = GatewayProc(redis_url=server.url, namespace=namespace, workdir=tmp_path).start()
    proxy = Nginx(tmp_path / "nginx", [gateway.port], certs=certs)
    try:
        proxy.start()
        yield proxy
    finally:
        proxy.stop()
        gateway.stop()


async def test_https_and_wss_through_nginx_with_the_made_certificate(
    nginx: Nginx, certs: Path
) -> None:
    """/healthz over HTTPS and a /ws hello over wss, verified against root.crt only; the
    key files are 0600 and plain http on the port is refused."""
    assert (certs / "server.key").stat().st_mode & 0o777 == 0o600
    assert (certs / "root.key").stat().st_mode & 0o777 == 0o600
    context = ssl.create_default_context(cafile=str(certs / "root.crt"))
    async with httpx.AsyncClient(verify=context, timeout=10) as http:
        health = await http.get(f"https://127.0.0.1:{nginx.port}/healthz")
        assert health.status_code == 200
        plain = await http.get(f"http://127.0.0.1:{nginx.port}/healthz")
        assert plain.status_code == 400  # nginx: "plain HTTP request was sent to HTTPS port"
    ws = WsClient(f"wss://127.0.0.1:{nginx.port}/ws", token="web-test-token", ssl=context)
    async with ws:
        await ws.send({"type": "hello", "capabilities": []})
        assert (await ws.expect("welcome", 30))["type"] == "welcome"
