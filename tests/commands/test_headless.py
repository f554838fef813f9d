"""The headless driver runs the (stand-in) CLI as a real child process."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from relaybus.collector.drivers import DriverError
from relaybus.collector.drivers.headless import HeadlessDriver
from tests.conftest import make_settings
from tests.support.commands_env import RecordingHooks, texts
from tests.support.fake_claude import INTERRUPTED, Transcript, transcript_path
from tests.support.wait import wait_for


def _driver(
    claude_dir: Path, claude_bin: Path, hooks: RecordingHooks, **kw: object
) -> HeadlessDriver:
    settings = make_settings(
        "redis://127.0.0.1:1/0", "ns", claude_dir, claude_bin=str(claude_bin), **kw
    )
    return HeadlessDriver(settings, hooks, grace_s=2.0)


def _seed(claude_dir: Path, cwd: Path, sid: str) -> Path:
    path = transcript_path(claude_dir, str(cwd), sid)
    t = Transcript(path, sid, str(cwd), "cli")
    t.user("first")
    t.reply("first")
    return path


async def test_prompt_resumes_session_and_reports_turn(
    claude_dir: Path, claude_bin: Path, workdir: Path, tmp_path: Path
) -> None:
    """A prompt runs `-p --resume=<sid> <args> -- <msg>` in the cwd; the turn starts and ends."""
    sid = str(uuid.uuid4())
    path = _seed(claude_dir, workdir, sid)
    hooks = RecordingHooks()
    driver = _driver(claude_dir, claude_bin, hooks, claude_args="--permission-mode acceptEdits")
    pid = await driver.prompt(sid, str(workdir), "-- hello there", new=False, trace_id="t-9")
    assert pid > 0 and driver.busy(sid)
    assert hooks.calls[0] == ("started", sid, "t-9")
    await wait_for(lambda: ("ended", sid, None) in hooks.calls, what="run end")
    assert not driver.busy(sid)
    assert texts(path, "user")[-1] == "-- hello there"
    assert texts(path, "assistant")[-1] == "Done: -- hello there"
    call = json.loads((tmp_path / "fake-claude.log").read_text().splitlines()[-1])
    assert call["argv"] == [
        "-p",
        f"--resume={sid}",
        "--permission-mode",
        "acceptEdits",
        "--",
        "-- hello there",
    ]
    assert call["cwd"] == str(workdir)


async def test_new_conversation_uses_session_id(
    claude_dir: Path, claude_bin: Path, workdir: Path
) -> None:
    """The first prompt of a reserved conversation starts it with --session-id."""
    sid = str(uuid.uuid4())
    hooks = RecordingHooks()
    driver = _driver(claude_dir, claude_bin, hooks)
    await driver.prompt(sid, str(workdir), "start", new=True, trace_id=None)
    await wait_for(lambda: ("ended", sid, None) in hooks.calls, what="run end")
    path = transcript_path(claude_dir, str(workdir), sid)
    assert texts(path, "user") == ["start"]
    assert [
        r["sessionId"] for r in json.loads("[" + ",".join(path.read_text().splitlines()) + "]")
    ] == [sid] * 3


async def test_second_prompt_while_running_is_busy(
    claude_dir: Path, claude_bin: Path, workdir: Path
) -> None:
    """One turn at a time per session: a second prompt is refused with busy."""
    sid = str(uuid.uuid4())
    _seed(claude_dir, workdir, sid)
    driver = _driver(claude_dir, claude_bin, RecordingHooks())
    await driver.prompt(sid, str(workdir), "LONG job", new=False, trace_id=None)
    with pytest.raises(DriverError) as err:
        await driver.prompt(sid, str(workdir), "another", new=False, trace_id=None)
    assert err.value.code == "busy"
    await driver.aclose()
    assert not driver.busy(sid)


async def test_interrupt_sends_sigint_and_turn_ends(
    claude_dir: Path, claude_bin: Path, workdir: Path
) -> None:
    """Interrupting a long run SIGINTs it: the CLI writes the interruption line and exits."""
    sid = str(uuid.uuid4())
    path = _seed(claude_dir, workdir, sid)
    hooks = RecordingHooks()
    driver = _driver(claude_dir, claude_bin, hooks)
    await driver.prompt(sid, str(workdir), "LONG job", new=False, trace_id=None)
    await wait_for(lambda: "LONG job" in texts(path, "user"), what="user record")
    assert await driver.interrupt(sid) is True
    await wait_for(lambda: ("ended", sid, None) in hooks.calls, what="run end")
    assert texts(path, "user")[-1] == INTERRUPTED
    assert await driver.interrupt(sid) is False


def _stubborn(tmp_path: Path, signals: str) -> Path:
    """A stand-in CLI that ignores ``signals`` and never exits by itself."""
    path = tmp_path / "stubborn"
    path.write_text(f"#!/bin/sh\ntrap '' {signals}\nwhile :; do sleep 0.1; done\n")
    path.chmod(0o755)
    return path


async def test_interrupt_escalates_when_sigint_is_ignored(
    claude_dir: Path, tmp_path: Path, workdir: Path
) -> None:
    """A child that ignores SIGINT is terminated after the grace period."""
    hooks = RecordingHooks()
    driver = _driver(claude_dir, _stubborn(tmp_path, "INT"), hooks)
    await driver.prompt("s1", str(workdir), "x", new=False, trace_id=None)
    assert await driver.interrupt("s1")
    await wait_for(lambda: ("ended", "s1", None) in hooks.calls, what="escalation", timeout_s=30)
    assert not driver.busy("s1")


async def test_missing_binary_is_a_bridge_error(claude_dir: Path, workdir: Path) -> None:
    """A CLI that cannot be started is reported, not crashed on, and leaves no run behind."""
    hooks = RecordingHooks()
    driver = _driver(claude_dir, workdir / "no-such-claude", hooks)
    with pytest.raises(DriverError) as err:
        await driver.prompt("s1", str(workdir), "x", new=False, trace_id=None)
    assert err.value.code == "bridge_error"
    assert not driver.busy("s1") and hooks.calls == []


async def test_close_kills_runs_that_ignore_the_interrupt(
    claude_dir: Path, tmp_path: Path, workdir: Path
) -> None:
    """On shutdown every run is interrupted, and killed if it does not stop in time."""
    hooks = RecordingHooks()
    driver = _driver(claude_dir, _stubborn(tmp_path, "INT TERM"), hooks)
    await driver.prompt("s1", str(workdir), "x", new=False, trace_id=None)
    await driver.aclose(wait_s=0.5)
    assert not driver.busy("s1") and ("ended", "s1", None) in hooks.calls


async def test_child_gets_no_relaybus_secrets_and_no_option_like_id(
    claude_dir: Path,
    claude_bin: Path,
    workdir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI child never sees RELAYBUS_* or Redis passwords; an id shaped like a flag never runs."""
    monkeypatch.setenv("RELAYBUS_REDIS_URL", "redis://:hunter2@127.0.0.1:6379/0")
    monkeypatch.setenv("RELAYBUS_TOKENS", "sekrit")
    monkeypatch.setenv("REDISCLI_AUTH", "hunter2")
    sid = str(uuid.uuid4())
    _seed(claude_dir, workdir, sid)
    hooks = RecordingHooks()
    driver = _driver(claude_dir, claude_bin, hooks)
    await driver.prompt(sid, str(workdir), "env?", new=False, trace_id=None)
    await wait_for(lambda: ("ended", sid, None) in hooks.calls, what="run end")
    calls = [json.loads(x) for x in (tmp_path / "fake-claude.log").read_text().splitlines()]
    assert calls[-1]["secretEnv"] == []
    with pytest.raises(DriverError):
        await driver.prompt(
            "--dangerously-skip-permissions", str(workdir), "x", new=False, trace_id=None
        )
    assert len((tmp_path / "fake-claude.log").read_text().splitlines()) == len(calls)
