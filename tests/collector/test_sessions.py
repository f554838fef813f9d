"""Batch planning: session_started, events, title ranks, turns, sidechains, backfill collapse."""

from __future__ import annotations

import time
from typing import Any

import orjson

from relaybus.collector.batch_plan import BatchPlan
from relaybus.collector.session_state import SessionState, SessionUpdate
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.transcript import projection
from tests.support.collector_records import (
    assistant_line,
    assistant_message,
    line,
    progress_line,
    record,
    user_line,
)

NOW = int(time.time() * 1000)
HOUR = 3_600_000


def plan_of(lines: list[bytes], state: SessionState | None = None, **kw: Any) -> BatchPlan:
    plan = BatchPlan(
        state or SessionState("s1"),
        host="h1",
        now_ms=NOW,
        idle_ms=HOUR,
        **kw,
    )
    projected = [projection.project_line(ln) for ln in lines]
    plan.prime(projected)
    for p in projected:
        plan.line(p)
    plan.finish()
    return plan


def kinds(events: list[OutEvent]) -> list[str]:
    out = []
    for ev in events:
        frame = orjson.loads(ev.prefix + b"}")
        out.append(frame["event"]["type"] if frame["type"] == "session_event" else frame["type"])
    return out


def test_first_batch_starts_the_session_then_events_title_and_turns() -> None:
    """A new session: session_started (with its first prompt), the user event, working, reply,
    idle; no title is invented from the prompt."""
    plan = plan_of([user_line("s1", "fix the bug"), assistant_line("s1", "done")])
    assert kinds(plan.events) == [
        "session_started",
        "user",
        "turn_status",
        "assistant",
        "turn_status",
    ]
    started = orjson.loads(plan.events[0].prefix + b"}")
    assert started["cwd"] == "/home/dev/project" and started["host"] == "h1"
    assert started["firstPrompt"] == "fix the bug" and started["title"] is None
    assert plan.hash["firstPrompt"] == "fix the bug" and "title" not in plan.hash
    assert plan.hash["state"] == "idle" and plan.hash["live"] == "1"
    assert plan.state.live and not plan.orig.live  # the original is untouched until commit
    assert plan.published == 2


def test_bookkeeping_lines_are_activity_but_not_events() -> None:
    """A progress line publishes nothing and starts no session, but counts as activity."""
    plan = plan_of([progress_line("s1")])
    assert kinds(plan.events) == []
    assert not plan.state.live
    assert plan.published == 0
    assert int(plan.hash["lastActivity"]) > NOW - 60_000


def test_only_the_first_prompt_titles_and_higher_ranks_win() -> None:
    """The first prompt is kept over later ones (as firstPrompt, never the title); an ai-title
    (3) is the title, published once as the line it is; a custom-title (5) beats it."""
    plan = plan_of([user_line("s1", "first"), user_line("s1", "second")])
    assert (plan.state.first_prompt, plan.state.title) == ("first", None)
    ai = orjson.dumps({"type": "ai-title", "aiTitle": "Fixing", "sessionId": "s1"}) + b"\n"
    plan2 = plan_of([ai, user_line("s1", "third")], state=plan.state)
    assert (plan2.state.title, plan2.state.title_rank) == ("Fixing", 3)
    assert plan2.state.first_prompt == "first"
    assert kinds(plan2.events).count("ai-title") == 1
    custom = orjson.dumps({"type": "custom-title", "customTitle": "Mine", "sessionId": "s1"})
    plan3 = plan_of([custom + b"\n", ai], state=plan2.state)
    assert (plan3.state.title, plan3.state.title_rank) == ("Mine", 5)
    assert kinds(plan3.events) == ["custom-title", "ai-title", "session_updated"]


def test_old_lines_publish_without_starting_the_session() -> None:
    """Lines older than the idle window are history: no session_started."""
    old = "2020-01-01T00:00:00.000Z"
    plan = plan_of([user_line("s1", "old prompt", timestamp=old)])
    assert "session_started" not in kinds(plan.events)
    assert kinds(plan.events)[0] == "user"


def test_sidechain_lines_are_marked_and_do_not_drive_turn_or_title() -> None:
    """A sub-agent's lines carry sidechain + agentId and leave the parent's turn and title alone."""
    plan = plan_of([user_line("s1", "agent task")], agent_id="a77")
    frames = [orjson.loads(e.prefix + b"}") for e in plan.events]
    ev = next(f for f in frames if f["type"] == "session_event")
    assert ev["event"]["sidechain"] is True and ev["event"]["agentId"] == "a77"
    assert plan.state.title is None and plan.state.turn.state is None
    assert "turn_status" not in kinds(plan.events)


def test_collapse_keeps_the_last_events_and_final_state() -> None:
    """Backfill: started first, the last N events, then the final turn once."""
    lines = []
    for i in range(10):
        lines += [user_line("s1", f"q{i}"), assistant_line("s1", f"a{i}")]
    plan = plan_of(lines, collapse=True, keep_events=4)
    assert kinds(plan.events) == [
        "session_started",
        "user",
        "assistant",
        "user",
        "assistant",
        "turn_status",
    ]
    texts = [orjson.loads(e.prefix + b"}")["event"]["blocks"][0]["text"] for e in plan.events[1:5]]
    assert texts == ["q8", "a8", "q9", "a9"]
    assert plan.published == 4


def _ended_by_exit() -> SessionState:
    plan = plan_of([user_line("s1", "go"), assistant_line("s1", "done")])
    state = plan.state
    SessionUpdate(state.sid).end(state, reason="exit", now_ms=NOW)
    return state


def test_lines_after_the_process_exited_do_not_restart_the_session() -> None:
    """After an exit end, bookkeeping and a partial answer start nothing; a new prompt does."""
    state = _ended_by_exit()
    trailing = [
        orjson.dumps({"type": "last-prompt", "sessionId": "s1"}) + b"\n",
        orjson.dumps({"type": "cost-state", "sessionId": "s1"}) + b"\n",
        assistant_line("s1", "partial answer", stop=None),
        user_line("s1", "[Request interrupted by user]"),
    ]
    plan = plan_of(trailing, state=state)
    assert "session_started" not in kinds(plan.events) and not plan.state.live
    assert kinds(plan.events).count("assistant") == 1  # still published, once
    again = plan_of([user_line("s1", "next question")], state=plan.state)
    assert kinds(again.events)[0] == "session_started" and again.state.live


def test_backfill_after_an_exit_does_not_restart_on_trailing_lines() -> None:
    """Collapsed backfill of lines after an exit end announces no session_started."""
    state = _ended_by_exit()
    plan = plan_of(
        [assistant_line("s1", "late", stop=None)], state=state, collapse=True, keep_events=10
    )
    assert "session_started" not in kinds(plan.events)


def test_a_thinking_line_with_end_turn_does_not_end_the_turn() -> None:
    """Every line of a message carries its final stop_reason: idle comes with the text line."""
    message_id = "msg_same"
    thinking = record(
        "s1",
        "assistant",
        message=assistant_message(
            [{"type": "thinking", "thinking": "hmm", "signature": "x"}], "end_turn"
        ),
    )
    thinking["message"]["id"] = message_id
    text = record(
        "s1",
        "assistant",
        message=assistant_message([{"type": "text", "text": "answer"}], "end_turn"),
    )
    text["message"]["id"] = message_id
    plan = plan_of([user_line("s1", "think"), line(thinking)])
    assert plan.state.turn.state == "working"
    plan2 = plan_of([line(text)], state=plan.state)
    turns = [
        orjson.loads(e.prefix + b"}")["state"] for e in plan2.events if e.kind == "turn_status"
    ]
    assert turns == ["idle"]


def test_an_assistant_line_after_the_backstop_brings_working_back() -> None:
    """The backstop idles a silent turn; the next main-session assistant line revives it."""
    plan = plan_of([user_line("s1", "long job")])
    state = plan.state
    assert state.turn.on_tick(NOW + 200_000, 120_000) is not None
    assert state.turn.state == "idle"
    later = plan_of([assistant_line("s1", "still going", stop="tool_use")], state=state)
    assert later.state.turn.state == "working"
