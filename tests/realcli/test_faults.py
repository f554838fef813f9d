"""Issue 27's real-CLI faults: a killed CLI's held request, a prompt to a vanished transcript."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import checks
from tests.realcli.observe import started_sid
from tests.realcli.rig import rig
from tests.realcli.test_approvals import (
    DEFAULT_MODE,
    _interactive_edit,
    _request,
    _resolved,
    edit_turns,
)
from tests.realcli.test_headless import _first_session, _prompt
from tests.realcli.test_tmux import wait_ready
from tests.support.netns import run_isolated

pytestmark = pytest.mark.realcli


async def killed_while_held(root: Path) -> dict[str, Any]:
    """Inside: ``claude -p`` asks through the hook; the CLI is SIGKILLed while the request is
    held; then a client accepts it late."""
    work = root / "work"
    async with rig(root, edit_turns(work), hook=True) as r:
        (work / "notes.txt").write_text("alpha\nbeta\ngamma\n")
        observer = await r.client("observer", auto_watch=False)
        watcher = await r.client("watcher")
        run = await r.claude_print(*DEFAULT_MODE.split(), "edit the notes")
        request = await _request(watcher)
        run.proc.kill()
        killed_at = time.time()
        await run.wait(30)
        resolved = None
        with contextlib.suppress(AssertionError):  # the test says what was missing
            resolved = await _resolved(watcher, 10.0)
        await watcher.send(
            {"type": "accept_diff", "requestId": "late", "requestKey": request["requestKey"]}
        )
        late = await watcher.reply("late")
        sid = started_sid(observer.frames)
        assert sid is not None
        await observer.until(lambda fs: checks.of_type(fs, "session_ended", sid), 10, "the end")
        return r.report(
            sid=sid,
            request=request,
            resolved=resolved,
            late=late,
            killed_at=killed_at,
            notes_after=(work / "notes.txt").read_text(),
        )


async def killed_in_tmux_while_held(root: Path) -> dict[str, Any]:
    """Inside: the interactive CLI in tmux asks through the hook (its own dialog showing); the
    CLI is SIGKILLed while the request is held."""
    async with rig(root, edit_turns(root / "work"), hook=True) as r:
        _term, watcher, sid, request = await _interactive_edit(r)
        pids = [
            json.loads(p.read_text())["pid"] for p in (r.claude_dir / "sessions").glob("*.json")
        ]
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        killed_at = time.time()
        resolved = None
        with contextlib.suppress(AssertionError):
            resolved = await _resolved(watcher, 10.0)
        return r.report(sid=sid, request=request, resolved=resolved, killed_at=killed_at)


def test_killed_interactive_cli_cancels_its_held_request(tmp_path: Path) -> None:
    """The interactive CLI SIGKILLed while relaybus holds its request: the request ends as
    ``cancelled`` within 2 s, not as answered in the terminal."""
    report = run_isolated(f"{__name__}:killed_in_tmux_while_held", tmp_path)
    resolved = report["resolved"]
    assert resolved is not None, "the held request of the killed CLI was never resolved"
    assert resolved["decision"] == "cancelled", resolved
    assert resolved["_at"] - report["killed_at"] < 2.0


def test_killed_cli_cancels_its_held_request(tmp_path: Path) -> None:
    """A ``claude -p`` SIGKILLed while its permission request is held: the request ends as
    ``cancelled`` within 2 s, a late accept_diff is ``already_resolved``, nothing is edited."""
    report = run_isolated(f"{__name__}:killed_while_held", tmp_path)
    resolved = report["resolved"]
    assert resolved is not None, "the held request of the killed CLI was never resolved"
    assert resolved["requestKey"] == report["request"]["requestKey"]
    assert resolved["decision"] == "cancelled", resolved
    assert resolved["_at"] - report["killed_at"] < 2.0
    assert (report["late"]["type"], report["late"].get("code")) == ("error", "already_resolved")
    assert report["notes_after"] == "alpha\nbeta\ngamma\n"


async def prompt_to_a_vanished_transcript(root: Path) -> dict[str, Any]:
    """Inside: a conversation started with ``claude -p``; its transcript is deleted; a client
    prompts the session."""
    turns: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "First answer."}]},
        {"content": [{"type": "text", "text": "An answer nobody should get."}]},
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        phone = await r.client("watcher")
        sid = await _first_session(r, observer)
        for path in (r.claude_dir / "projects").glob(f"*/{sid}.jsonl"):
            path.unlink()
        reply = await _prompt(phone, "p1", sid, "are you there?")
        return r.report(sid=sid, reply=reply)


def test_prompt_to_a_vanished_transcript_is_refused(tmp_path: Path) -> None:
    """A prompt to a session whose transcript is gone is answered ``transcript_missing`` (naming
    the reason); no run starts a new conversation under the old id."""
    report = run_isolated(f"{__name__}:prompt_to_a_vanished_transcript", tmp_path)
    reply = report["reply"]
    assert (reply["type"], reply.get("code")) == ("error", "transcript_missing"), reply
    assert "transcript" in reply["message"]
    assert report["transcripts"] == {}, "a new transcript was written under the old id"
    assert len([q for q in report["requests"] if q.get("kind") == "turn"]) == 1


REPAIR = "No response requested."


async def crash_then_prompt(root: Path) -> dict[str, Any]:
    """Inside: ``claude -p`` SIGKILLed mid-answer; the person resumes the conversation in the
    interactive CLI (tmux); a client prompts it (relaybus types into the pane)."""
    turns: list[dict[str, Any]] = [
        {
            "content": [{"type": "text", "text": " ".join(f"w{i}" for i in range(100))}],
            "delay_s": 1,
        },
        {"content": [{"type": "text", "text": "After the crash."}]},
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        phone = await r.client("watcher")
        run = await r.claude_print("first question")
        await r.wait_request(1)
        sid: str = await observer.until(started_sid, 30, "session_started")
        await asyncio.sleep(1.0)  # mid-answer: the fake API streams a delta a second
        run.proc.kill()
        await run.wait(30)
        await observer.until(lambda fs: checks.of_type(fs, "session_ended", sid), 10, "the end")
        term = r.start_interactive(f"--resume={sid}")
        await wait_ready(term)
        await observer.until(
            lambda fs: len(checks.of_type(fs, "session_started", sid)) >= 2, 20, "the resume"
        )
        mark = len(observer.frames)
        reply = await _prompt(phone, "p1", sid, "second question")
        await phone.until(lambda fs: "After the crash." in checks.texts(fs, sid), 30, "answer")
        await observer.until(
            lambda fs: checks.states(fs[mark:], sid)[-1:] == ["idle"], 30, "idle after it"
        )
        return r.report(sid=sid, reply=reply, after=checks.states(observer.frames[mark:], sid))


def test_first_prompt_after_a_crash_does_not_flicker(tmp_path: Path) -> None:
    """The CLI resumed after a crash first answers the unanswered prompt ("No response
    requested.", a turn end) and then writes the new prompt: the new turn is one working
    then one idle, never idle in between."""
    report = run_isolated(f"{__name__}:crash_then_prompt", tmp_path)
    assert report["reply"]["type"] == "prompt_sent", report["reply"]
    lines = [json.loads(x) for ls in report["transcripts"].values() for x in ls]
    repairs = [x for x in lines if x.get("message", {}).get("model") == "<synthetic>"]
    assert repairs and REPAIR in json.dumps(repairs[0]), "the CLI wrote no repair line"
    assert report["after"] == ["working", "idle"], report["after"]


async def replaced_then_resumed(root: Path) -> dict[str, Any]:
    """Inside: a ``claude -p`` conversation; its transcript is replaced by a copy (a new inode,
    as an editor or a sync tool saves it); then ``claude -p --resume`` appends to the copy."""
    turns: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "First answer."}]},
        {"content": [{"type": "text", "text": "Second answer."}]},
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        watcher = await r.client("watcher")
        sid = await _first_session(r, observer)
        path = next((r.claude_dir / "projects").glob(f"*/{sid}.jsonl"))
        copy = path.with_name(path.name + ".copy")
        copy.write_bytes(path.read_bytes())
        os.replace(copy, path)
        run = await (await r.claude_print(f"--resume={sid}", "second question")).wait(60)
        await watcher.until(lambda fs: "Second answer." in checks.texts(fs, sid), 30, "answer")
        await observer.until(
            lambda fs: len(checks.of_type(fs, "session_ended", sid)) >= 2, 20, "second exit"
        )
        return r.report(sid=sid, rc=run.rc)


def test_a_replaced_transcript_continues_where_it_was(tmp_path: Path) -> None:
    """A transcript replaced by a copy of itself and then appended to by the real CLI: every
    line reaches the client once (the copy's old lines are not published again), and no
    reset is announced."""
    report = run_isolated(f"{__name__}:replaced_then_resumed", tmp_path)
    assert report["rc"] == 0
    sid = report["sid"]
    checks.assert_every_line_once(report, sid)
    watcher = report["clients"]["watcher"]
    subtypes = [f["event"].get("subtype") for f in checks.events(watcher, sid)]
    assert "relaybus_transcript_reset" not in subtypes
