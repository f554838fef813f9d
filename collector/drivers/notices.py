"""What commands tell the rest of the collector: turn notices.

Drivers run on the command task, but only the engine's task may write session state. So a
prompt's start and a headless run's end go into the engine's inbox
(``relaybus.collector.inbox``) as :class:`TurnNotice` changes, applied on the engine task.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from relaybus.collector.inbox import Inbox, SessionWriter
from relaybus.collector.session_state import SessionUpdate, line_event
from relaybus.collector.traces import TraceMap
from relaybus.shared.aio import now_ms

log = logging.getLogger(__name__)


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
class TurnNotice:
    """A turn change a command caused, for the engine's inbox."""

    sid: str
    kind: str  # "prompt", "run" (a prompt carried by relaybus's headless run), "end", "failed"
    at_ms: int
    code: str = ""
    message: str = ""

    async def apply(self, writer: SessionWriter) -> None:
        """On the engine task: publish the turn change."""
        if self.kind in ("end", "failed"):
            await writer.drain_session(self.sid)  # the run's last lines come before its end
        state = (await writer.session(self.sid)).clone()
        if not state.cwd:  # nothing published for it yet: its first lines will tell
            return
        update = SessionUpdate(self.sid)
        change = None
        if self.kind in ("prompt", "run"):
            # transcript lines since the prompt already tell the turn (maybe its end)
            if state.turn.last_activity_ms < self.at_ms:
                change = state.turn.on_prompt(self.at_ms)
            if self.kind == "run":
                change = state.turn.on_run(True, self.at_ms) or change
        else:
            if self.kind == "failed":
                update.events.append(line_event(self.sid, failure_event(self.code, self.message)))
            change = state.turn.on_run(False, self.at_ms)
        update.turn(change)
        if update.events:
            await writer.commit(state, update.events, update.hash)
            log.debug("session %s: turn %s after a command", self.sid, state.turn.state)
        else:
            writer.keep(state)


class TurnNotices:
    """A ``TurnHooks`` that puts turn changes into the engine's inbox."""

    def __init__(self, traces: TraceMap, inbox: Inbox) -> None:
        self.traces = traces
        self._inbox = inbox

    async def prompt_started(
        self, session_id: str, trace_id: str | None, at_ms: int, *, run: bool = False
    ) -> None:
        self.traces.remember(session_id, trace_id)
        self._inbox.put(TurnNotice(session_id, "run" if run else "prompt", at_ms))

    async def prompt_ended(self, session_id: str) -> None:
        self._inbox.put(TurnNotice(session_id, "end", now_ms()))

    async def prompt_failed(self, session_id: str, code: str, message: str) -> None:
        self._inbox.put(TurnNotice(session_id, "failed", now_ms(), code, message))
