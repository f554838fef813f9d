"""The terminal answers a held permission request first: it is resolved at once, as such."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import orjson
import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import approvals as ap
from tests.approvals.conftest import Machine, published
from tests.support.approvals import (
    HookStarter,
    decide,
    hook_input,
    session_frames,
    session_with_tool,
    watch_from,
)
from tests.support.fake_claude import Transcript
from tests.support.wait import wait_for

#: "Resolved on the client within a second" (issue 10), with room for a loaded box.
RESOLVE_S = 3.0


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A real process standing in for the interactive ``claude`` (killed at teardown)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait(10)


async def _held(admin: aioredis.Redis, keys: Keys, sid: str) -> dict[str, object]:
    async def probe() -> list[dict[str, object]]:
        return await session_frames(admin, keys, sid, "permission_request")

    return (await wait_for(probe, what="permission_request published"))[0]


async def _resolved(admin: aioredis.Redis, keys: Keys, sid: str) -> dict[str, object]:
    async def probe() -> list[dict[str, object]]:
        return await session_frames(admin, keys, sid, "permission_resolved")

    return (await wait_for(probe, timeout_s=RESOLVE_S, what="permission_resolved"))[0]


def _edit(m: Machine) -> dict[str, object]:
    target = m.workdir / "notes.txt"
    target.write_text("alpha\nbeta\ngamma\n")
    return {"file_path": str(target), "old_string": "gamma", "new_string": "GAMMA"}


async def test_tool_result_in_the_transcript_resolves_the_request(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """The tool's result appears: answered_elsewhere at once, the hook exits with no decision,
    and a late accept is refused (the decision key is taken)."""
    m = machine()
    tool_input = _edit(m)
    sid, path, tool_use_id = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
    await published(admin, keys, sid)
    await watch_from(admin, keys, sid)
    hook_view = {**tool_input, "replace_all": False}  # what the CLI shows the hook
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", hook_view), env=m.hook_env())
    req = await _held(admin, keys, sid)
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
    written = time.monotonic()
    done = await _resolved(admin, keys, sid)
    assert time.monotonic() - written < RESOLVE_S
    assert (done["requestKey"], done["decision"]) == (req["requestKey"], ap.ANSWERED_ELSEWHERE)
    rc, out, _ = await run.result(RESOLVE_S * 2)
    assert (rc, out) == (0, "")
    assert not await decide(admin, keys, str(req["requestKey"]), ap.ALLOW)  # already_resolved
    assert not await admin.hgetall(ap.pending_key(keys, sid))
    assert await admin.hget(keys.session(sid), "state") == b"working"


async def test_live_file_leaving_waiting_resolves_the_request(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    admin: aioredis.Redis,
    keys: Keys,
    child: subprocess.Popen[bytes],
) -> None:
    """Claude Code's own dialog answered: the live file goes waiting -> busy; resolved at once."""
    m = machine()
    sid, path, _tid = session_with_tool(m.claude_dir, m.workdir, "Bash", {"command": "ls"})
    live = m.claude_dir / "sessions" / f"{child.pid}.json"

    def status(value: str, **extra: str) -> None:
        body = {"pid": child.pid, "sessionId": sid, "cwd": str(m.workdir), "status": value, **extra}
        tmp = live.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(body))
        os.replace(tmp, live)

    status("busy")
    await published(admin, keys, sid)
    await watch_from(admin, keys, sid)
    status("waiting", waitingFor="permission prompt")

    async def shown_waiting() -> bool:
        return await admin.hget(keys.session(sid), "waitingFor") == b"permission prompt"

    await wait_for(shown_waiting, what="the live file's waiting")
    run = await hooks(
        hook_input(sid, path, str(m.workdir), "Bash", {"command": "ls"}), env=m.hook_env()
    )
    await _held(admin, keys, sid)
    assert await admin.hget(keys.session(sid), "waitingFor") == b"approve Bash"  # ours wins
    status("busy")
    done = await _resolved(admin, keys, sid)
    assert done["decision"] == ap.ANSWERED_ELSEWHERE
    rc, out, _ = await run.result(RESOLVE_S * 2)
    assert (rc, out) == (0, "")

    async def working() -> bool:
        return await admin.hget(keys.session(sid), "state") == b"working"

    await wait_for(working, what="working again")


async def test_a_tool_use_line_written_after_the_hook_call_is_still_matched(
    hooks: HookStarter, machine: Callable[..., Machine], admin: aioredis.Redis, keys: Keys
) -> None:
    """The CLI flushed its tool_use line (with the result the terminal's answer produced) only
    after calling the hook: the held request finds it and resolves as answered elsewhere."""
    m = machine()
    sid, path, bash_id = session_with_tool(m.claude_dir, m.workdir, "Bash", {"command": "true"})
    t = Transcript(path, sid, str(m.workdir), "cli")
    t._append(
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": bash_id, "content": "ok"}],
            },
        }
    )  # an earlier call
    await published(admin, keys, sid)
    await watch_from(admin, keys, sid)
    tool_input = _edit(m)
    run = await hooks(hook_input(sid, path, str(m.workdir), "Edit", tool_input), env=m.hook_env())
    req = await _held(admin, keys, sid)
    assert "toolUseId" not in req  # nothing to match yet
    # the call and its result flushed together, after the hook was called
    t._append(
        {
            "type": "assistant",
            "message": {
                "id": "msg_late",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [
                    {"type": "tool_use", "id": "toolu_late", "name": "Edit", "input": tool_input}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {},
            },
        }
    )
    t._append(
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_late", "content": "edited"}
                ],
            },
        }
    )
    done = await wait_for(
        lambda: session_frames(admin, keys, sid, "permission_resolved"),
        timeout_s=RESOLVE_S * 2,
        what="permission_resolved",
    )
    assert done[0]["decision"] == ap.ANSWERED_ELSEWHERE
    rc, out, _ = await run.result(RESOLVE_S * 2)
    assert (rc, out) == (0, "")
