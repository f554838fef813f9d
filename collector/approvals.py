"""Permission requests from Claude Code's hook, held while someone can answer from a phone.

``relaybus hook permission-request`` POSTs the hook's JSON to the approval socket, a Unix
socket in a directory only this user can enter (``relaybus.collector.approval_endpoint``).
The request is held only when a client with a full-access token watches the session
(``RELAYBUS_APPROVAL_MODE=always``: regardless) and the session is known; otherwise the
answer is "no decision" at once and Claude Code shows its own prompt. A held request is
published as a ``permission_request`` log event and turns the session ``waiting``. It
ends with the first of: a client's decision (claimed in Redis with ``SET NX`` by the
gateway, delivered by a ``permission_decision`` command and also polled), the timeout,
the hook going away, (watched mode) nobody watching for :data:`UNWATCHED_GRACE_S`, or
the terminal answering first — the transcript shows the tool's result, or the live-process
file leaves ``waiting`` after it showed it (``answered_elsewhere``: the hook is answered
"no decision" at once and exits, and the decision key is claimed so a late client decision
is ``already_resolved``). However it ends, the session's ``approval_resolved`` key names it
for the approval timeout, so a late decision without a ``requestKey`` is
``already_resolved`` too. Only an explicit client decision ever allows; every other end is
"no decision".

Session state is written only by the engine task: events are queued here and the engine
applies them with :meth:`Approvals.apply` (as ``relaybus.collector.drivers.notices`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter
from redis.exceptions import RedisError

from relaybus.collector import approval_endpoint as endpoint
from relaybus.collector.sessions import turn_event, turn_hash
from relaybus.collector.tailer import open_regular
from relaybus.shared.settings import Settings
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.transcript import projection
from relaybus.shared.wire import approvals as ap
from relaybus.shared.wire import frames
from relaybus.shared.wire.commands import INVALID, Command, Reply
from relaybus.shared.wire.ids import valid_session_id

if TYPE_CHECKING:
    from relaybus.collector.engine import Engine

log = logging.getLogger(__name__)

T = TypeVar("T")

#: One Redis round trip on the hook's path may take this long before we give up.
REDIS_OP_S = 2.0
#: The request must be in the log within this time, or the hook gets no decision.
PUBLISH_WAIT_S = 5.0
#: A request whose tool call is not in the transcript yet waits this long for it (polling)
#: before it is published, so it can name its toolUseId.
MATCH_WAIT_S = 0.5
MATCH_POLL_S = 0.05
#: How often a held request looks at Redis (decision, watchers) besides the command push.
POLL_S = 0.5
#: A held request (watched mode) is released after nobody watched it for this long.
UNWATCHED_GRACE_S = 5.0
HEADER_MAX_BYTES = 16 * 1024
BODY_MAX_BYTES = 16 * 1024 * 1024
READ_TIMEOUT_S = 10.0
MAX_HELD = 256
MAX_QUEUED = 10_000
TRANSCRIPT_TAIL_BYTES = 2 * 1024 * 1024

Decision = tuple[str, str | None]


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

    def answer_elsewhere(self, why: str) -> None:
        if not self.decided.done():
            self.decided.set_result((ap.ANSWERED_ELSEWHERE, why))


@dataclass(slots=True)
class _Queued:
    sid: str
    events: list[OutEvent]
    published: asyncio.Future[None] | None = None
    cancelled: bool = False
    #: A client decided the request (Claude Code's own dialog is over, whatever the live file says).
    answered: bool = False


@dataclass(slots=True)
class Approvals:
    """The approval endpoint, the registry of held requests and their log events."""

    settings: Settings
    wake: Callable[[], None]
    registry: CollectorRegistry | None = None
    keys: Keys = field(init=False)
    outcomes: Counter = field(init=False)
    held: dict[str, Held] = field(default_factory=dict, init=False)
    _queue: deque[_Queued] = field(default_factory=deque, init=False)
    #: The live-process file's last status per session (``waiting``: Claude Code's dialog).
    _live: dict[str, str] = field(default_factory=dict, init=False)
    _client: aioredis.Redis | None = field(default=None, init=False)
    port: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.keys = Keys(self.settings.namespace)
        self.outcomes = Counter(
            "relaybus_collector_approvals_total",
            "Permission requests from the hook, by how they ended",
            ["outcome"],
            registry=self.registry,
        )

    # --- the loopback endpoint --------------------------------------------------------

    async def serve(self, stop: asyncio.Event) -> None:
        """Serve until ``stop``; held requests then end with no decision."""
        if self.settings.approval_port == 0:
            return
        self._client = connect(self.settings)
        bound: tuple[asyncio.Server, Path, int] | None = None
        try:
            bound = await endpoint.listen(self.settings, self._connection, limit=HEADER_MAX_BYTES)
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
                        h.decided.set_result((ap.CANCELLED, "the collector stopped"))
                for _ in range(100):  # let the held requests answer their hooks
                    if not self.held:
                        break
                    await asyncio.sleep(0.02)
        finally:
            if bound is not None:
                endpoint.unlink(bound[1], bound[2])
            await self._client.aclose()
            self._client = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        status, reply = 400, {}
        try:
            body = await asyncio.wait_for(_read_body(reader), READ_TIMEOUT_S)
            if body is not None:
                status = 200
                reply = await self.request(body, gone=asyncio.ensure_future(reader.read(1)))
        except (
            TimeoutError,
            OSError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as exc:
            log.debug("approvals: bad or lost request: %r", exc)
        finally:
            with contextlib.suppress(OSError):
                payload = orjson.dumps(reply)
                writer.write(
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Bad Request'}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                    "Connection: close\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    # --- one request --------------------------------------------------------------------

    async def request(self, body: bytes, *, gone: asyncio.Future[bytes]) -> dict[str, Any]:
        """The hook's answer: ``{"behavior": "allow"|"deny", "message"?}`` or ``{}`` (none)."""
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
        if s.approval_mode == "watched" and not await self._watchers(sid):
            log.info("approvals: %s %s: nobody watching, no decision", sid, name)
            return "unwatched", {}
        host, cwd = await self._op(self._redis.hmget(self.keys.session(sid), ["host", "cwd"]))
        if not host:
            log.info("approvals: %s %s: unknown session, no decision", sid, name)
            return "unknown_session", {}
        key = uuid.uuid4().hex
        expires = _now_ms() + int(s.approval_timeout_seconds * 1000)
        taken = {h.tool_use_id for h in self.held.values() if h.sid == sid and h.tool_use_id}
        transcript = self._transcript(req.get("transcript_path"))
        offset = _size(transcript) if transcript is not None else 0  # before the first look
        tool_use_id, edit = await asyncio.to_thread(
            self._describe,
            req.get("transcript_path"),
            name,
            tool_input,
            taken,
            _text(cwd),
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MATCH_WAIT_S
        while tool_use_id is None and transcript is not None and loop.time() < deadline:
            # the CLI may flush its tool_use line just after calling the hook
            await asyncio.sleep(MATCH_POLL_S)
            call = await asyncio.to_thread(call_after, transcript, offset, name, tool_input, taken)
            if call is not None and not call[1]:
                tool_use_id = call[0]
        held = Held(
            key,
            sid,
            name,
            loop.create_future(),
            tool_use_id,
            saw_waiting=self._live.get(sid) == "waiting",
        )
        if tool_use_id is None and transcript is not None:
            held.rematch = lambda ids: call_after(transcript, offset, name, tool_input, ids)
        index = ap.pending_key(self.keys, sid)
        entry = orjson.dumps({"host": s.host_id, "name": name, "expiresAt": expires})
        ttl = int(s.approval_timeout_seconds) + ap.DECISION_GRACE_S
        self.held[key] = held
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.hset(index, key, entry)
            pipe.expire(index, ttl)
            await self._op(pipe.execute())
            frame = frames.permission_request(
                sid,
                request_key=key,
                tool_use_id=tool_use_id,
                name=name,
                tool_input=tool_input,
                edit=edit,
                expires_at=expires,
            )
            if not await self._publish(sid, frame, frames.PERMISSION_REQUEST, wait=True):
                await self._finish(held, (ap.CANCELLED, None), claim=True)
                return "unavailable", {}
            log.info("approvals: %s %s held as %s (tool %s)", sid, name, key, tool_use_id or "-")
            decision = await self._hold(held, expires, gone)
            decision = await self._finish(
                held, decision, claim=decision[0] not in ap.CLIENT_DECISIONS
            )
        finally:
            self.held.pop(key, None)
        log.info("approvals: %s %s: %s", sid, key, decision[0])
        if decision[0] == ap.ALLOW:
            return ap.ALLOW, {"behavior": ap.ALLOW}
        if decision[0] == ap.DENY:
            return ap.DENY, {
                "behavior": ap.DENY,
                "message": decision[1] or "Rejected from relaybus",
            }
        if decision[0] in (ap.TIMEOUT, ap.ANSWERED_ELSEWHERE):
            return decision[0], {}
        return ap.CANCELLED, {}

    async def _hold(self, held: Held, expires_ms: int, gone: asyncio.Future[bytes]) -> Decision:
        """Wait for the decision, the timeout, the hook leaving, or (watched) the watchers leaving."""
        unwatched_since: float | None = None
        loop = asyncio.get_running_loop()
        dkey = ap.decision_key(self.keys, held.key)
        while True:
            left = (expires_ms - _now_ms()) / 1000
            if left <= 0:
                return (ap.TIMEOUT, None)
            waits: set[asyncio.Future[Any]] = {held.decided, gone}
            await asyncio.wait(
                waits, timeout=min(POLL_S, left), return_when=asyncio.FIRST_COMPLETED
            )
            if held.decided.done():
                return held.decided.result()
            if gone.done():
                return (ap.CANCELLED, "the hook went away")
            if held.tool_use_id is None and held.rematch is not None:
                taken = {h.tool_use_id for h in self.held.values() if h.sid == held.sid}
                call = await asyncio.to_thread(held.rematch, {t for t in taken if t})
                if call is not None:
                    held.tool_use_id = call[0]
                    if call[1]:
                        return (ap.ANSWERED_ELSEWHERE, "answered in the terminal")
            try:
                found = ap.parse_decision(await self._op(self._redis.get(dkey)))
                watched = self.settings.approval_mode != "watched" or await self._watchers(held.sid)
            except (RedisError, OSError, TimeoutError) as exc:
                log.warning("approvals: Redis unavailable while holding %s: %s", held.key, exc)
                return (ap.CANCELLED, "storage unavailable")
            if found is not None:
                return found
            if self.settings.approval_mode == "watched":
                if watched:
                    unwatched_since = None
                elif unwatched_since is None:
                    unwatched_since = loop.time()
                elif loop.time() - unwatched_since >= UNWATCHED_GRACE_S:
                    return (ap.CANCELLED, "nobody is watching")

    async def _finish(self, held: Held, decision: Decision, *, claim: bool) -> Decision:
        """Record the end (first writer wins), drop the index entry, publish the resolution."""
        dkey = ap.decision_key(self.keys, held.key)
        ttl = ap.DECISION_GRACE_S + int(self.settings.approval_timeout_seconds)
        try:
            if claim and not await self._op(
                self._redis.set(dkey, ap.decision_record(*decision), nx=True, ex=ttl)
            ):
                # a client decided in the same instant: its decision stands
                decision = ap.parse_decision(await self._op(self._redis.get(dkey))) or decision
            # the pending entry and the session's "last resolved" change together, so a late
            # keyless decision sees one or the other (already_resolved, not no_pending_request)
            pipe = self._redis.pipeline(transaction=True)
            pipe.hdel(ap.pending_key(self.keys, held.sid), held.key)
            pipe.set(
                ap.resolved_key(self.keys, held.sid),
                ap.resolved_record(held.key, decision[0], _now_ms()),
                ex=max(1, math.ceil(self.settings.approval_timeout_seconds)),
            )
            await self._op(pipe.execute())
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("approvals: could not record the end of %s: %s", held.key, exc)
            if claim:
                decision = (ap.CANCELLED, None)
        self.held.pop(held.key, None)
        frame = frames.permission_resolved(
            held.sid, request_key=held.key, decision=decision[0], message=decision[1]
        )
        await self._publish(
            held.sid,
            frame,
            frames.PERMISSION_RESOLVED,
            wait=False,
            answered=decision[0] in ap.CLIENT_DECISIONS,
        )
        return decision

    # --- decisions pushed by gateways ----------------------------------------------------

    async def decide(self, cmd: Command) -> Reply:
        """``permission_decision`` command: the gateway already claimed the decision key."""
        key = cmd.payload.get("requestKey")
        decision = cmd.payload.get("decision")
        message = cmd.payload.get("message")
        if not isinstance(key, str) or decision not in ap.CLIENT_DECISIONS:
            return Reply.failure(cmd.id, INVALID, "bad permission_decision payload")
        held = self.held.get(key)
        if held is None or held.decided.done():
            return Reply.failure(cmd.id, ap.ALREADY_RESOLVED, "no such request is held here")
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
            if status == "waiting":
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

    # --- publishing through the engine task -------------------------------------------------

    async def _publish(
        self, sid: str, frame: bytes, kind: str, *, wait: bool, answered: bool = False
    ) -> bool:
        if len(self._queue) >= MAX_QUEUED:
            log.warning("approvals: publish queue full, dropping %s for %s", kind, sid)
            return False
        item = _Queued(sid, [OutEvent(kind, frame, session_stream=True)], answered=answered)
        if wait:
            item.published = asyncio.get_running_loop().create_future()
        self._queue.append(item)
        self.wake()
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

    async def apply(self, engine: Engine) -> None:
        """On the engine task: publish queued events with the session's turn change."""
        while self._queue:
            item = self._queue[0]
            if item.cancelled:
                self._queue.popleft()
                continue
            state = (await engine.pub.session(item.sid)).clone()
            events = list(item.events)
            h: dict[str, str] = {}
            change = state.turn.on_approval(
                self.waiting_for(item.sid), _now_ms(), answered=item.answered
            )
            while change is not None:
                events.append(turn_event(item.sid, change))
                h.update(turn_hash(change))
                change = state.turn.settle(_now_ms())
            await engine.pub.commit_session(state, events, h)
            self._queue.popleft()
            if item.published is not None and not item.published.done():
                item.published.set_result(None)

    # --- helpers ------------------------------------------------------------------------------

    @property
    def _redis(self) -> aioredis.Redis:
        if self._client is None:
            raise RedisError("approvals endpoint is not running")
        return self._client

    async def _op(self, aw: Awaitable[T]) -> T:
        return await asyncio.wait_for(aw, REDIS_OP_S)

    async def _watchers(self, sid: str) -> int:
        fields = await self._op(self._redis.hgetall(self.keys.session_watchers(sid)))
        return ap.live_watchers(fields, _now_ms())

    def _describe(
        self,
        transcript: Any,
        name: str,
        tool_input: dict[str, Any],
        taken: set[str],
        cwd: str | None,
    ) -> tuple[str | None, dict[str, Any] | None]:
        """(toolUseId of the matching unanswered ``tool`` block, edit preview); off the loop.

        The request is not trusted: the transcript is read only inside the claude dir (real
        paths), the preview reads files only under the session's own cwd (from Redis).
        """
        return self._match(transcript, name, tool_input, taken), ap.edit_preview(
            name, tool_input, root=cwd
        )

    def _match(
        self, transcript: Any, name: str, tool_input: dict[str, Any], taken: set[str]
    ) -> str | None:
        """The toolUseId of the open ``tool`` block this request is for (claude dir only)."""
        path = self._transcript(transcript)
        return None if path is None else match_tool_use(path, name, tool_input, taken=taken)

    def _transcript(self, transcript: Any) -> Path | None:
        """The request's transcript path, only when it really lies in the claude dir."""
        if isinstance(transcript, str) and os.path.isabs(transcript):
            real = os.path.realpath(transcript)
            root = os.path.realpath(self.settings.claude_dir)
            if os.path.commonpath([real, root]) == root:
                return Path(real)
        return None


def match_tool_use(
    path: Path,
    name: str,
    tool_input: dict[str, Any],
    *,
    taken: set[str] | frozenset[str] = frozenset(),
) -> str | None:
    """The ``tool`` block in the transcript's tail this request is for, if one is clear.

    Open calls (no result yet, not ``taken`` by another held request) with this name; of
    those the latest whose input is the same once normalised (Claude Code shows the hook its
    input with defaults added, e.g. ``"replace_all": false``), else the only one.
    """
    try:
        with open_regular(path) as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - TRANSCRIPT_TAIL_BYTES)
            f.seek(start)
            data = f.read()
    except OSError:
        return None
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first one is cut
    calls: list[tuple[str, Any]] = []
    answered: set[str] = set()
    for raw in lines:
        if not raw.strip():
            continue
        event = projection.project_line(raw, text_max_chars=len(raw) + 1).event
        for block in (event or {}).get("blocks", []):
            if block.get("kind") == "tool" and block.get("name") == name:
                calls.append((str(block.get("toolUseId")), block.get("input")))
            elif block.get("kind") == "tool_result":
                answered.add(str(block.get("toolUseId")))
    open_calls = [(t, i) for t, i in calls if t not in answered and t not in taken]
    same = [t for t, i in open_calls if isinstance(i, dict) and same_input(tool_input, i)]
    if same:
        return same[-1]
    return open_calls[0][0] if len(open_calls) == 1 else None


def call_after(
    path: Path, offset: int, name: str, tool_input: dict[str, Any], taken: set[str]
) -> tuple[str, bool] | None:
    """A ``tool`` block for this request written after ``offset`` (toolUseId, has a result).

    The latest call with the same (normalised) input, else the only one with this name.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(TRANSCRIPT_TAIL_BYTES)
    except OSError:
        return None
    calls: list[tuple[str, Any]] = []
    answered: set[str] = set()
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        event = projection.project_line(raw, text_max_chars=len(raw) + 1).event
        for block in (event or {}).get("blocks", []):
            if block.get("kind") == "tool" and block.get("name") == name:
                if str(block.get("toolUseId")) not in taken:
                    calls.append((str(block.get("toolUseId")), block.get("input")))
            elif block.get("kind") == "tool_result":
                answered.add(str(block.get("toolUseId")))
    same = [t for t, i in calls if isinstance(i, dict) and same_input(tool_input, i)]
    found = same[-1] if same else (calls[0][0] if len(calls) == 1 else None)
    return None if found is None else (found, found in answered)


def _size(path: Path) -> int:
    """The file's size now (0 when unreadable)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def same_input(hook: dict[str, Any], call: dict[str, Any]) -> bool:
    """Equal, counting a key present on one side only as equal when its value is empty/false."""
    for k in hook.keys() | call.keys():
        if k in hook and k in call:
            if hook[k] != call[k]:
                return False
        elif (hook.get(k) if k in hook else call.get(k)) not in (None, False, "", [], {}):
            return False
    return True


def _fields(req: Any) -> tuple[str | None, str | None, dict[str, Any] | None]:
    if not isinstance(req, dict):
        return None, None, None
    sid, name, tool_input = req.get("session_id"), req.get("tool_name"), req.get("tool_input")
    return (
        sid if valid_session_id(sid) else None,
        name if isinstance(name, str) and name and len(name) <= 256 else None,
        tool_input if isinstance(tool_input, dict) else None,
    )


async def _read_body(reader: asyncio.StreamReader) -> bytes | None:
    """The body of one ``POST /permission-request`` (``None`` for anything else)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[0] != "POST" or parts[1] != "/permission-request":
        return None
    length = -1
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if not 0 <= length <= BODY_MAX_BYTES:
        return None
    return await reader.readexactly(length)


def _text(raw: bytes | str | None) -> str | None:
    if isinstance(raw, bytes):
        return raw.decode(errors="replace") or None
    return raw or None


def _now_ms() -> int:
    return int(time.time() * 1000)
