"""Approvals end to end: the hook subprocess, a collector process, two gateways, WebSocket clients."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import approvals as ap
from tests.approvals.conftest import Machine, published
from tests.conftest import make_settings
from tests.support.approvals import HookStarter, hook_input, session_frames, session_with_tool
from tests.support.collector_records import Entries
from tests.support.gateway_client import FULL, Frame, WsClient
from tests.support.gateway_server import GatewayProc, RunningGateway, running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

EDIT = {"old_string": "a = 1", "new_string": "a = 2"}


@pytest.fixture
async def gateways(server: RedisServer, namespace: str) -> AsyncIterator[Callable[..., Any]]:
    async with AsyncExitStack() as stack:

        async def make() -> RunningGateway:
            return await stack.enter_async_context(
                running_gateway(make_settings(server.url, namespace))
            )

        yield make


async def _watch(ws: WsClient, sid: str) -> None:
    await ws.hello(FULL)
    await ws.watch(sid, requestId="w")


async def _watchers(admin: aioredis.Redis, keys: Keys, sid: str, gateways: int) -> None:
    async def probe() -> bool:
        return len(await admin.hgetall(keys.session_watchers(sid))) == gateways

    await wait_for(probe, what=f"{gateways} gateways counting watchers of {sid}")


def _of(ws: WsClient, type_: str) -> list[Frame]:
    return ws.of_type(type_)


async def test_two_clients_race_through_two_gateways(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    gateways: Callable[..., Any],
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """Clients on two gateways see the request; accept and reject race: one wins, the other is
    already_resolved, the hook answers the winner, everyone sees permission_resolved; a late
    decision, by requestKey or without one, is already_resolved."""
    m = machine()
    target = m.workdir / "f.py"
    target.write_text("a = 1\n")
    tool_input = {"file_path": str(target), **EDIT}
    sid, path, tool_use_id = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
    await published(admin, keys, sid)
    gw1, gw2 = await gateways(), await gateways()
    async with (
        WsClient(gw1.ws, token="full-token") as a,
        WsClient(gw2.ws, token="full-token") as b,
        WsClient(gw1.ws, token="ro-token") as ro,
    ):
        for ws in (a, b, ro):
            await _watch(ws, sid)
        await _watchers(admin, keys, sid, 2)
        assert (
            ap.live_watchers(
                await admin.hgetall(keys.session_watchers(sid)), int(time.time() * 1000)
            )
            == 2
        )
        run = await hooks(
            hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env()
        )
        reqs = [await ws.expect("permission_request", wait_s=30) for ws in (a, b, ro)]
        req = reqs[0]
        assert all(r["requestKey"] == req["requestKey"] for r in reqs)
        assert (req["sessionId"], req["toolUseId"], req["name"]) == (sid, tool_use_id, "Edit")
        assert req["edit"]["added"] == 1 and req["edit"]["removed"] == 1
        assert isinstance(req["seqId"], int) and "sessionSeq" not in req
        await a.until(
            lambda fs: any(
                f["type"] == "turn_status" and f.get("waitingFor") == "approve Edit" for f in fs
            )
        )
        await ro.send({"type": "accept_diff", "requestId": "ro1"})
        err = await ro.expect("error")
        assert (err["requestId"], err["code"]) == ("ro1", "forbidden")
        await asyncio.gather(
            a.send({"type": "accept_diff", "requestId": "acc"}),
            b.send({"type": "reject_diff", "requestId": "rej", "sessionId": sid, "reason": "no"}),
        )
        for ws in (a, b):
            await ws.until(
                lambda fs: any(
                    f["type"] in ("decision_ack", "error") and f.get("requestId") in ("acc", "rej")
                    for f in fs
                )
            )
        acks = [f for ws in (a, b) for f in _of(ws, "decision_ack")]
        errors = [f for ws in (a, b) for f in _of(ws, "error")]
        assert len(acks) == 1 and len(errors) == 1
        assert errors[0]["code"] == "already_resolved"
        winner = acks[0]["decision"]
        assert acks[0]["requestKey"] == req["requestKey"]
        rc, out, _ = await run.result()
        assert rc == 0
        assert json.loads(out)["hookSpecificOutput"]["decision"]["behavior"] == winner
        for ws in (a, b, ro):
            done = await ws.expect("permission_resolved", wait_s=30)
            assert (done["requestKey"], done["decision"]) == (req["requestKey"], winner)
        await a.until(
            lambda fs: (
                [f.get("state") for f in fs if f["type"] == "turn_status"][-1:] == ["working"]
            )
        )
        await a.send({"type": "accept_diff", "requestId": "late", "requestKey": req["requestKey"]})
        late = await a.expect("error")
        assert (late["requestId"], late["code"]) == ("late", "already_resolved")
        await b.send({"type": "accept_diff", "requestId": "keyless"})
        keyless = await b.expect("error")  # decided by the other client moments ago
        assert (keyless["requestId"], keyless["code"]) == ("keyless", "already_resolved")


async def test_ambiguous_then_by_key_and_unwatch_releases(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    gateways: Callable[..., Any],
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """Two requests pending: a keyless decision is ambiguous, a keyed one resolves its request;
    when the last watcher leaves, the other falls through (no decision)."""
    m = machine()
    sid, path, _tid = session_with_tool(m.claude_dir, m.workdir, "Bash", {"command": "ls"})
    await published(admin, keys, sid)
    gw = await gateways()
    async with WsClient(gw.ws, token="full-token") as a:
        await _watch(a, sid)
        await _watchers(admin, keys, sid, 1)
        first = await hooks(
            hook_input(sid, path, str(m.workdir), "Bash", {"command": "ls"}), env=m.hook_env()
        )
        r1 = await a.expect("permission_request", wait_s=30)
        second = await hooks(
            hook_input(sid, path, str(m.workdir), "Bash", {"command": "pwd"}), env=m.hook_env()
        )
        r2 = await a.expect("permission_request", wait_s=30)
        await a.send({"type": "accept_diff", "requestId": "x"})
        err = await a.expect("error")
        assert (err["requestId"], err["code"]) == ("x", "ambiguous")
        await a.send(
            {
                "type": "reject_diff",
                "requestId": "y",
                "requestKey": r2["requestKey"],
                "reason": "not that one",
            }
        )
        ack = await a.expect("decision_ack")
        assert (ack["requestKey"], ack["decision"]) == (r2["requestKey"], "deny")
        rc, out, _ = await second.result()
        assert json.loads(out)["hookSpecificOutput"]["decision"] == {
            "behavior": "deny",
            "message": "not that one",
        }
        await a.send({"type": "unwatch_session", "requestId": "u", "sessionId": sid})
        await a.expect("watch_ack")
    rc, out, _ = await first.result(wait_s=60)
    assert (rc, out) == (0, "")
    resolved = {f["requestKey"]: f["decision"] for f in await _session_kind(admin, keys, sid)}
    assert resolved == {r1["requestKey"]: "cancelled", r2["requestKey"]: "deny"}


async def _session_kind(admin: aioredis.Redis, keys: Keys, sid: str) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]]:
        entries = cast(Entries, await admin.xrange(keys.session_events(sid)))
        found = [json.loads(f[b"f"]) for _i, f in entries if f[b"k"] == b"permission_resolved"]
        return found if len(found) >= 2 else []

    return await wait_for(probe, what="both resolutions")


async def test_dead_gateway_releases_the_request(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    server: RedisServer,
    namespace: str,
    admin: aioredis.Redis,
    keys: Keys,
    tmp_path: Path,
) -> None:
    """The only watcher's gateway process is SIGKILLed while a request is held: its count
    expires (a 3 s watcher TTL) and the hook falls through (no decision) well before the
    approval timeout."""
    m = machine(timeout_s=110)
    sid, path, _tid = session_with_tool(m.claude_dir, m.workdir, "Bash", {"command": "ls"})
    await published(admin, keys, sid)
    with GatewayProc(
        redis_url=server.url,
        namespace=namespace,
        log_path=tmp_path / "gw.log",
        env={"RELAYBUS_WATCHERS_TTL_S": "3"},
    ) as gw:
        async with WsClient(gw.ws, token="full-token") as a:
            await _watch(a, sid)
            await _watchers(admin, keys, sid, 1)
            run = await hooks(
                hook_input(sid, path, str(m.workdir), "Bash", {"command": "ls"}), env=m.hook_env()
            )
            await a.expect("permission_request", wait_s=30)
            gw.kill()
            rc, out, took = await run.result(wait_s=100)
    assert (rc, out) == (0, "")
    assert took < 30
    done = await wait_for(lambda: session_frames(admin, keys, sid, "permission_resolved"))
    assert done[0]["decision"] == "cancelled"
