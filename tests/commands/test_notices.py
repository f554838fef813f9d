"""The seed's 10-second traceId inheritance window."""

from __future__ import annotations

import orjson

from relaybus.collector.traces import TraceMap
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.wire import frames


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_trace_is_inherited_for_ten_seconds_only() -> None:
    """A prompt's traceId labels the session for 10 s, then is forgotten."""
    clock = Clock()
    traces = TraceMap(clock=clock)
    traces.remember("s1", "t-1")
    clock.now += 9.9
    assert traces.get("s1") == "t-1" and traces.get("s2") is None
    clock.now += 0.2
    assert traces.get("s1") is None


def test_prompt_without_trace_leaves_no_label() -> None:
    """No traceId, nothing inherited."""
    traces = TraceMap()
    traces.remember("s1", None)
    assert traces.get("s1") is None


def test_label_adds_trace_to_session_events_only() -> None:
    """session_event frames gain traceId (still valid JSON once closed); turn_status is untouched."""
    traces = TraceMap()
    traces.remember("s1", 't-"q"')
    event = OutEvent(
        frames.SESSION_EVENT, frames.session_event("s1", {"type": "user", "blocks": []})
    )
    turn = OutEvent(frames.TURN_STATUS, frames.turn_status("s1", state="working", since=1))
    labelled = traces.label("s1", [event, turn])
    closed = orjson.loads(labelled[0].prefix + b',"seqId":1}')
    assert closed["traceId"] == 't-"q"' and closed["event"]["type"] == "user"
    assert labelled[1] == turn
    assert traces.label("other", [event]) == [event]
