"""deploy/redis-acl.conf: collector and gateway run the protocol as their own Redis users,
and neither user can run FLUSHALL, CONFIG, KEYS or SCAN (a real redis-server)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, transcript, user_line
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc
from tests.support.redis_acl import ACL_ENV, load_acl
from tests.support.servers import RedisServer


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
        for command in (
            ("FLUSHALL",),
            ("FLUSHDB",),
            ("CONFIG", "GET", "*"),
            ("KEYS", "*"),
            ("SCAN", "0"),
            ("SHUTDOWN",),
            ("ACL", "LIST"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.set("elsewhere", "1")
    finally:
        client.close()


def test_gateway_user_cannot_forge_log_events(
    acl_server: tuple[RedisServer, dict[str, str]], namespace: str
) -> None:
    """The gateway user reads the log but cannot append to it or to a session stream; it
    records permission decisions (approval:<key>) and routes commands (cmd:<host>)."""
    _, urls = acl_server
    client = redis.Redis.from_url(urls["gateway"], socket_timeout=5)
    try:
        assert client.xrange(f"{{{namespace}}}:log") == []
        assert client.set(f"{{{namespace}}}:approval:k1", "allow", nx=True, ex=60)
        assert client.xadd(f"{{{namespace}}}:cmd:testhost", {"t": "x"})
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.hset(f"{{{namespace}}}:session:s1:approvals", "k1", "{}")
        for key in (f"{{{namespace}}}:log", f"{{{namespace}}}:session:s1:events"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.xadd(key, {"f": "{}"})
    finally:
        client.close()


async def test_protocol_runs_with_each_role_under_its_acl(
    acl_server: tuple[RedisServer, dict[str, str]],
    namespace: str,
    claude_dir: Path,
    tmp_path: Path,
) -> None:
    """A collector (collector user) and a gateway (gateway user): list, watch with replay, live
    events, hello resume, and a routed new_conversation all work; neither logs NOPERM."""
    _, urls = acl_server
    collector = CollectorProc(
        redis_url=urls["collector"],
        namespace=namespace,
        claude_dir=claude_dir,
        env={"RELAYBUS_ALLOW_PROMPTS": "true"},
        log_path=tmp_path / "collector.log",
    )
    gateway = GatewayProc(
        redis_url=urls["gateway"], namespace=namespace, log_path=tmp_path / "gateway.log"
    )
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
            await ws.send(
                {
                    "type": "new_conversation",
                    "requestId": "n",
                    "host": "testhost",
                    "cwd": str(tmp_path),
                }
            )
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


def test_gateway_protocol_tests_pass_under_the_acl_users() -> None:
    """tests/gateway's protocol files (connect, hello, watch, replay, resume, gaps) pass with
    the gateway logged in as relaybus-gateway and the publisher as relaybus-collector."""
    root = Path(__file__).resolve().parents[2]
    files = ["tests/gateway/test_ws_basic.py", "tests/gateway/test_replay_resume.py"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        cwd=root,
        env={**os.environ, ACL_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    tail = proc.stdout[-3000:] + proc.stderr[-1000:]
    assert proc.returncode == 0, tail
    assert " passed" in tail and "failed" not in tail and "skipped" not in tail
