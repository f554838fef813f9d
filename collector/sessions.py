"""Session state and the events a batch of lines produces for it.

Pure: nothing here touches Redis or files. :class:`SessionState` mirrors the session hash;
:class:`BatchPlan` turns projected lines into log events (``session_started``,
``session_event``, title changes, ``turn_status``) plus the hash updates that go with them,
working on a copy of the state so that a refused append changes nothing.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from relaybus.collector.turns import IDLE, WORKING, TurnChange, TurnTracker
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.wire import frames

#: Rank of "the first real user prompt": only the first one counts. Candidates of this
#: rank or below (a ``/command args`` line is 0) are the session's ``firstPrompt``, never
#: its title: titles are only what Claude Code writes as such (custom-title, agent-name,
#: ai-title, or a summary of this session's own conversation).
FIRST_PROMPT_RANK = 1
SUMMARY_RANK = 2
#: Summaries waiting for their leaf line (a summary names the line it summarises up to).
MAX_PENDING_SUMMARIES = 16
#: Sub-agents remembered as cache warm-ups (their lines are not published).
MAX_WARMUP_AGENTS = 64
#: Sub-agent -> Task call links remembered per session (the oldest is forgotten first).
MAX_AGENT_PARENTS = 256
#: Sub-agent ids of compaction runs start so.
COMPACTION_AGENT_PREFIX = "acompact"


class LineFacts(Protocol):
    """What the collector reads from a projected line (``relaybus.shared.transcript.projection.Projected``)."""

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
    @property
    def leaf_uuid(self) -> str | None: ...
    @property
    def agent_parent(self) -> tuple[str, str] | None: ...


class Projection(Protocol):
    """The projection module's interface (``relaybus.shared.transcript.projection``)."""

    def project_line(
        self, raw: bytes, *, data_max_bytes: int = ..., text_max_chars: int = ...
    ) -> LineFacts: ...
    def oversize_line(self, size: int) -> LineFacts: ...


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
        title, title_rank = s("title") or None, n("titleRank")
        first, first_rank = (
            s("firstPrompt") or None,
            n("firstPromptRank") if s("firstPrompt") else -1,
        )
        if title is not None and title_rank <= FIRST_PROMPT_RANK:  # written before titles were real
            if first is None:
                first, first_rank = title, title_rank
            title, title_rank = None, 0
        return cls(
            sid=sid,
            cwd=s("cwd"),
            entrypoint=s("entrypoint"),
            title=title,
            title_rank=title_rank,
            first_prompt=first,
            first_prompt_rank=first_rank,
            started_at=n("startedAt"),
            live=s("live") == "1",
            pid=n("pid") or None,
            end_reason=s("endReason"),
            turn=turn,
            # hashes from before the field: any published event counted
            has_content=s("hasContent") == "1" or (not s("hasContent") and n("sessionSeq") > 0),
        )

    def clone(self) -> SessionState:
        return copy.deepcopy(self)


def turn_event(sid: str, change: TurnChange) -> OutEvent:
    prefix = frames.turn_status(
        sid, state=change.state, since=change.since, waiting_for=change.waiting_for
    )
    return OutEvent(frames.TURN_STATUS, prefix)


def turn_hash(change: TurnChange) -> dict[str, str]:
    return {
        "state": change.state,
        "since": str(change.since),
        "waitingFor": change.waiting_for or "",
    }


def line_event(sid: str, event: dict[str, Any], trace_id: str | None = None) -> OutEvent:
    prefix = frames.session_event(sid, event, trace_id=trace_id)
    return OutEvent(frames.SESSION_EVENT, prefix, session_stream=True, session_seq=True)


def _shows_content(event: dict[str, Any] | None) -> bool:
    """Whether an event is something to read: a block other than a /goal status, or a line
    too big or malformed to project (its stand-in). Title records alone are not."""
    if not event:
        return False
    blocks = event.get("blocks") or []
    return event.get("type") == "unknown" or any(b.get("kind") != "goal_status" for b in blocks)


def _facts(st: SessionState) -> tuple[str, str, str | None, str | None]:
    """What ``session_updated`` announces a change of (turn state and life have frames)."""
    return st.cwd, st.entrypoint, st.title, st.first_prompt


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
    info.update(host=host, state=st.turn.state or "idle", live=st.live)
    if activity_ms is not None:
        info["lastActivity"] = activity_ms
    return OutEvent(frames.SESSION_UPDATED, frames.session_updated(st.sid, info))


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
        collapse: bool = False,
        keep_events: int = 0,
        agent_id: str | None = None,
        parent_tool_use_id: str | None = None,
    ) -> None:
        self.orig = state
        self.state = state.clone()
        self.host = host
        self.now_ms = now_ms
        self.idle_ms = idle_ms
        self.collapse = collapse
        self.agent_id = agent_id
        #: the Task/Agent tool call that ran this sub-agent file (from its ``.meta.json``)
        self.parent_tool_use_id = parent_tool_use_id
        #: what clients were last told (session_started, or before this batch)
        self._announced = _facts(state) if state.live else None
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
        """Learn cwd/entrypoint (and the first prompt) from the batch before anything is
        announced, so that ``session_started`` carries them."""
        st = self.state
        for p in lines:
            title = p.title
            if (
                st.first_prompt_rank < FIRST_PROMPT_RANK
                and title is not None
                and title[0] <= FIRST_PROMPT_RANK
                and not (p.is_sidechain or self.agent_id)
            ):
                self._title(*title)
            if st.cwd and st.entrypoint:
                continue
            if p.cwd and not st.cwd:
                st.cwd = p.cwd
                self.hash["cwd"] = p.cwd
            if p.entrypoint and not st.entrypoint:
                st.entrypoint = p.entrypoint
                self.hash["entrypoint"] = p.entrypoint

    def encode(self, p: LineFacts) -> OutEvent | None:
        """The ``session_event`` of a published line (None for a bookkeeping line)."""
        agent = p.agent_id or self.agent_id
        link = p.agent_parent
        if link is not None:
            parents = self.state.agent_parents
            if link[0] not in parents and len(parents) >= MAX_AGENT_PARENTS:
                del parents[next(iter(parents))]
            parents[link[0]] = link[1]
        if p.drop_reason == "warmup" and agent:  # the rest of this agent is warm-up too
            warm = self.state.warmup_agents
            if len(warm) >= MAX_WARMUP_AGENTS:
                warm.pop()
            warm.add(agent)
        if not p.publish or p.event is None:
            return None
        event = p.event
        if p.is_sidechain or self.agent_id:
            if agent and agent in self.state.warmup_agents:
                return None
            event["sidechain"] = True
            if agent:
                event.setdefault("agentId", agent)
                if agent.startswith(COMPACTION_AGENT_PREFIX):
                    event["compaction"] = True
            parent = self.parent_tool_use_id or (
                self.state.agent_parents.get(agent) if agent else None
            )
            if parent:
                event["parentToolUseId"] = parent
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
            if not st.has_content and _shows_content(p.event):
                st.has_content = True
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
            if p.leaf_uuid is None:
                self._title(*p.title)
            elif len(st.pending_summaries) < MAX_PENDING_SUMMARIES:
                st.pending_summaries[p.leaf_uuid] = p.title[1]
        if st.pending_summaries and p.event is not None:
            summary = st.pending_summaries.pop(p.event.get("uuid") or "", None)
            if summary is not None:  # the summary's leaf is this session's own line
                self._title(SUMMARY_RANK, summary)
        turn = p.turn
        if (
            turn == IDLE
            and event.get("type") == "assistant"
            and blocks
            and all(b.get("kind") in ("thinking", "redacted_thinking") for b in blocks)
        ):
            turn = None  # every line of a message carries its final stop_reason: the text follows
        activity = event.get("type") == "assistant" or any(
            b.get("kind") == "tool_result" for b in blocks
        )
        change = st.turn.on_line(turn, ts, activity=activity)
        while change is not None:
            if not self.collapse:
                self.events.append(turn_event(st.sid, change))
                self.hash.update(turn_hash(change))
            change = st.turn.settle(ts)

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
            t = st.turn
            if t.state and (t.state, t.waiting_for) != (orig.turn.state, orig.turn.waiting_for):
                change = TurnChange(t.state, t.since, t.waiting_for)
                tail.append(turn_event(st.sid, change))
                self.hash.update(turn_hash(change))
            self.events = head + list(self._kept) + tail
            self.published = len(self._kept)
        if self.activity_ms is None:
            self.activity_ms = self.now_ms
        if st.live and self._announced is not None and _facts(st) != self._announced:
            self.events.append(updated_event(st, host=self.host, activity_ms=self.activity_ms))
        self.hash["lastActivity"] = str(self.activity_ms)
        self.hash["hasContent"] = "1" if st.has_content else "0"
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
            first_prompt=st.first_prompt,
        )
        (self.events if into is None else into).append(OutEvent(frames.SESSION_STARTED, prefix))
        self._announced = _facts(st)
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
        if rank <= FIRST_PROMPT_RANK:
            if rank < st.first_prompt_rank or rank == st.first_prompt_rank == FIRST_PROMPT_RANK:
                return
            if rank != st.first_prompt_rank or text != st.first_prompt:
                st.first_prompt, st.first_prompt_rank = text, rank
                self.hash.update({"firstPrompt": text, "firstPromptRank": str(rank)})
            return
        if rank < st.title_rank or (rank == st.title_rank and text == st.title):
            return
        st.title, st.title_rank = text, rank
        self.hash.update({"title": text, "titleRank": str(rank)})


def end_events(
    state: SessionState, *, reason: str, now_ms: int
) -> tuple[list[OutEvent], dict[str, str]]:
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
