"""Held permission requests: their state machine, and the events they publish.

See the package docstring (``relaybus.collector.approvals``) for how a request ends. A
held request's ``permission_request``/``permission_resolved`` events and the session's
turn change are applied by the engine task (:class:`ApprovalEvent` in its inbox); their
Redis records are :mod:`.records`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from prometheus_client import Counter
from redis.exceptions import RedisError

from relaybus.collector import procfiles
from relaybus.collector.approvals import asks, endpoint, preview
from relaybus.collector.approvals.records import Decision, Records
from relaybus.collector.drivers.tmux import TmuxDriver
from relaybus.collector.inbox import Inbox, SessionWriter
from relaybus.collector.session_state import SessionUpdate
from relaybus.shared.aio import now_ms
from relaybus.shared.settings import Settings
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.store.connection import connect
from relaybus.shared.wire import approvals, frames
from relaybus.shared.wire.commands import Command, Reply
from relaybus.shared.wire.errors import ErrorCode
from relaybus.shared.wire.ids import valid_session_id

log = logging.getLogger(__name__)


#: The request must be in the log within this time, or the hook gets no decision.
PUBLISH_WAIT_S = 5.0
#: A request whose tool call is not in the transcript yet waits this long for it (polling)
#: before it is published, so it can name its toolUseId. The interactive CLI writes the call
#: a few hundred ms after it called the hook, seconds later on a loaded machine.
MATCH_WAIT_S = 2.0
MATCH_POLL_S = 0.05
#: How often a held request looks at Redis (decision, watchers) besides the command push.
POLL_S = 0.5
#: A held request (watched mode) is released after nobody watched it for this long.
UNWATCHED_GRACE_S = 5.0
MAX_HELD = 256


@dataclass(slots=True)
class Held:
    key: str
    sid: str
    name: str
    decided: asyncio.Future[Decision]
    tool_use_id: str | None = None
    #: The live-process file said ``waiting`` while this request was held.
    saw_waiting: bool = False
    #: Finds ``tool_use_id`` later (given the ids other requests took), and whether the call
    #: has its result already: the CLI may flush the ``tool_use`` line (even with its result)
    #: after it called the hook.
    rematch: Callable[[set[str]], tuple[str, bool] | None] | None = None
    #: The Claude Code process that asked (its live-process file), once known.
    pid: int | None = None

    def answer_elsewhere(self, why: str) -> None:
        if not self.decided.done():
            self.decided.set_result((approvals.ANSWERED_ELSEWHERE, why))


@dataclass(slots=True)
class ApprovalEvent:
    """A held request's event for the engine's inbox, published with the session's turn change."""

    sid: str
    events: list[OutEvent]
    #: What the session waits for now (the held requests' names), asked when applied.
    waiting_for: Callable[[str], str | None]
    published: asyncio.Future[None] | None = None
    cancelled: bool = False
    #: A client decided the request (Claude Code's own dialog is over, whatever the live file says).
    answered: bool = False

    async def apply(self, writer: SessionWriter) -> None:
        """On the engine task: publish the event with the session's turn change."""
        if self.cancelled:
            return
        state = (await writer.session(self.sid)).clone()
        update = SessionUpdate(self.sid, list(self.events))
        change = state.turn.on_approval(
            self.waiting_for(self.sid), now_ms(), answered=self.answered
        )
        update.settle(state.turn, change, now_ms())
        await writer.commit(state, update.events, update.hash)
        if self.published is not None and not self.published.done():
            self.published.set_result(None)


@dataclass(slots=True)
class Approvals:
    """The approval endpoint, the registry of held requests and their log events."""

    settings: Settings
    inbox: Inbox
    #: ``relaybus_collector_approvals_total{outcome}`` (``relaybus.collector.metrics``)
    outcomes: Counter
    held: dict[str, Held] = field(default_factory=dict, init=False)
    #: The live-process file's last status per session (``waiting``: Claude Code's dialog).
    _live: dict[str, str] = field(default_factory=dict, init=False)
    _store: Records | None = field(default=None, init=False)
    #: Types a plan's decision into its tmux pane (``asks``).
    tmux: TmuxDriver = field(default_factory=TmuxDriver, init=False)
    port: int = field(default=0, init=False)

    # --- the endpoint -----------------------------------------------------------------

    async def serve(self, stop: asyncio.Event) -> None:
        """Serve until ``stop``; held requests then end with no decision."""
        if self.settings.approval_port == 0:
            return
        self._store = Records(connect(self.settings), self.settings)
        bound: endpoint.Bound | None = None
        try:
            bound = await endpoint.listen(self.settings, self.request)
            if bound is None:
                return
            server, path, _ino = bound
            self.port = self.settings.approval_port
            log.info("approvals: listening on %s", path)
            async with server:
                await stop.wait()
                server.close()
                for h in list(self.held.values()):
                    if not h.decided.done():
                        h.decided.set_result((approvals.CANCELLED, "the collector stopped"))
                for _ in range(100):  # let the held requests answer their hooks
                    if not self.held:
                        break
                    await asyncio.sleep(0.02)
        finally:
            if bound is not None:
                endpoint.unlink(bound[1], bound[2])
            await self._store.client.aclose()
            self._store = None

    # --- one request --------------------------------------------------------------------

    async def request(self, body: bytes, *, gone: asyncio.Future[bytes]) -> dict[str, Any]:
        """The hook's answer: ``{"behavior": "allow"|"deny", "message"?, "updatedInput"?,
        "updatedPermissions"?, "interrupt"?}`` (:mod:`.asks`) or ``{}`` (none)."""
        outcome = "unavailable"
        try:
            outcome, reply = await self._request(body, gone)
            return reply
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("approvals: Redis unavailable (%s): no decision", exc)
            return {}
        finally:
            gone.cancel()
            self.outcomes.labels(outcome).inc()

    async def _request(
        self, body: bytes, gone: asyncio.Future[bytes]
    ) -> tuple[str, dict[str, Any]]:
        """(outcome for the metric, the hook's answer)."""
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:
            return "invalid", {}
        sid, name, tool_input = _fields(req)
        if sid is None or name is None or tool_input is None:
            return "invalid", {}
        s = self.settings
        if len(self.held) >= MAX_HELD:
            log.warning("approvals: %d requests held already; no decision", len(self.held))
            return "busy", {}
        records = self._records
        if s.approval_mode == "watched" and not await records.watchers(sid):
            log.info("approvals: %s %s: nobody watching, no decision", sid, name)
            return "unwatched", {}
        host, cwd = await records.session(sid)
        if not host:
            log.info("approvals: %s %s: unknown session, no decision", sid, name)
            return "unknown_session", {}
        loop = asyncio.get_running_loop()
        asked = loop.time()
        key = uuid.uuid4().hex
        expires = now_ms() + int(s.approval_timeout_seconds * 1000)
        taken = {h.tool_use_id for h in self.held.values() if h.sid == sid and h.tool_use_id}
        transcript = preview.transcript_path(s.claude_dir, req.get("transcript_path"))
        # the transcript's size before the first look: later calls are written after it
        offset = preview.file_size(transcript) if transcript is not None else 0
        tool_use_id, edit = await asyncio.to_thread(
            preview.describe, transcript, name, tool_input, taken, _text(cwd)
        )
        deadline = asked + MATCH_WAIT_S
        while tool_use_id is None and transcript is not None and loop.time() < deadline:
            # the CLI may flush its tool_use line just after calling the hook
            await asyncio.sleep(MATCH_POLL_S)
            call = await asyncio.to_thread(
                preview.call_after, transcript, offset, name, tool_input, taken
            )
            if call is not None and not call[1]:
                tool_use_id = call[0]
        rematch = None
        if tool_use_id is None and transcript is not None:
            rematch = partial(preview.call_after, transcript, offset, name, tool_input)
        held = Held(
            key,
            sid,
            name,
            loop.create_future(),
            tool_use_id,
            saw_waiting=self._live.get(sid) == "waiting",
            rematch=rematch,
            pid=_asker_pid(s, sid),
        )
        described = await asks.describe(
            name,
            tool_input,
            req,
            sid=sid,
            claude_dir=s.claude_dir,
            transcript=transcript,
            tool_use_id=tool_use_id,
            tmux=self.tmux,
        )
        self.held[key] = held
        try:
            await records.index(sid, key, name, expires, described.index())
            frame = frames.permission_request(
                sid,
                request_key=key,
                tool_use_id=tool_use_id,
                name=name,
                tool_input=tool_input,
                edit=edit,
                expires_at=expires,
                asks=described.frame(),
            )
            if not await self._publish(sid, frame, frames.PERMISSION_REQUEST, wait=True):
                await self._finish(held, (approvals.CANCELLED, None), claim=True)
                return "unavailable", {}
            log.info(
                "approvals: %s %s held as %s (tool %s, published after %.0f ms)",
                sid,
                name,
                key,
                tool_use_id or "-",
                (loop.time() - asked) * 1000,
            )
            decision = await self._hold(held, asked + s.approval_timeout_seconds, gone)
            decision = await self._finish(
                held, decision, claim=decision[0] not in approvals.CLIENT_DECISIONS
            )
        finally:
            self.held.pop(key, None)
        log.info("approvals: %s %s: %s", sid, key, decision[0])
        if decision[0] in approvals.CLIENT_DECISIONS:
            try:
                extra = await self._records.extra(key)
            except (RedisError, OSError, TimeoutError) as exc:
                log.warning("approvals: %s: the decision's answers are unreadable: %s", key, exc)
                extra = {}
            reply = await asks.answer(described, self.tmux, decision[0], decision[1], extra)
            return decision[0], reply
        if decision[0] in (approvals.TIMED_OUT, approvals.ANSWERED_ELSEWHERE):
            return decision[0], {}
        return approvals.CANCELLED, {}

    async def _hold(self, held: Held, deadline: float, gone: asyncio.Future[bytes]) -> Decision:
        """Wait for the decision, the timeout (``deadline`` on the loop's clock: a step of the
        wall clock must not cut a hold short), the hook leaving, or (watched) the watchers
        leaving."""
        unwatched_since: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            left = deadline - loop.time()
            if left <= 0:
                return (approvals.TIMED_OUT, None)
            waits: set[asyncio.Future[Any]] = {held.decided, gone}
            await asyncio.wait(
                waits, timeout=min(POLL_S, left), return_when=asyncio.FIRST_COMPLETED
            )
            if held.decided.done():
                return held.decided.result()
            if gone.done():
                return (approvals.CANCELLED, "the hook went away")
            if _asker_gone(held, self.settings):
                return (approvals.CANCELLED, PROCESS_GONE)
            if held.tool_use_id is None and held.rematch is not None:
                taken = {h.tool_use_id for h in self.held.values() if h.sid == held.sid}
                call = await asyncio.to_thread(held.rematch, {t for t in taken if t})
                if call is not None:
                    held.tool_use_id = call[0]
                    if call[1]:
                        return (approvals.ANSWERED_ELSEWHERE, "answered in the terminal")
            try:
                found = await self._records.decision(held.key)
                watched = self.settings.approval_mode != "watched" or await self._records.watchers(
                    held.sid
                )
            except (RedisError, OSError, TimeoutError) as exc:
                log.warning("approvals: Redis unavailable while holding %s: %s", held.key, exc)
                return (approvals.CANCELLED, "storage unavailable")
            if found is not None:
                return found
            if self.settings.approval_mode == "watched":
                if watched:
                    unwatched_since = None
                elif unwatched_since is None:
                    unwatched_since = loop.time()
                elif loop.time() - unwatched_since >= UNWATCHED_GRACE_S:
                    return (approvals.CANCELLED, "nobody is watching")

    async def _finish(self, held: Held, decision: Decision, *, claim: bool) -> Decision:
        """Record the end (first writer wins), drop the index entry, publish the resolution."""
        try:
            if claim:
                decision = await self._records.claim(held.key, decision)
            await self._records.resolve(held.sid, held.key, decision[0])
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("approvals: could not record the end of %s: %s", held.key, exc)
            if claim:
                decision = (approvals.CANCELLED, None)
        self.held.pop(held.key, None)
        by = None
        if decision[0] in approvals.CLIENT_DECISIONS:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                by = await self._records.decided_by(held.key)
        frame = frames.permission_resolved(
            held.sid,
            request_key=held.key,
            decision=decision[0],
            message=decision[1],
            decided_by=by,
        )
        await self._publish(
            held.sid,
            frame,
            frames.PERMISSION_RESOLVED,
            wait=False,
            answered=decision[0] in approvals.CLIENT_DECISIONS,
        )
        return decision

    # --- decisions pushed by gateways ----------------------------------------------------

    async def decide(self, cmd: Command) -> Reply:
        """``permission_decision`` command: the gateway already claimed the decision key."""
        key = cmd.payload.get("requestKey")
        decision = cmd.payload.get("decision")
        message = cmd.payload.get("message")
        if not isinstance(key, str) or decision not in approvals.CLIENT_DECISIONS:
            return Reply.failure(
                cmd.id, ErrorCode.INVALID_MESSAGE, "bad permission_decision payload"
            )
        held = self.held.get(key)
        if held is None or held.decided.done():
            return Reply.failure(cmd.id, ErrorCode.ALREADY_RESOLVED, "no such request is held here")
        held.decided.set_result((str(decision), message if isinstance(message, str) else None))
        return Reply(cmd.id, True, data={"requestKey": key, "decision": decision})

    # --- what the engine sees (``relaybus.collector.engine.SessionObserver``) -----------------------

    def live_status(self, sid: str, status: str | None) -> None:
        """Claude Code's own dialog: ``waiting`` while it shows, anything else once answered."""
        if status is None:
            self._live.pop(sid, None)
        else:
            self._live[sid] = status
        for h in self.held.values():
            if h.sid != sid or h.decided.done():
                continue
            if status is None and _asker_gone(h, self.settings):
                log.info("approvals: %s %s: its Claude Code process is gone", sid, h.key)
                h.decided.set_result((approvals.CANCELLED, PROCESS_GONE))
            elif status == "waiting":
                h.saw_waiting = True
            elif h.saw_waiting:
                log.info("approvals: %s %s answered in the terminal (live file)", sid, h.key)
                h.answer_elsewhere("answered in the terminal")

    def tool_results(self, sid: str, tool_use_ids: list[str]) -> None:
        """The transcript shows the held tool's result: the terminal answered first."""
        done = set(tool_use_ids)
        for h in self.held.values():
            if h.sid == sid and h.tool_use_id in done and not h.decided.done():
                log.info("approvals: %s %s answered in the terminal (tool result)", sid, h.key)
                h.answer_elsewhere("answered in the terminal")

    # --- publishing through the engine's inbox -----------------------------------------------

    async def _publish(
        self, sid: str, frame: bytes, kind: str, *, wait: bool, answered: bool = False
    ) -> bool:
        event = OutEvent(kind, frame, session_stream=True)
        item = ApprovalEvent(sid, [event], self.waiting_for, answered=answered)
        if wait:
            item.published = asyncio.get_running_loop().create_future()
        if not self.inbox.put(item):
            return False
        if item.published is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(item.published), PUBLISH_WAIT_S)
            return True
        except TimeoutError:
            item.cancelled = True
            return False

    def waiting_for(self, sid: str) -> str | None:
        names = [h.name for h in self.held.values() if h.sid == sid and not h.decided.done()]
        return f"approve {names[-1]}" if names else None

    @property
    def _records(self) -> Records:
        if self._store is None:
            raise RedisError("approvals endpoint is not running")
        return self._store


PROCESS_GONE = "the Claude Code process is gone"


def _asker_pid(settings: Settings, sid: str) -> int | None:
    """The live Claude Code process of ``sid`` (its live-process file), if one runs."""
    info = procfiles.scan(settings.claude_dir / "sessions").get(sid)
    return info.pid if info is not None else None


def _asker_gone(held: Held, settings: Settings) -> bool:
    """Whether the process that asked is gone: killed, it leaves its live-process file and
    maybe its hook (orphaned, still connected) behind."""
    if held.pid is None:
        held.pid = _asker_pid(settings, held.sid)
        return False
    return not procfiles.pid_alive(held.pid)


def _fields(req: Any) -> tuple[str | None, str | None, dict[str, Any] | None]:
    if not isinstance(req, dict):
        return None, None, None
    sid, name, tool_input = req.get("session_id"), req.get("tool_name"), req.get("tool_input")
    return (
        sid if valid_session_id(sid) else None,
        name if isinstance(name, str) and name and len(name) <= 256 else None,
        tool_input if isinstance(tool_input, dict) else None,
    )


def _text(raw: bytes | str | None) -> str | None:
    if isinstance(raw, bytes):
        return raw.decode(errors="replace") or None
    return raw or None
