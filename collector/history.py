"""Sessions older than the backfill window: listed at once, their history loaded on demand.

A transcript last written more than ``backfill_max_age_hours`` ago is registered, not
replayed: its offset is committed at the end of its last complete line (so none of its
lines is ever published by the tailer) and, when it has something to show, its session
hash is written with ``historyLoaded=0`` and ``historyEnd`` (that committed value). The
session is then listed with its cwd, title and last activity, and nothing else.

When a client watches it, the gateway sends a ``load_history`` command; the command task
hands it to the engine task (the collector's single writer) through its inbox
(:class:`HistoryRequests`), and ``FileSync.load_history`` publishes the session events of
the last ``replay_depth`` lines before ``historyEnd`` (:func:`history_events`) together
with ``historyLoaded=1``, in one atomic append. Lines after
``historyEnd`` belong to the tailer, lines before it only to this loader, and the flag is
read and written by the one engine task: history is published at most once, and never
overlaps what the tailer publishes. When the session is resumed before anyone watched it,
the tailer loads the history first, so it precedes the new lines.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass

from relaybus.collector import backfill
from relaybus.collector.inbox import Inbox, SessionWriter
from relaybus.collector.projector import Projector
from relaybus.collector.session_state import SessionState
from relaybus.collector.tailer import FileTail, Line
from relaybus.collector.tracked import FileEntry
from relaybus.shared.aio import now_ms
from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.store.session_row import Field
from relaybus.shared.transcript import projection
from relaybus.shared.wire.commands import Command, Reply
from relaybus.shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

#: Hash fields a listing never writes: an old session is neither live nor working.
_NOT_LISTED = frozenset(
    {
        Field.STATE,
        Field.SINCE,
        Field.WAITING_FOR,
        Field.LIVE,
        Field.ENDED,
        Field.STARTED_AT,
        Field.PID,
    }
)
#: Bytes scanned backwards for an old session's tail (a listing, or its history).
TAIL_MAX_BYTES = 16 * 1024 * 1024
#: Lines read per wanted event at first (bookkeeping lines publish nothing).
LINES_PER_EVENT = 3
#: Lines of an old transcript's head and tail read to list it (first prompt, cwd, title,
#: activity), then more of the tail (up to ``LISTING_MAX_LINES``) only while none of them
#: has anything to show.
LISTING_LINES = 64
LISTING_MAX_LINES = 4096


def _tail_lines(
    entry: FileEntry, end: int, n_lines: int, max_line_bytes: int, *, head: int = 0
) -> list[Line]:
    """The complete lines in the last ``TAIL_MAX_BYTES`` before ``end``, at most ``n_lines``,
    preceded by the file's first ``head`` lines (where the first prompt is) when not among them.
    """
    path = entry.tail.path
    try:
        start = backfill.tail_start(
            path, end, lines=n_lines, max_bytes=TAIL_MAX_BYTES, identity=entry.tail.identity
        )
    except OSError as exc:  # gone, replaced, or a FIFO swapped in: the tailer's check sees it
        log.info("file %s: no history read: %s", entry.tp.key, exc)
        return []
    out: list[Line] = []
    if head and start > 0:
        first = FileTail(path, entry.tail.identity, 0)
        lines = first.read(max_lines=head, max_bytes=4 << 20, max_line_bytes=max_line_bytes)
        out = [ln for ln in lines if ln.end <= start]
    cursor = FileTail(path, entry.tail.identity, start)
    while cursor.offset < end:
        lines = cursor.read(max_lines=10_000, max_bytes=4 << 20, max_line_bytes=max_line_bytes)
        lines = [ln for ln in lines if ln.end <= end]
        if not lines:
            break
        out.extend(lines)
        cursor.commit(lines[-1].end)
    return out


def listing(
    projector: Projector, entry: FileEntry, state: SessionState, end: int, mtime: float
) -> tuple[dict[str, str], int | None]:
    """Hash fields and activity (ms) that list an old main transcript, or ``({}, None)``.

    Nothing is listed for a sub-agent file or a tail with nothing to show (the caller
    skips a session whose history was published before: its hash has ``lastSeqId``).
    """
    if entry.sid is None or entry.tp.agent_id is not None or end <= 0:
        return {}, None
    max_line_bytes = projector.settings.max_line_bytes
    n_lines = LISTING_LINES
    while True:  # a short tail first: most have something to show in their last lines
        lines = _tail_lines(entry, end, n_lines, max_line_bytes, head=LISTING_LINES)
        plan = projector.plan(state, collapse=True)
        facts = projector.feed(plan, lines)
        plan.finish()
        if plan.published or len(lines) < n_lines + LISTING_LINES or n_lines >= LISTING_MAX_LINES:
            break
        n_lines *= 8
    if plan.published == 0 or plan.hash.get(Field.HAS_CONTENT) == "0":
        return {}, None  # nothing to show (the projection's verdict, where it gives one)
    mtime_ms = int(mtime * 1000)
    activity = min(plan.activity_ms or mtime_ms, mtime_ms)
    if activity < now_ms() - projector.settings.session_ttl_s * 1000:
        return {}, None  # older than the TTL: the sessions zset would keep it otherwise
    h = {k: v for k, v in plan.hash.items() if k not in _NOT_LISTED}
    started = _started_at(lines, facts)
    if started is not None:
        h[Field.STARTED_AT] = str(started)
    ident = entry.tail.identity
    h.update(
        {
            Field.LAST_ACTIVITY: str(activity),
            Field.HISTORY_LOADED: "0",
            Field.HISTORY_END: backfill.offset_value(end, ident.dev, ident.ino),
        }
    )
    return h, activity


def _started_at(lines: list[Line], facts: list[projection.Projected]) -> int | None:
    """The first timestamp of the transcript (ms), when ``lines`` begin at its start."""
    if not lines or lines[0].end - lines[0].size - 1 > 0:
        return None
    return next((p.timestamp_ms for p in facts if p.timestamp_ms is not None), None)


def history_events(
    projector: Projector, entry: FileEntry, state: SessionState, end: int
) -> list[OutEvent]:
    """The session events of the last ``replay_depth`` publishable lines before ``end``."""
    depth = projector.settings.replay_depth
    if depth <= 0:
        return []
    plan = projector.plan(state, agent_id=None)
    n_lines = depth * LINES_PER_EVENT
    while True:
        lines = _tail_lines(entry, end, n_lines, projector.settings.max_line_bytes)
        facts, _ = projector.project(lines)
        kept: collections.deque[OutEvent] = collections.deque(maxlen=depth)
        for p in facts:
            ev = plan.encode(p)
            if ev is not None:
                kept.append(ev)
        whole = not lines or lines[0].end - lines[0].size - 1 <= 0
        if len(kept) >= depth or whole or len(lines) < n_lines:
            return list(kept)
        n_lines *= 4


@dataclass(slots=True)
class HistoryLoad:
    """A ``load_history`` for the engine's inbox; ``done`` gets the events published."""

    sid: str
    done: asyncio.Future[int]

    async def apply(self, writer: SessionWriter) -> None:
        published = await writer.load_history(self.sid)
        if not self.done.done():
            self.done.set_result(published)


class HistoryRequests:
    """``load_history`` commands (the command task), loaded by the engine task.

    A request is dropped only once its load succeeded, so a Redis outage delays it
    instead of losing it.
    """

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox

    async def handle(self, cmd: Command) -> Reply:
        if not cmd.session_id:
            return Reply.failure(
                cmd.id, ErrorCode.INVALID_MESSAGE, "load_history needs a session id"
            )
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if not self._inbox.put(HistoryLoad(cmd.session_id, fut)):
            return Reply.failure(cmd.id, ErrorCode.BUSY, "the collector is too busy")
        timeout_s = max(0.1, (cmd.deadline_ms - now_ms()) / 1000)
        try:
            published = await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return Reply.failure(cmd.id, ErrorCode.TIMEOUT, "the history was not loaded in time")
        return Reply(cmd.id, True, data={"published": published})
