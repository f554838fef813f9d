"""Browser-facing hardening (issue 12 items 11-12): headers, Origin on /ws, anonymous tier,
tokens kept out of logs. Real gateways, real sockets."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from relaybus import up
from relaybus.gateway.app import create_app
from relaybus.gateway.auth import AuthConfigError
from relaybus.gateway.main import run
from relaybus.lan import lan_address
from tests.conftest import make_settings
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc, RunningGateway, running_gateway
from tests.support.servers import RedisServer


async def test_every_page_sends_csp_nosniff_and_no_referrer(gw: RunningGateway) -> None:
    """The web client, /healthz and a 404 carry the CSP, nosniff and Referrer-Policy headers."""
    async with httpx.AsyncClient(base_url=gw.http, timeout=10) as http:
        for path in ("/", "/app.js", "/healthz", "/missing"):
            r = await http.get(path)
            csp = r.headers["content-security-policy"]
            assert "default-src 'self'" in csp and "connect-src 'self'" in csp
            assert "frame-ancestors 'none'" in csp
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["referrer-policy"] == "no-referrer"


async def _status_for_origin(url: str, origin: str | None, token: str = "full-token") -> int:
    headers = {"Authorization": f"Bearer {token}"}
    if origin is not None:
        headers["Origin"] = origin
    try:
        async with connect(url, additional_headers=headers, open_timeout=10):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


async def test_ws_refuses_a_foreign_origin(gw: RunningGateway) -> None:
    """A page on another site cannot open /ws (403), even with a valid token; the gateway's own
    origin and non-browser clients (no Origin) can."""
    assert await _status_for_origin(gw.ws, "https://evil.example") == 403
    assert await _status_for_origin(gw.ws, "null") == 403
    assert await _status_for_origin(gw.ws, f"http://127.0.0.1:{gw.port}") == 101
    assert await _status_for_origin(gw.ws, None) == 101
    assert gw.metric("relaybus_gateway_auth_failures_total") >= 2


async def test_allowed_origins_setting(server: RedisServer, namespace: str) -> None:
    """RELAYBUS_ALLOWED_ORIGINS adds origins; others stay refused."""
    settings = make_settings(server.url, namespace, allowed_origins="https://app.example")
    async with running_gateway(settings) as g:
        assert await _status_for_origin(g.ws, "https://app.example") == 101
        assert await _status_for_origin(g.ws, "https://other.example") == 403


async def test_anonymous_next_to_tokens_is_read_only(server: RedisServer, namespace: str) -> None:
    """With tokens configured, anonymous access may watch but not act; a token in hello upgrades."""
    settings = make_settings(server.url, namespace, allow_anonymous=True, allow_prompts=True)
    async with running_gateway(settings) as g:
        async with WsClient(g.ws) as anon:
            await anon.hello(FULL)
            await anon.send(
                {
                    "type": "new_conversation",
                    "requestId": "n",
                    "host": "testhost",
                    "cwd": "/tmp",
                    "text": "hi",
                }
            )
            err = await anon.expect("error")
            assert err["code"] == "forbidden"
        async with WsClient(g.ws) as upgraded:
            await upgraded.hello(FULL, token="full-token")
            await upgraded.send(
                {
                    "type": "new_conversation",
                    "requestId": "n",
                    "cwd": "/tmp",
                    "host": "nohost",
                    "text": "hi",
                }
            )
            reply = await upgraded.recv()
            assert reply.get("code") != "forbidden"


async def test_tokens_never_reach_the_log(
    server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """At DEBUG, tokens offered by header, query and hello frame are redacted from the log."""
    secret = "s3cr3t-token-value"
    log_path = tmp_path / "gw.log"
    env = {"RELAYBUS_LOG_LEVEL": "DEBUG"}
    with GatewayProc(
        redis_url=server.url, namespace=namespace, tokens=secret, env=env, log_path=log_path
    ) as g:
        async with WsClient(g.ws, token=secret) as c:
            await c.hello()
        async with WsClient(g.ws, token=secret, query_token=True) as c:
            await c.hello()
        async with WsClient(g.ws) as c:
            await c.hello(token=secret)
        async with WsClient(g.ws) as c:
            await c.send({"type": "hello", "capabilities": [], "token": secret + "-wrong"})
            assert await c.closed_code() == 4401
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while log_path.read_text().count("closed") < 4:
            assert loop.time() < deadline, "the gateway did not log four closed connections"
            await asyncio.sleep(0.1)
    text = log_path.read_text()
    assert "hello" in text and "token" in text.lower()  # DEBUG really logged the frames
    assert secret not in text


async def _status_for_host(port: int, host: str, path: str = "/ws") -> int:
    """The status of a request to ``path`` sent with ``Host`` and a matching ``Origin`` (what a
    DNS-rebinding page's browser sends); a WebSocket upgrade for ``/ws``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = [f"GET {path} HTTP/1.1", f"Host: {host}", f"Origin: http://{host}"]
        if path == "/ws":
            head += [
                "Upgrade: websocket",
                "Connection: Upgrade",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                "Sec-WebSocket-Version: 13",
                "Authorization: Bearer full-token",
            ]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        line = await asyncio.wait_for(reader.readline(), 10)
        return int(line.split()[1])
    finally:
        writer.close()


async def test_dns_rebinding_host_is_refused(server: RedisServer, namespace: str) -> None:
    """With Host and Origin both rebind.evil.example:<port>, /ws and HTTP pages get 403; the
    gateway's IP, localhost and RELAYBUS_PUBLIC_HOSTS names are served."""
    settings = make_settings(server.url, namespace, public_hosts="relay.example.com")
    async with running_gateway(settings) as g:
        evil = f"rebind.evil.example:{g.port}"
        assert await _status_for_host(g.port, evil) == 403
        assert await _status_for_host(g.port, evil, "/healthz") == 403
        assert await _status_for_host(g.port, evil, "/") == 403
        assert await _status_for_host(g.port, "rebind.evil.example.", "/") == 403
        own = (f"{lan_address()}:{g.port}", socket.gethostname())  # `relaybus up`'s banner URL
        for good in (
            f"127.0.0.1:{g.port}",
            f"localhost:{g.port}",
            "relay.example.com",
            "[::1]",
            *own,
        ):
            assert await _status_for_host(g.port, good) == 101, good
            assert await _status_for_host(g.port, good, "/healthz") == 200, good
        assert g.metric("relaybus_gateway_auth_failures_total") >= 4


def test_anonymous_without_tokens_only_on_loopback(
    server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """RELAYBUS_ALLOW_ANONYMOUS without tokens on 0.0.0.0 (full control for anyone who reaches
    it) is refused at start: one line, exit 2; next to tokens it still starts."""
    settings = make_settings(server.url, namespace, tokens="", allow_anonymous=True)
    assert settings.gateway_host == "0.0.0.0"
    with pytest.raises(AuthConfigError):
        create_app(settings)
    assert run(settings) == 2
    err = capsys.readouterr().err.strip()
    assert "RELAYBUS_ALLOW_ANONYMOUS" in err and "RELAYBUS_GATEWAY_HOST" in err
    assert len(err.splitlines()) == 1
    for host in ("127.0.0.1", "::1", "localhost"):
        loopback = settings.model_copy(update={"gateway_host": host})
        create_app(loopback)  # would raise AuthConfigError
    create_app(settings.model_copy(update={"tokens": SecretStr("t1")}))


def test_up_refuses_anonymous_without_tokens_off_loopback(
    server: RedisServer,
    namespace: str,
    claude_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`relaybus up` with RELAYBUS_ALLOW_ANONYMOUS and no tokens on 0.0.0.0 stops before it
    starts anything: one line, exit 2."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    settings = make_settings(
        server.url, namespace, claude_dir, tokens="", allow_anonymous=True, gateway_port=0
    )
    assert up.run(settings) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("relaybus up: RELAYBUS_ALLOW_ANONYMOUS") and "\n" not in err
