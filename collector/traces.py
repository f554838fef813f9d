"""The traceId window: a prompt's traceId labels its session's events for a while."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import orjson

from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.wire import frames

#: The seed's traceId inheritance window.
TRACE_TTL_S = 10.0


class TraceMap:
    """A prompt's traceId labels its session's events for ``ttl_s`` afterwards."""

    def __init__(
        self, ttl_s: float = TRACE_TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
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
