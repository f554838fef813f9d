"""Session state and the events a batch of lines produces for it.

Pure: nothing here touches Redis or files. :class:`SessionState` mirrors the session hash;
:class:`BatchPlan` turns projected lines into log events (``session_started``,
``session_event``, title changes, ``turn_status``) plus the hash updates that go with them,
working on a copy of the state so that a refused append changes nothing.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from collector.turns import IDLE, WORKING, TurnChange, TurnTracker
from shared import frames
from shared.appendlog import OutEvent

#: Title rank of "the first real user prompt": only the first one counts.
FIRST_PROMPT_RANK = 1


class LineFacts(Protocol):
    """What the collector reads from a projected line (``shared.projection.Projected``)."""

    @property
    def publish(self) -> bool: ...
    @property
    def event(self) -> dict[str, Any] | None: ...
    @property
    def cwd(self) -> str | None: ...
    @property
    def entrypoint(self) -> str | None: ...
    @property
    def timestamp_ms(self) -> int | None: ...
    @property
    def is_sidechain(self) -> bool: ...
    @property
    def agent_id(self) -> str | None: ...
    @property
    def title(self) -> tuple[int, str] | None: ...
    @property
    def turn(self) -> str | None: ...
    @property
    def malformed(self) -> bool: ...
    @property
    def drop_reason(self) -> str | None: ...
    @property
    def session_id(self) -> str | None: ...


class Projection(Protocol):
    """The projection module's interface (``shared.projection``)."""

    def project_line(
        self, raw: bytes, *, data_max_bytes: int = ..., text_max_chars: int = ...
    ) -> LineFacts: ...
    def oversize_line(self, size: int) -> LineFacts: ...
    def title_event(self, title: str) -> dict[str, Any]: ...


@dataclass(slots=True)
class SessionState:
    """What the collector knows of one session; ``live`` = started and not ended."""

    sid: str
    cwd: str = ""
    entrypoint: str = ""
    title: str | None = None
    title_rank: int = 0
    started_at: int = 0
    live: bool = False
    pid: int | None = None
    #: Why it last ended (``exit``: its process is gone, so only a new prompt restarts it).
    end_reason: str = ""
    turn: TurnTracker = field(default_factory=TurnTracker)

    @classmethod
    def from_hash(cls, sid: str, h: Mapping[Any, Any]) -> SessionState:
        def s(name: str) -> str:
            v = h.get(name.encode(), b"")
            return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)

        def n(name: str) -> int:
            try:
                return int(float(s(name) or 0))
            except ValueError:
                return 0

        turn = TurnTracker(
            state=s("state") or None,
            since=n("since"),
            waiting_for=s("waitingFor") or None,
            last_activity_ms=n("lastActivity"),
        )
        return cls(
            sid=sid,
            cwd=s("cwd"),
            entrypoint=s("entrypoint"),
            title=s("title") or None,
            title_rank=n("titleRank"),
            started_at=n("startedAt"),
            live=s("live") == "1",
            pid=n("pid") or None,
            end_reason=s("endReason"),
            turn=turn,
        )

    def clone(self) -> SessionState:
        return copy.deepcopy(self)


def turn_event(sid: str, change: TurnChange) -> OutEvent:
    prefix = frames.turn_status(
        sid, state=change.state, since=change.since, waiting_for=change.waiting_for
    )
    return OutEvent(frames.TURN_STATUS, prefix)


def turn_hash(change: TurnChange) -> dict[str, str]:
    return {"state": change.state, "since": str(change.since), "waitingFor": change.waiting_for or ""}


def line_event(sid: str, event: dict[str, Any], trace_id: str | None = None) -> OutEvent:
    prefix = frames.session_event(sid, event, trace_id=trace_id)
    return OutEvent(frames.SESSION_EVENT, prefix, session_stream=True, session_seq=True)


class BatchPlan:
    """Events and hash updates for one batch of one session's lines.

    ``collapse`` (backfill): keep only the last ``keep_events`` line events and the final
    title and turn state, so a watch gets recent history without a replay of every change.
    """

    def __init__(
        self,
        state: SessionState,
        *,
        host: str,
        now_ms: int,
        idle_ms: int,
        title_event: Callable[[str], dict[str, Any]],
        collapse: bool = False,
        keep_events: int = 0,
        agent_id: str | None = None,
    ) -> None:
        self.orig = state
        self.state = state.clone()
        self.host = host
        self.now_ms = now_ms
        self.idle_ms = idle_ms
        self._title_event = title_event
        self.collapse = collapse
        self.agent_id = agent_id
        self.events: list[OutEvent] = []
        self._kept: collections.deque[OutEvent] = collections.deque(maxlen=max(keep_events, 0))
        self.hash: dict[str, str] = {}
        self.activity_ms: int | None = None
        self.published = 0
        #: toolUseIds of the tool results in this batch (sub-agents' too).
        self.tool_results: list[str] = []
        #: Backfill: the newest line that may (re)start the session.
        self._start_ms: int | None = None

    def prime(self, lines: Iterable[LineFacts]) -> None:
        """Learn cwd/entrypoint from the batch before anything is announced."""
        st = self.state
        for p in lines:
            if st.cwd and st.entrypoint:
                break
            if p.cwd and not st.cwd:
                st.cwd = p.cwd
                self.hash["cwd"] = p.cwd
            if p.entrypoint and not st.entrypoint:
                st.entrypoint = p.entrypoint
                self.hash["entrypoint"] = p.entrypoint

    def encode(self, p: LineFacts) -> OutEvent | None:
        """The ``session_event`` of a published line (None for a bookkeeping line)."""
        if not p.publish or p.event is None:
            return None
        event = p.event
        if p.is_sidechain or self.agent_id:
            event["sidechain"] = True
            agent = p.agent_id or self.agent_id
            if agent:
                event.setdefault("agentId", agent)
        return line_event(self.state.sid, event)

    def line(self, p: LineFacts, encoded: OutEvent | None = None) -> None:
        """Plan one line; ``encoded`` is its :meth:`encode` when the caller did that already.

        Only a published line starts a session that is not live, and one whose process
        exited only by a new prompt: the CLI writes bookkeeping, and after SIGINT a partial
        answer, after it removed its live-process file.
        """
        st = self.state
        if p.timestamp_ms is not None:
            ts = min(p.timestamp_ms, self.now_ms)
            self.activity_ms = max(self.activity_ms or 0, ts)
        else:
            ts = self.activity_ms or self.now_ms
        ev = encoded if encoded is not None else self.encode(p)
        sidechain = p.is_sidechain or self.agent_id is not None
        if ev is not None and not st.live and self._may_start(p, sidechain):
            if self.collapse:
                self._start_ms = max(self._start_ms or 0, ts)
            elif self._recent(ts):
                self._start(ts)
        if ev is not None:
            self.published += 1
            if self.collapse:
                self._kept.append(ev)
            else:
                self.events.append(ev)
        event = p.event or {}
        blocks = event.get("blocks") or []
        self.tool_results += [
            str(b.get("toolUseId")) for b in blocks if b.get("kind") == "tool_result"
        ]
        if sidechain:
            st.turn.on_activity(ts)
            return
        if p.title is not None:
            self._title(*p.title)
        turn = p.turn
        if turn == IDLE and event.get("type") == "assistant" and blocks and all(
            b.get("kind") in ("thinking", "redacted_thinking") for b in blocks
        ):
            turn = None  # every line of a message carries its final stop_reason: the text follows
        activity = event.get("type") == "assistant" or any(
            b.get("kind") == "tool_result" for b in blocks
        )
        change = st.turn.on_line(turn, ts, activity=activity)
        if change is not None and not self.collapse:
            self.events.append(turn_event(st.sid, change))
            self.hash.update(turn_hash(change))

    def _may_start(self, p: LineFacts, sidechain: bool) -> bool:
        if self.state.end_reason != "exit":
            return True
        return p.turn == WORKING and not sidechain

    def finish(self) -> None:
        """Close the plan: collapsed history, the final title/turn, the activity stamp."""
        st, orig = self.state, self.orig
        if self.collapse:
            head: list[OutEvent] = []
            if not st.live and (
                st.pid is not None or (self._start_ms is not None and self._recent(self._start_ms))
            ):
                self._start(self._start_ms or self.activity_ms or self.now_ms, into=head)
            tail: list[OutEvent] = []
            if st.title != orig.title and st.title:
                tail.append(line_event(st.sid, self._title_event(st.title)))
            t = st.turn
            if t.state and (t.state, t.waiting_for) != (orig.turn.state, orig.turn.waiting_for):
                change = TurnChange(t.state, t.since, t.waiting_for)
                tail.append(turn_event(st.sid, change))
                self.hash.update(turn_hash(change))
            self.events = head + list(self._kept) + tail
            self.published = len(self._kept)
        if self.activity_ms is None:
            self.activity_ms = self.now_ms
        self.hash["lastActivity"] = str(self.activity_ms)
        self.hash.setdefault("id", st.sid)
        self.hash.setdefault("host", self.host)

    def start_now(self) -> None:
        """Announce the session now (a live process appeared before any transcript line)."""
        if not self.state.live:
            self._start(self.now_ms)

    def _recent(self, ts: int) -> bool:
        return self.now_ms - ts < self.idle_ms

    def _start(self, ts: int, into: list[OutEvent] | None = None) -> None:
        st = self.state
        st.live = True
        st.started_at = ts
        st.end_reason = ""
        prefix = frames.session_started(
            st.sid,
            cwd=st.cwd,
            entrypoint=st.entrypoint,
            host=self.host,
            title=st.title,
            started_at=ts,
        )
        (self.events if into is None else into).append(OutEvent(frames.SESSION_STARTED, prefix))
        self.hash.update(
            {
                "id": st.sid,
                "host": self.host,
                "cwd": st.cwd,
                "entrypoint": st.entrypoint,
                "startedAt": str(ts),
                "live": "1",
                "ended": "0",
                "endReason": "",
            }
        )

    def _title(self, rank: int, text: str) -> None:
        st = self.state
        if rank < st.title_rank or (rank == st.title_rank == FIRST_PROMPT_RANK):
            return
        if rank == st.title_rank and text == st.title:
            return
        st.title, st.title_rank = text, rank
        self.hash.update({"title": text, "titleRank": str(rank)})
        if not self.collapse:
            self.events.append(line_event(st.sid, self._title_event(text)))


def end_events(state: SessionState, *, reason: str, now_ms: int) -> tuple[list[OutEvent], dict[str, str]]:
    """``session_ended`` (after a final ``idle`` if a turn was open); mutates ``state``."""
    events: list[OutEvent] = []
    h: dict[str, str] = {"live": "0", "ended": "1", "endReason": reason}
    change = state.turn.on_end(now_ms)
    if change is not None:
        events.append(turn_event(state.sid, change))
        h.update(turn_hash(change))
    events.append(OutEvent(frames.SESSION_ENDED, frames.session_ended(state.sid, reason=reason)))
    state.live = False
    state.pid = None
    state.end_reason = reason
    return events, h
