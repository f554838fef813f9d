"""`relaybus up`: one command runs collector, gateway and a private server, and cleans up."""

from __future__ import annotations

import signal
import socket
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.up import lan_address
from tests.support.collector_records import append, transcript, user_line
from tests.support.deploy_up import UpProc, child_pids, gone
from tests.support.gateway_client import Frame, WsClient
from tests.support.servers import RedisServer


@pytest.fixture
def up(tmp_path: Path, claude_dir: Path) -> Iterator[UpProc]:
    proc = UpProc(tmp_path, claude_dir)
    yield proc
    proc.kill()


async def _hello(ws: WsClient, caps: list[str] | None = None) -> Frame:
    """hello/welcome with a wait long enough for a loaded machine."""
    await ws.send({"type": "hello", "capabilities": caps or []})
    return await ws.expect("welcome", 60)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_up_serves_client_publishes_a_line_and_stops_cleanly(
    up: UpProc, claude_dir: Path, signum: int
) -> None:
    """Start with no Redis URL and no token; open the web client; a transcript line
    reaches a WebSocket client; SIGTERM (or Ctrl-C) exits 0 and leaves no server process."""
    banner = up.start().wait_banner()
    token = banner["Token"]
    assert banner["Open on your phone"] == f"http://127.0.0.1:{up.port}/#token={token}"
    token_file = up.state_dir / "token"
    assert token_file.read_text().strip() == token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert up.proc is not None
    servers = child_pids(up.proc.pid)
    assert len(servers) == 1  # the embedded server, nothing else
    conf = (up.state_dir / "server" / "server.conf").read_text()
    server_port = int(conf.split("\nport ")[1].split()[0])
    assert "appendfsync everysec" in conf

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{up.port}", timeout=10) as http:
        page = await http.get("/")
        assert page.status_code == 200
        assert "<html" in page.text.lower()

    sid = str(uuid.uuid4())
    async with WsClient(f"ws://127.0.0.1:{up.port}/ws", token=token, query_token=True) as ws:
        await _hello(ws)
        append(transcript(claude_dir, sid), user_line(sid, "hello from the terminal"))
        await ws.until(lambda frames: any(f.get("sessionId") == sid for f in ws.events()), 60)
        event = ws.events(sid)[0]
        assert "hello from the terminal" in str(event["event"]["blocks"])

        assert up.terminate(signum=signum) == 0
        assert await ws.closed_code(60) in (1001, 1012)
    assert gone(servers[0])
    assert not _port_open(server_port)
    assert not _port_open(up.port)


async def test_up_restart_keeps_token_and_history(up: UpProc, claude_dir: Path) -> None:
    """A second run reuses the stored token and the embedded server's data (AOF)."""
    first = up.start().wait_banner()
    sid = str(uuid.uuid4())
    async with WsClient(f"ws://127.0.0.1:{up.port}/ws", token=first["Token"]) as ws:
        await _hello(ws)
        append(transcript(claude_dir, sid), user_line(sid, "before the restart"))
        await ws.until(lambda frames: bool(ws.events(sid)), 60)
    assert up.terminate() == 0

    second = up.start().wait_banner()
    assert second["Token"] == first["Token"]
    async with WsClient(f"ws://127.0.0.1:{up.port}/ws", token=first["Token"]) as ws:
        await _hello(ws, ["session_subscriptions"])
        await ws.send({"type": "watch_session", "requestId": "w", "sessionId": sid})
        await ws.until(lambda frames: bool(ws.events(sid)), 60)
        assert "before the restart" in str(ws.events(sid)[0]["event"]["blocks"])
    assert up.terminate() == 0


async def test_up_with_a_redis_url_starts_no_embedded_server(
    tmp_path: Path, claude_dir: Path, server: RedisServer, namespace: str
) -> None:
    """RELAYBUS_REDIS_URL given: that server is used, none is started, tokens are honoured."""
    up = UpProc(
        tmp_path,
        claude_dir,
        env={
            "RELAYBUS_REDIS_URL": server.url,
            "RELAYBUS_NAMESPACE": namespace,
            "RELAYBUS_TOKENS": "configured-token",
        },
    )
    try:
        banner = up.start().wait_banner()
        assert "Token" not in banner and "Redis" not in banner
        assert up.proc is not None
        assert child_pids(up.proc.pid) == []
        assert not (up.state_dir / "server").exists()
        async with WsClient(f"ws://127.0.0.1:{up.port}/ws", token="configured-token") as ws:
            welcome = await _hello(ws)
            assert welcome["type"] == "welcome"
        assert up.terminate() == 0
    finally:
        up.kill()


def test_up_fails_cleanly_when_its_port_is_taken(tmp_path: Path, claude_dir: Path) -> None:
    """The gateway cannot bind: `relaybus up` exits non-zero, says why, and stops the
    server it started."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        up = UpProc(tmp_path, claude_dir, port=blocker.getsockname()[1])
        try:
            up.start()
            assert up.proc is not None
            assert up.proc.wait(90) != 0
            assert "address already in use" in up.log()
        finally:
            up.kill()
    conf = (up.state_dir / "server" / "server.conf").read_text()
    assert not _port_open(int(conf.split("\nport ")[1].split()[0]))
    assert "Stop with Ctrl-C" not in up.out.read_text()


def test_lan_address_is_an_ipv4_address() -> None:
    """The address printed for phones is this machine's IPv4 address (loopback at worst)."""
    address = lan_address()
    assert socket.inet_aton(address)
    assert not address.startswith("0.")
