"""What commands tell the rest of the collector: turn notices and the traceId window.

Drivers run on the command task, but only the engine's task may write session state
(``relaybus.collector.publisher``). So a prompt's start and a headless run's end are queued here,
the engine is woken, and the engine task applies them with :meth:`TurnNotices.apply`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import orjson

from relaybus.collector.sessions import line_event, turn_event, turn_hash
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.wire import frames

if TYPE_CHECKING:
    from relaybus.collector.engine import Engine

log = logging.getLogger(__name__)

#: The seed's traceId inheritance window.
TRACE_TTL_S = 10.0
MAX_NOTICES = 10_000


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


def failure_event(code: str, message: str) -> dict[str, Any]:
    """The ``session_event`` telling watchers that relaybus's run of a prompt failed.

    Shaped like a published ``system`` line (text block, ``subtype``), so every client
    shows it; ``errorCode`` names the reason for clients that look.
    """
    text = f"relaybus: the prompt failed ({code}): {message}"
    return {
        "type": "system",
        "subtype": "relaybus_error",
        "errorCode": code,
        "blocks": [{"kind": "text", "text": text}],
        "data": {"type": "system", "subtype": "relaybus_error", "content": text},
    }


@dataclass(frozen=True, slots=True)
class _Notice:
    sid: str
    kind: str  # "prompt", "run" (a prompt carried by relaybus's headless run), "end", "failed"
    at_ms: int
    code: str = ""
    message: str = ""


class TurnNotices:
    """A ``TurnHooks`` that queues turn changes for the engine task and wakes it."""

    def __init__(self, traces: TraceMap, wake: Callable[[], None]) -> None:
        self.traces = traces
        self._wake = wake
        self._pending: deque[_Notice] = deque(maxlen=MAX_NOTICES)

    async def prompt_started(
        self, session_id: str, trace_id: str | None, at_ms: int, *, run: bool = False
    ) -> None:
        self.traces.remember(session_id, trace_id)
        self._pending.append(_Notice(session_id, "run" if run else "prompt", at_ms))
        self._wake()

    async def prompt_ended(self, session_id: str) -> None:
        self._pending.append(_Notice(session_id, "end", int(time.time() * 1000)))
        self._wake()

    async def prompt_failed(self, session_id: str, code: str, message: str) -> None:
        self._pending.append(_Notice(session_id, "failed", int(time.time() * 1000), code, message))
        self._wake()

    async def apply(self, engine: Engine) -> None:
        """On the engine task: publish the turn changes (a notice is dropped once applied)."""
        while self._pending:
            n = self._pending[0]
            if n.kind in ("end", "failed"):
                await engine.drain_session(n.sid)  # the run's last lines come before its end
            state = (await engine.pub.session(n.sid)).clone()
            if not state.cwd:  # nothing published for it yet: its first lines will tell
                self._pending.popleft()
                continue
            events: list[OutEvent] = []
            change = None
            if n.kind in ("prompt", "run"):
                # transcript lines since the prompt already tell the turn (maybe its end)
                if state.turn.last_activity_ms < n.at_ms:
                    change = state.turn.on_prompt(n.at_ms)
                if n.kind == "run":
                    change = state.turn.on_run(True, n.at_ms) or change
            else:
                if n.kind == "failed":
                    events.append(line_event(n.sid, failure_event(n.code, n.message)))
                change = state.turn.on_run(False, n.at_ms)
            if change is not None:
                events.append(turn_event(n.sid, change))
            h = turn_hash(change) if change is not None else {}
            if events:
                await engine.pub.commit_session(state, events, h)
                log.debug("session %s: turn %s after a command", n.sid, state.turn.state)
            else:
                engine.pub.sessions[n.sid] = state
            self._pending.popleft()
