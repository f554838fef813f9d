"""The session's permission mode: projected from what Claude Code writes, kept in the session
state and hash, announced in ``session_started``/``session_updated`` and listed."""

from __future__ import annotations

from pathlib import Path

import orjson

from relaybus.collector.session_state import SessionState
from relaybus.gateway.frames import session_info
from relaybus.shared.store.session_row import SessionRow
from relaybus.shared.transcript import projection
from tests.collector.test_sessions import kinds, plan_of
from tests.support.collector_records import line, record, user_line

REAL = Path(__file__).resolve().parents[1] / "data" / "claude-cli-2.1.332"


def test_real_cli_lines_state_the_mode() -> None:
    """The 2.1.332 transcript's ``permission-mode`` and prompt lines project their mode;
    other lines none."""
    raw = (REAL / "interactive-tmux" / "5c1de74c-e5ce-48cf-94e6-491b2115c20b.jsonl").read_bytes()
    modes = [projection.project_line(ln).permission_mode for ln in raw.splitlines()]
    stated = [m for m in modes if m is not None]
    assert stated and set(stated) == {"acceptEdits"}
    assert len(stated) < len(modes) / 2


def test_mode_lines_are_found_by_the_backfill_scan() -> None:
    """A ``permission-mode`` line is stateful for the backfill's head scan (else a collapsed
    read would lose the mode)."""
    raw = line(record("s1", "permission-mode", permissionMode="plan")).rstrip(b"\n")
    assert projection.may_be_stateful(raw)
    assert projection.hint_line(raw).stateful


def test_hostile_or_sidechain_modes_are_ignored() -> None:
    """A mode that is not a short ASCII word, or a sub-agent's, is never taken."""
    for bad in ("x" * 33, "plan; rm", "", 7, "mödé"):
        p = projection.project_line(line(record("s1", "permission-mode", permissionMode=bad)))
        assert p.permission_mode is None, bad
    side = record("s1", "user", message={"role": "user", "content": "hi"}, permissionMode="plan")
    side["isSidechain"] = True
    assert projection.project_line(line(side)).permission_mode is None


def test_mode_change_on_a_live_session_is_announced_and_stored() -> None:
    """A prompt in a new mode on a live session: ``session_updated`` carries it, the hash
    stores it; a repeat of the same mode announces nothing."""
    live = SessionState("s1", cwd="/home/dev/project", entrypoint="cli", live=True)
    live.permission_mode = "default"
    plan = plan_of([user_line("s1", "go", permissionMode="plan")], live)
    updated = [orjson.loads(e.prefix + b"}") for e in plan.events if e.kind == "session_updated"]
    assert [u["session"]["permissionMode"] for u in updated] == ["plan"]
    assert plan.hash["permissionMode"] == "plan"
    again = plan_of([user_line("s1", "more", permissionMode="plan")], plan.state)
    assert "session_updated" not in kinds(again.events)
    assert "permissionMode" not in again.hash


def test_session_started_and_listing_carry_the_mode() -> None:
    """A new session's ``session_started`` has the mode of its first lines; the hash read
    back lists it in SessionInfo (absent when unknown)."""
    plan = plan_of(
        [
            line(record("s1", "permission-mode", permissionMode="acceptEdits")),
            user_line("s1", "go", permissionMode="acceptEdits"),
        ]
    )
    started = orjson.loads(plan.events[0].prefix + b"}")
    assert started["type"] == "session_started"
    assert started["permissionMode"] == "acceptEdits"
    row = SessionRow.parse({k.encode(): v.encode() for k, v in plan.hash.items()})
    assert session_info("s1", row)["permissionMode"] == "acceptEdits"
    assert "permissionMode" not in session_info("s1", SessionRow())
    assert SessionState.from_row("s1", row).permission_mode == "acceptEdits"
