"""Issue 27's real-CLI faults: a killed CLI's held request, a prompt to a vanished transcript."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import checks
from tests.realcli.observe import started_sid
from tests.realcli.rig import rig
from tests.realcli.test_approvals import DEFAULT_MODE, _request, _resolved, edit_turns
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
