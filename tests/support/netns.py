"""Run a real-CLI scenario inside a private network namespace that has only loopback.

The design (docs/claude-code-notes.md, "The rig"): the pytest process stays outside.
:func:`run_isolated` starts ``unshare --net -- python -m tests.support.netns_inside
<module:function> <dir> <result.json>``; inside, loopback is brought up, any other
interface makes it refuse to run, and the scenario coroutine starts everything it
needs there — Redis, the fake Messages API, the collector, a gateway, the WebSocket
clients, the real ``claude`` (directly, through the collector, or in tmux). It returns
plain JSON (frames received, API requests, transcripts, exit codes), which the test
asserts on outside. Loopback inside the namespace is unreachable from outside, and the
CLI can reach nothing but the fake API.

The CLI is the npm package ``@anthropic-ai/claude-code`` installed by ``scripts/check``
into ``$RELAYBUS_TEST_CLAUDE_CACHE/<version>`` (default ``~/.cache/relaybus-claude``),
version ``$RELAYBUS_TEST_CLAUDE_VERSION`` (default :data:`DEFAULT_VERSION`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VERSION = "2.1.332"
VERSION_ENV = "RELAYBUS_TEST_CLAUDE_VERSION"
CACHE_ENV = "RELAYBUS_TEST_CLAUDE_CACHE"


def claude_version() -> str:
    return os.environ.get(VERSION_ENV) or DEFAULT_VERSION


def claude_binary() -> Path:
    """Where ``scripts/check`` installs the pinned CLI (the package's native ``claude``)."""
    cache = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "relaybus-claude")
    return Path(cache) / claude_version() / "node_modules" / ".bin" / "claude"


@functools.cache
def unavailable() -> str | None:
    """Why the real-CLI rig cannot run here (one line), or ``None`` when it can."""
    if not os.access(claude_binary(), os.X_OK):
        return (
            f"real-CLI tests skipped: no Claude Code CLI at {claude_binary()} (run scripts/check)"
        )
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "real-CLI tests skipped: unshare or ip (util-linux, iproute2) not installed"
    try:
        probe = subprocess.run(["unshare", "--net", "--", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"real-CLI tests skipped: unshare --net failed: {exc}"
    if probe.returncode != 0:
        err = probe.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        return f"real-CLI tests skipped: no network namespaces here (unshare --net: {err[0]})"
    return None


class ScenarioFailed(AssertionError):
    """The scenario raised inside the namespace, timed out, or wrote no result."""


def run_isolated(target: str, workdir: Path, timeout_s: float = 105.0) -> dict[str, Any]:
    """Run ``target`` (``module:function``, an ``async def f(workdir: Path) -> dict``) inside
    a fresh loopback-only network namespace; return what it returned.

    The scenario gets ``timeout_s - 15`` seconds to finish and clean up after itself;
    after ``timeout_s`` its whole process group is killed.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "result.json"
    log = workdir / "inside.log"
    argv = [
        "unshare",
        "--net",
        "--",
        sys.executable,
        "-m",
        "tests.support.netns_inside",
        target,
        str(workdir),
        str(out),
        str(max(10.0, timeout_s - 15)),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RELAYBUS_TEST_CLAUDE_BIN": str(claude_binary())}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            raise ScenarioFailed(
                f"{target} still running after {timeout_s}s:\n{_tail(log)}"
            ) from None
    if not out.exists():
        raise ScenarioFailed(f"{target} exited {code} without a result:\n{_tail(log)}")
    result = json.loads(out.read_text())
    if not result.get("ok"):
        raise ScenarioFailed(
            f"{target} failed inside the namespace:\n{result.get('error')}\n--- log:\n{_tail(log)}"
        )
    value: dict[str, Any] = result["result"]
    return value


def _tail(path: Path, chars: int = 6000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return ""
