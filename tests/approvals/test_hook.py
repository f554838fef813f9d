"""The hook as Claude Code runs it (a subprocess, JSON on stdin) against a real collector."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import redis.asyncio as aioredis

from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import approvals as ap
from tests.approvals.conftest import Machine, published
from tests.conftest import make_settings
from tests.support.approvals import (
    HookStarter,
    decide,
    hook_input,
    log_frames,
    session_frames,
    session_with_tool,
    watch_from,
)
from tests.support.servers import RedisServer, free_port
from tests.support.wait import wait_for

EDIT = {"old_string": "x = 1\n", "new_string": "x = 2\ny = 3\n"}
#: "at once": far below the hold timeout the machines use (60 s), generous for a loaded box.
AT_ONCE_S = 15.0


async def _held(admin: aioredis.Redis, keys: Keys, sid: str, n: int = 1) -> dict[str, object]:
    async def probe() -> list[dict[str, object]]:
        found = await session_frames(admin, keys, sid, "permission_request")
        return found if len(found) >= n else []

    return (await wait_for(probe, what="permission_request published"))[n - 1]


async def _edit_session(
    m: Machine, admin: aioredis.Redis, keys: Keys
) -> tuple[str, Path, str, dict[str, object]]:
    target = m.workdir / "a.py"
    target.write_text("import os\nx = 1\nprint(x)\n")
    tool_input: dict[str, object] = {"file_path": str(target), **EDIT}
    sid, path, tool_use_id = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
    await published(admin, keys, sid)
    return sid, path, tool_use_id, tool_input


async def test_accept_allows(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """A watched session: the request is published with toolUseId and preview; allow -> the hook allows."""
    m = machine()
    sid, path, tool_use_id, tool_input = await _edit_session(m, admin, keys)
    await watch_from(admin, keys, sid)
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    req = await _held(admin, keys, sid)
    assert req["toolUseId"] == tool_use_id
    assert (req["name"], req["input"]) == ("Edit", tool_input)
    assert req["edit"] == {
        "added": 2,
        "removed": 1,
        "hunks": [{"oldStart": 2, "lines": ["-x = 1", "+x = 2", "+y = 3"]}],
    }
    assert isinstance(req["expiresAt"], int)
    row = await admin.hgetall(keys.session(sid))
    assert (row[b"state"], row[b"waitingFor"]) == (b"waiting", b"approve Edit")
    assert await decide(admin, keys, str(req["requestKey"]), ap.ALLOW)
    rc, out, _ = await run.result()
    assert rc == 0
    assert json.loads(out) == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"},
        }
    }

    async def resolved() -> list[dict[str, object]]:
        return await session_frames(admin, keys, sid, "permission_resolved")

    done = await wait_for(resolved, what="permission_resolved")
    assert (done[0]["requestKey"], done[0]["decision"]) == (req["requestKey"], "allow")
    states = [f["state"] for f in await log_frames(admin, keys, sid, "turn_status")]
    assert states[-2:] == ["waiting", "working"]
    assert not await admin.hgetall(keys.approvals(sid))


async def test_reject_denies_with_reason(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """reject with a reason -> the hook denies, and Claude is told the reason."""
    m = machine()
    sid, path, _tid, tool_input = await _edit_session(m, admin, keys)
    await watch_from(admin, keys, sid)
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    req = await _held(admin, keys, sid)
    assert await decide(admin, keys, str(req["requestKey"]), ap.DENY, "use y = 4 instead")
    rc, out, _ = await run.result()
    assert rc == 0
    decision = json.loads(out)["hookSpecificOutput"]["decision"]
    assert decision == {"behavior": "deny", "message": "use y = 4 instead"}


async def test_timeout_falls_through(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """No decision within the timeout: the hook prints nothing and exits 0; a later decision is refused."""
    m = machine(timeout_s=2)
    sid, path, _tid, tool_input = await _edit_session(m, admin, keys)
    await watch_from(admin, keys, sid)
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    req = await _held(admin, keys, sid)
    rc, out, took = await run.result()
    assert (rc, out) == (0, "")
    done = await wait_for(lambda: session_frames(admin, keys, sid, "permission_resolved"))
    assert done[0]["decision"] == "timeout", m.proc.log()
    assert took >= 1.5, m.proc.log()
    assert not await decide(admin, keys, str(req["requestKey"]), ap.ALLOW)


async def test_nobody_watching_falls_through_at_once(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """Nobody watches the session: no decision at once, nothing published."""
    m = machine()
    sid, path, _tid, tool_input = await _edit_session(m, admin, keys)
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    rc, out, took = await run.result()
    assert (rc, out) == (0, "")
    assert took < AT_ONCE_S
    assert await session_frames(admin, keys, sid, "permission_request") == []


async def test_stale_watchers_do_not_count(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """A watcher count whose gateway stopped refreshing it (expired stamp) holds nothing."""
    m = machine()
    sid, path, _tid, tool_input = await _edit_session(m, admin, keys)
    await admin.hset(keys.session_watchers(sid), "gw-dead", ap.watcher_value(3, 1_000))
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    rc, out, took = await run.result()
    assert (rc, out) == (0, "")
    assert took < AT_ONCE_S


async def test_always_mode_holds_without_watchers(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """approval_mode=always holds with nobody watching (and still never decides by itself)."""
    m = machine(mode="always", timeout_s=3)
    sid, path, _tid, _tool_input = await _edit_session(m, admin, keys)
    run = await hooks(
        hook_input(sid, path, str(m.workdir), "Bash", {"command": "ls"}), env=m.hook_env()
    )
    req = await _held(admin, keys, sid)
    assert req["name"] == "Bash" and "edit" not in req and "toolUseId" not in req
    rc, out, _ = await run.result()
    assert (rc, out) == (0, "")


async def test_hook_gone_cancels(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """The hook is killed while held (Claude Code gave up): the request resolves as cancelled."""
    m = machine()
    sid, path, _tid, tool_input = await _edit_session(m, admin, keys)
    await watch_from(admin, keys, sid)
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    req = await _held(admin, keys, sid)
    run.kill()
    await run.proc.wait()
    done = await wait_for(lambda: session_frames(admin, keys, sid, "permission_resolved"))
    assert (done[0]["requestKey"], done[0]["decision"]) == (req["requestKey"], "cancelled")
    assert (await admin.hget(keys.session(sid), "state")) == b"working"


async def test_collector_down_falls_through_at_once(hooks: HookStarter, tmp_path: Path) -> None:
    """Nothing listens on the approval port: no decision at once."""
    env = {"RELAYBUS_APPROVAL_PORT": str(free_port()), "PATH": "/usr/bin:/bin"}
    payload = hook_input("s1", tmp_path / "s1.jsonl", str(tmp_path), "Edit", EDIT)
    rc, out, took = await (await hooks(payload, env=env)).result()
    assert (rc, out) == (0, "")
    assert took < AT_ONCE_S


async def test_bad_input_falls_through(hooks: HookStarter, tmp_path: Path) -> None:
    """Input that is not a JSON object, or a port of 0 (off): nothing printed, exit 0."""
    env = {"RELAYBUS_APPROVAL_PORT": str(free_port())}
    for payload in (b"not json", b"[1, 2]", b""):
        rc, out, _ = await (await hooks(payload, env=env)).result()
        assert (rc, out) == (0, "")
    off = {"RELAYBUS_APPROVAL_PORT": "0"}
    rc, out, _ = await (await hooks(hook_input("s", tmp_path, "/", "Edit", EDIT), env=off)).result()
    assert (rc, out) == (0, "")


async def test_redis_down_falls_through_at_once(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    private_server: Callable[..., RedisServer],
    namespace: str,
) -> None:
    """The collector is up but its Redis is gone: no decision at once."""
    srv = private_server()
    m = machine(url=srv.url)
    client = connect(make_settings(srv.url, namespace))
    keys = Keys(namespace)
    try:
        sid, path, _tid, tool_input = await _edit_session(m, client, keys)
        await watch_from(client, keys, sid)
    finally:
        await client.aclose()
    srv.stop()
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    rc, out, took = await run.result()
    assert (rc, out) == (0, "")
    assert took < AT_ONCE_S


async def test_collector_stopping_releases_the_hook(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """SIGTERM to the collector while a request is held: the hook falls through, the collector exits 0."""
    m = machine()
    sid, path, _tid, tool_input = await _edit_session(m, admin, keys)
    await watch_from(admin, keys, sid)
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    await _held(admin, keys, sid)
    assert m.proc.terminate() == 0
    rc, out, took = await run.result()
    assert (rc, out) == (0, "")
    assert took < AT_ONCE_S
