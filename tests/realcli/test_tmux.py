"""The interactive CLI in a real tmux server: typed prompts, prompts and Escape from a client, /exit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import checks
from tests.realcli.observe import Recorder
from tests.realcli.rig import rig
from tests.realcli.terminals import Tmux
from tests.support.netns import run_isolated

pytestmark = pytest.mark.realcli

SLOW = " ".join(f"word{i}" for i in range(300))
INTERRUPTED = "[Request interrupted by user]"
PROMPT_MARK = "❯"


async def wait_ready(term: Tmux) -> None:
    """The CLI shows its input prompt (no first-run dialog in the way)."""
    screen = await term.screen_until(
        lambda s: PROMPT_MARK in s or "Do you want" in s, 30, "the prompt"
    )
    assert "Do you want" not in screen, f"a first-run dialog is in the way:\n{screen}"
    await asyncio.sleep(0.5)  # keys sent at the first paint can be lost, as with a person


async def idle_turn(obs: Recorder, sid: str, mark: int, what: str) -> list[str]:
    """Wait for the turn begun at ``mark`` to end (``idle``, and the CLI back at its prompt)."""
    await obs.until(
        lambda fs: (
            checks.states(fs[mark:], sid)[-1:] == ["idle"]
            and "working" in checks.states(fs[mark:], sid)
        ),
        60,
        what,
    )
    return checks.states(obs.frames[mark:], sid)


async def interactive(root: Path) -> dict[str, Any]:
    """Inside: claude in tmux; a typed prompt, a client's prompt and multi-line prompt, a slow
    turn interrupted from the client (Escape), /exit typed."""
    turns: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "Hello, terminal."}]},
        {
            "content": [
                {"type": "thinking", "thinking": "The phone asks."},
                {"type": "text", "text": "Hello, phone."},
            ]
        },
        {"content": [{"type": "text", "text": "Two lines received."}]},
        {"content": [{"type": "text", "text": SLOW}], "delay_s": 0.1},
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        phone = await r.client("watcher")
        r.poll_live()
        term = r.start_interactive()
        await wait_ready(term)
        marks: dict[str, Any] = {"typed": len(observer.frames)}
        await term.type_keys("hello from the terminal")
        sid: str = await observer.until(
            lambda fs: next((f["sessionId"] for f in fs if f["type"] == "session_started"), None),
            30,
            "session_started",
        )
        marks["typed_states"] = await idle_turn(observer, sid, marks["typed"], "typed turn")
        for name, message in (
            ("phone", "hello from the phone"),
            ("multi", "first line of the prompt\nsecond line of the prompt"),
        ):
            marks[name] = len(observer.frames)
            await phone.send(
                {"type": "prompt", "requestId": name, "sessionId": sid, "message": message}
            )
            marks[f"{name}_reply"] = await phone.reply(name)
            marks[f"{name}_states"] = await idle_turn(observer, sid, marks[name], name)
        marks["slow"] = len(observer.frames)
        await phone.send(
            {
                "type": "prompt",
                "requestId": "slow",
                "sessionId": sid,
                "message": "slow answer please",
            }
        )
        marks["slow_reply"] = await phone.reply("slow")
        await r.wait_request(4)
        await term.screen_until(lambda s: "word3" in s, 20, "the slow answer streaming")
        await phone.send({"type": "interrupt_request", "requestId": "esc", "sessionId": sid})
        marks["esc_reply"] = await phone.reply("esc")
        marks["slow_states"] = await idle_turn(observer, sid, marks["slow"], "interrupted turn")
        await term.screen_until(lambda s: PROMPT_MARK in s, 20, "the prompt after Escape")
        await term.type_keys("/exit")
        marks["exited_at"] = await term.wait_gone(30)
        await r.listing_after(observer, sid, marks["exited_at"])
        return r.report(sid=sid, marks=marks)


def test_interactive_cli_in_tmux(tmp_path: Path) -> None:
    """The interactive CLI in tmux: each prompt (typed, from a client, multi-line) is one
    working→idle, Escape from a client interrupts, /exit ends the session (not live 2 s
    later), every line reaches the watcher once."""
    report = run_isolated(f"{__name__}:interactive", tmp_path)
    sid, marks = report["sid"], report["marks"]
    observer = report["clients"]["observer"]
    bounds = [marks["typed"], marks["phone"], marks["multi"], marks["slow"], len(observer)]
    for name, start, end in zip(
        ("typed", "phone", "multi", "slow"), bounds, bounds[1:], strict=False
    ):
        got = checks.states(observer[start:end], sid)
        if name == "typed" and got[:1] == ["idle"]:
            got = got[1:]  # the state announced with the session at the CLI's start
        assert got == ["working", "idle"], (name, got)
    for name in ("phone", "multi", "slow"):
        assert marks[f"{name}_reply"]["type"] == "prompt_sent", marks[f"{name}_reply"]
    assert (marks["esc_reply"]["type"], marks["esc_reply"]["ok"]) == ("interrupt_ack", True)
    watcher = report["clients"]["watcher"]
    said = checks.texts(watcher, sid)
    assert "first line of the prompt\nsecond line of the prompt" in said
    assert "Two lines received." in said and INTERRUPTED in said
    checks.assert_every_line_once(report, sid)
    checks.assert_not_live_after(report, sid, marks["exited_at"])
