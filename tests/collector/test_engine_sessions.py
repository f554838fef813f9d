"""Sessions and turns in the engine: live-process files, idle end, the turn backstop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.collector_records import append, assistant_line, transcript, user_line
from tests.support.collector_rig import RigFactory


def write_process_file(claude_dir: Path, pid: int, sid: str, **extra: Any) -> Path:
    path = claude_dir / "sessions" / f"{pid}.json"
    body = {"pid": pid, "sessionId": sid, "cwd": "/srv/app", "startedAt": 1, **extra}
    path.write_bytes(orjson.dumps(body))
    return path


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A real process standing in for a running ``claude`` (killed at teardown)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait(10)


def exit_child(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(10)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    return proc.pid


def summary(frames: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for f in frames:
        if f["type"] == "turn_status":
            out.append(("turn_status", f["state"], f.get("waitingFor", "")))
        elif f["type"] == "session_ended":
            out.append(("session_ended", f["reason"]))
        else:
            out.append((f["type"],))
    return out


async def test_live_process_file_drives_turns_and_its_exit_ends_the_session(
    make_rig: RigFactory, claude_dir: Path, child: subprocess.Popen[bytes]
) -> None:
    """status busy/waiting/idle from sessions/<pid>.json; the process's exit ends the session."""
    rig = make_rig()
    await rig.engine.start()
    pf = write_process_file(claude_dir, child.pid, "s1", status="busy")
    await rig.engine.sync_processes()
    write_process_file(claude_dir, child.pid, "s1", status="waiting", waitingFor="approve Bash")
    await rig.engine.sync_processes()
    await rig.engine.sync_processes()  # unchanged: nothing new
    path = transcript(claude_dir, "s1")  # the turn's last line: the live idle ends the turn
    append(path, user_line("s1", "go") + assistant_line("s1", "done"))
    await rig.engine.sync_path(path)
    write_process_file(claude_dir, child.pid, "s1", status="idle")
    await rig.engine.sync_processes()
    pf.unlink()
    await rig.engine.sync_processes()
    assert await rig.client.hget(rig.keys.session("s1"), "live") == b"1"  # still running
    exit_child(child)
    await rig.engine.sync_processes()
    log = [
        f
        for f in await rig.frames(rig.keys.log)
        if f["type"] not in ("session_event", "session_updated")
    ]
    assert summary(log) == [
        ("session_started",),
        ("turn_status", "working", ""),
        ("turn_status", "waiting", "approve Bash"),
        ("turn_status", "idle", ""),
        ("session_ended", "exit"),
    ]
    assert log[0]["cwd"] == "/srv/app"
    h = await rig.client.hgetall(rig.keys.session("s1"))
    assert h[b"live"] == b"0" and h[b"ended"] == b"1" and h[b"pid"] == b""


async def test_live_status_overrides_the_transcript(
    make_rig: RigFactory, claude_dir: Path, child: subprocess.Popen[bytes]
) -> None:
    """While the process reports busy, an assistant end_turn line does not make it idle."""
    rig = make_rig()
    await rig.engine.start()
    write_process_file(claude_dir, child.pid, "s2", status="busy")
    await rig.engine.sync_processes()
    path = transcript(claude_dir, "s2")
    append(path, user_line("s2", "go") + assistant_line("s2", "done"))
    await rig.engine.sync_path(path)
    assert await rig.client.hget(rig.keys.session("s2"), "state") == b"working"
    turns = [f for f in await rig.frames(rig.keys.log) if f["type"] == "turn_status"]
    assert [t["state"] for t in turns] == ["working"]


async def test_a_dead_pid_is_not_a_live_process(make_rig: RigFactory, claude_dir: Path) -> None:
    """A process file whose pid no longer exists is ignored."""
    rig = make_rig()
    await rig.engine.start()
    write_process_file(claude_dir, dead_pid(), "s3", status="busy")
    await rig.engine.sync_processes()
    assert await rig.client.exists(rig.keys.session("s3")) == 0


async def test_idle_session_ends_and_new_activity_starts_it_again(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """Without a live process, a quiet session ends after the idle time; a new line restarts it."""
    rig = make_rig(session_idle_minutes=0.03)  # 1.8 s: generous for a loaded machine
    await rig.engine.start()
    path = transcript(claude_dir, "s4")
    append(path, user_line("s4", "hello"))
    await rig.engine.sync_path(path)
    await asyncio.sleep(2.0)
    await rig.engine.tick()
    append(path, user_line("s4", "again"))
    await rig.engine.sync_path(path)
    kinds = [s for s in summary(await rig.frames(rig.keys.log)) if s[0] != "session_event"]
    assert kinds == [
        ("session_started",),
        ("turn_status", "working", ""),
        ("turn_status", "idle", ""),
        ("session_ended", "idle"),
        ("session_started",),
        ("turn_status", "working", ""),
    ]


async def test_backstop_idles_a_silent_turn(make_rig: RigFactory, claude_dir: Path) -> None:
    """A working turn with no transcript activity for the backstop turns idle, once."""
    rig = make_rig(turn_backstop_seconds=1.5)
    await rig.engine.start()
    path = transcript(claude_dir, "s5")
    append(path, user_line("s5", "think hard"))
    await rig.engine.sync_path(path)
    await rig.engine.tick()
    assert await rig.client.hget(rig.keys.session("s5"), "state") == b"working"
    await asyncio.sleep(1.6)
    await rig.engine.tick()
    await rig.engine.tick()
    turns = [f["state"] for f in await rig.frames(rig.keys.log) if f["type"] == "turn_status"]
    assert turns == ["working", "idle"]
    assert await rig.client.hget(rig.keys.session("s5"), "state") == b"idle"


async def test_a_process_that_died_while_the_collector_was_down_ends_its_session(
    make_rig: RigFactory, claude_dir: Path, child: subprocess.Popen[bytes]
) -> None:
    """On start, a live session whose recorded process is gone is ended (reason exit)."""
    rig = make_rig()
    await rig.engine.start()
    pf = write_process_file(claude_dir, child.pid, "s6", status="idle")
    await rig.engine.sync_processes()
    assert await rig.client.hget(rig.keys.session("s6"), "live") == b"1"
    pf.unlink()  # the process exits while no collector runs
    exit_child(child)
    fresh = make_rig()
    await fresh.engine.start()
    h = await fresh.client.hgetall(fresh.keys.session("s6"))
    assert h[b"live"] == b"0" and h[b"ended"] == b"1"
    ended = [f for f in await fresh.frames(fresh.keys.log) if f["type"] == "session_ended"]
    assert [f["reason"] for f in ended] == ["exit"]


async def test_draining_a_session_reads_transcripts_not_reported_yet(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """drain_session publishes a session's transcript even before the watcher reported it."""
    rig = make_rig()
    await rig.engine.start()
    path = transcript(claude_dir, "s7")
    append(path, user_line("s7", "hello") + assistant_line("s7", "hi"))
    await rig.engine.drain_session("s7")
    events = await rig.events("s7")
    texts = [f["event"]["blocks"][0]["text"] for f in events if f["event"]["blocks"]]
    assert texts == ["hello", "hi"]
    await rig.engine.drain_session("s7")  # nothing new: nothing twice
    assert len(await rig.events("s7")) == len(events)


async def test_a_process_gone_with_its_file_still_busy_ends_its_turn_first(
    make_rig: RigFactory, claude_dir: Path, child: subprocess.Popen[bytes]
) -> None:
    """The transcript ended the turn while the file said busy; file and process go at once:
    idle, then session_ended — never an ended session shown working."""
    rig = make_rig()
    await rig.engine.start()
    pf = write_process_file(claude_dir, child.pid, "s8", status="busy")
    await rig.engine.sync_processes()
    path = transcript(claude_dir, "s8")
    append(path, user_line("s8", "go") + assistant_line("s8", "done"))
    await rig.engine.sync_path(path)
    pf.unlink()
    exit_child(child)
    await rig.engine.sync_processes()
    log = [
        f for f in await rig.frames(rig.keys.log) if f["type"] in ("turn_status", "session_ended")
    ]
    assert summary(log) == [
        ("turn_status", "working", ""),
        ("turn_status", "idle", ""),
        ("session_ended", "exit"),
    ]
