"""Prompts from a client, run by the collector's headless driver with the real ``claude -p``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import checks
from tests.realcli.observe import Recorder, started_sid
from tests.realcli.rig import Rig, rig
from tests.support.netns import run_isolated

pytestmark = pytest.mark.realcli

SLOW = " ".join(f"word{i}" for i in range(200))


async def _prompt(rec: Recorder, rid: str, sid: str, message: str) -> dict[str, Any]:
    await rec.send({"type": "prompt", "requestId": rid, "sessionId": sid, "message": message})
    reply: dict[str, Any] = await rec.reply(rid)
    return reply


async def _prompt_as_a_phone(
    rec: Recorder, rid: str, sid: str, message: str, busy: list[float]
) -> dict[str, Any]:
    """Send a prompt; on ``busy`` try again a little later, as a phone would (noted in ``busy``)."""
    for attempt in range(20):
        reply = await _prompt(rec, f"{rid}.{attempt}" if attempt else rid, sid, message)
        if not (reply["type"] == "error" and reply["code"] == "busy"):
            return reply
        busy.append(reply["_at"])
        await asyncio.sleep(0.25)
    return reply


async def _idle_after(rec: Recorder, sid: str, mark: int, what: str) -> None:
    await rec.until(lambda fs: checks.states(fs[mark:], sid)[-1:] == ["idle"], 60, what)


async def _first_session(r: Rig, observer: Recorder) -> str:
    """A conversation the user started in the terminal with ``claude -p``."""
    run = await (await r.claude_print("first question")).wait(60)
    sid: str = await observer.until(started_sid, what="session_started")
    await observer.until(lambda fs: checks.of_type(fs, "session_ended", sid), 10, "first exit")
    assert run.rc == 0
    return sid


async def prompt_and_interrupt(root: Path) -> dict[str, Any]:
    """Inside: a prompt from the client, then a slow one interrupted from the client."""
    turns: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "First answer."}]},
        {
            "content": [
                {"type": "thinking", "thinking": "A phone asks."},
                {"type": "text", "text": "Answer for the phone."},
            ]
        },
        {"content": [{"type": "text", "text": SLOW}], "delay_s": 0.1},
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        phone = await r.client("watcher")
        sid = await _first_session(r, observer)
        marks: dict[str, Any] = {"prompt": len(observer.frames), "busy": []}
        marks["sent1"] = await _prompt_as_a_phone(
            phone, "p1", sid, "question from the phone", marks["busy"]
        )
        await _idle_after(observer, sid, marks["prompt"], "idle after the phone's prompt")
        await observer.until(
            lambda fs: len(checks.of_type(fs, "session_ended", sid)) >= 2,
            10,
            "exit after the phone's prompt",
        )
        marks["slow"] = len(observer.frames)
        marks["sent2"] = await _prompt_as_a_phone(
            phone, "p2", sid, "slow answer please", marks["busy"]
        )
        await observer.until(
            lambda fs: "working" in checks.states(fs[marks["slow"] :], sid),
            30,
            "working on the slow prompt",
        )
        await r.wait_request(3)
        await asyncio.sleep(0.5)  # let a few words stream before the interrupt
        marks["interrupt_at"] = time.time()
        await phone.send({"type": "interrupt_request", "requestId": "i1", "sessionId": sid})
        marks["ack1"] = await phone.reply("i1")
        await _idle_after(observer, sid, marks["slow"], "idle after the interrupt")
        await observer.until(
            lambda fs: len(checks.of_type(fs, "session_ended", sid)) >= 3,
            10,
            "exit after the interrupt",
        )
        marks["ended_at"] = checks.of_type(observer.frames, "session_ended", sid)[-1]["_at"]
        await phone.send({"type": "interrupt_request", "requestId": "i2", "sessionId": sid})
        marks["ack2"] = await phone.reply("i2")
        return r.report(sid=sid, marks=marks)


def test_prompt_and_interrupt_from_a_client(tmp_path: Path) -> None:
    """A client's prompt runs claude -p --resume (one working→idle, its lines once); a slow
    turn is interrupted from the client (ack ok, the answer never completes, idle); a second
    interrupt is refused with interrupt_ack ok:false."""
    report = run_isolated(f"{__name__}:prompt_and_interrupt", tmp_path)
    sid, marks = report["sid"], report["marks"]
    observer, watcher = report["clients"]["observer"], report["clients"]["watcher"]
    assert marks["sent1"]["type"] == "prompt_sent" and marks["sent2"]["type"] == "prompt_sent"
    assert checks.states(observer[marks["prompt"] : marks["slow"]], sid) == ["working", "idle"]
    assert checks.states(observer[marks["slow"] :], sid) == ["working", "idle"]
    assert (marks["ack1"]["type"], marks["ack1"]["ok"]) == ("interrupt_ack", True)
    assert (marks["ack2"]["type"], marks["ack2"]["ok"]) == ("interrupt_ack", False)
    checks.assert_every_line_once(report, sid)
    said = checks.texts(watcher, sid)
    assert "Answer for the phone." in said and SLOW not in said
    assert marks["ended_at"] - marks["interrupt_at"] < 10


async def followup_while_exiting(root: Path) -> dict[str, Any]:
    """Inside: a slow prompt interrupted from the client, the next prompt sent at once."""
    turns: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "First answer."}]},
        {"content": [{"type": "text", "text": SLOW}], "delay_s": 0.1},
        {"content": [{"type": "text", "text": "Answer to the follow-up."}]},
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        phone = await r.client("watcher")
        sid = await _first_session(r, observer)
        await _prompt_as_a_phone(phone, "p1", sid, "slow answer please", [])
        await r.wait_request(2)
        await phone.send({"type": "interrupt_request", "requestId": "i", "sessionId": sid})
        ack = await phone.reply("i")
        followup = await _prompt(phone, "p2", sid, "follow-up right away")
        with contextlib.suppress(AssertionError):  # the test reports what was missing
            await phone.until(lambda fs: "Answer to the follow-up." in checks.texts(fs, sid), 15)
        return r.report(sid=sid, ack=ack, followup=followup)


def test_followup_prompt_while_the_run_exits_is_queued(tmp_path: Path) -> None:
    """A prompt sent right after an interrupt_ack is queued and run next, not refused busy."""
    report = run_isolated(f"{__name__}:followup_while_exiting", tmp_path)
    assert report["ack"]["ok"] is True
    assert report["followup"]["type"] == "prompt_sent", report["followup"]
    assert "Answer to the follow-up." in checks.texts(report["clients"]["watcher"], report["sid"])


async def new_conversation(root: Path) -> dict[str, Any]:
    """Inside: new_conversation, its first prompt, the exit."""
    turns: list[dict[str, Any]] = [
        {"content": [{"type": "text", "text": "Hello, new conversation here."}]}
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        phone = await r.client("watcher")
        await phone.send({"type": "new_conversation", "requestId": "n", "cwd": str(r.workdir)})
        ack = await phone.reply("n")
        sid = ack["sessionId"]
        sent = await _prompt(phone, "p", sid, "hello new conversation")
        await _idle_after(observer, sid, 0, "idle after the first prompt")
        ended = await observer.until(
            lambda fs: checks.of_type(fs, "session_ended", sid), 10, "exit"
        )
        await r.listing_after(observer, sid, ended[0]["_at"])
        return r.report(sid=sid, ack=ack, sent=sent)


def test_new_conversation_then_first_prompt(tmp_path: Path) -> None:
    """new_conversation reserves an id; its first prompt starts the real CLI with it: the
    session starts, its lines arrive once, one working→idle, not live after the exit."""
    report = run_isolated(f"{__name__}:new_conversation", tmp_path)
    sid = report["sid"]
    assert report["ack"]["ok"] is True and report["sent"]["type"] == "prompt_sent"
    observer = report["clients"]["observer"]
    assert checks.of_type(observer, "session_started", sid)
    assert checks.states(observer, sid) == ["working", "idle"]
    checks.assert_every_line_once(report, sid)
    assert "Hello, new conversation here." in checks.texts(report["clients"]["watcher"], sid)
    listing = report["notes"]["listings"][0]
    assert next(s for s in listing["sessions"] if s["id"] == sid)["live"] is False


async def failing_prompt(root: Path) -> dict[str, Any]:
    """Inside: a client's prompt whose run fails (the API refuses it: ``claude -p`` exits 1)."""
    # keyed by prompt: the refusal answers "this one fails" however many requests came before
    turns: list[dict[str, Any]] = [
        {"prompt": "first question", "content": [{"type": "text", "text": "First answer."}]},
        # a 403 is not retried (a 400 is, once): the run exits 1
        {
            "prompt": "this one fails",
            "error": {"status": 403, "type": "permission_error", "message": "fake refusal"},
        },
    ]
    async with rig(root, turns) as r:
        observer = await r.client("observer", auto_watch=False)
        phone = await r.client("watcher")
        sid = await _first_session(r, observer)
        sent = await _prompt(phone, "p", sid, "this one fails")
        failure = None
        with contextlib.suppress(AssertionError):  # reported as "silence" by the test
            failure = await phone.until(
                lambda fs: next(
                    (f for f in fs if f["type"] == "error" and f.get("requestId") == "p"), None
                ),
                10,
                "the failure",
            )
        return r.report(sid=sid, sent=sent, failure=failure)


def test_failing_prompt_is_answered(tmp_path: Path) -> None:
    """A prompt whose claude -p run exits 1 reaches the client as an error naming the reason."""
    report = run_isolated(f"{__name__}:failing_prompt", tmp_path)
    assert report["sent"]["type"] in ("prompt_sent", "error")
    failure = report["failure"] if report["sent"]["type"] == "prompt_sent" else report["sent"]
    assert failure is not None, "prompt_sent, then silence"
    assert any(word in failure["message"] for word in ("fake refusal", "403", "exit")), failure
