"""deploy/redis-acl.conf: collector and gateway run the protocol as their own Redis users,
and neither user can run FLUSHALL, CONFIG, KEYS or SCAN (a real redis-server)."""

from __future__ import annotations

import asyncio
import secrets
import shlex
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, transcript, user_line
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc
from tests.support.servers import RedisServer

ACL_FILE = Path(__file__).resolve().parents[2] / "deploy" / "redis-acl.conf"
ROLES = ("admin", "collector", "gateway")


def load_acl(srv: RedisServer, namespace: str) -> dict[str, str]:
    """Apply deploy/redis-acl.conf to ``srv`` as its aclfile would (fresh passwords, the test's
    namespace); the default user stays on so the fixture can stop the server. Role -> URL."""
    passwords = {role: secrets.token_hex(16) for role in ROLES}
    text = ACL_FILE.read_text().replace("{relaybus}", f"{{{namespace}}}")
    for role, password in passwords.items():
        text = text.replace(f"CHANGE-ME-{role}", password)
    admin = srv.client()
    try:
        for line in text.splitlines():
            words = shlex.split(line)
            assert words[0] == "user", line
            if words[1] == "default":
                continue
            admin.acl_setuser(words[1], reset=True)
            admin.execute_command("ACL", "SETUSER", *words[1:])
    finally:
        admin.close()
    return {
        role: f"redis://relaybus-{role}:{pw}@127.0.0.1:{srv.port}/0" for role, pw in passwords.items()
    }


@pytest.fixture
def acl_server(
    private_server: Callable[..., RedisServer], namespace: str
) -> Iterator[tuple[RedisServer, dict[str, str]]]:
    srv = private_server()
    yield srv, load_acl(srv, namespace)


@pytest.mark.parametrize("role", ["collector", "gateway"])
def test_roles_cannot_flush_configure_or_list_keys(
    acl_server: tuple[RedisServer, dict[str, str]], namespace: str, role: str
) -> None:
    """FLUSHALL, FLUSHDB, CONFIG, KEYS, SCAN and keys outside the namespace are refused."""
    _, urls = acl_server
    client = redis.Redis.from_url(urls[role], socket_timeout=5)
    try:
        assert client.ping()
        for command in (("FLUSHALL",), ("FLUSHDB",), ("CONFIG", "GET", "*"), ("KEYS", "*"),
                        ("SCAN", "0"), ("SHUTDOWN",), ("ACL", "LIST")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.set("elsewhere", "1")
    finally:
        client.close()


def test_gateway_user_cannot_forge_log_events(
    acl_server: tuple[RedisServer, dict[str, str]], namespace: str
) -> None:
    """The gateway user reads the log but cannot append to it or to a session stream."""
    _, urls = acl_server
    client = redis.Redis.from_url(urls["gateway"], socket_timeout=5)
    try:
        assert client.xrange(f"{{{namespace}}}:log") == []
        for key in (f"{{{namespace}}}:log", f"{{{namespace}}}:session:s1:events"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.xadd(key, {"f": "{}"})
    finally:
        client.close()


async def test_protocol_runs_with_each_role_under_its_acl(
    acl_server: tuple[RedisServer, dict[str, str]], namespace: str, claude_dir: Path,
    tmp_path: Path,
) -> None:
    """A collector (collector user) and a gateway (gateway user): list, watch with replay, live
    events, hello resume, and a routed new_conversation all work; neither logs NOPERM."""
    _, urls = acl_server
    collector = CollectorProc(redis_url=urls["collector"], namespace=namespace,
                              claude_dir=claude_dir, env={"RELAYBUS_ALLOW_PROMPTS": "true"},
                              log_path=tmp_path / "collector.log")
    gateway = GatewayProc(redis_url=urls["gateway"], namespace=namespace,
                          log_path=tmp_path / "gateway.log")
    sid = str(uuid.uuid4())
    path = transcript(claude_dir, sid)
    try:
        collector.start()
        gateway.start()
        append(path, b"".join(user_line(sid, f"line {i}") for i in range(5)))
        async with WsClient(gateway.ws, token="full-token") as ws:
            await ws.hello(FULL)
            for _ in range(200):
                await ws.send({"type": "list_sessions", "requestId": "l"})
                listed = await ws.expect("sessions")
                if any(s["id"] == sid for s in listed["sessions"]):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the session was never listed")
            await ws.send({"type": "watch_session", "sessionId": sid, "sinceSeqId": 0})
            await ws.until(lambda _f: len(ws.events(sid)) >= 5)
            append(path, user_line(sid, "live line"))
            await ws.until(lambda _f: any("live line" in str(f) for f in ws.events(sid)))
            await ws.send({"type": "new_conversation", "requestId": "n", "host": "testhost",
                           "cwd": str(tmp_path)})
            ack = await ws.expect("new_conversation_ack")
            assert ack["ok"] is True, ack
        async with WsClient(gateway.ws, token="full-token") as v1:
            await v1.hello([], lastSeqId=0)
            await v1.until(lambda _f: len(v1.events(sid)) >= 6)
    finally:
        gateway.kill()
        collector.stop()
    for proc in (collector, gateway):
        text = proc.log()
        assert "NOPERM" not in text and "no permissions" not in text, text[-2000:]
