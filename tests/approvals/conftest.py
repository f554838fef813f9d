"""Fixtures for the approval tests: a real collector process with its approval endpoint."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.approvals import HookRun, HookStarter, start_hook
from tests.support.collector_proc import CollectorProc
from tests.support.servers import RedisServer, free_port
from tests.support.wait import wait_for


@dataclass
class Machine:
    proc: CollectorProc
    claude_dir: Path
    workdir: Path
    port: int
    timeout_s: float
    runtime: Path

    @property
    def socket(self) -> Path:
        """The approval socket: named by the port in this machine's private runtime dir."""
        return self.runtime / "relaybus" / f"approval-{self.port}.sock"

    def hook_env(self) -> dict[str, str]:
        """The environment Claude Code gives the hook (none of the test runner's RELAYBUS_*)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
        env["XDG_RUNTIME_DIR"] = str(self.runtime)
        env["RELAYBUS_APPROVAL_PORT"] = str(self.port)
        env["RELAYBUS_APPROVAL_TIMEOUT_SECONDS"] = str(self.timeout_s)
        return env


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A short private directory for Unix sockets (tmp_path can exceed sockaddr_un's 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rb-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def machine(
    server: RedisServer, namespace: str, tmp_path: Path, runtime_dir: Path
) -> Iterator[Callable[..., Machine]]:
    """Start a collector with an approval socket (stopped at teardown)."""
    made: list[CollectorProc] = []

    def make(
        *,
        timeout_s: float = 60,
        mode: str = "watched",
        url: str | None = None,
        listening: bool = True,
    ) -> Machine:
        root = tmp_path / f"m{len(made)}"
        claude_dir = root / "claude"
        (claude_dir / "projects").mkdir(parents=True)
        (claude_dir / "sessions").mkdir()
        workdir = root / "work"
        workdir.mkdir()
        port = free_port()
        env = {
            "XDG_RUNTIME_DIR": str(runtime_dir),
            "RELAYBUS_APPROVAL_PORT": str(port),
            "RELAYBUS_APPROVAL_TIMEOUT_SECONDS": str(timeout_s),
            "RELAYBUS_APPROVAL_MODE": mode,
            "RELAYBUS_HEARTBEAT_TTL_S": "3",
        }
        proc = CollectorProc(
            redis_url=url or server.url, namespace=namespace, claude_dir=claude_dir, env=env
        )
        made.append(proc)
        proc.start()
        m = Machine(proc, claude_dir, workdir, port, timeout_s, runtime_dir)
        if listening:
            wait_listening(m.socket)
        return m

    yield make
    for proc in made:
        proc.stop()


@pytest.fixture
async def hooks() -> AsyncIterator[HookStarter]:
    """Start hook processes; any still running at teardown is killed."""
    runs: list[HookRun] = []

    async def start(payload: dict[str, Any] | bytes, *, env: dict[str, str]) -> HookRun:
        run = await start_hook(payload, env=env)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()
        await run.proc.communicate()


def wait_listening(path: Path, timeout_s: float = 30.0) -> None:
    """Wait until something accepts connections on the Unix socket ``path``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1)
                s.connect(str(path))
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture
async def admin(server: RedisServer, namespace: str) -> AsyncIterator[aioredis.Redis]:
    client = connect(make_settings(server.url, namespace))
    yield client
    await client.aclose()


async def published(admin: aioredis.Redis, keys: Keys, sid: str) -> None:
    """Wait until the collector has announced the session."""

    async def probe() -> bool:
        return bool(await admin.hget(keys.session(sid), "host"))

    await wait_for(probe, what=f"session {sid} published")
