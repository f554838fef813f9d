"""Decide how a command acts on a session on this machine, and act.

A session with a live Claude Code process in tmux is driven through its pane (the one its
live-process file names, else the one found from the process tree); a session with a live
process relaybus cannot type into is refused (``not_controllable``: never a second writer
on one transcript); any other session gets a headless ``claude -p`` run. A prompt sent
while relaybus's previous run of the session is exiting (interrupted, or its turn over)
waits for that run to end and then runs. Execution is refused unless ``allow_prompts``
is on, and only in directories under ``prompt_cwd_allow``.
"""

from __future__ import annotations

import logging
import os
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from relaybus.collector.drivers import (
    DriverError,
    Release,
    TurnHooks,
    no_release,
    pane_check,
)
from relaybus.collector.drivers.headless import HeadlessDriver
from relaybus.collector.drivers.live import find_live
from relaybus.collector.drivers.tmux import TmuxDriver
from relaybus.shared.aio import now_ms
from relaybus.shared.settings import Settings
from relaybus.shared.store.command_streams import queue_reply, session_route
from relaybus.shared.store.keys import RESERVATION_TTL_S, Keys
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire import commands as wire
from relaybus.shared.wire.commands import Command, Reply
from relaybus.shared.wire.cwd import cwd_problem
from relaybus.shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

#: A starting run is watched this long at most for taking its prompt before the reply.
ACCEPT_WAIT_S = 10.0
#: Kept free of the command's deadline for the reply to reach the gateway.
REPLY_RESERVE_S = 2.0
#: Turn states during which a prompt is ``busy`` and Stop can act.
ACTIVE_STATES = ("working", "waiting")


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

    async def execute(self, cmd: Command, release: Release = no_release) -> Reply:
        """Run ``cmd``; ``release`` lets the session's next command start early."""
        try:
            if not self._settings.allow_prompts:
                raise DriverError(
                    ErrorCode.PROMPTS_DISABLED,
                    "commands are disabled on this machine (RELAYBUS_ALLOW_PROMPTS)",
                )
            if cmd.type == wire.PROMPT:
                data = await self._prompt(cmd, release)
            elif cmd.type == wire.INTERRUPT:
                data = await self._interrupt(cmd)
            elif cmd.type == wire.NEW_CONVERSATION:
                data = await self._new_conversation(cmd)
            else:
                raise DriverError(ErrorCode.INVALID_MESSAGE, f"unsupported command {cmd.type!r}")
        except DriverError as exc:
            return Reply.failure(cmd.id, exc.code, exc.message)
        return Reply(cmd.id, True, data=data)

    async def aclose(self) -> None:
        await self.headless.aclose()

    def _check_cwd(self, cwd: str) -> None:
        problem = cwd_problem(cwd) if cwd else None
        if problem is not None:  # before realpath: a NUL byte would raise there
            raise DriverError(ErrorCode.INVALID_FIELD, problem)
        if not cwd_allowed(cwd, self._settings.prompt_cwd_allow):
            raise DriverError(
                ErrorCode.CWD_NOT_ALLOWED, f"{cwd} is outside RELAYBUS_PROMPT_CWD_ALLOW"
            )
        if not Path(cwd).is_dir():
            raise DriverError(ErrorCode.CWD_NOT_FOUND, f"{cwd} is not a directory on this machine")

    async def _route(self, sid: str) -> str:
        route = await session_route(self._client, self._keys, sid)
        if route is None or route[0] != self._settings.host_id:
            raise DriverError(ErrorCode.UNKNOWN_SESSION, f"no session {sid} on this machine")
        return route[1]

    async def _state(self, sid: str) -> tuple[str, int]:
        """The turn state the session shows, and since when."""
        state, since = await self._client.hmget(self._keys.session(sid), [Field.STATE, Field.SINCE])
        text = state.decode() if isinstance(state, bytes) else ""
        try:
            return text, int(since or 0)
        except ValueError:
            return text, 0

    def _transcript_exists(self, sid: str) -> bool:
        return any((self._settings.claude_dir / "projects").glob(f"*/{sid}.jsonl"))

    async def _unstarted_reservation(self, sid: str) -> bool:
        """``sid`` was reserved by ``new_conversation`` and no line of it was ever published:
        the only session a prompt may start a conversation for."""
        reserved = await self._client.exists(self._keys.reservation(sid))
        published = await self._client.hget(self._keys.session(sid), Field.SESSION_SEQ)
        return bool(reserved) and int(published or 0) == 0

    def _budget_s(self, cmd: Command) -> float:
        return max(0.0, (cmd.deadline_ms - now_ms()) / 1000 - REPLY_RESERVE_S)

    async def _after_exiting_run(self, cmd: Command) -> None:
        """Relaybus's run of the session is exiting: wait for it; one still at work: ``busy``."""
        sid = cmd.session_id
        run = self.headless.run_of(sid)
        if run is None:
            return
        state, since = await self._state(sid)
        exiting = run.interrupted or (state not in ACTIVE_STATES and since >= run.started_ms)
        if not exiting:
            raise DriverError(ErrorCode.BUSY, "a prompt is already running in this session")
        budget = min(self._budget_s(cmd) / 2, self.headless.grace_s * 3)
        if not await self.headless.wait_ended(sid, budget):
            raise DriverError(ErrorCode.BUSY, "the previous run of this session is still exiting")
        log.info("session %s: previous run ended, running the queued prompt", sid)

    async def _prompt(self, cmd: Command, release: Release) -> dict[str, Any]:
        sid = cmd.session_id
        message = cmd.payload.get("message")
        if not isinstance(message, str) or not message.strip():
            raise DriverError(ErrorCode.INVALID_MESSAGE, "prompt needs a non-empty message")
        if "\x00" in message:  # an argv cannot carry it
            raise DriverError(ErrorCode.INVALID_MESSAGE, "a prompt cannot contain NUL")
        cwd = await self._route(sid)
        self._check_cwd(cwd)
        await self._after_exiting_run(cmd)
        live = find_live(self._settings.claude_dir, sid)
        if live is not None:
            pane = await self.tmux.find_pane(live.pid, live.tmux)
            if pane is None:
                raise DriverError(
                    ErrorCode.NOT_CONTROLLABLE,
                    f"Claude Code runs this session outside tmux (pid {live.pid}); "
                    "relaybus cannot type into it: prompt it there",
                )
            if (await self._state(sid))[0] in ACTIVE_STATES:
                raise DriverError(ErrorCode.BUSY, "Claude is working in this session")
            await pane_check.verify(self.tmux, pane, live, self._settings.claude_dir / "sessions")
            at_ms = now_ms()
            await self.tmux.prompt(pane, message)
            await self._hooks.prompt_started(sid, cmd.trace_id, at_ms)
            return {"driver": "tmux"}
        new = not self._transcript_exists(sid)
        if new and not await self._unstarted_reservation(sid):
            raise DriverError(
                ErrorCode.TRANSCRIPT_MISSING,
                f"the transcript of session {sid} is gone from this machine: a prompt would "
                "start a new conversation under its id; start a new conversation instead",
            )
        await self.headless.prompt(
            sid,
            cwd,
            message,
            new=new,
            trace_id=cmd.trace_id,
            accept_wait_s=min(ACCEPT_WAIT_S, self._budget_s(cmd)),
            on_failure=partial(self._late_failure, cmd),
            started=release,
        )
        return {"driver": "headless"}

    async def _late_failure(self, cmd: Command, code: str, message: str) -> None:
        """A run failed after ``prompt_sent``: a second reply the gateway turns into ``error``."""
        reply = Reply(cmd.id, False, code, message, data={wire.LATE: True})
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                queue_reply(pipe, self._keys, cmd.gateway_id, reply)
                await pipe.execute()
        except Exception:
            log.exception("could not report the failed run of %s", cmd.session_id)

    async def _interrupt(self, cmd: Command) -> dict[str, Any]:
        sid = cmd.session_id
        await self._route(sid)
        if await self.headless.interrupt(sid):
            return {"driver": "headless"}
        shown = (await self._state(sid))[0] in ACTIVE_STATES
        # A session shown working never hears "no active turn": nothing here can stop it.
        nothing = ErrorCode.INTERRUPT_UNAVAILABLE if shown else ErrorCode.NO_ACTIVE_TURN
        if self.headless.busy(sid):
            raise DriverError(nothing, "the turn was interrupted already; its run is ending")
        live = find_live(self._settings.claude_dir, sid)
        if live is None:
            raise DriverError(nothing, "no Claude Code process runs this session here")
        pane = await self.tmux.find_pane(live.pid, live.tmux)
        if pane is None:
            raise DriverError(
                ErrorCode.INTERRUPT_UNAVAILABLE,
                "this session runs outside tmux and cannot be interrupted",
            )
        if not shown:
            raise DriverError(ErrorCode.NO_ACTIVE_TURN, "no turn is running in this session")
        await pane_check.verify(self.tmux, pane, live, self._settings.claude_dir / "sessions")
        await self.tmux.interrupt(pane)
        return {"driver": "tmux"}

    async def _new_conversation(self, cmd: Command) -> dict[str, Any]:
        cwd = cmd.payload.get("cwd")
        if not isinstance(cwd, str) or not cwd:
            cwd = self._default_cwd()
        problem = cwd_problem(cwd)
        if problem is not None:  # defence in depth: the gateway refuses these already
            raise DriverError(ErrorCode.INVALID_FIELD, problem)
        cwd = normalise_cwd(cwd)
        self._check_cwd(cwd)
        sid = str(uuid.uuid4())
        key = self._keys.reservation(sid)
        host = self._settings.host_id
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"host": host, "cwd": cwd})
            pipe.expire(key, RESERVATION_TTL_S)
            await pipe.execute()
        return {"sessionId": sid, "host": host, "cwd": cwd}

    def _default_cwd(self) -> str:
        for prefix in self._settings.prompt_cwd_allow.split(","):
            if prefix.strip():
                return prefix.strip()
        return str(Path.home())
