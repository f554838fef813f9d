"""`relaybus up`: one command runs collector, gateway and a private server, and cleans up."""

from __future__ import annotations

import signal
import socket
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from relaybus import upstate
from relaybus.lan import lan_address
from tests.conftest import BINARIES, DEFAULT_KIND
from tests.support.collector_records import append, transcript, user_line
from tests.support.deploy_up import UpProc, child_pids, gone
from tests.support.gateway_client import Frame, WsClient
from tests.support.servers import RedisServer, free_port
from tests.support.wait import poll, wait_for


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
    assert banner["Prompts"].startswith("off (RELAYBUS_ALLOW_PROMPTS=true")
    assert banner["Listening"] == f"gateway 127.0.0.1:{up.port}"
    assert "24 h" in banner["Watching"]
    assert up.proc is not None
    servers = child_pids(up.proc.pid)
    assert len(servers) == 1  # the embedded server, nothing else
    state = await wait_for(lambda: upstate.read(up.state_dir), timeout_s=10)
    assert (state.pid, state.pid_start) == (up.proc.pid, upstate.process_start(up.proc.pid))
    assert state.pid_start is not None and upstate.alive(state)
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


def _failed_start(up: UpProc) -> str:
    """Run ``up`` to its exit; the one line it printed on stderr (exit 1, no banner)."""
    up.start()
    assert up.proc is not None
    assert up.proc.wait(90) == 1
    lines = up.err.read_text().strip().splitlines()
    assert len(lines) == 1, up.log()
    assert "Open on your phone" not in up.out.read_text()
    return lines[0]


def test_up_fails_cleanly_when_its_port_is_taken(tmp_path: Path, claude_dir: Path) -> None:
    """The gateway's port is taken: `relaybus up` says so in one line naming the port,
    exit 1, before it starts a server."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        up = UpProc(tmp_path, claude_dir, port=blocker.getsockname()[1])
        try:
            line = _failed_start(up)
        finally:
            up.kill()
    assert line.startswith(f"relaybus up: port {up.port} on 127.0.0.1 (RELAYBUS_GATEWAY_PORT)")
    assert "already in use" in line
    assert not (up.state_dir / "server").exists()


def test_up_names_a_taken_metrics_port_once(tmp_path: Path, claude_dir: Path) -> None:
    """The collector's metrics port is taken: one line naming it (not two tracebacks)."""
    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        up = UpProc(tmp_path, claude_dir)
        up.args[up.args.index("--collector-metrics-port") + 1] = str(taken)
        try:
            line = _failed_start(up)
        finally:
            up.kill()
    assert f"port {taken} on 127.0.0.1 (RELAYBUS_COLLECTOR_METRICS_PORT)" in line


def test_up_refuses_an_unusable_state_dir(tmp_path: Path, claude_dir: Path) -> None:
    """XDG_STATE_HOME pointing at a file: one line naming the directory and the fix."""
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("")
    up = UpProc(tmp_path, claude_dir, env={"XDG_STATE_HOME": str(a_file)})
    try:
        line = _failed_start(up)
    finally:
        up.kill()
    assert f"state directory {a_file / 'relaybus'} is not usable" in line
    assert "XDG_STATE_HOME" in line


def test_up_wrong_redis_password_is_one_line(
    tmp_path: Path, claude_dir: Path, private_server: Callable[..., RedisServer]
) -> None:
    """A password the configured Redis refuses: one line, exit 1, no phone URL, no token."""
    srv = private_server()
    admin = srv.client()
    admin.config_set("requirepass", "right-pw")
    admin.close()
    up = UpProc(
        tmp_path,
        claude_dir,
        env={"RELAYBUS_REDIS_URL": f"redis://:wrong-pw@127.0.0.1:{srv.port}/0"},
    )
    try:
        line = _failed_start(up)
    finally:
        up.kill()
    assert (
        line
        == f"relaybus up: Redis at 127.0.0.1:{srv.port} refused the password (or user) in RELAYBUS_REDIS_URL"
    )
    assert not (up.state_dir / "token").exists()


async def test_up_prints_the_phone_url_only_once_redis_answers(
    tmp_path: Path, claude_dir: Path
) -> None:
    """An unreachable Redis is retried: `up` says it is waiting, and prints the banner with
    the phone URL only after the server starts answering."""
    port = free_port()
    up = UpProc(
        tmp_path,
        claude_dir,
        env={
            "RELAYBUS_REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "RELAYBUS_TOKENS": "t0k",
        },
    )
    srv = RedisServer(DEFAULT_KIND, BINARIES[DEFAULT_KIND], tmp_path / "late", port=port)
    try:
        up.start()
        poll(
            lambda: (
                "Waiting for Redis" in up.out.read_text()
                or (up.proc and up.proc.poll() is not None)
            )
        )
        text = up.out.read_text()
        assert f"Waiting for Redis at 127.0.0.1:{port}" in text, up.log()
        assert "Open on your phone" not in text
        srv.start()
        banner = up.wait_banner()
        assert banner["Open on your phone"] == f"http://127.0.0.1:{up.port}/"
        assert up.terminate() == 0
    finally:
        up.kill()
        srv.stop()


def test_lan_address_is_an_ipv4_address() -> None:
    """The address printed for phones is this machine's IPv4 address (loopback at worst)."""
    address = lan_address()
    assert socket.inet_aton(address)
    assert not address.startswith("0.")


def _listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses (hex, as /proc/net/tcp shows them) listening on ``port``."""
    found = set()
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = row.split()[1], row.split()[3]
        address, _, hexport = local.partition(":")
        if state == "0A" and int(hexport, 16) == port:
            found.add(address)
    return found


async def test_up_serves_collector_metrics_on_loopback_only(
    tmp_path: Path, claude_dir: Path
) -> None:
    """Under `relaybus up` the collector's /metrics listens on 127.0.0.1, not on every interface."""
    proc = UpProc(tmp_path, claude_dir)
    metrics_port = free_port()
    proc.args[proc.args.index("--collector-metrics-port") + 1] = str(metrics_port)
    try:
        proc.start().wait_banner()

        async def listening() -> set[str]:
            return _listening_addresses(metrics_port)

        assert await wait_for(listening, what="collector /metrics listening") == {"0100007F"}
        async with httpx.AsyncClient(timeout=10) as http:
            page = await http.get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert "relaybus_collector_lines_read_total" in page.text
    finally:
        proc.kill()
