"""SessionState.clone (and TurnTracker.copy): every field copied, nothing shared that a plan
could change (a refused append must leave the engine's state as it was)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from relaybus.collector.session_state import SessionState
from relaybus.collector.turns import TurnTracker


def _set_all(obj: Any) -> None:
    """Give every field a value unlike its default (a field a copy forgot would differ)."""
    for i, f in enumerate(fields(obj)):
        value = getattr(obj, f.name)
        if isinstance(value, bool):
            setattr(obj, f.name, not value)
        elif isinstance(value, int):
            setattr(obj, f.name, 1000 + i)
        elif isinstance(value, dict):
            setattr(obj, f.name, {f"k{i}": f"v{i}"})
        elif isinstance(value, set):
            setattr(obj, f.name, {f"m{i}"})
        elif isinstance(value, TurnTracker):
            _set_all(value)
        else:
            setattr(obj, f.name, f"s{i}")


def test_turn_tracker_copy_keeps_every_field() -> None:
    turn = TurnTracker()
    _set_all(turn)
    twin = turn.copy()
    assert twin == turn and twin is not turn
    assert all(getattr(twin, f.name) != getattr(TurnTracker(), f.name) for f in fields(turn))


def test_clone_keeps_every_field_and_shares_no_mutable_part() -> None:
    state = SessionState("sid")
    _set_all(state)
    twin = state.clone()
    assert twin == state
    for f in fields(state):
        value = getattr(twin, f.name)
        if not isinstance(value, str | int | bool | type(None)):
            assert value is not getattr(state, f.name), f.name
    twin.turn.on_line("working", 5_000_000, activity=True)
    twin.pending_summaries["leaf"] = "t"
    twin.warmup_agents.add("w")
    twin.agent_parents["a"] = "p"
    assert twin != state
    fresh = SessionState("sid")
    _set_all(fresh)
    assert state == fresh
