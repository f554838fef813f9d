"""SessionUpdate: the one place a turn change or an end becomes log events and hash fields."""

from __future__ import annotations

from relaybus.collector.session_state import SessionState, SessionUpdate
from relaybus.collector.turns import IDLE, WORKING, TurnChange
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire import frames


def test_a_turn_change_is_one_turn_status_and_its_fields() -> None:
    """A change adds its ``turn_status`` and the state fields; ``None`` adds nothing."""
    update = SessionUpdate("s1")
    update.turn(None)
    assert update.events == [] and update.hash == {}
    update.turn(TurnChange(WORKING, 1_000))
    assert [e.kind for e in update.events] == [frames.TURN_STATUS]
    assert update.hash[Field.STATE] == WORKING and update.hash[Field.SINCE] == "1000"


def test_an_end_closes_the_open_turn_first_and_writes_into_the_callers_list() -> None:
    """``end`` after an open turn: ``turn_status`` idle, then ``session_ended``, the end fields
    and the state changed; a caller's own list and dict are the ones added to."""
    state = SessionState("s1", live=True, pid=42)
    state.turn.on_prompt(1_000)
    events: list[OutEvent] = []
    h: dict[str, str] = {}
    SessionUpdate("s1", events, h).end(state, reason="exit", now_ms=2_000)
    assert [e.kind for e in events] == [frames.TURN_STATUS, frames.SESSION_ENDED]
    assert h[Field.STATE] == IDLE and h[Field.LIVE] == "0" and h[Field.END_REASON] == "exit"
    assert not state.live and state.pid is None and state.end_reason == "exit"
