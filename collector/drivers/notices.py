"""What commands tell the rest of the collector: turn notices and the traceId window.

Drivers run on the command task, but only the engine's task may write session state
(``collector.publisher``). So a prompt's start and a headless run's end are queued here,
the engine is woken, and the engine task applies them with :meth:`TurnNotices.apply`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import orjson

from collector.sessions import turn_event, turn_hash
from shared import frames
from shared.appendlog import OutEvent

if TYPE_CHECKING:
    from collector.engine import Engine

log = logging.getLogger(__name__)

#: The seed's traceId inheritance window.
TRACE_TTL_S = 10.0
MAX_NOTICES = 10_000


class TraceMap:
    """A prompt's traceId labels its session's events for ``ttl_s`` afterwards."""

    def __init__(self, ttl_s: float = TRACE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[str, tuple[str, float]] = {}

    def remember(self, session_id: str, trace_id: str | None) -> None:
        now = self._clock()
        self._entries = {s: e for s, e in self._entries.items() if e[1] > now}
        if trace_id:
            self._entries[session_id] = (trace_id, now + self._ttl_s)

    def get(self, session_id: str) -> str | None:
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            del self._entries[session_id]
            return None
        return entry[0]

    def label(self, session_id: str, events: list[OutEvent]) -> list[OutEvent]:
        """``events`` with the session's current traceId added to its ``session_event`` frames."""
        trace = self.get(session_id)
        if trace is None:
            return events
        suffix = b',"traceId":' + orjson.dumps(trace)
        return [
            replace(ev, prefix=ev.prefix + suffix) if ev.kind == frames.SESSION_EVENT else ev
            for ev in events
        ]


class TurnNotices:
    """A ``TurnHooks`` that queues turn changes for the engine task and wakes it."""

    def __init__(self, traces: TraceMap, wake: Callable[[], None]) -> None:
        self.traces = traces
        self._wake = wake
        self._pending: deque[tuple[str, bool, int]] = deque(maxlen=MAX_NOTICES)

    async def prompt_started(self, session_id: str, trace_id: str | None, at_ms: int) -> None:
        self.traces.remember(session_id, trace_id)
        self._pending.append((session_id, True, at_ms))
        self._wake()

    async def prompt_ended(self, session_id: str) -> None:
        self._pending.append((session_id, False, int(time.time() * 1000)))
        self._wake()

    async def apply(self, engine: Engine) -> None:
        """On the engine task: publish the turn changes (a notice is dropped once applied)."""
        while self._pending:
            sid, started, at_ms = self._pending[0]
            state = (await engine.pub.session(sid)).clone()
            if not state.cwd:  # nothing published for it yet: its first lines will tell
                self._pending.popleft()
                continue
            if started:
                # transcript lines since the prompt already tell the turn (maybe its end)
                fresh = state.turn.last_activity_ms < at_ms
                change = state.turn.on_prompt(at_ms) if fresh else None
            else:
                change = None if state.turn.live_status else state.turn.on_end(at_ms)
            if change is not None:
                await engine.pub.commit_session(state, [turn_event(sid, change)], turn_hash(change))
                log.debug("session %s: turn %s after a command", sid, change.state)
            self._pending.popleft()
