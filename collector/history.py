"""Sessions older than the backfill window: listed at once, their history loaded on demand.

A transcript last written more than ``backfill_max_age_hours`` ago is registered, not
replayed: its offset is committed at the end of its last complete line (so none of its
lines is ever published by the tailer) and, when it has something to show, its session
hash is written with ``historyLoaded=0`` and ``historyEnd`` (that committed value). The
session is then listed with its cwd, title and last activity, and nothing else.

When a client watches it, the gateway sends a ``load_history`` command; the command task
hands it to the engine task (the collector's single writer) through :class:`HistoryRequests`,
and :func:`load` publishes the session events of the last ``replay_depth`` lines before
``historyEnd`` together with ``historyLoaded=1``, in one atomic append. Lines after
``historyEnd`` belong to the tailer, lines before it only to this loader, and the flag is
read and written by the one engine task: history is published at most once, and never
overlaps what the tailer publishes. When the session is resumed before anyone watched it,
the tailer loads the history first (:func:`load` from ``FileSync``), so it precedes the new
lines.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from relaybus.collector import backfill
from relaybus.collector.tailer import FileTail, Line
from relaybus.shared.store.appendlog import AppendBatch, OutEvent
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command, Reply

if TYPE_CHECKING:
    from relaybus.collector.engine import Engine
    from relaybus.collector.files import FileEntry, FileSync

log = logging.getLogger(__name__)

#: Session hash fields (strings): "0" while the history was never published.
HISTORY_LOADED = "historyLoaded"
#: The committed offset value (``end:dev:ino``) the history ends at.
HISTORY_END = "historyEnd"
#: Hash fields a listing never writes: an old session is neither live nor working.
_NOT_LISTED = frozenset({"state", "since", "waitingFor", "live", "ended", "startedAt", "pid"})
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
    start = backfill.tail_start(path, end, lines=n_lines, max_bytes=TAIL_MAX_BYTES)
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


async def listing(
    fs: FileSync, entry: FileEntry, end: int, mtime: float
) -> tuple[dict[str, str], int | None]:
    """Hash fields and activity (ms) that list an old main transcript, or ``({}, None)``.

    Nothing is listed for a sub-agent file, a session whose history was published before
    (its hash has ``lastSeqId``), or a tail with nothing to show.
    """
    sid = entry.sid
    if sid is None or entry.tp.agent_id is not None or end <= 0:
        return {}, None
    if await fs.pub.client.hexists(fs.pub.keys.session(sid), "lastSeqId"):
        return {}, None
    state = await fs.pub.session(sid)
    n_lines = LISTING_LINES
    while True:  # a short tail first: most have something to show in their last lines
        lines = _tail_lines(entry, end, n_lines, fs.settings.max_line_bytes, head=LISTING_LINES)
        facts, _ = fs._project(lines)
        plan = fs.plan(state, collapse=True, agent_id=None)
        plan.prime(facts)
        for p in facts:
            plan.line(p)
        plan.finish()
        if plan.published or len(lines) < n_lines + LISTING_LINES or n_lines >= LISTING_MAX_LINES:
            break
        n_lines *= 8
    if plan.published == 0 or plan.hash.get("hasContent") == "0":
        return {}, None  # nothing to show (the projection's verdict, where it gives one)
    mtime_ms = int(mtime * 1000)
    activity = min(plan.activity_ms or mtime_ms, mtime_ms)
    h = {k: v for k, v in plan.hash.items() if k not in _NOT_LISTED}
    ident = entry.tail.identity
    h.update(
        {
            "lastActivity": str(activity),
            HISTORY_LOADED: "0",
            HISTORY_END: backfill.offset_value(end, ident.dev, ident.ino),
        }
    )
    return h, activity


def _main_entry(fs: FileSync, sid: str) -> FileEntry | None:
    for entry in fs.files.values():
        if entry.sid == sid and entry.tp.agent_id is None:
            return entry
    return None


async def _history_events(fs: FileSync, entry: FileEntry, end: int) -> list[OutEvent]:
    """The session events of the last ``replay_depth`` publishable lines before ``end``."""
    depth = fs.settings.replay_depth
    if depth <= 0:
        return []
    plan = fs.plan(await fs.pub.session(entry.tp.session_id or ""), agent_id=None)
    n_lines = depth * LINES_PER_EVENT
    while True:
        lines = _tail_lines(entry, end, n_lines, fs.settings.max_line_bytes)
        facts, _ = fs._project(lines)
        kept: collections.deque[OutEvent] = collections.deque(maxlen=depth)
        for p in facts:
            ev = plan.encode(p)
            if ev is not None:
                kept.append(ev)
        whole = not lines or lines[0].end - lines[0].size - 1 <= 0
        if len(kept) >= depth or whole or len(lines) < n_lines:
            return list(kept)
        n_lines *= 4


async def load(fs: FileSync, sid: str) -> int:
    """Publish a registered session's history once; the number of events published."""
    pub = fs.pub
    loaded, end_value = await pub.client.hmget(pub.keys.session(sid), [HISTORY_LOADED, HISTORY_END])
    entry = _main_entry(fs, sid)
    if entry is not None:
        entry.history_pending = False
    if loaded != b"0":
        return 0
    parsed = backfill.parse_offset(end_value.decode() if isinstance(end_value, bytes) else "")
    events: list[OutEvent] = []
    if entry is not None and parsed is not None:
        end, dev, ino = parsed
        ident = entry.tail.identity
        if (dev, ino) == (ident.dev, ident.ino):
            started = time.perf_counter()
            events = await _history_events(fs, entry, end)
            log.info(
                "session %s: history of %d events loaded on demand in %.0f ms",
                sid,
                len(events),
                (time.perf_counter() - started) * 1000,
            )
    try:
        await pub.append(AppendBatch(sid, events, hash_updates={HISTORY_LOADED: "1"}))
    except BaseException:
        if entry is not None:
            entry.history_pending = True
        raise
    fs.metrics.lines_published.inc(len(events))
    return len(events)


class HistoryRequests:
    """``load_history`` commands, handed from the command task to the engine task.

    :meth:`handle` is the command handler (command task); :meth:`apply` runs them in the
    engine task. A request is dropped only once its load succeeded, so a Redis outage
    delays it instead of losing it.
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._pending: collections.deque[tuple[str, asyncio.Future[int]]] = collections.deque()

    async def handle(self, cmd: Command) -> Reply:
        if not cmd.session_id:
            return Reply.failure(cmd.id, c.INVALID, "load_history needs a session id")
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append((cmd.session_id, fut))
        self._wake()
        timeout_s = max(0.1, (cmd.deadline_ms - c.now_ms()) / 1000)
        try:
            published = await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return Reply.failure(cmd.id, c.TIMEOUT, "the history was not loaded in time")
        return Reply(cmd.id, True, data={"published": published})

    async def apply(self, engine: Engine) -> None:
        while self._pending:
            sid, fut = self._pending[0]
            published = await load(engine.filesync, sid)
            self._pending.popleft()
            if not fut.done():
                fut.set_result(published)
