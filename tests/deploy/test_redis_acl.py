"""deploy/redis-acl.conf: collector and gateway run the protocol, approvals and push as their
own Redis users, neither can run FLUSHALL, CONFIG, KEYS or SCAN, and the collector cannot read
the push keys (a real redis-server)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from tests.approvals.conftest import Machine, hooks, machine, published, runtime_dir
from tests.conftest import make_settings
from tests.support.approvals import HookStarter, hook_input, session_with_tool
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, transcript, user_line
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc, running_gateway
from tests.support.push_service import PushServiceStandIn
from tests.support.redis_acl import ACL_ENV, load_acl
from tests.support.servers import RedisServer

__all__ = ["hooks", "machine", "runtime_dir"]  # the approval tests' fixtures, used below
EDIT = {"old_string": "a = 1", "new_string": "a = 2"}
BEARER = {"Authorization": "Bearer full-token"}


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


def test_collector_user_cannot_read_push_keys(
    acl_server: tuple[RedisServer, dict[str, str]], namespace: str
) -> None:
    """The collector user gets NOPERM for the VAPID private key, the subscriptions and every
    other push key; the gateway user reads and writes them."""
    srv, urls = acl_server
    keys = Keys(namespace)
    admin = srv.client()
    admin.set(keys.push_vapid, '{"private": "secret"}')
    admin.hset(keys.push_subs, "id", "{}")
    collector = redis.Redis.from_url(urls["collector"], socket_timeout=5)
    gateway = redis.Redis.from_url(urls["gateway"], socket_timeout=5)
    try:
        reads: list[tuple[str, str]] = [
            ("GET", keys.push_vapid),
            ("HGETALL", keys.push_subs),
            ("HGETALL", keys.push_turns),
            ("GET", keys.push_cap("ab")),
            ("GET", keys.push_done("1:approval", "id")),
        ]
        for command, key in reads:
            with pytest.raises(redis.exceptions.NoPermissionError):
                collector.execute_command(command, key)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            gateway.execute_command(command, key)  # type: ignore[no-untyped-call]
        assert gateway.hset(keys.push_subs, "id2", "{}") == 1
    finally:
        collector.close()
        gateway.close()
        admin.close()


async def test_push_and_approvals_run_under_the_acl_users(
    acl_server: tuple[RedisServer, dict[str, str]],
    namespace: str,
    machine: Callable[..., Machine],
    hooks: HookStarter,
) -> None:
    """Collector and gateway as their ACL users: GET /push/key and PUT /push/subscription
    answer 200, a permission request reaches the push stand-in and its Approve lets the hook
    proceed; a second request is approved over /ws (accept_diff) and the hook proceeds."""
    srv, urls = acl_server
    keys = Keys(namespace)
    admin = connect(make_settings(srv.url, namespace))
    m = machine(url=urls["collector"])
    target = m.workdir / "parser.py"
    target.write_text("a = 1\n")
    tool_input = {"file_path": str(target), **EDIT}
    try:
        with PushServiceStandIn() as service:
            settings = make_settings(urls["gateway"], namespace, push_endpoint_allow=service.host)
            async with (
                running_gateway(settings) as gw,
                httpx.AsyncClient(base_url=gw.http, timeout=10) as http,
            ):
                sid, path, _ = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
                await published(admin, keys, sid)
                r = await http.get("/push/key")
                assert r.status_code == 200, r.text
                service.vapid_public = r.json()["publicKey"]
                device = {"subscription": service.device("phone").subscription(), "prefs": {}}
                r = await http.put("/push/subscription", json=device, headers=BEARER)
                assert r.status_code == 200, r.text
                run = await hooks(
                    hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env()
                )
                [push] = await asyncio.to_thread(service.wait, "phone", 1)
                assert push.payload["kind"] == "approval"
                r = await http.post(
                    "/push/decide", json={"cap": push.payload["cap"], "decision": "allow"}
                )
                assert r.status_code == 200, r.text
                code, out, _ = await run.result(30)
                assert code == 0 and orjson.loads(out)["hookSpecificOutput"]["decision"] == {
                    "behavior": "allow"
                }

                sid2, path2, _ = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
                await published(admin, keys, sid2)
                async with WsClient(gw.ws, token="full-token") as ws:
                    await ws.hello(FULL)
                    await ws.watch(sid2, requestId="w")
                    run2 = await hooks(
                        hook_input(sid2, path2, str(m.workdir), "Edit", tool_input),
                        env=m.hook_env(),
                    )
                    req = await ws.expect("permission_request", wait_s=30)
                    await ws.send(
                        {"type": "accept_diff", "requestId": "a", "requestKey": req["requestKey"]}
                    )
                    ack = await ws.expect("decision_ack", wait_s=30)
                    assert (ack["requestId"], ack["decision"]) == ("a", "allow")
                    code, out, _ = await run2.result(30)
                    assert code == 0 and '"allow"' in out
    finally:
        await admin.aclose()
