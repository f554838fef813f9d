"""Helpers for the approval tests: run the hook as Claude Code does, fake a gateway's Redis side."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import approvals as ap
from tests.support.collector_records import Entries
from tests.support.fake_claude import Transcript, transcript_path

RELAYBUS = Path(sys.executable).parent / "relaybus"


def hook_input(
    sid: str, transcript: Path, cwd: str, name: str, tool_input: dict[str, Any]
) -> dict[str, Any]:
    """The JSON Claude Code writes to a PermissionRequest hook's stdin."""
    return {
        "session_id": sid,
        "transcript_path": str(transcript),
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "PermissionRequest",
        "tool_name": name,
        "tool_input": tool_input,
    }


@dataclass
class HookRun:
    proc: asyncio.subprocess.Process
    started: float

    def kill(self) -> None:
        """SIGKILL the shell and the hook under it (their own process group)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def result(self, wait_s: float = 60.0) -> tuple[int, str, float]:
        """(exit code, stdout, seconds it ran)."""
        out, _err = await asyncio.wait_for(self.proc.communicate(), wait_s)
        assert self.proc.returncode is not None
        return self.proc.returncode, out.decode(), time.monotonic() - self.started


async def start_hook(payload: dict[str, Any] | bytes, *, env: dict[str, str]) -> HookRun:
    """``relaybus hook permission-request`` with ``payload`` on stdin (stdin then closed)."""
    proc = await asyncio.create_subprocess_shell(  # Claude Code runs hook commands via a shell
        f"{shlex.quote(str(RELAYBUS))} hook permission-request",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    started = time.monotonic()
    assert proc.stdin is not None
    proc.stdin.write(payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    await proc.stdin.drain()
    proc.stdin.close()
    return HookRun(proc, started)


HookStarter = Callable[..., Awaitable[HookRun]]


def session_with_tool(
    claude_dir: Path, cwd: Path, name: str, tool_input: dict[str, Any]
) -> tuple[str, Path, str]:
    """A recent transcript whose last assistant line asks for ``name`` (no result yet)."""
    sid = str(uuid.uuid4())
    path = transcript_path(claude_dir, str(cwd), sid)
    t = Transcript(path, sid, str(cwd), "cli")
    t.user("please change the file")
    tool_use_id = f"toolu_{uuid.uuid4().hex[:20]}"
    mid = f"msg_{uuid.uuid4().hex[:24]}"
    t._append(
        {
            "type": "assistant",
            "message": {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": "claude-stand-in",
                "content": [
                    {"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 3, "output_tokens": 7},
            },
        }
    )
    return sid, path, tool_use_id


async def watch_from(
    client: aioredis.Redis, keys: Keys, sid: str, gateway_id: str = "gw-test"
) -> None:
    """What a gateway writes when one full-access client watches ``sid``."""
    expires = int(time.time() * 1000) + 60_000
    await client.hset(keys.session_watchers(sid), gateway_id, ap.watcher_value(1, expires))


async def decide(
    client: aioredis.Redis, keys: Keys, request_key: str, decision: str, message: str | None = None
) -> bool:
    """What the deciding gateway does first: claim the decision (first writer wins)."""
    return bool(
        await client.set(
            ap.decision_key(keys, request_key),
            ap.decision_record(decision, message),
            nx=True,
            ex=600,
        )
    )


async def session_frames(
    client: aioredis.Redis, keys: Keys, sid: str, kind: str
) -> list[dict[str, Any]]:
    entries = cast(Entries, await client.xrange(keys.session_events(sid)))
    return [orjson.loads(f[b"f"]) for _id, f in entries if f[b"k"] == kind.encode()]


async def log_frames(
    client: aioredis.Redis, keys: Keys, sid: str, kind: str
) -> list[dict[str, Any]]:
    entries = cast(Entries, await client.xrange(keys.log))
    return [
        orjson.loads(f[b"f"])
        for _id, f in entries
        if f[b"k"] == kind.encode() and f[b"s"] == sid.encode()
    ]
