"""Headless driver: one ``claude -p`` child per running prompt.

``<bin> -p --resume=<sid> <args> -- <message>`` (``--session-id=`` for a reserved
conversation's first prompt) runs in the session's cwd with the user's environment (less
``RELAYBUS_*`` and Redis passwords), so
the CLI appends to the transcript the collector already tails. One run per session;
an interrupt is SIGINT to the child's process group, escalated to SIGTERM and SIGKILL
after ``grace_s`` each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.drivers import DriverError, TurnHooks
from shared.commands import BRIDGE_ERROR, BUSY
from shared.ids import valid_session_id
from shared.settings import Settings

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 4096


@dataclass(slots=True)
class Run:
    session_id: str
    proc: asyncio.subprocess.Process
    interrupted: bool = False
    stderr_tail: bytes = b""
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


#: Never passed to a child: the collector's own settings (Redis URL with its password,
#: tokens) and Redis clients' password variables. A prompt-injected tool in the child
#: could otherwise read them.
SECRET_PREFIXES = ("RELAYBUS_",)
SECRET_NAMES = frozenset({"REDISCLI_AUTH", "REDIS_URL", "REDIS_PASSWORD", "VALKEY_URL"})


def child_env(settings: Settings) -> dict[str, str]:
    """The user's environment without relaybus's secrets, pointing the CLI at the claude
    dir this collector tails."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(SECRET_PREFIXES) and k not in SECRET_NAMES
    }
    configured = env.get("CLAUDE_CONFIG_DIR")
    default = Path(configured) if configured else Path.home() / ".claude"
    if default.resolve() != settings.claude_dir.resolve():
        env["CLAUDE_CONFIG_DIR"] = str(settings.claude_dir)
    return env


class HeadlessDriver:
    """Starts, watches and interrupts headless runs; owns every child it starts."""

    def __init__(self, settings: Settings, hooks: TurnHooks, *, grace_s: float = 5.0) -> None:
        self._settings = settings
        self._hooks = hooks
        self._grace_s = grace_s
        self._runs: dict[str, Run] = {}

    def busy(self, session_id: str) -> bool:
        return session_id in self._runs

    def argv(self, session_id: str, message: str, *, new: bool) -> list[str]:
        """The child's argv; the id is glued to its flag so it can never read as an option."""
        if not valid_session_id(session_id):
            raise DriverError(BRIDGE_ERROR, "invalid session id")
        s = self._settings
        flag = "--session-id" if new else "--resume"
        return [s.claude_bin, "-p", f"{flag}={session_id}", *shlex.split(s.claude_args), "--", message]

    async def prompt(
        self, session_id: str, cwd: str, message: str, *, new: bool, trace_id: str | None
    ) -> int:
        """Start the run; returns once the child exists (its pid)."""
        if session_id in self._runs:
            raise DriverError(BUSY, "a prompt is already running in this session")
        argv = self.argv(session_id, message, new=new)
        at_ms = int(time.time() * 1000)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=child_env(self._settings),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise DriverError(BRIDGE_ERROR, f"cannot start {argv[0]}: {exc}") from None
        run = Run(session_id, proc)
        self._runs[session_id] = run
        log.info("headless run started: session=%s pid=%d new=%s", session_id, proc.pid, new)
        try:
            await self._hooks.prompt_started(session_id, trace_id, at_ms)
        finally:
            self._spawn(run, self._watch(run))
        return proc.pid

    async def interrupt(self, session_id: str) -> bool:
        """SIGINT the session's run (escalating later); ``False`` when none is running.

        A run already interrupted and still exiting has no active turn any more.
        """
        run = self._runs.get(session_id)
        if run is None or run.interrupted:
            return False
        run.interrupted = True
        self._signal(run, signal.SIGINT)
        self._spawn(run, self._escalate(run))
        return True

    async def aclose(self, *, wait_s: float = 2.0) -> None:
        """Interrupt every run; SIGKILL what is still running after ``wait_s``; reap all."""
        runs = list(self._runs.values())
        for run in runs:
            await self.interrupt(run.session_id)
        pending = [t for run in runs for t in run.tasks]
        if not pending:
            return
        await asyncio.wait(pending, timeout=wait_s)
        for run in runs:
            self._signal(run, signal.SIGKILL)
        await asyncio.gather(*pending, return_exceptions=True)

    def _spawn(self, run: Run, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        run.tasks.add(task)
        task.add_done_callback(run.tasks.discard)

    def _signal(self, run: Run, sig: signal.Signals) -> None:
        if run.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.proc.pid, sig)

    async def _escalate(self, run: Run) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(run.proc.wait()), self._grace_s)
                return
            log.warning("headless run %s ignored interrupt: sending %s", run.session_id, sig.name)
            self._signal(run, sig)

    async def _watch(self, run: Run) -> None:
        proc = run.proc
        try:
            if proc.stderr is not None:
                while chunk := await proc.stderr.read(65536):
                    run.stderr_tail = (run.stderr_tail + chunk)[-STDERR_TAIL_BYTES:]
            code = await proc.wait()
        finally:
            if self._runs.get(run.session_id) is run:
                del self._runs[run.session_id]
        if code != 0 and not run.interrupted:
            log.warning(
                "headless run %s exited %d: %s",
                run.session_id,
                code,
                run.stderr_tail.decode(errors="replace").strip()[-500:],
            )
        else:
            log.info("headless run ended: session=%s code=%d", run.session_id, code)
        try:
            await self._hooks.prompt_ended(run.session_id)
        except Exception:
            log.exception("turn hook failed after run of %s", run.session_id)
