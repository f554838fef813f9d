"""One transcript after another: open, backfill, drain, exactly once.

:class:`FileSync` owns the file cursors; the session states belong to the engine
(:class:`SessionOwner`), which it runs for on the engine task: it reads a state from the
engine and hands back each state Redis accepted. For each file it reads complete lines
from the committed offset, projects them, plans the session events and appends them
atomically with the new offset; the next batch is prepared while Redis runs the previous
one. Refusals (:class:`~relaybus.shared.store.appendlog.EpochChanged`) and connection
errors propagate to the driver; an :class:`~relaybus.shared.store.appendlog.OffsetConflict`
is settled here by adopting the committed offset, so nothing is published twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from relaybus.collector import backfill, backfill_read, history
from relaybus.collector.batch_plan import BatchPlan
from relaybus.collector.open_files import OpenFiles
from relaybus.collector.paths import TranscriptPath, classify
from relaybus.collector.projector import Projector
from relaybus.collector.publisher import Publisher
from relaybus.collector.session_state import SessionState, line_event
from relaybus.collector.tailer import FileTail, Line, Probe, Status, Tip, probe
from relaybus.collector.tracked import Acked, FileEntry, bus_error, stamp
from relaybus.shared.store.appendlog import AppendBatch, Appended, OffsetConflict, OutEvent, Sent
from relaybus.shared.store.session_row import Field
from relaybus.shared.transcript import projection
from relaybus.shared.wire.ids import valid_session_id

log = logging.getLogger(__name__)

#: Stop adding lines to a batch once it holds about this many raw bytes.
BATCH_MAX_BYTES = 4 * 1024 * 1024
#: Lines read to find a legacy sub-agent file's parent session id.
SID_PROBE_LINES = 50
#: A file set aside after a failure of its own is tried again after this long even unchanged.
RETRY_S = 60.0


@dataclass(slots=True)
class _Pending:
    """A batch sent (or about to be) and what it will make true once Redis accepts it."""

    batch: AppendBatch
    plan: BatchPlan
    start: int
    end: int
    value: str
    #: its lines, whose :class:`Tip` is taken once it is accepted (not before the send)
    lines: list[Line]
    sent: Sent | None = None


class SessionOwner(Protocol):
    """The engine, as the files see it: it owns the session states (``relaybus.collector.engine``)."""

    async def session(self, sid: str) -> SessionState:
        """The session's current state (not to be changed: plans work on a copy)."""

    def accepted(self, state: SessionState, tool_results: list[str]) -> None:
        """Redis accepted a batch that leaves the session in ``state``."""

    def forget(self, sid: str | None = None) -> None:
        """Reload a session (``None``: every session) from its hash when next needed."""


class FileSync:
    """The transcripts this collector tracks, by file key, and how each is published."""

    def __init__(
        self, publisher: Publisher, projector: Projector, owner: SessionOwner, root: Path
    ) -> None:
        self.settings = projector.settings
        self.pub = publisher
        self.metrics = projector.metrics
        self.projector = projector
        self.owner = owner
        self.root = root
        self.files: dict[str, FileEntry] = {}
        #: The tracked files kept open between reads (bounded; closed when idle).
        self.open_files = OpenFiles()
        #: Files set aside after a failure of their own, by key: (the stat they failed
        #: with, when): tried again when the file changes or after :data:`RETRY_S`.
        self.failed: dict[str, tuple[tuple[int, int, int, float] | None, float]] = {}
        #: Files a failover rewound (:meth:`verify`) that the driver must read again.
        self._reread: set[Path] = set()
        self._real_root = os.path.realpath(root)

    def _inside(self, path: Path) -> bool:
        """The file's directory, symlinks resolved, is still inside the claude dir."""
        real = os.path.realpath(path.parent)
        return os.path.commonpath([real, self._real_root]) == self._real_root

    async def sync_path(
        self, path: Path, *, initial: bool = False, max_batches: int | None = None
    ) -> bool:
        """Publish what is new in one file, at most ``max_batches`` batches (None: all).

        True when the file has more to read (the caller comes back to it after the others).
        A failure that belongs to this file alone (a refused append, an unreadable name or
        content) is logged and the file is set aside until it changes (or :data:`RETRY_S`
        passed): one bad file never stops the others. Failures of the bus itself (connection, epoch) propagate.
        """
        tp = classify(self.root, path)
        if tp is None:
            return False
        if tp.key in self.failed:
            failed_at, since = self.failed[tp.key]
            if failed_at == stamp(path) and time.monotonic() - since < RETRY_S:
                return False
            del self.failed[tp.key]
        try:
            entry = self.files.get(tp.key)
            if entry is None:
                entry = await self._open(path, tp, initial=initial)
                if entry is None:
                    return False
                self.files[tp.key] = entry
            return await self._drain(entry, max_batches)
        except Exception as exc:
            if bus_error(exc):
                raise
            self.failed[tp.key] = (stamp(path), time.monotonic())
            self._untrack(tp.key)
            self.metrics.file_errors.inc()
            log.warning("file %s: set aside until it changes: %r", tp.key, exc, exc_info=exc)
            return False

    async def _open(self, path: Path, tp: TranscriptPath, *, initial: bool) -> FileEntry | None:
        p = probe(path)
        if p is None or p.identity is None:
            return None
        if not self._inside(path):
            log.warning("file %s: its directory leads out of %s; not read", tp.key, self.root)
            self.failed[tp.key] = (stamp(path), time.monotonic())
            return None
        committed = await self.pub.committed(tp.key)
        entry = FileEntry(tp, FileTail(path, p.identity, 0, hold=True), committed, tp.session_id)
        if entry.sid is None:
            entry.sid = self._resolve_sid(entry)
        parsed = backfill.parse_offset(committed)
        if parsed is not None and parsed[2] == p.identity.ino:
            entry.tail.offset = parsed[0]
            entry.tail.tip = entry.tail.read_tip(parsed[0])
            # Perhaps registered by an earlier run without its history: checked (one HMGET)
            # before its first new line, so a resumed old session shows its history first.
            entry.history_pending = tp.agent_id is None
            log.debug("file %s: resuming at offset %d", tp.key, parsed[0])
        elif initial or parsed is not None:
            await self._backfill(entry, p.size, p.mtime)
        else:
            log.info("file %s: new, publishing from the start", tp.key)
        return entry

    def _resolve_sid(self, entry: FileEntry) -> str | None:
        """A legacy ``agent-*.jsonl`` sibling: its parent session from its records."""
        probe_tail = FileTail(entry.tail.path, entry.tail.identity, 0)
        for line in probe_tail.read(
            max_lines=SID_PROBE_LINES, max_bytes=BATCH_MAX_BYTES, max_line_bytes=1 << 20
        ):
            if line.raw is not None:
                sid = projection.project_line(line.raw).session_id
                if sid:
                    return sid if valid_session_id(sid) else None
        return None

    async def _backfill(self, entry: FileEntry, size: int, mtime: float) -> None:
        s = self.settings
        tail, key = entry.tail, entry.tp.key
        end = backfill.last_line_end(tail.path, size)
        ident = tail.identity
        if entry.sid is None or not backfill.wants_history(
            mtime, time.time(), max_age_hours=s.backfill_max_age_hours, events=s.backfill_events
        ):
            await self._register(entry, end, mtime)
            return
        state = await self.owner.session(entry.sid)
        agent, parent = entry.tp.agent_id, entry.parent_tool_use_id()

        def new_plan() -> BatchPlan:
            return self.projector.plan(state, collapse=True, agent_id=agent, parent=parent)

        abandon = threading.Event()
        try:
            # In a thread: a huge file takes seconds, and the heartbeat, the commands and the
            # approvals keep their loop meanwhile (the engine task waits here; the plan works
            # on copies of the state, which only the engine task changes).
            read = await asyncio.to_thread(
                backfill_read.collapse,
                self.projector,
                new_plan,
                tail.path,
                ident,
                end,
                abandon=abandon,
            )
            plan = read.plan
            tail.offset = read.end
            value = backfill.offset_value(tail.offset, ident.dev, ident.ino)
            batch = AppendBatch(
                entry.sid, plan.events, key, entry.committed, value, plan.hash, plan.activity_ms
            )
            done = await self.pub.append(batch)
        except OffsetConflict as exc:
            tail.offset = 0
            await self._conflict(entry, exc.committed)
            return
        except BaseException:
            abandon.set()  # cancelled (the collector stops): the thread ends at its next batch
            tail.offset = 0
            raise
        self.owner.accepted(plan.state, [])
        entry.committed = value
        tail.tip = tail.read_tip(tail.offset)
        _remember(entry, done, tail.offset)
        self.metrics.lines_published.inc(plan.published)
        log.info(
            "file %s: backfilled %d events of %d lines (%d projected, window from %d) into session %s",
            key,
            len(plan.events),
            read.lines,
            read.projected,
            read.window,
            entry.sid,
        )

    async def _register(self, entry: FileEntry, end: int, mtime: float) -> None:
        """Commit the offset at the file's end; list the session (``relaybus.collector.history``)."""
        tail, key, ident = entry.tail, entry.tp.key, entry.tail.identity
        listed: dict[str, str] = {}
        activity: int | None = None
        main = entry.sid is not None and entry.tp.agent_id is None and end > 0
        if main and not await self.pub.client.hexists(
            self.pub.keys.session(entry.sid or ""), Field.LAST_SEQ_ID
        ):  # a main transcript whose history was never published
            state = await self.owner.session(entry.sid or "")
            listed, activity = history.listing(self.projector, entry, state, end, mtime)
        value = backfill.offset_value(end, ident.dev, ident.ino)
        batch = AppendBatch(entry.sid or "", [], key, entry.committed, value, listed, activity)
        try:
            await self.pub.append(batch)
        except OffsetConflict as exc:
            await self._conflict(entry, exc.committed)
            return
        tail.commit(end)
        entry.committed = value
        tail.tip = tail.read_tip(end)
        if listed and entry.sid:
            entry.history_pending = True
            self.owner.forget(entry.sid)  # reloaded from the hash just written
        log.debug("file %s: registered at offset %d (listed: %s)", key, end, bool(listed))

    async def _drain(self, entry: FileEntry, max_batches: int | None = None) -> bool:
        """Publish what is new in one file, one batch in flight while the next is prepared.

        Stops after ``max_batches`` batches (None: when nothing is left); True when the
        file still has unread lines then.

        The next batch is read, projected and planned while Redis runs the previous one; it
        is sent only after that one succeeded. Its expected offset is the previous batch's
        new value, so even a mistake here could never publish a line twice.
        """
        tail = entry.tail
        pending: _Pending | None = None
        sent = 0
        more = False
        try:
            while True:
                if sent and not tail.has_unread:
                    break  # caught up with the size read: what is appended since wakes us again
                pr = tail.check()
                if pr.status is not Status.SAME:
                    if pending is not None:
                        done, pending = pending, None
                        if not await self._settle(entry, done):
                            return False
                    if not self._follow(entry, pr.status, pr):
                        return False
                    if entry.tail.restarted is None and not await self._rebind(entry):
                        return False
                if not tail.has_unread:
                    break
                if max_batches is not None and sent >= max_batches:
                    more = True
                    break
                if entry.sid is None:
                    entry.sid = self._resolve_sid(entry)
                    if entry.sid is None:
                        break
                lines = tail.read(
                    max_lines=self.settings.batch_max_lines,
                    max_bytes=BATCH_MAX_BYTES,
                    max_line_bytes=self.settings.max_line_bytes,
                    size=pr.size,  # this iteration's check: the held descriptor's size
                )
                self.open_files.read(tail, time.monotonic())
                if not lines:
                    break
                if entry.history_pending and pending is None:
                    await self.load_history(entry.sid)  # resumed: its history goes first
                nxt = await self._prepare(entry, entry.sid, lines, pending)
                if pending is not None:
                    done, pending = pending, None
                    if not await self._settle(entry, done):
                        return False
                pending = nxt  # rewound from if the send fails
                nxt.sent = await self.pub.send(nxt.batch)
                sent += 1
            if pending is not None:
                done, pending = pending, None
                if not await self._settle(entry, done):
                    return False
            return more
        except BaseException:
            if pending is not None:
                if pending.sent is not None:
                    self.pub.abandon(pending.sent)  # its outcome is settled by the rewind
                tail.rewind(pending.start)
            raise

    def _follow(self, entry: FileEntry, status: Status, pr: Probe) -> bool:
        """React to a deleted, replaced or truncated file; False when it is gone."""
        key = entry.tp.key
        if status is Status.MISSING or pr.identity is None:
            log.info("file %s: gone", key)
            self._untrack(key)
            return False
        entry.acked.clear()  # offsets of the old content: no longer comparable
        if status is Status.REPLACED and entry.tail.continued_by(pr.identity):
            log.info("file %s: replaced by a copy of what was published; continuing", key)
            entry.tail.reset(pr.identity, entry.tail.offset)
            return True
        if status is Status.REPLACED:
            log.warning("file %s: replaced by other content, reading from the start", key)
            why = "replaced by a file that does not hold what was published"
        else:
            log.warning(
                "file %s: truncated to %d < %d, reading from the start",
                key,
                pr.size,
                entry.tail.offset,
            )
            why = "truncated"
        published = entry.tail.offset > 0
        entry.tail.reset(pr.identity, 0)
        entry.tail.restarted = why if published else None
        return True

    def _untrack(self, key: str) -> None:
        entry = self.files.pop(key, None)
        if entry is not None:
            self.open_files.close(entry.tail)

    def clear(self) -> None:
        """Forget every file (their descriptors closed)."""
        self.open_files.close_all()
        self.files.clear()

    async def _rebind(self, entry: FileEntry) -> bool:
        """Commit the continued offset under the replacing file's identity (so a restarted
        collector resumes there too). False after a conflict."""
        tail = entry.tail
        ident = tail.identity
        value = backfill.offset_value(tail.offset, ident.dev, ident.ino)
        batch = AppendBatch(entry.sid or "", [], entry.tp.key, entry.committed, value)
        try:
            await self.pub.append(batch)
        except OffsetConflict as exc:
            await self._conflict(entry, exc.committed)
            return False
        entry.committed = value
        return True

    async def _prepare(
        self, entry: FileEntry, sid: str, lines: list[Line], after: _Pending | None
    ) -> _Pending:
        """Plan a batch on the state the batch in flight (if any) will leave."""
        state = after.plan.state if after is not None else await self.owner.session(sid)
        plan = self.projector.plan_batch(
            state,
            lines,
            agent_id=entry.tp.agent_id,
            parent=entry.parent_tool_use_id(),
            encode=True,
        )
        if entry.tail.restarted is not None and entry.tail.offset == 0:
            plan.events.insert(
                0, line_event(sid, restart_event(entry.tp.key, entry.tail.restarted))
            )
            entry.tail.restarted = None
        ident = entry.tail.identity
        end = lines[-1].end
        value = backfill.offset_value(end, ident.dev, ident.ino)
        expected = after.value if after is not None else entry.committed
        batch = AppendBatch(
            sid, plan.events, entry.tp.key, expected, value, plan.hash, plan.activity_ms
        )
        start = entry.tail.offset
        entry.tail.commit(end)
        return _Pending(batch, plan, start, end, value, lines)

    async def _settle(self, entry: FileEntry, done: _Pending) -> bool:
        """Wait for a batch; on success make its state current. False after a conflict."""
        assert done.sent is not None
        try:
            appended = await self.pub.result(done.sent)
        except OffsetConflict as exc:
            entry.tail.rewind(done.start)
            await self._conflict(entry, exc.committed)
            return False
        except BaseException:
            entry.tail.rewind(done.start)
            raise
        self.owner.accepted(done.plan.state, done.plan.tool_results)
        entry.committed = done.value
        entry.tail.tip = Tip.of_lines(done.lines)
        _remember(entry, appended, done.end)
        self.metrics.batch_lines.observe(len(done.lines))
        self.metrics.lines_published.inc(done.plan.published)
        return True

    async def _conflict(self, entry: FileEntry, committed: str) -> None:
        """Redis holds another offset than the batch expected: adopt it. Behind an append
        Redis acknowledged, a failover lost entries: :meth:`verify` every file first."""
        if entry.first_lost(committed) is not None:
            await self.verify(entry)  # adopts it with the others
        else:
            self._adopt(entry, committed)

    async def verify(self, also: FileEntry | None = None) -> None:
        """Compare the committed offsets Redis holds with this collector's (one HMGET).

        Files behind an append Redis acknowledged lost entries in a failover (the promoted
        replica never got them). Nobody else may know: every gateway that sent them may be
        gone. The rewind is recorded from the lowest lost seq (``relaybus.shared.store.rewinds``)
        before any of those files is read again from the offset Redis holds (the files are
        the source of truth); :meth:`take_reread` then hands them to the driver.
        """
        entries = list(self.files.values())
        if also is not None and also not in entries:
            entries.append(also)
        if not entries:
            return
        values = await self.pub.committed_all([e.tp.key for e in entries])
        behind = [
            (lost, e, v)
            for e, v in zip(entries, values, strict=True)
            if v != e.committed and (lost := e.first_lost(v)) is not None
        ]
        if not behind:
            return
        first = min((lost for lost, _, _ in behind), key=lambda a: a.first_seq)
        await self.pub.record_rewind(first.gen, first.first_seq)
        for _, e, v in behind:
            self._adopt(e, v, lost=True)
            if e.tp.key in self.files:
                self._reread.add(e.tail.path)

    def take_reread(self) -> set[Path]:
        """The files a failover rewound since the last call, to be read again."""
        taken, self._reread = self._reread, set()
        return taken

    def _adopt(self, entry: FileEntry, committed: str, *, lost: bool = False) -> None:
        """Someone (our own earlier self, whose reply was lost) committed already, or a
        failover ``lost`` appends (none left committed: the file is read from its start)."""
        parsed = backfill.parse_offset(committed)
        ident = entry.tail.identity
        log.info("file %s: committed offset is %s, adopting it", entry.tp.key, committed or "none")
        entry.committed = committed
        entry.acked.clear()
        if parsed is not None and parsed[2] == ident.ino:
            entry.tail.reset(ident, parsed[0])
            entry.tail.tip = entry.tail.read_tip(parsed[0])
        elif lost and not committed:
            entry.tail.reset(ident, 0)
        self.owner.forget()

    async def load_history(self, sid: str) -> int:
        """Publish a registered session's history once (``relaybus.collector.history``);
        the number of events published."""
        loaded, end_value = await self.pub.client.hmget(
            self.pub.keys.session(sid), [Field.HISTORY_LOADED, Field.HISTORY_END]
        )
        entry = next(
            (e for e in self.files.values() if e.sid == sid and e.tp.agent_id is None), None
        )
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
                state = await self.owner.session(entry.tp.session_id or "")
                events = history.history_events(self.projector, entry, state, end)
                log.info(
                    "session %s: history of %d events loaded on demand in %.0f ms",
                    sid,
                    len(events),
                    (time.perf_counter() - started) * 1000,
                )
        try:
            await self.pub.append(
                AppendBatch(sid, events, hash_updates={Field.HISTORY_LOADED: "1"})
            )
        except BaseException:
            if entry is not None:
                entry.history_pending = True
            raise
        self.metrics.lines_published.inc(len(events))
        return len(events)


def restart_event(key: str, why: str) -> dict[str, Any]:
    """The ``session_event`` announcing that a transcript is published again from its start
    (``system``/``relaybus_transcript_reset``: its lines may repeat earlier ones)."""
    text = f"relaybus: the transcript file {key} was {why}; its lines are published again"
    return {
        "type": "system",
        "subtype": "relaybus_transcript_reset",
        "file": key,
        "reason": why,
        "blocks": [{"kind": "text", "text": text}],
        "data": {"type": "system", "subtype": "relaybus_transcript_reset", "content": text},
    }


def _remember(entry: FileEntry, done: Appended, end: int) -> None:
    """Keep an acknowledged append that carried events (:meth:`FileSync.verify`)."""
    if done.first_seq:
        entry.acked.append(Acked(end, entry.tail.identity.ino, done.first_seq, done.gen))
