"""Members' tokens and push (issue 25): a member's device gets only its scope's sessions, a
revoke removes its subscriptions (and no send reaches a revoked token meanwhile), and an
Approve from a notification is recorded with the member and device like one from the
WebSocket."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import cast

import httpx
import pytest
import redis.asyncio as aioredis

from relaybus.gateway.push.audience import Audience
from relaybus.gateway.push.store import PushStore, Subscription
from relaybus.shared.store import audit, members
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.scope import Scope
from tests.approvals.conftest import Machine, published
from tests.conftest import make_settings
from tests.shared.test_cli import run_cli
from tests.support.approvals import HookStarter, hook_input, session_with_tool
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.push_service import PushServiceStandIn
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

IPHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Safari/604.1"
EDIT = {"old_string": "a = 1", "new_string": "a = 2"}


@dataclass
class Pushing:
    """A gateway with push to the stand-in, and an admin client of its Redis."""

    gw: RunningGateway
    http: httpx.AsyncClient
    admin: aioredis.Redis
    keys: Keys
    service: PushServiceStandIn

    async def subscribe(self, device: str, token: str) -> httpx.Response:
        return await self.http.put(
            "/push/subscription",
            json={"subscription": self.service.device(device).subscription(), "prefs": {}},
            headers={"Authorization": f"Bearer {token}", "User-Agent": IPHONE},
        )

    def sessions(self, device: str) -> list[str]:
        return sorted(p.payload["sessionId"] for p in self.service.of(device))


@pytest.fixture
async def pushing(
    server: RedisServer, namespace: str, keys: Keys, push_service: PushServiceStandIn
) -> AsyncIterator[Pushing]:
    admin = aioredis.Redis.from_url(server.url)
    settings = make_settings(server.url, namespace, push_endpoint_allow=push_service.host)
    try:
        async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
            push_service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
            yield Pushing(gw, http, admin, keys, push_service)
    finally:
        await admin.aclose()


async def test_a_push_only_device_marks_its_token_used(
    pushing: Pushing, server: RedisServer, namespace: str
) -> None:
    """A member's device that only subscribes to push (never opens the WebSocket) shows in
    `relaybus token list`: last used, and its device label; a refused subscription does not."""
    p = pushing
    tid, dana = await members.add_token(p.admin, p.keys, "dana", Scope.build(hosts=["laptop"]))

    def listed() -> dict[str, object]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
        env |= {"RELAYBUS_REDIS_URL": server.url, "RELAYBUS_NAMESPACE": namespace}
        out = run_cli("token", "list", "--json", env=env)
        assert out.returncode == 0, out.stderr
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        return next(row for row in rows if row["id"] == tid)

    taken = await p.subscribe("ops", "full-token")
    assert taken.status_code == 200
    assert (await p.subscribe("ops", dana)).status_code == 409  # another token's endpoint
    before = await asyncio.to_thread(listed)
    assert (before["lastUsed"], before["devices"]) == (None, []), before
    assert (await p.subscribe("dana", dana)).status_code == 200
    after = await asyncio.to_thread(listed)
    assert after["devices"] == ["iPhone"] and isinstance(after["lastUsed"], int), after


async def test_each_member_gets_only_its_scopes_notifications(pushing: Pushing) -> None:
    """dana (laptop) and erik (server, /srv/app) each get only their own session's push; a
    bootstrap token's device gets all three."""
    p = pushing
    _d, dana = await members.add_token(p.admin, p.keys, "dana", Scope.build(hosts=["laptop"]))
    _e, erik = await members.add_token(
        p.admin, p.keys, "erik", Scope.build(hosts=["server"], projects=["/srv/app"])
    )
    for device, token in (("dana", dana), ("erik", erik), ("ops", "full-token")):
        r = await p.subscribe(device, token)
        assert r.status_code == 200, r.text
    assert (await p.subscribe("dana-2", erik)).json()["approvals"] is True
    laptop, srv = (
        Publisher(p.admin, p.keys, host="laptop"),
        Publisher(p.admin, p.keys, host="server"),
    )
    await laptop.start_session("s-dana", cwd="/home/dana/site")
    await srv.start_session("s-app", cwd="/srv/app/api")
    await srv.start_session("s-other", cwd="/srv/other")
    for pub, sid in ((laptop, "s-dana"), (srv, "s-app"), (srv, "s-other")):
        await pub.turn(sid, "waiting")
    await asyncio.to_thread(p.service.wait, "ops", 3)
    await asyncio.sleep(0.3)  # the members' pushes of the same entries went out before
    assert p.sessions("ops") == ["s-app", "s-dana", "s-other"]
    assert p.sessions("dana") == ["s-dana"]
    assert p.sessions("erik") == p.sessions("dana-2") == ["s-app"]


async def test_revoke_removes_the_subscription_and_stops_sends(pushing: Pushing) -> None:
    """A revoked member's subscription is gone within a second; a token deleted without the
    announcement (the reader not yet run) already gets nothing."""
    p = pushing
    dana_id, dana = await members.add_token(p.admin, p.keys, "dana", Scope.build(hosts=["h"]))
    erik_id, erik = await members.add_token(p.admin, p.keys, "erik", Scope.build(hosts=["h"]))
    for device, token in (("dana", dana), ("erik", erik), ("ops", "full-token")):
        assert (await p.subscribe(device, token)).status_code == 200
    subs = cast(dict[bytes, bytes], await p.admin.hgetall(p.keys.push_subs))
    assert len(subs) == 3 and all(dana.encode() not in v for v in subs.values()), "no secret"
    start = time.monotonic()
    assert await members.revoke(p.admin, p.keys, "dana") == [dana_id]

    async def removed() -> bool:
        rows = cast(dict[bytes, bytes], await p.admin.hgetall(p.keys.push_subs))
        return len(rows) == 2 and all(dana_id.encode() not in v for v in rows.values())

    await wait_for(removed, what="dana's subscription removed", timeout_s=1.0)
    took_s = time.monotonic() - start
    assert took_s < 1.0, f"revoke → subscription removed took {took_s:.3f} s"
    await p.admin.hdel(p.keys.tokens, erik_id)  # erik is gone; no announcement read yet
    pub = Publisher(p.admin, p.keys, host="h")
    await pub.start_session("s-1")
    await pub.turn("s-1", "waiting")
    await asyncio.to_thread(p.service.wait, "ops", 1)
    await asyncio.sleep(0.3)
    assert p.service.of("dana") == [] and p.service.of("erik") == []
    assert p.gw.metric(
        "relaybus_gateway_push_dropped_total", {"channel": "webpush", "reason": "revoked"}
    ) == pytest.approx(1.0)


async def test_a_member_cannot_take_a_live_tokens_endpoint(pushing: Pushing) -> None:
    """An endpoint held by a live member's token is refused to another token (409)."""
    p = pushing
    _d, dana = await members.add_token(p.admin, p.keys, "dana", Scope.build(hosts=["h"]))
    assert (await p.subscribe("phone", dana)).status_code == 200
    r = await p.subscribe("phone", "full-token")
    assert r.status_code == 409, r.text


async def test_decide_out_of_scope_or_revoked_is_answered_as_expired(pushing: Pushing) -> None:
    """A capability of erik's device for a laptop session, or of dana's revoked token, gets
    the same 410 as a used one, and nothing is decided."""
    p = pushing
    dana_id, dana = await members.add_token(p.admin, p.keys, "dana", Scope.build(hosts=["laptop"]))
    _e, erik = await members.add_token(p.admin, p.keys, "erik", Scope.build(hosts=["server"]))
    await Publisher(p.admin, p.keys, host="laptop").start_session("s-dana")
    store = PushStore(p.admin, p.keys)
    until = int(time.time() * 1000) + 60_000
    erik_sub = (await p.subscribe("erik", erik)).json()["id"]
    dana_sub = (await p.subscribe("dana", dana)).json()["id"]
    await p.admin.hdel(p.keys.tokens, dana_id)
    for sub in (erik_sub, dana_sub):
        cap = await store.grant("s-dana", f"k-{sub}", until, sub)
        r = await p.http.post("/push/decide", json={"cap": cap, "decision": "allow"})
        assert r.status_code == 410 and r.json()["error"] == "expired", r.text
        assert await p.admin.get(p.keys.approval(f"k-{sub}")) is None
    assert await audit.read(p.admin, p.keys) == []


def test_an_unknown_place_is_outside_a_restricted_scope() -> None:
    """A member's subscription never reaches a session whose host or cwd is unknown; a
    bootstrap one reaches everything; a gone token reaches nothing."""
    member = Subscription("https://p/x", "k", "a", "fp-m", True, token_id="t1")
    boot = Subscription("https://p/y", "k", "a", "fp-b", True)
    who = Audience({"fp-b": True}, {"t1": Scope.build(hosts=["h"], projects=["/p"])})
    assert who.reaches(member, "h", "/p/q") and who.full(member) is True
    assert not who.reaches(member, "h", "") and not who.reaches(member, "", "/p")
    assert who.reaches(boot, "", "")
    gone = Audience({"fp-b": True}, {})
    assert gone.full(member) is None and not gone.reaches(member, "h", "/p")


async def test_decide_from_a_notification_records_member_and_device(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    admin: aioredis.Redis,
    machine: Callable[..., Machine],
    hooks: HookStarter,
    push_service: PushServiceStandIn,
) -> None:
    """dana approves from her iPhone's notification: the hook proceeds, the audit trail has
    one approve by dana · iPhone, the decision record names her, and `relaybus token list`
    shows her token used from the iPhone."""
    m = machine()
    target = m.workdir / "parser.py"
    target.write_text("a = 1\n")
    tool_input = {"file_path": str(target), **EDIT}
    sid, path, _ = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
    await published(admin, keys, sid)
    dana_id, dana = await members.add_token(admin, keys, "dana", Scope.build(hosts=["testhost"]))
    _e, erik = await members.add_token(admin, keys, "erik", Scope.build(hosts=["elsewhere"]))
    settings = make_settings(server.url, namespace, push_endpoint_allow=push_service.host)
    async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
        p = Pushing(gw, http, admin, keys, push_service)
        push_service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
        assert (await p.subscribe("dana", dana)).status_code == 200
        assert (await p.subscribe("erik", erik)).status_code == 200
        assert await admin.hget(keys.session_watchers(sid), "push"), "dana's device holds it"
        await admin.delete(keys.token_seen(dana_id))  # what subscribing marked: the decide's own
        run = await hooks(
            hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env()
        )
        [push] = await asyncio.to_thread(push_service.wait, "dana", 1)
        r = await http.post("/push/decide", json={"cap": push.payload["cap"], "decision": "allow"})
        assert r.status_code == 200, r.text
        code, out, _ = await run.result(30)
        assert code == 0 and '"behavior": "allow"' in out.replace('":"', '": "')
        assert push_service.of("erik") == [], "outside erik's scope"
        [entry] = [e for e in await audit.read(admin, keys) if e["action"] == "approve"]
        assert entry["member"] == "dana" and entry["device"] == "iPhone"
        assert entry["tokenId"] == dana_id and entry["sessionId"] == sid
        assert entry["host"] == "testhost"
        record = await admin.get(keys.approval(r.json()["requestKey"]))
        assert record is not None and b'"decidedBy"' in record and b'"iPhone"' in record
        [listed] = [t for t in await members.list_tokens(admin, keys) if t.id == dana_id]
        assert listed.devices == ("iPhone",) and listed.last_used_ms is not None, listed
