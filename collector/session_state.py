"""What the collector knows of one session, and the events that change it.

Pure: nothing here touches Redis or files. :class:`SessionState` mirrors the session hash;
the functions build the log events (``turn_status``, ``session_event``,
``session_updated``, ``session_ended``) and hash updates that go with a change of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relaybus.collector.turns import TurnChange, TurnTracker
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.store.session_row import Field, SessionRow, turn_update
from relaybus.shared.wire import frames

#: Rank of "the first real user prompt": only the first one counts. Candidates of this
#: rank or below (a ``/command args`` line is 0) are the session's ``firstPrompt``, never
#: its title: titles are only what Claude Code writes as such (custom-title, agent-name,
#: ai-title, or a summary of this session's own conversation).
FIRST_PROMPT_RANK = 1


@dataclass(slots=True)
class SessionState:
    """What the collector knows of one session; ``live`` = started and not ended."""

    sid: str
    cwd: str = ""
    entrypoint: str = ""
    title: str | None = None
    title_rank: int = 0
    first_prompt: str | None = None
    first_prompt_rank: int = -1
    started_at: int = 0
    live: bool = False
    pid: int | None = None
    #: Why it last ended (``exit``: its process is gone, so only a new prompt restarts it).
    end_reason: str = ""
    turn: TurnTracker = field(default_factory=TurnTracker)
    pending_summaries: dict[str, str] = field(default_factory=dict)
    warmup_agents: set[str] = field(default_factory=set)
    #: sub-agent id -> the Task call running it, from the main transcript's progress lines
    agent_parents: dict[str, str] = field(default_factory=dict)
    #: It published an event a person reads (not only /goal status lines): it is listed.
    has_content: bool = False
    #: Claude Code's permission mode, from the transcript or a mode switch relaybus made.
    permission_mode: str | None = None

    @classmethod
    def from_row(cls, sid: str, row: SessionRow) -> SessionState:
        turn = TurnTracker(
            state=row.state,
            since=row.since,
            waiting_for=row.waiting_for,
            last_activity_ms=row.last_activity,
        )
        title, title_rank = row.title, row.title_rank or 0
        first, first_rank = (
            row.first_prompt,
            (row.first_prompt_rank or 0) if row.first_prompt else -1,
        )
        if title is not None and title_rank <= FIRST_PROMPT_RANK:  # written before titles were real
            if first is None:
                first, first_rank = title, title_rank
            title, title_rank = None, 0
        return cls(
            sid=sid,
            cwd=row.cwd,
            entrypoint=row.entrypoint,
            title=title,
            title_rank=title_rank,
            first_prompt=first,
            first_prompt_rank=first_rank,
            started_at=row.started_at,
            live=row.live,
            pid=row.pid,
            end_reason=row.end_reason,
            turn=turn,
            # hashes from before the field: any published event counted
            has_content=row.has_content if row.has_content is not None else row.session_seq > 0,
            permission_mode=row.permission_mode,
        )

    def clone(self) -> SessionState:
        """A copy whose changes never reach this state (every batch plans on one). Field by
        field: ``copy.deepcopy`` cost 20-40x more (50+ µs), most of a one-line batch's planning."""
        return SessionState(
            self.sid,
            self.cwd,
            self.entrypoint,
            self.title,
            self.title_rank,
            self.first_prompt,
            self.first_prompt_rank,
            self.started_at,
            self.live,
            self.pid,
            self.end_reason,
            self.turn.copy(),
            dict(self.pending_summaries),
            set(self.warmup_agents),
            dict(self.agent_parents),
            self.has_content,
            self.permission_mode,
        )


def turn_changed(sid: str, change: TurnChange) -> tuple[OutEvent, dict[str, str]]:
    """:func:`relaybus.shared.store.session_row.turn_update` of a tracker's change."""
    return turn_update(sid, change.state, change.since, change.waiting_for)


def line_event(sid: str, event: dict[str, Any], trace_id: str | None = None) -> OutEvent:
    prefix = frames.session_event(sid, event, trace_id=trace_id)
    return OutEvent(frames.SESSION_EVENT, prefix, session_stream=True, session_seq=True)


def updated_event(st: SessionState, *, host: str, activity_ms: int | None) -> OutEvent:
    """``session_updated`` with the session's current SessionInfo."""
    info: dict[str, Any] = {
        "id": st.sid,
        "cwd": st.cwd,
        "startedAt": st.started_at,
        "entrypoint": st.entrypoint,
    }
    if st.title:
        info["title"] = st.title
    if st.first_prompt:
        info["firstPrompt"] = st.first_prompt
    if st.permission_mode:
        info["permissionMode"] = st.permission_mode
    info.update(host=host, state=st.turn.state or "idle", live=st.live)
    if activity_ms is not None:
        info["lastActivity"] = activity_ms
    return OutEvent(frames.SESSION_UPDATED, frames.session_updated(st.sid, info))


def end_events(
    state: SessionState, *, reason: str, now_ms: int
) -> tuple[list[OutEvent], dict[str, str]]:
    """``session_ended`` (after a final ``idle`` if a turn was open); mutates ``state``."""
    events: list[OutEvent] = []
    h: dict[str, str] = {Field.LIVE: "0", Field.ENDED: "1", Field.END_REASON: reason}
    change = state.turn.on_end(now_ms)
    if change is not None:
        turn, fields = turn_changed(state.sid, change)
        events.append(turn)
        h.update(fields)
    events.append(OutEvent(frames.SESSION_ENDED, frames.session_ended(state.sid, reason=reason)))
    state.live = False
    state.pid = None
    state.end_reason = reason
    return events, h
