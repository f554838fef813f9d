"""Permission requests through the installed hook, decided from a client or in the terminal."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import checks
from tests.realcli.observe import Recorder, started_sid
from tests.realcli.rig import Rig, rig
from tests.realcli.terminals import Tmux
from tests.realcli.test_tmux import PROMPT_MARK, wait_ready
from tests.support.netns import run_isolated

pytestmark = pytest.mark.realcli

DEFAULT_MODE = "--permission-mode default"


def edit_turns(work: Path) -> list[dict[str, Any]]:
    notes = str(work / "notes.txt")
    return [
        {
            "content": [
                {"type": "text", "text": "Editing the notes."},
                {
                    "type": "tool_use",
                    "name": "Edit",
                    "input": {"file_path": notes, "old_string": "beta", "new_string": "BETA"},
                },
            ]
        },
        {"content": [{"type": "text", "text": "Edit step finished."}]},
    ]


async def _request(watcher: Recorder) -> dict[str, Any]:
    found: dict[str, Any] = await watcher.until(
        lambda fs: next((f for f in fs if f["type"] == "permission_request"), None),
        30,
        "permission_request",
    )
    return found


async def _accept(watcher: Recorder, request: dict[str, Any]) -> dict[str, Any]:
    await watcher.send(
        {"type": "accept_diff", "requestId": "acc", "requestKey": request["requestKey"]}
    )
    ack: dict[str, Any] = await watcher.reply("acc")
    return ack


async def _resolved(watcher: Recorder, timeout_s: float = 30.0) -> dict[str, Any]:
    found: dict[str, Any] = await watcher.until(
        lambda fs: next((f for f in fs if f["type"] == "permission_resolved"), None),
        timeout_s,
        "permission_resolved",
    )
    return found


async def print_mode(root: Path) -> dict[str, Any]:
    """Inside: ``claude -p`` in default permission mode; its Edit accepted from the client."""
    work = root / "work"
    async with rig(root, edit_turns(work), hook=True) as r:
        (work / "notes.txt").write_text("alpha\nbeta\ngamma\n")
        observer = await r.client("observer", auto_watch=False)
        watcher = await r.client("watcher")
        run = await r.claude_print(*DEFAULT_MODE.split(), "edit the notes")
        request = await _request(watcher)
        ack = await _accept(watcher, request)
        resolved = await _resolved(watcher)
        await run.wait(60)
        sid = started_sid(observer.frames)
        return r.report(
            sid=sid,
            request=request,
            ack=ack,
            resolved=resolved,
            notes_after=(work / "notes.txt").read_text(),
        )


def _assert_accepted(report: dict[str, Any]) -> None:
    request, resolved = report["request"], report["resolved"]
    assert (request["name"], request["sessionId"]) == ("Edit", report["sid"])
    assert report["ack"]["type"] == "decision_ack", report["ack"]
    assert (resolved["requestKey"], resolved["decision"]) == (request["requestKey"], "allow")
    assert report["notes_after"] == "alpha\nBETA\ngamma\n"
    tool = next(
        t for t in checks.tools(report["clients"]["watcher"], report["sid"]) if t["name"] == "Edit"
    )
    assert request.get("toolUseId") == tool["toolUseId"]


def test_print_mode_permission_decided_from_a_client(tmp_path: Path) -> None:
    """claude -p asks through the installed hook; the watching client accepts; the edit is made,
    the turn goes working → waiting → working → idle, every line arrives once."""
    report = run_isolated(f"{__name__}:print_mode", tmp_path)
    assert report["runs"][0]["rc"] == 0
    _assert_accepted(report)
    sid = report["sid"]
    assert checks.states(report["clients"]["observer"], sid) == [
        "working",
        "waiting",
        "working",
        "idle",
    ]
    checks.assert_every_line_once(report, sid)


async def _interactive_edit(r: Rig) -> tuple[Tmux, Recorder, str, dict[str, Any]]:
    (r.workdir / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    observer = await r.client("observer", auto_watch=False)
    watcher = await r.client("watcher")
    term = r.start_interactive(DEFAULT_MODE)
    await wait_ready(term)
    await term.type_keys("edit the notes")
    sid: str = await observer.until(started_sid, 30, "session_started")
    return term, watcher, sid, await _request(watcher)


async def interactive_from_client(root: Path) -> dict[str, Any]:
    """Inside: the interactive CLI asks; the client accepts while the CLI shows its dialog."""
    async with rig(root, edit_turns(root / "work"), hook=True) as r:
        term, watcher, sid, request = await _interactive_edit(r)
        dialog = term.screen()
        ack = await _accept(watcher, request)
        resolved = await _resolved(watcher)
        await watcher.until(lambda fs: "Edit step finished." in checks.texts(fs, sid), 30, "answer")
        # the answer's text is published before the turn ends: the result waits for the idle
        await r.recorders["observer"].until(
            lambda fs: checks.states(fs, sid)[-1:] == ["idle"], 30, "idle after the answer"
        )
        return r.report(
            sid=sid,
            request=request,
            ack=ack,
            resolved=resolved,
            dialog=dialog,
            notes_after=(r.workdir / "notes.txt").read_text(),
        )


def test_interactive_permission_decided_from_a_client(tmp_path: Path) -> None:
    """The interactive CLI asks through the hook (and shows its own dialog meanwhile); the
    client's accept is what decides; the edit is made; the turn is working → waiting →
    working → idle, and once relaybus holds the request it is what the turn waits for."""
    report = run_isolated(f"{__name__}:interactive_from_client", tmp_path)
    _assert_accepted(report)
    observer = report["clients"]["observer"]
    states = checks.states(observer, report["sid"])
    assert checks.collapsed(states) == ["working", "waiting", "working", "idle"], states
    waiting = [
        f.get("waitingFor")
        for f in checks.of_type(observer, "turn_status", report["sid"])
        if f["state"] == "waiting"
    ]
    held = waiting.index("approve Edit")
    assert waiting[held:] == ["approve Edit"], waiting


async def interactive_in_terminal(root: Path) -> dict[str, Any]:
    """Inside: the interactive CLI asks; the person answers its dialog in the terminal."""
    async with rig(root, edit_turns(root / "work"), hook=True) as r:
        term, watcher, sid, request = await _interactive_edit(r)
        dialog = await term.settled(
            lambda s: "Do you want" in s and "Esc to cancel" in s,
            20,
            "the CLI's own dialog, fully drawn",
        )
        await asyncio.sleep(0.5)  # a person reads it; a key at first paint can be lost
        await term.type_keys("", enter=True)
        # under load the CLI takes its answer seconds after the key: the answer is when its
        # dialog goes, not when the key was sent
        await term.screen_until(
            lambda s: "Do you want" not in s, 20, "the dialog to close", interval_s=0.01
        )
        answered_at = time.time()
        await watcher.until(lambda fs: "Edit step finished." in checks.texts(fs, sid), 30, "answer")
        resolved = None
        with contextlib.suppress(AssertionError):  # the test says what was missing
            resolved = await _resolved(watcher, 5.0)
        late = keyless = None
        if resolved is not None:
            await watcher.send(
                {"type": "accept_diff", "requestId": "late", "requestKey": request["requestKey"]}
            )
            late = await watcher.reply("late")
            await watcher.send({"type": "accept_diff", "requestId": "keyless"})  # a seed client
            keyless = await watcher.reply("keyless")
        await term.screen_until(lambda s: PROMPT_MARK in s, 20, "the prompt again")
        await r.recorders["observer"].until(
            lambda fs: checks.states(fs, sid)[-1:] == ["idle"], 30, "idle after the answer"
        )
        return r.report(
            sid=sid,
            request=request,
            resolved=resolved,
            late=late,
            keyless=keyless,
            dialog=dialog,
            answered_at=answered_at,
            notes_after=(r.workdir / "notes.txt").read_text(),
        )


def test_interactive_permission_answered_in_the_terminal(tmp_path: Path) -> None:
    """The person answers the CLI's own dialog: the client's request is resolved within a
    second as answered elsewhere, a late accept_diff (with or without its requestKey) is
    already_resolved, the turn is working → waiting → working → idle, every line arrives once."""
    report = run_isolated(f"{__name__}:interactive_in_terminal", tmp_path)
    assert report["notes_after"] == "alpha\nBETA\ngamma\n"
    resolved = report["resolved"]
    assert resolved is not None, "the held request was never resolved"
    assert resolved["requestKey"] == report["request"]["requestKey"]
    assert resolved["decision"] not in ("allow", "deny"), json.dumps(resolved)
    assert resolved["_at"] - report["answered_at"] < 1.0
    assert (report["late"]["type"], report["late"].get("code")) == ("error", "already_resolved")
    assert (report["keyless"]["type"], report["keyless"].get("code")) == (
        "error",
        "already_resolved",
    )
    states = checks.states(report["clients"]["observer"], report["sid"])
    assert checks.collapsed(states) == ["working", "waiting", "working", "idle"], states
    checks.assert_every_line_once(report, report["sid"])


async def two_parallel_edits(root: Path) -> dict[str, Any]:
    """Inside: one model message with two Edit calls, ``claude -p`` in default mode; the
    client accepts each request as it comes."""
    work = root / "work"
    turns: list[dict[str, Any]] = [
        {
            "content": [
                {"type": "text", "text": "Two edits at once."},
                {
                    "type": "tool_use",
                    "name": "Edit",
                    "input": {
                        "file_path": str(work / "a.txt"),
                        "old_string": "one",
                        "new_string": "ONE",
                    },
                },
                {
                    "type": "tool_use",
                    "name": "Edit",
                    "input": {
                        "file_path": str(work / "b.txt"),
                        "old_string": "two",
                        "new_string": "TWO",
                    },
                },
            ]
        },
        {"content": [{"type": "text", "text": "Both edits done."}]},
    ]
    async with rig(root, turns, hook=True) as r:
        (work / "a.txt").write_text("one\n")
        (work / "b.txt").write_text("two\n")
        await r.client("observer", auto_watch=False)
        watcher = await r.client("watcher")
        run = await r.claude_print(*DEFAULT_MODE.split(), "edit both files")
        accepted: set[str] = set()
        while len(accepted) < 2:
            request = await watcher.until(
                lambda fs: next(
                    (
                        f
                        for f in fs
                        if f["type"] == "permission_request" and f["requestKey"] not in accepted
                    ),
                    None,
                ),
                30,
                f"permission request {len(accepted) + 1}",
            )
            await watcher.send(
                {
                    "type": "accept_diff",
                    "requestId": f"acc{len(accepted)}",
                    "requestKey": request["requestKey"],
                }
            )
            accepted.add(request["requestKey"])
        await run.wait(60)
        sid = started_sid(watcher.frames)
        return r.report(sid=sid, after=[(work / n).read_text() for n in ("a.txt", "b.txt")])


def test_two_parallel_edits_each_matched_to_its_tool_call(tmp_path: Path) -> None:
    """Two Edit calls in one message ask through two hook runs; each request names its own
    tool call (matched despite the hook's normalised input), both are accepted and made."""
    report = run_isolated(f"{__name__}:two_parallel_edits", tmp_path)
    assert report["runs"][0]["rc"] == 0
    assert report["after"] == ["ONE\n", "TWO\n"]
    watcher, sid = report["clients"]["watcher"], report["sid"]
    requests = checks.of_type(watcher, "permission_request", sid)
    assert len(requests) == 2
    tools = {t["input"]["file_path"]: t["toolUseId"] for t in checks.tools(watcher, sid)}
    assert {r["input"]["file_path"]: r.get("toolUseId") for r in requests} == tools
    resolved = checks.of_type(watcher, "permission_resolved", sid)
    assert sorted(f["decision"] for f in resolved) == ["allow", "allow"]
    checks.assert_every_line_once(report, sid)
