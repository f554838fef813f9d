"""The permission mode of the real interactive CLI in tmux, read and switched from a client."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realcli.observe import started_sid
from tests.realcli.rig import rig
from tests.realcli.test_tmux import PROMPT_MARK, idle_turn, wait_ready
from tests.support.netns import run_isolated

pytestmark = pytest.mark.realcli


async def switching(root: Path) -> dict[str, Any]:
    """Inside: claude in tmux started in default mode; a typed prompt; the client switches to
    plan, asks for bypassPermissions (not in the cycle), switches to acceptEdits; a prompt
    from the client then runs in that mode."""
    turns: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "Hello, terminal."}]},
        {"content": [{"type": "text", "text": "Editing freely."}]},
    ]
    async with rig(root, turns) as r:
        phone = await r.client("phone")
        term = r.start_interactive("--permission-mode", "default")
        await wait_ready(term)
        marks: dict[str, Any] = {"start_screen": term.screen().splitlines()[-3:]}
        await term.type_keys("hello from the terminal")
        sid: str = await phone.until(started_sid, 30, "session_started")
        await idle_turn(phone, sid, 0, "typed turn")
        await term.screen_until(lambda s: PROMPT_MARK in s, 20, "the prompt")
        for name, mode in (
            ("plan", "plan"),
            ("bypass", "bypassPermissions"),
            ("edits", "acceptEdits"),
        ):
            sent = time.time()
            await phone.send(
                {"type": "set_permission_mode", "requestId": name, "sessionId": sid, "mode": mode}
            )
            marks[name] = await phone.reply(name)
            marks[f"{name}_s"] = time.time() - sent
            marks[f"{name}_footer"] = term.screen().rstrip().splitlines()[-1]
        await phone.until(
            lambda fs: any(
                f["type"] == "session_updated"
                and f["session"].get("permissionMode") == "acceptEdits"
                for f in fs
            ),
            10,
            "session_updated with acceptEdits",
        )
        mark = len(phone.frames)
        await phone.send(
            {"type": "prompt", "requestId": "p", "sessionId": sid, "message": "edit it now"}
        )
        marks["prompt"] = await phone.reply("p")
        await idle_turn(phone, sid, mark, "the client's prompt")
        await phone.send({"type": "list_sessions", "requestId": "l"})
        marks["listed"] = [s for s in (await phone.reply("l"))["sessions"] if s["id"] == sid]
        return r.report(sid=sid, marks=marks)


def test_mode_switched_from_a_client_by_shift_tab(tmp_path: Path) -> None:
    """Shift+Tab from a client lands on plan (2 presses from default), refuses
    bypassPermissions after one round without changing the mode, lands on acceptEdits; the
    phone sees each change live, the list has it, and the CLI writes it on the next prompt."""
    report = run_isolated(f"{__name__}:switching", tmp_path)
    sid, marks = report["sid"], report["marks"]
    assert "manual mode on" in "\n".join(marks["start_screen"])
    plan = marks["plan"]
    assert (plan["type"], plan["mode"], plan["driver"]) == ("permission_mode_ack", "plan", "tmux")
    assert "plan mode on" in marks["plan_footer"]
    bypass = marks["bypass"]
    assert (bypass["type"], bypass["code"]) == ("error", "mode_unavailable"), bypass
    assert "plan → auto → default → acceptEdits → plan" in bypass["message"]
    assert "plan mode on" in marks["bypass_footer"]
    edits = marks["edits"]
    assert (edits["type"], edits["mode"]) == ("permission_mode_ack", "acceptEdits")
    assert "accept edits on" in marks["edits_footer"]
    updates = [
        f["session"].get("permissionMode")
        for f in report["clients"]["phone"]
        if f["type"] == "session_updated" and f["sessionId"] == sid
    ]
    assert "plan" in updates and updates.index("plan") < updates.index("acceptEdits")
    assert marks["prompt"]["type"] == "prompt_sent"
    assert [s.get("permissionMode") for s in marks["listed"]] == ["acceptEdits"]
    (lines,) = [v for k, v in report["transcripts"].items() if k.endswith(f"{sid}.jsonl")]
    prompts = [
        json.loads(ln)
        for ln in lines
        if json.loads(ln).get("type") == "user" and "permissionMode" in json.loads(ln)
    ]
    assert [p["permissionMode"] for p in prompts] == ["default", "acceptEdits"]
