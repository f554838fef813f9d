"""Prompts are typed only into a pane whose foreground is the session's Claude Code (issue 22.4).

A real tmux server on a private socket, real shells and the stand-in CLI: a live-process
file planted to point at a shell, at another session's CLI, or naming a CLI suspended
back to its shell must never get a prompt typed (the shell never runs the marker command).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis

from relaybus.collector.drivers import pane_check
from relaybus.collector.drivers.control import Controller
from relaybus.collector.drivers.live import find_live
from relaybus.collector.procfiles import LiveProcess
from relaybus.shared.aio import now_ms
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command, Reply
from tests.conftest import make_settings
from tests.support.commands_env import RecordingHooks, TmuxServer, texts
from tests.support.fake_claude import REPO, interactive_argv, transcript_path
from tests.support.servers import RedisServer
from tests.support.wait import poll, wait_for


@pytest.fixture
def tmux() -> Iterator[TmuxServer]:
    srv = TmuxServer()
    yield srv
    srv.kill()


@pytest.fixture
async def admin(server: RedisServer, namespace: str) -> AsyncIterator[aioredis.Redis]:
    client = connect(make_settings(server.url, namespace))
    yield client
    await client.aclose()


def _env(claude_dir: Path) -> dict[str, str]:
    return {
        "CLAUDE_CONFIG_DIR": str(claude_dir),
        "PYTHONPATH": str(REPO),
        "PATH": os.environ.get("PATH", ""),
    }


def _plant(claude_dir: Path, name: str, pid: int, sid: str, cwd: Path) -> None:
    body = {"pid": pid, "sessionId": sid, "cwd": str(cwd), "kind": "interactive"}
    (claude_dir / "sessions" / name).write_bytes(orjson.dumps(body))


async def _prompt(
    server: RedisServer,
    namespace: str,
    admin: aioredis.Redis,
    claude_dir: Path,
    workdir: Path,
    sid: str,
    message: str,
) -> Reply:
    """A prompt to ``sid`` (listed idle on this host) through a real controller."""
    await admin.hset(
        Keys(namespace).session(sid),
        mapping={"host": "testhost", "cwd": str(workdir), "state": "idle"},
    )
    settings = make_settings(
        server.url, namespace, claude_dir, allow_prompts=True, claude_bin="/nonexistent"
    )
    cmd = Command(str(uuid.uuid4()), c.PROMPT, sid, "gw", now_ms() + 30_000, {"message": message})
    return await Controller(settings, admin, RecordingHooks()).execute(cmd)


def _shell_never_ran(tmux: TmuxServer, tmp_path: Path, marker: Path) -> None:
    """Type a sentinel command into the shell ourselves: once it ran, whatever was typed before
    it ran too, so the marker's absence proves the prompt never reached the shell."""
    sentinel = tmp_path / f"sentinel-{uuid.uuid4().hex[:8]}"
    tmux.run("send-keys", "-t", "main", "-l", "--", f"touch {shlex.quote(str(sentinel))}")
    tmux.run("send-keys", "-t", "main", "Enter")
    poll(sentinel.exists, timeout_s=15)
    assert not marker.exists()
    assert marker.name not in tmux.run("capture-pane", "-p", "-t", "main")


async def test_a_live_file_planted_on_a_shell_gets_no_prompt(
    tmux: TmuxServer,
    tmp_path: Path,
    claude_dir: Path,
    workdir: Path,
    server: RedisServer,
    namespace: str,
    admin: aioredis.Redis,
) -> None:
    """sessions/<bash pid>.json naming a session: the prompt is refused, the shell runs nothing."""
    bash = tmux.start(["bash", "--norc", "--noprofile"], cwd=workdir, env=_env(claude_dir))
    sid = str(uuid.uuid4())
    _plant(claude_dir, f"{bash}.json", bash, sid, workdir)
    marker = tmp_path / "pwned-by-prompt"
    reply = await _prompt(server, namespace, admin, claude_dir, workdir, sid, f"touch {marker}")
    assert (reply.ok, reply.code) == (False, "not_controllable"), reply
    assert "not Claude Code" in (reply.message or "")
    _shell_never_ran(tmux, tmp_path, marker)


async def test_a_live_file_naming_another_sessions_cli_gets_no_prompt(
    tmux: TmuxServer,
    claude_dir: Path,
    workdir: Path,
    server: RedisServer,
    namespace: str,
    admin: aioredis.Redis,
) -> None:
    """A planted file borrowing the pid of session B's CLI for session A: refused, B gets nothing,
    and B itself is still prompted."""
    other = str(uuid.uuid4())
    tmux.start(interactive_argv(other), cwd=workdir, env=_env(claude_dir))
    live = await wait_for(lambda: find_live(claude_dir, other), what="the CLI's live file")
    sid = str(uuid.uuid4())
    _plant(claude_dir, "planted.json", live.pid, sid, workdir)
    reply = await _prompt(server, namespace, admin, claude_dir, workdir, sid, "meant for A")
    assert (reply.ok, reply.code) == (False, "not_controllable"), reply
    assert "names this session" in (reply.message or "")
    ok = await _prompt(server, namespace, admin, claude_dir, workdir, other, "meant for B")
    assert ok.ok, ok
    path = transcript_path(claude_dir, str(workdir), other)
    await wait_for(lambda: "Done: meant for B" in texts(path, "assistant"), what="B's reply")
    assert texts(path, "user") == ["meant for B"]


async def test_a_cli_suspended_to_its_shell_gets_no_prompt(
    tmux: TmuxServer,
    tmp_path: Path,
    claude_dir: Path,
    workdir: Path,
    server: RedisServer,
    namespace: str,
    admin: aioredis.Redis,
) -> None:
    """Claude Code stopped with Ctrl-Z: its own live file is true, but the keys would reach bash."""
    tmux.start(["bash", "--norc", "--noprofile"], cwd=workdir, env=_env(claude_dir))
    sid = str(uuid.uuid4())
    tmux.run("send-keys", "-t", "main", "-l", "--", shlex.join(interactive_argv(sid)))
    tmux.run("send-keys", "-t", "main", "Enter")
    live = await wait_for(lambda: find_live(claude_dir, sid), what="the CLI's live file")
    await wait_for(
        lambda: "stand-in claude ready" in tmux.run("capture-pane", "-p", "-t", "main"),
        what="the CLI reading keys",
    )
    tmux.run("send-keys", "-t", "main", "C-z")
    await wait_for(lambda: _state(live.pid) == "T", what="the CLI stopped")
    marker = tmp_path / "pwned-by-prompt"
    reply = await _prompt(server, namespace, admin, claude_dir, workdir, sid, f"touch {marker}")
    assert (reply.ok, reply.code) == (False, "not_controllable"), reply
    assert "foreground" in (reply.message or "")
    _shell_never_ran(tmux, tmp_path, marker)


def _state(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def test_the_cli_command_rule() -> None:
    """The native binary, a claude path, and the JS package count; shells and lookalikes do not."""
    for argv in (
        ["claude"],
        ["/home/u/.local/bin/claude", "--resume"],
        ["/x/node_modules/@anthropic-ai/claude-code/bin/claude.exe"],
        ["node", "/usr/local/bin/claude"],
        ["node", "--no-warnings", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"],
    ):
        assert pane_check.is_cli_command(argv), argv
    for argv in (
        [],
        ["bash"],
        ["-bash"],
        ["python3", "claude"],
        ["/usr/bin/claude-helper"],
        ["node", "/tmp/cli.js"],
        ["sh", "-c", "claude"],
    ):
        assert not pane_check.is_cli_command(argv), argv


def test_a_reused_pid_is_not_the_file_writer(claude_dir: Path, tmp_path: Path) -> None:
    """A live file whose procStart is not the process's start time is refused before anything else."""
    proc = subprocess.Popen(["bash", "-c", "exec -a claude sleep 60"])
    try:
        poll(lambda: pane_check.cmdline(proc.pid)[:1] == ["claude"])
        st = pane_check.proc_stat(proc.pid)
        assert st is not None
        path = claude_dir / "sessions" / f"{proc.pid}.json"
        live = LiveProcess(proc.pid, "s1", str(tmp_path), None, None, None)
        for start, why in ((st.start + 1, "not the one"), (st.start, "does not run in that pane")):
            body = {"pid": proc.pid, "sessionId": "s1", "procStart": str(start)}
            path.write_bytes(orjson.dumps(body))
            reason = pane_check.refusal(live, claude_dir / "sessions", 1_000_000, "/dev/null")
            assert reason is not None and why in reason, reason
    finally:
        proc.kill()
        proc.wait()


async def test_a_shared_sessions_dir_is_not_trusted_to_find_a_pane(
    tmux: TmuxServer,
    claude_dir: Path,
    workdir: Path,
    server: RedisServer,
    namespace: str,
    admin: aioredis.Redis,
) -> None:
    """With sessions/ group-writable, even the CLI's own live file is ignored: nothing is typed."""
    sid = str(uuid.uuid4())
    tmux.start(interactive_argv(sid), cwd=workdir, env=_env(claude_dir))
    await wait_for(lambda: find_live(claude_dir, sid), what="the CLI's live file")
    sessions = claude_dir / "sessions"
    sessions.chmod(0o775)
    assert find_live(claude_dir, sid) is None
    reply = await _prompt(server, namespace, admin, claude_dir, workdir, sid, "via a shared dir")
    assert not reply.ok and reply.data != {"driver": "tmux"}, reply
    sessions.chmod(0o755)
    assert (await _prompt(server, namespace, admin, claude_dir, workdir, sid, "trusted")).ok
    path = transcript_path(claude_dir, str(workdir), sid)
    await wait_for(lambda: "Done: trusted" in texts(path, "assistant"), what="the reply")
    assert texts(path, "user") == ["trusted"]
