"""Headless driver: one ``claude -p`` child per running prompt.

``<bin> -p --resume=<sid> <args> [--permission-mode=<mode>] -- <message>`` (``--session-id=<sid>``
for a conversation without a transcript yet; the mode once a client chose one) runs in the session's cwd with the user's environment less
``RELAYBUS_*`` and Redis passwords, so the CLI appends to the transcript the collector
already tails. One run per session; an interrupt is SIGINT to the child's process group,
escalated to SIGTERM and SIGKILL after ``grace_s`` each.

:meth:`HeadlessDriver.prompt` returns once the run took the prompt (its transcript grew,
or it finished) — a run that exits non-zero before that (``No conversation found``, an
API refusal) raises ``prompt_failed`` naming the CLI's own reason — or once
``accept_wait_s`` passed. A run that fails after that is reported through ``on_failure``
and the turn hooks, so a failed prompt is never ``prompt_sent`` followed by silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaybus.collector.drivers import DriverError, TurnHooks
from relaybus.shared.aio import now_ms
from relaybus.shared.settings import Settings
from relaybus.shared.wire.errors import ErrorCode
from relaybus.shared.wire.ids import valid_session_id

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 4096
#: How often a starting run is looked at for its first transcript line or its exit.
ACCEPT_POLL_S = 0.05

#: Sessions whose chosen permission mode (:meth:`HeadlessDriver.set_mode`) is remembered.
MAX_MODES = 10_000

#: Told (code, message) when a run fails after its prompt was reported sent.
FailureReport = Callable[[str, str], Awaitable[None]]


@dataclass(slots=True)
class Run:
    session_id: str
    proc: asyncio.subprocess.Process
    started_ms: int = 0
    interrupted: bool = False
    stderr_tail: bytes = b""
    stdout_tail: bytes = b""
    #: The prompt was reported sent: a later failure goes to ``on_failure``.
    reported: bool = True
    on_failure: FailureReport | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    code: int | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def reason(self) -> str:
        """The CLI's own words for why it failed (its last output line), or its exit code."""
        for tail in (self.stderr_tail, self.stdout_tail):
            lines = [x.strip() for x in tail.decode(errors="replace").splitlines() if x.strip()]
            if lines:
                return lines[-1][-300:]
        return f"claude exited with code {self.code}"


#: Never passed to a child: the collector's own settings (Redis URL with its password,
#: tokens) and Redis clients' password variables. A prompt-injected tool in the child
#: could otherwise read them.
SECRET_PREFIXES = ("RELAYBUS_",)
SECRET_NAMES = frozenset({"REDISCLI_AUTH", "REDIS_URL", "REDIS_PASSWORD", "VALKEY_URL"})


def child_env(settings: Settings) -> dict[str, str]:
    """The user's environment without relaybus's secrets, pointing the CLI at the claude
    dir this collector tails."""
    env = {
        k: v
        for k, v in os.environ.items()
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
        self.grace_s = grace_s
        self._runs: dict[str, Run] = {}
        #: Permission modes chosen by ``set_permission_mode``: every later run gets the flag.
        self._modes: dict[str, str] = {}

    def busy(self, session_id: str) -> bool:
        return session_id in self._runs

    def run_of(self, session_id: str) -> Run | None:
        return self._runs.get(session_id)

    async def wait_ended(self, session_id: str, timeout_s: float) -> bool:
        """Wait for the session's run (if any) to end; False when it still runs."""
        run = self._runs.get(session_id)
        if run is None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.ended.wait(), max(timeout_s, 0.0))
        return run.ended.is_set()

    def set_mode(self, session_id: str, mode: str) -> None:
        """Run the session's next prompts with ``--permission-mode=<mode>`` (after
        ``claude_args``, so it wins over a mode given there); bounded, oldest forgotten."""
        self._modes.pop(session_id, None)
        if len(self._modes) >= MAX_MODES:
            del self._modes[next(iter(self._modes))]
        self._modes[session_id] = mode

    def argv(self, session_id: str, message: str, *, new: bool) -> list[str]:
        """The child's argv; the id is glued to its flag so it can never read as an option."""
        if not valid_session_id(session_id):
            raise DriverError(ErrorCode.BRIDGE_ERROR, "invalid session id")
        s = self._settings
        flag = "--session-id" if new else "--resume"
        mode = self._modes.get(session_id)
        return [
            s.claude_bin,
            "-p",
            f"{flag}={session_id}",
            *shlex.split(s.claude_args),
            *([f"--permission-mode={mode}"] if mode else []),
            "--",
            message,
        ]

    async def prompt(
        self,
        session_id: str,
        cwd: str,
        message: str,
        *,
        new: bool,
        trace_id: str | None,
        accept_wait_s: float = 0.0,
        on_failure: FailureReport | None = None,
        started: Callable[[], None] | None = None,
    ) -> int:
        """Start the run; returns its pid once it took the prompt (see the module doc)."""
        if session_id in self._runs:
            raise DriverError(ErrorCode.BUSY, "a prompt is already running in this session")
        argv = self.argv(session_id, message, new=new)
        at_ms = now_ms()
        before = self._transcript_size(session_id)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=child_env(self._settings),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise DriverError(ErrorCode.BRIDGE_ERROR, f"cannot start {argv[0]}: {exc}") from None
        run = Run(session_id, proc, at_ms, reported=accept_wait_s <= 0, on_failure=on_failure)
        self._runs[session_id] = run
        log.info("headless run started: session=%s pid=%d new=%s", session_id, proc.pid, new)
        try:
            await self._hooks.prompt_started(session_id, trace_id, at_ms, run=True)
        finally:
            self._spawn(run, self._watch(run))
        if started is not None:
            started()
        if accept_wait_s > 0:
            await self._accepted(run, before, accept_wait_s)
        return proc.pid

    async def _accepted(self, run: Run, before: int, wait_s: float) -> None:
        """Until the run's transcript grows or it ends (failure: ``prompt_failed``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while not run.ended.is_set() and loop.time() < deadline:
            if self._transcript_size(run.session_id) > before:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.ended.wait(), ACCEPT_POLL_S)
        run.reported = True
        if run.ended.is_set() and run.code != 0 and not run.interrupted:
            raise DriverError(ErrorCode.PROMPT_FAILED, run.reason())

    def _transcript_size(self, session_id: str) -> int:
        size = 0
        for path in (self._settings.claude_dir / "projects").glob(f"*/{session_id}.jsonl"):
            with contextlib.suppress(OSError):
                size += path.stat().st_size
        return size

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
                await asyncio.wait_for(asyncio.shield(run.proc.wait()), self.grace_s)
                return
            log.warning("headless run %s ignored interrupt: sending %s", run.session_id, sig.name)
            self._signal(run, sig)

    async def _watch(self, run: Run) -> None:
        proc = run.proc

        async def tail(stream: asyncio.StreamReader | None, name: str) -> None:
            if stream is None:
                return
            while chunk := await stream.read(65536):
                setattr(run, name, (getattr(run, name) + chunk)[-STDERR_TAIL_BYTES:])

        try:
            await asyncio.gather(tail(proc.stderr, "stderr_tail"), tail(proc.stdout, "stdout_tail"))
            code = run.code = await proc.wait()
        finally:
            if self._runs.get(run.session_id) is run:
                del self._runs[run.session_id]
            run.ended.set()
        failed = code != 0 and not run.interrupted
        if failed:
            log.warning("headless run %s exited %d: %s", run.session_id, code, run.reason())
        else:
            log.info("headless run ended: session=%s code=%d", run.session_id, code)
        try:
            if failed:
                await self._hooks.prompt_failed(
                    run.session_id, ErrorCode.PROMPT_FAILED, run.reason()
                )
            else:
                await self._hooks.prompt_ended(run.session_id)
            if failed and run.reported and run.on_failure is not None:
                await run.on_failure(ErrorCode.PROMPT_FAILED, run.reason())
        except Exception:
            log.exception("turn hook failed after run of %s", run.session_id)
