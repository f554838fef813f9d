"""What the collector knows of one session, and the events that change it.

Pure: nothing here touches Redis or files. :class:`SessionState` mirrors the session hash;
:class:`SessionUpdate` is the one place a turn change or an end becomes log events
(``turn_status``, ``session_ended``) and the hash fields that go with them; the functions
build ``session_event`` and ``session_updated``.
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
        """A copy whose changes never reach this state (every batch plans on one), field by
        field (``copy.deepcopy`` is many times slower)."""
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


@dataclass(slots=True)
class SessionUpdate:
    """The log events and hash fields one change of a session writes.

    ``events`` and ``hash`` may be a caller's own list and dict: the methods add to them.
    """

    sid: str
    events: list[OutEvent] = field(default_factory=list)
    hash: dict[str, str] = field(default_factory=dict)

    def turn(self, change: TurnChange | None) -> None:
        """A tracker's change (if any): its ``turn_status`` event and hash fields
        (:func:`relaybus.shared.store.session_row.turn_update`)."""
        if change is not None:
            event, fields = turn_update(self.sid, change.state, change.since, change.waiting_for)
            self.events.append(event)
            self.hash.update(fields)

    def settle(self, tracker: TurnTracker, change: TurnChange | None, now_ms: int) -> None:
        """``change``, then each change ``tracker`` settles into at ``now_ms``."""
        while change is not None:
            self.turn(change)
            change = tracker.settle(now_ms)

    def end(self, state: SessionState, *, reason: str, now_ms: int) -> None:
        """``session_ended`` (after a final ``idle`` if a turn was open); mutates ``state``."""
        self.hash.update({Field.LIVE: "0", Field.ENDED: "1", Field.END_REASON: reason})
        self.turn(state.turn.on_end(now_ms))
        self.events.append(
            OutEvent(frames.SESSION_ENDED, frames.session_ended(state.sid, reason=reason))
        )
        state.live = False
        state.pid = None
        state.end_reason = reason


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
