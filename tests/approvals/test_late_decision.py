"""A decision without a requestKey that comes after the request ended: already_resolved, not
no_pending_request (the hook process, a collector process, a gateway, a WebSocket client)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import approvals as ap
from tests.approvals.conftest import Machine, published
from tests.conftest import make_settings
from tests.support.approvals import HookStarter, hook_input, session_with_tool
from tests.support.fake_claude import Transcript
from tests.support.gateway_client import FULL, Frame, WsClient
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

#: The approval timeout of these collectors: how long a late keyless decision is already_resolved.
TIMEOUT_S = 3.0


@pytest.fixture
async def gateway(server: RedisServer, namespace: str) -> AsyncIterator[RunningGateway]:
    async with running_gateway(make_settings(server.url, namespace)) as gw:
        yield gw


async def _watching(ws: WsClient, admin: aioredis.Redis, keys: Keys, sid: str) -> None:
    await ws.hello(FULL)
    await ws.watch(sid, requestId="w")

    async def counted() -> bool:
        return (
            ap.live_watchers(
                await admin.hgetall(keys.session_watchers(sid)), int(time.time() * 1000)
            )
            == 1
        )

    await wait_for(counted, what=f"the gateway counting the watcher of {sid}")


async def _keyless_accept(ws: WsClient, rid: str) -> Frame:
    """Send an accept_diff without requestKey or sessionId; the answer to it."""
    await ws.send({"type": "accept_diff", "requestId": rid})
    frames = await ws.until(lambda fs: any(f.get("requestId") == rid for f in fs))
    return next(f for f in frames if f.get("requestId") == rid)


async def test_terminal_answered_then_keyless_accept_is_already_resolved(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    gateway: RunningGateway,
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """The terminal answers a held request; a keyless accept_diff after it is already_resolved,
    and no_pending_request again once the approval timeout has passed since."""
    m = machine(timeout_s=TIMEOUT_S * 10)
    target = m.workdir / "f.py"
    target.write_text("a = 1\n")
    tool_input = {"file_path": str(target), "old_string": "a = 1", "new_string": "a = 2"}
    sid, path, tool_use_id = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
    await published(admin, keys, sid)
    async with WsClient(gateway.ws, token="full-token") as ws:
        await _watching(ws, admin, keys, sid)
        run = await hooks(
            hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env()
        )
        req = await ws.expect("permission_request", wait_s=30)
        assert req["toolUseId"] == tool_use_id
        Transcript(path, sid, str(m.workdir), "cli")._append(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tool_use_id, "content": "edited"}
                    ],
                },
            }
        )
        done = await ws.expect("permission_resolved", wait_s=10)
        assert (done["requestKey"], done["decision"]) == (req["requestKey"], ap.ANSWERED_ELSEWHERE)
        rc, out, _ = await run.result(30)
        assert (rc, out) == (0, "")
        late = await _keyless_accept(ws, "late")
        assert (late["type"], late["code"]) == ("error", "already_resolved")
        assert req["requestKey"] in late["message"]
        record = ap.parse_resolved(await admin.get(keys.approval_resolved(sid)))
        assert record == (req["requestKey"], ap.ANSWERED_ELSEWHERE)
        assert 0 < await admin.ttl(keys.approval_resolved(sid)) <= TIMEOUT_S * 10
        assert not ws.of_type("decision_ack")


async def test_keyless_accept_is_no_pending_request_once_the_timeout_passed(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    gateway: RunningGateway,
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """A request that timed out is already_resolved for a keyless accept_diff only for the
    approval timeout after it ended; then no_pending_request."""
    m = machine(timeout_s=TIMEOUT_S)
    sid, path, _tid = session_with_tool(m.claude_dir, m.workdir, "Bash", {"command": "ls"})
    await published(admin, keys, sid)
    async with WsClient(gateway.ws, token="full-token") as ws:
        await _watching(ws, admin, keys, sid)
        run = await hooks(
            hook_input(sid, path, str(m.workdir), "Bash", {"command": "ls"}), env=m.hook_env()
        )
        req = await ws.expect("permission_request", wait_s=30)
        done = await ws.expect("permission_resolved", wait_s=TIMEOUT_S + 10)
        assert (done["requestKey"], done["decision"]) == (req["requestKey"], ap.TIMED_OUT)
        ended = time.monotonic()
        late = await _keyless_accept(ws, "late")
        assert late["code"] == "already_resolved"
        assert (await run.result(30))[:2] == (0, "")
        codes: list[str] = []

        async def no_longer_late() -> bool:
            frame = await _keyless_accept(ws, f"try{len(codes)}")
            codes.append(str(frame["code"]))
            if codes[-1] != "no_pending_request":
                await asyncio.sleep(0.2)
                return False
            return True

        await wait_for(no_longer_late, timeout_s=TIMEOUT_S + 10, what="the late window to close")
        assert time.monotonic() - ended >= TIMEOUT_S - 1.5  # not before the window could close
        assert set(codes[:-1]) <= {"already_resolved"}


async def test_nothing_ever_requested_is_no_pending_request(
    machine: Callable[..., Machine],
    gateway: RunningGateway,
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """A session that never had a permission request: keyless accept_diff and reject_diff are
    no_pending_request, and nothing is claimed in Redis."""
    m = machine(timeout_s=TIMEOUT_S * 10)
    sid, _path, _tid = session_with_tool(m.claude_dir, m.workdir, "Bash", {"command": "ls"})
    await published(admin, keys, sid)
    async with WsClient(gateway.ws, token="full-token") as ws:
        await _watching(ws, admin, keys, sid)
        acc = await _keyless_accept(ws, "acc")
        assert (acc["type"], acc["code"]) == ("error", "no_pending_request")
        await ws.send({"type": "reject_diff", "requestId": "rej", "sessionId": sid})
        rej = await ws.expect("error")
        assert (rej["requestId"], rej["code"]) == ("rej", "no_pending_request")
    assert await admin.get(keys.approval_resolved(sid)) is None
    assert not await admin.hgetall(keys.approvals(sid))
    assert await admin.keys(f"{keys.prefix}approval:*") == []
