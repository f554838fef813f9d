"""``claude -p`` runs watched live: tools, a sub-agent, a ``--resume`` turn, an unknown session."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import checks
from tests.realcli.observe import started_sid
from tests.realcli.rig import rig
from tests.support.netns import run_isolated

pytestmark = pytest.mark.realcli

ALLOW_TOOLS = {"permissions": {"allow": ["Read", "Edit", "Write", "Bash", "Agent"]}}


def tool_turns(work: Path) -> list[dict[str, Any]]:
    """Read, Edit, a failing Bash, an ``Agent`` sub-agent (its own turn), Write, an answer."""
    notes = str(work / "notes.txt")
    return [
        {
            "content": [
                {"type": "thinking", "thinking": "The notes need fixing. Read first."},
                {"type": "text", "text": "Let me read the file first."},
                {"type": "tool_use", "name": "Read", "input": {"file_path": notes}},
            ]
        },
        {
            "content": [
                {"type": "text", "text": "Now I will change beta to BETA."},
                {
                    "type": "tool_use",
                    "name": "Edit",
                    "input": {"file_path": notes, "old_string": "beta", "new_string": "BETA"},
                },
            ]
        },
        {
            "content": [
                {
                    "type": "tool_use",
                    "name": "Bash",
                    "input": {"command": "ls /definitely/not/here", "description": "List it"},
                }
            ]
        },
        {
            "content": [
                {"type": "text", "text": "Delegating a check."},
                {
                    "type": "tool_use",
                    "name": "Agent",
                    "input": {
                        "description": "Check the notes",
                        "prompt": "Check notes.txt.",
                        "subagent_type": "general-purpose",
                        "run_in_background": False,
                    },
                },
            ]
        },
        {"content": [{"type": "text", "text": "Sub-agent: the notes look fine."}]},
        {
            "content": [
                {
                    "type": "tool_use",
                    "name": "Write",
                    "input": {"file_path": str(work / "new.txt"), "content": "new\n"},
                }
            ]
        },
        {"content": [{"type": "text", "text": "All done: beta is now BETA."}]},
    ]


SECOND_TURN = {
    "content": [
        {"type": "thinking", "thinking": "Second turn thinking."},
        {"type": "text", "text": "Second turn answer."},
    ]
}


async def print_then_resume(root: Path) -> dict[str, Any]:
    """Inside the namespace: a tool run, its ``--resume`` turn, a resume of an unknown id."""
    work = root / "work"
    async with rig(root, [*tool_turns(work), SECOND_TURN], settings=ALLOW_TOOLS) as r:
        (work / "notes.txt").write_text("alpha\nbeta\ngamma\n")
        observer = await r.client("observer", auto_watch=False)
        await r.client("watcher")
        r.poll_live()
        first = await (await r.claude_print("fix the notes")).wait(90)
        sid = await observer.until(started_sid, what="session_started")
        await r.listing_after(observer, sid, first.ended or 0)
        second = await (await r.claude_print("--resume", sid, "second turn please")).wait(90)
        await r.listing_after(observer, sid, second.ended or 0)
        await (await r.claude_print("--resume", str(uuid.uuid4()), "hello?")).wait(60)
        return r.report(sid=sid, notes_after=(work / "notes.txt").read_text())


def test_print_runs_watched_live(tmp_path: Path) -> None:
    """A tool run with a sub-agent and its --resume turn: every line once, one working→idle per
    run, not live 2 s after each exit; a resume of an unknown id exits 1 naming the reason."""
    report = run_isolated(f"{__name__}:print_then_resume", tmp_path)
    first, second, unknown = report["runs"]
    assert (first["rc"], second["rc"]) == (0, 0), report["runs"]
    assert report["notes_after"] == "alpha\nBETA\ngamma\n"
    sid = report["sid"]
    watcher, observer = report["clients"]["watcher"], report["clients"]["observer"]
    checks.assert_every_line_once(report, sid)
    live = [e for e in checks.events(watcher, sid) if e["_at"] < first["ended"]]
    assert any(e["event"].get("sidechain") for e in live), "the sub-agent was not seen live"
    assert len(live) > len(checks.events(watcher, sid)) // 4, "events arrived only after the exit"
    assert checks.states(observer, sid) == ["working", "idle", "working", "idle"]
    checks.assert_not_live_after(report, sid, first["ended"], until=second["started"])
    checks.assert_not_live_after(report, sid, second["ended"])

    turns: list[dict[str, Any]] = [q for q in report["requests"] if q["kind"] == "turn"]
    assert len(turns) == 8 and not any(q["exhausted"] for q in turns)
    side = [e for e in checks.events(watcher, sid) if e["event"].get("sidechain")]
    assert "Sub-agent: the notes look fine." in checks.texts(side, sid)
    bash = next(t for t in checks.tools(watcher, sid) if t["name"] == "Bash")
    result = next(
        b for b in checks.tool_results(watcher, sid) if b["toolUseId"] == bash["toolUseId"]
    )
    assert result["isError"] is True
    assert "Second turn answer." in checks.texts(watcher, sid)

    assert unknown["rc"] == 1
    assert "No conversation found" in unknown["stdout"] + unknown["stderr"]
