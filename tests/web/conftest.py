"""Browser-test fixtures: Redis + collector + gateway processes and headless Chromium."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    ViewportSize,
    expect,
    sync_playwright,
)

from tests.support import fake_claude
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, transcript
from tests.support.servers import RedisServer, free_port
from tests.support.web import CHROMIUM, CHROMIUM_ARGS, TOKEN, GatewayProc

# Generous waits: other engineers load the same 2-core machine while these tests run.
expect.set_options(timeout=20_000)
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
PHONE: ViewportSize = {"width": 390, "height": 844}


@dataclass
class Stack:
    """A real deployment for one test: its own namespace on the shared server."""

    server: RedisServer
    namespace: str
    claude_dir: Path
    collector: CollectorProc
    gateway: GatewayProc
    approval_port: int = 0

    def new_session(self) -> tuple[str, Path]:
        sid = str(uuid.uuid4())
        return sid, transcript(self.claude_dir, sid)

    def write(self, path: Path, *lines: bytes) -> None:
        append(path, b"".join(lines))

    def live_process(
        self,
        sid: str,
        status: str,
        waiting_for: str | None = None,
        *,
        pid: int | None = None,
        cwd: str = "/home/dev/project",
    ) -> Path:
        """A ``sessions/<pid>.json`` file naming an alive process (this one by default)."""
        pid = pid or os.getpid()
        body: dict[str, object] = {"pid": pid, "sessionId": sid, "cwd": cwd, "status": status}
        if waiting_for:
            body["waitingFor"] = waiting_for
        path = self.claude_dir / "sessions" / f"{pid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(body))
        tmp.replace(path)
        return path


def _stack(
    server: RedisServer,
    namespace: str,
    claude_dir: Path,
    tmp_path: Path,
    env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    collector = CollectorProc(
        redis_url=server.url, namespace=namespace, claude_dir=claude_dir, env=env
    )
    gateway = GatewayProc(redis_url=server.url, namespace=namespace, workdir=tmp_path)
    try:
        collector.start()
        gateway.start()
        port = int((env or {}).get("RELAYBUS_APPROVAL_PORT", "0"))
        yield Stack(server, namespace, claude_dir, collector, gateway, port)
    finally:
        gateway.stop()
        collector.stop()


@pytest.fixture
def stack(server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path) -> Iterator[Stack]:
    yield from _stack(server, namespace, claude_dir, tmp_path)


@pytest.fixture
def small_stack(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> Iterator[Stack]:
    """A stack whose per-session streams keep only ~10 events (to provoke trimming gaps)."""
    yield from _stack(
        server, namespace, claude_dir, tmp_path, env={"RELAYBUS_SESSION_MAXLEN": "10"}
    )


@pytest.fixture
def command_stack(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> Iterator[Stack]:
    """A stack whose collector runs prompts with the stand-in ``claude`` (tests/support/fake_claude.py)."""
    claude_bin = fake_claude.install(tmp_path / "bin")
    # A tmux that never finds a server: the collector must not reach a real tmux (whose
    # panes may belong to whoever runs the tests), and sessions run "outside tmux".
    tmux = tmp_path / "bin" / "tmux"
    tmux.write_text("#!/bin/sh\necho 'no server running (test stand-in)' >&2\nexit 1\n")
    tmux.chmod(0o755)
    env = {
        "PATH": f"{tmux.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TMUX": "",
        "RELAYBUS_ALLOW_PROMPTS": "true",
        "RELAYBUS_CLAUDE_BIN": str(claude_bin),
        "CLAUDE_CONFIG_DIR": str(claude_dir),
        "FAKE_CLAUDE_LOG": str(tmp_path / "fake-claude.log"),
    }
    yield from _stack(server, namespace, claude_dir, tmp_path, env=env)


@pytest.fixture
def approval_stack(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> Iterator[Stack]:
    """A stack whose collector holds PermissionRequest hooks while a client watches."""
    env = {
        "RELAYBUS_APPROVAL_PORT": str(free_port()),
        "RELAYBUS_APPROVAL_TIMEOUT_SECONDS": "90",
        "RELAYBUS_APPROVAL_MODE": "watched",
    }
    yield from _stack(server, namespace, claude_dir, tmp_path, env=env)


@pytest.fixture(scope="module")
def playwright_instance() -> Iterator[Playwright]:
    assert Path(CHROMIUM).exists(), (
        "Debian's chromium package is required (apt-get install chromium)"
    )
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    b = playwright_instance.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
    )
    yield b
    b.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(
        viewport=PHONE,
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
        service_workers="block",
    )
    ctx.set_default_timeout(20_000)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    assert not errors, f"uncaught errors in the page: {errors}"


def open_app(page: Page, stack: Stack) -> None:
    """Load the client with a one-time ``?token=`` link and wait for the session list."""
    page.goto(f"{stack.gateway.url}?token={TOKEN}")
    page.wait_for_selector("#sessions .srow")


def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
