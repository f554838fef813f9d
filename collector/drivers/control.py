"""Decide how a command acts on a session on this machine, and act.

A session with a live interactive process inside tmux is driven through its pane; any
other session gets a headless ``claude -p`` run. Execution is refused unless
``allow_prompts`` is on, and only in directories under ``prompt_cwd_allow``.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from collector.drivers import DriverError, TurnHooks
from collector.drivers.headless import HeadlessDriver
from collector.drivers.live import find_live
from collector.drivers.tmux import TmuxDriver
from shared import commands as c
from shared.commands import Command, Reply
from shared.keys import Keys
from shared.settings import Settings

log = logging.getLogger(__name__)


def cwd_allowed(cwd: str, allow: str) -> bool:
    """``cwd`` lies under one of the comma-separated prefixes (an empty list allows all)."""
    prefixes = [p.strip() for p in allow.split(",") if p.strip()]
    if not prefixes:
        return True
    real = os.path.realpath(cwd)
    for prefix in prefixes:
        base = os.path.realpath(os.path.expanduser(prefix))
        if real == base or real.startswith(base.rstrip("/") + "/"):
            return True
    return False


def normalise_cwd(cwd: str) -> str:
    return os.path.realpath(os.path.expanduser(cwd))


class Controller:
    """Executes ``prompt``, ``interrupt_request`` and ``new_conversation`` commands."""

    def __init__(
        self,
        settings: Settings,
        client: aioredis.Redis,
        hooks: TurnHooks,
        *,
        headless: HeadlessDriver | None = None,
        tmux: TmuxDriver | None = None,
    ) -> None:
        self._settings = settings
        self._client = client
        self._keys = Keys(settings.namespace)
        self._hooks = hooks
        self.headless = headless or HeadlessDriver(settings, hooks)
        self.tmux = tmux or TmuxDriver()

    async def execute(self, cmd: Command) -> Reply:
        try:
            if not self._settings.allow_prompts:
                raise DriverError(
                    c.PROMPTS_DISABLED, "commands are disabled on this machine (RELAYBUS_ALLOW_PROMPTS)"
                )
            if cmd.type == c.PROMPT:
                data = await self._prompt(cmd)
            elif cmd.type == c.INTERRUPT:
                data = await self._interrupt(cmd)
            elif cmd.type == c.NEW_CONVERSATION:
                data = await self._new_conversation(cmd)
            else:
                raise DriverError(c.INVALID, f"unsupported command {cmd.type!r}")
        except DriverError as exc:
            return Reply.failure(cmd.id, exc.code, exc.message)
        return Reply(cmd.id, True, data=data)

    async def aclose(self) -> None:
        await self.headless.aclose()

    def _check_cwd(self, cwd: str) -> None:
        if not cwd_allowed(cwd, self._settings.prompt_cwd_allow):
            raise DriverError(c.CWD_NOT_ALLOWED, f"{cwd} is outside RELAYBUS_PROMPT_CWD_ALLOW")
        if not Path(cwd).is_dir():
            raise DriverError(c.CWD_NOT_FOUND, f"{cwd} is not a directory on this machine")

    async def _route(self, sid: str) -> str:
        route = await c.session_route(self._client, self._keys, sid)
        if route is None or route[0] != self._settings.host_id:
            raise DriverError(c.UNKNOWN_SESSION, f"no session {sid} on this machine")
        return route[1]

    async def _state(self, sid: str) -> str:
        raw = await self._client.hget(self._keys.session(sid), "state")
        return raw.decode() if isinstance(raw, bytes) else ""

    def _transcript_exists(self, sid: str) -> bool:
        return any((self._settings.claude_dir / "projects").glob(f"*/{sid}.jsonl"))

    async def _prompt(self, cmd: Command) -> dict[str, Any]:
        sid = cmd.session_id
        message = cmd.payload.get("message")
        if not isinstance(message, str) or not message.strip():
            raise DriverError(c.INVALID, "prompt needs a non-empty message")
        cwd = await self._route(sid)
        self._check_cwd(cwd)
        if self.headless.busy(sid):
            raise DriverError(c.BUSY, "a prompt is already running in this session")
        live = find_live(self._settings.claude_dir, sid)
        if live is not None:
            pane = await self.tmux.find_pane(live.pid)
            if pane is not None:
                if await self._state(sid) == "working":
                    raise DriverError(c.BUSY, "Claude is working in this session")
                at_ms = c.now_ms()
                await self.tmux.prompt(pane, message)
                await self._hooks.prompt_started(sid, cmd.trace_id, at_ms)
                return {"driver": "tmux"}
            log.info("session %s is live outside tmux (pid %d): running headless", sid, live.pid)
        exists = await self._client.exists(self._keys.session(sid))
        new = not exists and not self._transcript_exists(sid)
        await self.headless.prompt(sid, cwd, message, new=new, trace_id=cmd.trace_id)
        return {"driver": "headless"}

    async def _interrupt(self, cmd: Command) -> dict[str, Any]:
        sid = cmd.session_id
        await self._route(sid)
        if await self.headless.interrupt(sid):
            return {"driver": "headless"}
        live = find_live(self._settings.claude_dir, sid)
        if live is None:
            raise DriverError(c.NO_ACTIVE_TURN, "no turn is running in this session")
        pane = await self.tmux.find_pane(live.pid)
        if pane is None:
            raise DriverError(
                c.INTERRUPT_UNAVAILABLE, "this session runs outside tmux and cannot be interrupted"
            )
        if await self._state(sid) != "working":
            raise DriverError(c.NO_ACTIVE_TURN, "no turn is running in this session")
        await self.tmux.interrupt(pane)
        return {"driver": "tmux"}

    async def _new_conversation(self, cmd: Command) -> dict[str, Any]:
        cwd = cmd.payload.get("cwd")
        if not isinstance(cwd, str) or not cwd:
            cwd = self._default_cwd()
        cwd = normalise_cwd(cwd)
        self._check_cwd(cwd)
        sid = str(uuid.uuid4())
        key = c.reservation_key(self._keys, sid)
        host = self._settings.host_id
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"host": host, "cwd": cwd})
            pipe.expire(key, c.RESERVATION_TTL_S)
            await pipe.execute()
        return {"sessionId": sid, "host": host, "cwd": cwd}

    def _default_cwd(self) -> str:
        for prefix in self._settings.prompt_cwd_allow.split(","):
            if prefix.strip():
                return prefix.strip()
        return str(Path.home())
