"""Web Push end to end: the hook, a collector and a gateway process, a push-service stand-in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import cast

import httpx
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from tests.approvals.conftest import Machine, published
from tests.conftest import make_settings
from tests.support.approvals import HookStarter, hook_input, session_with_tool
from tests.support.collector_records import Entries
from tests.support.gateway_client import WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.push_service import Accepted, PushServiceStandIn
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

EDIT = {"old_string": "a = 1", "new_string": "a = 2"}
FULL = {"Authorization": "Bearer full-token"}


async def subscribe(
    gw: RunningGateway,
    device: dict[str, object],
    *,
    token: str = "full-token",
    prefs: dict[str, object] | None = None,
) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=gw.http) as http:
        r = await http.put(
            "/push/subscription",
            json={"subscription": device, "prefs": prefs or {}},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text
        body: dict[str, object] = r.json()
        return body


async def test_permission_request_is_pushed_and_approve_lets_the_hook_proceed(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    admin: aioredis.Redis,
    machine: Callable[..., Machine],
    hooks: HookStarter,
    push_service: PushServiceStandIn,
) -> None:
    """Nobody watches; a subscribed device holds the request, gets Approve/Deny within a
    second (VAPID-signed, aes128gcm), and its capability lets the real hook proceed, once."""
    m = machine()
    target = m.workdir / "parser.py"
    target.write_text("a = 1\n")
    tool_input = {"file_path": str(target), **EDIT}
    sid, path, _ = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
    await published(admin, keys, sid)
    settings = make_settings(
        server.url,
        namespace,
        push_subject="mailto:ops@example.com",
        push_endpoint_allow=push_service.host,
    )
    async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
        push_service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
        phone = push_service.device("phone")
        await subscribe(gw, phone.subscription())
        assert await admin.hget(keys.session_watchers(sid), "push"), "the device holds requests"
        run = await hooks(
            hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env()
        )
        [push] = await _wait(push_service, "phone", 1)
        [(_, fields)] = [
            e
            for e in cast(Entries, await admin.xrange(keys.log))
            if e[1][b"k"] == b"permission_request"
        ]
        took_s = push.at - int(fields[b"t"]) / 1000
        assert took_s < 1.0, f"request in the log → push accepted took {took_s:.3f} s"
        p = push.payload
        assert p["kind"] == "approval" and p["tag"] == f"relaybus:{sid}"
        assert p["title"].startswith("testhost · ")
        assert p["body"] == "Edit parser.py +1 −1"
        assert [a["action"] for a in p["actions"]] == ["approve", "deny"]
        assert p["url"] == f"#/s/{sid}" and "token" not in str(p)
        assert push.claims["sub"] == "mailto:ops@example.com"
        assert 0 < int(push.headers["ttl"]) <= m.timeout_s
        r = await http.post("/push/decide", json={"cap": p["cap"], "decision": "allow"})
        assert r.status_code == 200, r.text
        code, out, _ = await run.result(30)
        assert code == 0 and '"behavior": "allow"' in out.replace('":"', '": "')
        again = await http.post("/push/decide", json={"cap": p["cap"], "decision": "deny"})
        assert again.status_code == 410, "single use"
        pushes = await _wait(push_service, "phone", 2)
        assert pushes[1].payload["kind"] == "resolved" and pushes[1].payload["body"] == "Approved"
        assert pushes[1].payload["tag"] == p["tag"], "replaces the request's notification"

        async def counted() -> bool:
            return gw.metric("relaybus_gateway_push_sent_total", {"channel": "webpush"}) == 2

        await wait_for(counted, what="both pushes counted as sent")


async def test_a_gone_subscription_is_deleted_and_a_read_token_gets_no_approvals(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    admin: aioredis.Redis,
    push_service: PushServiceStandIn,
) -> None:
    """A 410 from the push service deletes the subscription; a read-only token's device gets
    'waiting' and 'done' (for a turn over 30 s only) but never approvals, and holds no request."""
    settings = make_settings(server.url, namespace, push_endpoint_allow=push_service.host)
    pub = Publisher(admin, keys)
    async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
        push_service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
        old, reader = push_service.device("old"), push_service.device("reader")
        push_service.gone.add("/push/old")
        body = await subscribe(gw, reader.subscription(), token="ro-token")
        assert body["approvals"] is False
        sid = "sess-waiting"
        await pub.start_session(sid, title="fix the parser")
        await pub.turn(sid, "waiting")
        [push] = await _wait(push_service, "reader", 1)
        assert push.payload["title"] == "Waiting: fix the parser"
        assert "actions" not in push.payload
        assert await admin.hget(keys.session_watchers(sid), "push") is None, "holds nothing"
        await subscribe(gw, old.subscription())
        await pub.turn(sid, "waiting")
        await _wait(push_service, "reader", 2)

        async def deleted() -> bool:
            return await admin.hlen(f"{keys.prefix}push:subs") == 1

        await wait_for(deleted, what="the gone subscription deleted")
        now = int(time.time() * 1000)
        await pub.turn(sid, "working", since=now - 5_000)
        await pub.turn(sid, "idle", since=now)  # a short turn: nothing
        await pub.turn(sid, "working", since=now + 1)
        await pub.turn(sid, "idle", since=now + 40_000)
        pushes = await _wait(push_service, "reader", 3)
        assert [p.payload["kind"] for p in pushes] == ["waiting", "waiting", "done"]
        assert pushes[2].payload["title"] == "Done: fix the parser"
        assert (
            gw.metric(
                "relaybus_gateway_push_dropped_total", {"channel": "webpush", "reason": "gone"}
            )
            == 1
        )


async def _wait(service: PushServiceStandIn, name: str, count: int) -> list[Accepted]:
    return await asyncio.to_thread(service.wait, name, count)


async def test_a_notification_titles_a_session_as_the_listing_does(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    admin: aioredis.Redis,
    push_service: PushServiceStandIn,
) -> None:
    """A title Claude Code wrote names the notification; a session with only a first prompt
    (or a prompt stored as a title) is named by its cwd basename, never by the prompt, the
    list showing that prompt as firstPrompt and no title (one rule, gateway.frames)."""
    settings = make_settings(server.url, namespace, push_endpoint_allow=push_service.host)
    pub = Publisher(admin, keys)
    async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
        push_service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
        reader = push_service.device("reader")
        await subscribe(gw, reader.subscription(), token="ro-token")
        await pub.start_session("titled", cwd="/work/titled-dir")
        await admin.hset(
            keys.session("titled"),
            mapping={"title": "Parser fix", "titleRank": "5", "firstPrompt": "fix it"},
        )
        await pub.start_session("prompted", cwd="/work/prompted-dir")
        await admin.hset(keys.session("prompted"), "firstPrompt", "please fix the parser")
        await pub.start_session("old", cwd="/work/old-dir")
        await admin.hset(keys.session("old"), mapping={"title": "an old prompt", "titleRank": "1"})
        for sid in ("titled", "prompted", "old"):
            await pub.turn(sid, "waiting")
        pushes = await _wait(push_service, "reader", 3)
        async with WsClient(gw.ws, token="full-token") as c:
            await c.hello([])
            await c.send({"type": "list_sessions"})
            listed = {s["id"]: s for s in (await c.expect("sessions"))["sessions"]}
    assert sorted(str(p.payload["title"]) for p in pushes) == [
        "Waiting: Parser fix",
        "Waiting: old-dir",
        "Waiting: prompted-dir",
    ]
    assert listed["titled"]["title"] == "Parser fix"
    assert "title" not in listed["prompted"] and "title" not in listed["old"]
    assert listed["prompted"]["firstPrompt"] == "please fix the parser"
    assert listed["old"]["firstPrompt"] == "an old prompt"
