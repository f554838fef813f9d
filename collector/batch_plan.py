"""The events a batch of one session's lines produces.

Pure: nothing here touches Redis or files. :class:`BatchPlan` turns projected lines into
log events (``session_started``, ``session_event``, title changes, ``turn_status``) plus the
hash updates that go with them, working on a copy of the state so that a refused append
changes nothing.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

from relaybus.collector.session_state import (
    FIRST_PROMPT_RANK,
    SessionState,
    SessionUpdate,
    line_event,
    updated_event,
)
from relaybus.collector.turns import IDLE, WORKING, TurnChange
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.store.session_row import Field
from relaybus.shared.transcript.projection import Projected
from relaybus.shared.wire import frames

SUMMARY_RANK = 2
#: Summaries waiting for their leaf line (a summary names the line it summarises up to).
MAX_PENDING_SUMMARIES = 16
#: Sub-agents remembered as cache warm-ups (their lines are not published).
MAX_WARMUP_AGENTS = 64
#: Sub-agent -> Task call links remembered per session (the oldest is forgotten first).
MAX_AGENT_PARENTS = 256
#: Sub-agent ids of compaction runs start so.
COMPACTION_AGENT_PREFIX = "acompact"


_NO_KEPT: collections.deque[OutEvent] = collections.deque(maxlen=0)


def _shows_content(event: dict[str, Any] | None) -> bool:
    """Whether an event is something to read: a block other than a /goal status, or a line
    too big or malformed to project (its stand-in). Title records alone are not."""
    if not event:
        return False
    blocks = event.get("blocks") or []
    return event.get("type") == "unknown" or any(b.get("kind") != "goal_status" for b in blocks)


def _facts(st: SessionState) -> tuple[str, str, str | None, str | None, str | None]:
    """What ``session_updated`` announces a change of (turn state and life have frames)."""
    return st.cwd, st.entrypoint, st.title, st.first_prompt, st.permission_mode


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
        #: collapse: the last ``keep_events`` line events (made only then)
        self._kept: collections.deque[OutEvent] = (
            collections.deque(maxlen=max(keep_events, 0)) if collapse else _NO_KEPT
        )
        self.hash: dict[str, str] = {}
        self.activity_ms: int | None = None
        self.published = 0
        #: toolUseIds of the tool results in this batch (sub-agents' too).
        self.tool_results: list[str] = []
        #: Backfill: the newest line that may (re)start the session.
        self._start_ms: int | None = None

    def prime(self, lines: Iterable[Projected]) -> None:
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
                self.hash[Field.CWD] = p.cwd
            if p.entrypoint and not st.entrypoint:
                st.entrypoint = p.entrypoint
                self.hash[Field.ENTRYPOINT] = p.entrypoint

    def encode(self, p: Projected) -> OutEvent | None:
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

    def line(self, p: Projected, encoded: OutEvent | None = None) -> None:
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
        if p.permission_mode is not None and p.permission_mode != st.permission_mode:
            st.permission_mode = p.permission_mode
            self.hash[Field.PERMISSION_MODE] = p.permission_mode
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
        if change is not None and not self.collapse:
            SessionUpdate(st.sid, self.events, self.hash).settle(st.turn, change, ts)
        else:
            while change is not None:  # collapsed: finish() tells the final state alone
                change = st.turn.settle(ts)

    def _may_start(self, p: Projected, sidechain: bool) -> bool:
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
                SessionUpdate(st.sid, tail, self.hash).turn(change)
            self.events = head + list(self._kept) + tail
            self.published = len(self._kept)
        if self.activity_ms is None:
            self.activity_ms = self.now_ms
        if st.live and self._announced is not None and _facts(st) != self._announced:
            self.events.append(updated_event(st, host=self.host, activity_ms=self.activity_ms))
        self.hash[Field.LAST_ACTIVITY] = str(self.activity_ms)
        self.hash[Field.HAS_CONTENT] = "1" if st.has_content else "0"
        self.hash.setdefault(Field.ID, st.sid)
        self.hash.setdefault(Field.HOST, self.host)

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
            permission_mode=st.permission_mode,
        )
        (self.events if into is None else into).append(OutEvent(frames.SESSION_STARTED, prefix))
        self._announced = _facts(st)
        self.hash.update(
            {
                Field.ID: st.sid,
                Field.HOST: self.host,
                Field.CWD: st.cwd,
                Field.ENTRYPOINT: st.entrypoint,
                Field.STARTED_AT: str(ts),
                Field.LIVE: "1",
                Field.ENDED: "0",
                Field.END_REASON: "",
            }
        )

    def _title(self, rank: int, text: str) -> None:
        st = self.state
        if rank <= FIRST_PROMPT_RANK:
            if rank < st.first_prompt_rank or rank == st.first_prompt_rank == FIRST_PROMPT_RANK:
                return
            if rank != st.first_prompt_rank or text != st.first_prompt:
                st.first_prompt, st.first_prompt_rank = text, rank
                self.hash.update({Field.FIRST_PROMPT: text, Field.FIRST_PROMPT_RANK: str(rank)})
            return
        if rank < st.title_rank or (rank == st.title_rank and text == st.title):
            return
        st.title, st.title_rank = text, rank
        self.hash.update({Field.TITLE: text, Field.TITLE_RANK: str(rank)})
