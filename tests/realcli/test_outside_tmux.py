"""The interactive CLI in a plain terminal (no tmux): relaybus cannot type into it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import checks
from tests.realcli.observe import started_sid
from tests.realcli.rig import rig
from tests.support.netns import run_isolated

pytestmark = pytest.mark.realcli


async def plain_terminal(root: Path) -> dict[str, Any]:
    """Inside: claude on its own pseudo-terminal; a typed prompt; then a client's prompt and
    interrupt for that live session; /exit typed."""
    turns: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "Hello, plain terminal."}]}
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        phone = await r.client("watcher")
        r.poll_live()
        term = await r.start_in_pty()
        await term.until("❯".encode())
        await term.type_keys("hello from the terminal")
        sid: str = await observer.until(started_sid, 30, "session_started")
        await phone.until(lambda fs: "Hello, plain terminal." in checks.texts(fs, sid), 30, "reply")
        await phone.send(
            {"type": "prompt", "requestId": "p", "sessionId": sid, "message": "typed by relaybus?"}
        )
        prompt_reply = await phone.reply("p")
        await phone.send({"type": "interrupt_request", "requestId": "i", "sessionId": sid})
        interrupt_reply = await phone.reply("i")
        await term.type_keys("/exit")
        assert term.proc is not None
        rc = await asyncio.wait_for(term.proc.wait(), 30)
        return r.report(
            sid=sid,
            prompt_reply=prompt_reply,
            interrupt_reply=interrupt_reply,
            rc=rc,
            turns=len([q for q in r.api.requests if q["kind"] == "turn"]),
        )


def test_prompt_to_a_session_relaybus_cannot_type_into_is_refused(tmp_path: Path) -> None:
    """A client's prompt to an interactive CLI running outside tmux is refused with a clear
    code (no second claude on the same transcript); its interrupt is interrupt_ack
    ok:false interrupt_unavailable."""
    report = run_isolated(f"{__name__}:plain_terminal", tmp_path)
    assert report["rc"] == 0
    assert report["interrupt_reply"]["type"] == "interrupt_ack"
    assert (report["interrupt_reply"]["ok"], report["interrupt_reply"]["errorCode"]) == (
        False,
        "interrupt_unavailable",
    )
    assert report["prompt_reply"]["type"] == "error", report["prompt_reply"]
    assert report["prompt_reply"]["code"] not in ("busy", "bridge_error")
    assert report["turns"] == 1, "a second claude ran a turn for the refused prompt"
    texts = checks.texts(report["clients"]["watcher"], report["sid"])
    assert "typed by relaybus?" not in texts
    checks.assert_every_line_once(report, report["sid"])
