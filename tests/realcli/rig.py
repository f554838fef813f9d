"""What a real-CLI scenario starts inside the namespace, and what it reports back.

Runs only inside ``unshare --net`` (:mod:`tests.support.netns_inside`); refuses to start
the CLI otherwise. :func:`rig` starts Redis, the fake Messages API, a collector process
(prompts allowed, the approval endpoint on), an in-process gateway, and sets the
environment every child inherits: temporary ``HOME``/``CLAUDE_CONFIG_DIR``/``TMPDIR``,
``ANTHROPIC_BASE_URL`` at the fake API, a dummy key, no telemetry, no updates.
:mod:`tests.realcli.observe` has the clients and pollers, :mod:`tests.realcli.terminals`
the tmux and pty terminals; :meth:`Rig.report` is the JSON the test gets.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import BINARIES, DEFAULT_KIND, make_settings
from tests.realcli.observe import LivePoller, Recorder
from tests.realcli.terminals import Pty, Tmux
from tests.support.collector_proc import CollectorProc
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.gateway_client import WsClient
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.netns import claude_binary
from tests.support.netns_inside import assert_isolated
from tests.support.servers import RedisServer, free_port

API_KEY = "sk-ant-relaybus-test-0000-dummy-key"
#: What the CLI must not see from the outer environment.
CLEARED_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "RELAYBUS_", "TMUX")


@dataclass
class CliRun:
    """One ``claude`` process the scenario ran (directly, not through the collector)."""

    argv: list[str]
    started: float
    proc: asyncio.subprocess.Process
    ended: float | None = None
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""

    async def wait(self, timeout_s: float = 60.0) -> CliRun:
        out, err = await asyncio.wait_for(self.proc.communicate(), timeout_s)
        self.ended = time.time()
        self.rc = self.proc.returncode
        self.stdout, self.stderr = out.decode(errors="replace"), err.decode(errors="replace")
        return self

    def report(self) -> dict[str, Any]:
        return {
            "argv": self.argv[1:],
            "started": self.started,
            "ended": self.ended,
            "rc": self.rc,
            "stdout": self.stdout[-2000:],
            "stderr": self.stderr[-2000:],
        }


@dataclass
class Rig:
    root: Path
    tmp: Path  # short: unix socket paths (tmux, the CLI's own) must stay under 108 bytes
    claude: str
    api: FakeAnthropic
    server: RedisServer
    namespace: str
    claude_dir: Path
    home: Path
    workdir: Path
    approval_port: int
    collector: CollectorProc | None = None
    gateway: RunningGateway | None = None
    runs: list[CliRun] = field(default_factory=list)
    recorders: dict[str, Recorder] = field(default_factory=dict)
    tmux: Tmux | None = None
    pty: Pty | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    pollers: list[LivePoller] = field(default_factory=list)
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)

    # --- the CLI ------------------------------------------------------------------------
    async def claude_print(self, *args: str, cwd: Path | None = None) -> CliRun:
        """Start ``claude -p <args>`` (stdin closed) as the user would; see :meth:`CliRun.wait`."""
        assert_isolated()
        argv = [self.claude, "-p", *args]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd or self.workdir,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        run = CliRun(argv, time.time(), proc)
        self.runs.append(run)
        return run

    async def wait_request(self, turns: int, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait until the fake API has had ``turns`` turn requests; the last one."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = [q for q in self.api.requests if q.get("kind") == "turn"]
            if len(got) >= turns:
                return got[turns - 1]
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for turn request {turns}: {got}")
            await asyncio.sleep(0.02)

    # --- the interactive CLI ---------------------------------------------------------------
    def start_interactive(self, *args: str) -> Tmux:
        """The interactive ``claude <args>`` in a new tmux server (killed at the end)."""
        self.tmux = Tmux().start([self.claude, *args], self.workdir)
        return self.tmux

    async def start_in_pty(self, *args: str) -> Pty:
        """The interactive ``claude <args>`` on a plain pseudo-terminal (killed at the end)."""
        self.pty = await Pty().start([self.claude, *args], self.workdir)
        return self.pty

    # --- clients ------------------------------------------------------------------------
    async def client(self, name: str, *, auto_watch: bool = True) -> Recorder:
        assert self.gateway is not None
        ws = await self.stack.enter_async_context(WsClient(self.gateway.ws, token="full-token"))
        rec = await Recorder(ws, auto_watch=auto_watch).start()
        self.recorders[name] = rec
        return rec

    async def listing_after(
        self, rec: Recorder, sid: str, exited_at: float, delay_s: float = 2.0
    ) -> None:
        """``list_sessions`` ``delay_s`` after the process exited; kept for
        :func:`tests.realcli.checks.assert_not_live_after`."""
        await asyncio.sleep(max(0.0, exited_at + delay_s - time.time()))
        listings = self.notes.setdefault("listings", [])
        rid = f"list{len(listings)}"
        await rec.send({"type": "list_sessions", "requestId": rid})
        sessions = (await rec.reply(rid))["sessions"]
        listings.append({"exited": exited_at, "at": time.time(), "sid": sid, "sessions": sessions})

    def poll_live(self) -> LivePoller:
        """Start recording the live-process files and transcript line counts (every 5 ms)."""
        poller = LivePoller(self.claude_dir)
        poller.task = asyncio.create_task(poller.run())
        self.pollers.append(poller)
        return poller

    # --- the result -----------------------------------------------------------------------
    def transcripts(self) -> dict[str, list[str]]:
        """Every JSONL file under ``projects/`` (path relative to it) → its lines."""
        root = self.claude_dir / "projects"
        return {
            str(p.relative_to(root)): p.read_text(errors="replace").splitlines()
            for p in sorted(root.rglob("*.jsonl"))
        }

    def report(self, **extra: Any) -> dict[str, Any]:
        return {
            "clients": {name: rec.frames for name, rec in self.recorders.items()},
            "requests": self.api.requests,
            "transcripts": self.transcripts(),
            "runs": [r.report() for r in self.runs],
            "collector_log": self.collector.log()[-3000:] if self.collector else "",
            "workdir": str(self.workdir),
            "notes": self.notes,
            "timelines": [p.timeline for p in self.pollers],
            **extra,
        }


def _seed_config(claude_dir: Path, workdir: Path, settings: dict[str, Any]) -> None:
    """What a person who has used Claude Code before has: onboarding done, the key
    approved, the folder trusted — so the interactive CLI starts at its prompt."""
    claude_dir.mkdir(parents=True, exist_ok=True)
    (claude_dir / "sessions").mkdir(exist_ok=True)
    (claude_dir / "projects").mkdir(exist_ok=True)
    (claude_dir / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "theme": "dark",
                "numStartups": 3,
                "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
                "projects": {str(workdir): {"hasTrustDialogAccepted": True, "allowedTools": []}},
            }
        )
    )
    (claude_dir / "settings.json").write_text(json.dumps(settings))


def _isolated_env(tmp: Path, home: Path, claude_dir: Path, api_url: str) -> None:
    """The environment of this process and so of every child: the CLI reaches only the fake API."""
    for name in list(os.environ):
        if name.startswith(CLEARED_PREFIXES):
            del os.environ[name]
    os.environ.update(
        {
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(claude_dir),
            "TMPDIR": str(tmp),
            "TMUX_TMPDIR": str(tmp),
            "ANTHROPIC_BASE_URL": api_url,
            "ANTHROPIC_API_KEY": API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "TERM": "xterm-256color",
        }
    )


@asynccontextmanager
async def rig(
    root: Path,
    turns: list[dict[str, Any]],
    *,
    collector: bool = True,
    claude_args: str = "",
    hook: bool = False,
    settings: dict[str, Any] | None = None,
) -> AsyncIterator[Rig]:
    """Everything a scenario needs, started inside the namespace; stopped in reverse order."""
    assert_isolated()
    claude = os.environ.get("RELAYBUS_TEST_CLAUDE_BIN") or str(claude_binary())
    tmp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
    home, claude_dir, workdir = root / "home", root / "claude", root / "work"
    for d in (home, workdir):
        d.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        api = stack.enter_context(FakeAnthropic(turns))
        server = RedisServer(DEFAULT_KIND, BINARIES[DEFAULT_KIND], root / "redis")
        server.start()
        stack.callback(server.stop)
        _isolated_env(tmp, home, claude_dir, api.url)
        os.environ["RELAYBUS_TEST_CLAUDE_BIN"] = claude  # for the next rig of this process
        _seed_config(claude_dir, workdir, settings or {})
        namespace = f"rc{uuid.uuid4().hex[:10]}"
        r = Rig(root, tmp, claude, api, server, namespace, claude_dir, home, workdir, free_port())
        if hook:
            _install_hook(r)
        if collector:
            r.collector = CollectorProc(
                redis_url=server.url,
                namespace=namespace,
                claude_dir=claude_dir,
                host_id="realhost",
                log_path=root / "collector.log",
                env={
                    "RELAYBUS_ALLOW_PROMPTS": "true",
                    "RELAYBUS_CLAUDE_BIN": claude,
                    "RELAYBUS_CLAUDE_ARGS": claude_args,
                    "RELAYBUS_APPROVAL_PORT": str(r.approval_port),
                    "RELAYBUS_APPROVAL_TIMEOUT_SECONDS": "60",
                    "RELAYBUS_HEARTBEAT_TTL_S": "3",
                },
            )
            r.collector.start()
            stack.callback(r.collector.stop)
            gw_settings = make_settings(server.url, namespace, command_timeout_seconds=30)
            r.gateway = await stack.enter_async_context(running_gateway(gw_settings))
        async with r.stack:
            try:
                yield r
            finally:
                for poller in r.pollers:
                    await poller.stop()
                for rec in r.recorders.values():
                    await rec.stop()
                for run in r.runs:
                    if run.proc.returncode is None:
                        run.proc.kill()
                        await run.proc.wait()
                if r.tmux is not None:
                    r.tmux.kill()
                if r.pty is not None:
                    await r.pty.close()


def _install_hook(r: Rig) -> None:
    """``relaybus install-hook`` as a user runs it: the hook goes into the CLI's settings.json."""
    env = {
        **os.environ,
        "RELAYBUS_CLAUDE_DIR": str(r.claude_dir),
        "RELAYBUS_APPROVAL_PORT": str(r.approval_port),
        "RELAYBUS_APPROVAL_TIMEOUT_SECONDS": "60",
    }
    subprocess.run(
        [sys.executable, "-m", "relaybus.cli", "install-hook"],
        env=env,
        check=True,
        capture_output=True,
        timeout=30,
    )
