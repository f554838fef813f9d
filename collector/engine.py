"""What the collector does on each wake-up: sync files, live processes and timers.

One :class:`Engine` per collector, driven by one task (see ``relaybus.collector.service``):
the files (:class:`~relaybus.collector.files.FileSync`), the live-process files, the
session timers (turn backstop, idle end) and the changes other tasks queued in its
:class:`~relaybus.collector.inbox.Inbox`. The engine owns the session states
(:class:`~relaybus.collector.session_cache.SessionCache`); every write goes through the
:class:`~relaybus.collector.publisher.Publisher`, from this one task.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from relaybus.collector import procfiles
from relaybus.collector.disk_scan import DiskScan
from relaybus.collector.files import FileSync
from relaybus.collector.inbox import Inbox
from relaybus.collector.metrics import CollectorMetrics
from relaybus.collector.projector import Projector
from relaybus.collector.publisher import Publisher
from relaybus.collector.session_cache import SessionCache
from relaybus.collector.session_state import SessionState, SessionUpdate
from relaybus.collector.tracked import FileEntry
from relaybus.shared.aio import now_ms
from relaybus.shared.settings import Settings
from relaybus.shared.store.appendlog import AppendBatch, OutEvent
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire.ids import valid_session_id

log = logging.getLogger(__name__)


class SessionObserver(Protocol):
    """Told, on the engine task, what the files show (``relaybus.collector.approvals`` listens)."""

    def live_status(self, sid: str, status: str | None) -> None:
        """The live-process file's status (``None``: no file any more)."""

    def tool_results(self, sid: str, tool_use_ids: list[str]) -> None:
        """Tool results just published from the session's transcripts."""


class Engine:
    def __init__(
        self,
        settings: Settings,
        publisher: Publisher,
        metrics: CollectorMetrics,
        *,
        inbox: Inbox | None = None,
        observers: Sequence[SessionObserver] = (),
    ) -> None:
        """``inbox``: the changes other tasks queue (whose wake-up wakes the engine task);
        ``observers``: told of live statuses and tool results, in order."""
        self.settings = settings
        self.pub = publisher
        self.metrics = metrics
        self.root = Path(os.path.abspath(settings.claude_dir))  # as watchfiles reports paths
        self.projects = self.root / "projects"
        self.disk = DiskScan(self.projects)
        self.sessions_dir = self.root / "sessions"
        self.sessions = SessionCache(publisher.client, publisher.keys, publisher.host)
        #: Changes from other tasks, applied by :meth:`apply_inbox` each loop.
        self.inbox = inbox if inbox is not None else Inbox(lambda: None)
        self.observers = tuple(observers)
        self.filesync = FileSync(publisher, Projector(settings, metrics), self, self.root)
        self.live_pids: dict[str, int] = {}
        #: Sessions whose live-process file is gone while their process still runs.
        self.closing: set[str] = set()
        self.idle_ms = int(settings.session_idle_minutes * 60_000)
        self.backstop_ms = int(settings.turn_backstop_seconds * 1000)

    # --- the session states (``inbox.SessionWriter``, ``files.SessionOwner``) ----------

    async def session(self, sid: str) -> SessionState:
        return await self.sessions.get(sid)

    async def commit(
        self,
        state: SessionState,
        events: list[OutEvent],
        hash_updates: dict[str, str],
        *,
        activity_ms: int | None = None,
    ) -> None:
        """Publish session-level events (no file offset), then make ``state`` current."""
        if events or hash_updates:
            await self.pub.append(
                AppendBatch(state.sid, events, hash_updates=hash_updates, activity_ms=activity_ms)
            )
        self.sessions.put(state)

    def keep(self, state: SessionState) -> None:
        self.sessions.put(state)

    def accepted(self, state: SessionState, tool_results: list[str]) -> None:
        self.sessions.put(state)
        if tool_results:
            for observer in self.observers:
                observer.tool_results(state.sid, tool_results)

    def forget(self, sid: str | None = None) -> None:
        if sid is None:
            self.sessions.clear()
        else:
            self.sessions.drop(sid)

    async def load_history(self, sid: str) -> int:
        return await self.filesync.load_history(sid)

    async def apply_inbox(self) -> None:
        """Apply the changes other tasks queued (errors propagate; the rest wait)."""
        await self.inbox.apply(self)

    @property
    def files(self) -> dict[str, FileEntry]:
        return self.filesync.files

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Adopt the epoch, reload live sessions, then sync everything under backfill rules."""
        epoch = await self.pub.open_epoch()
        found = await self.sessions.load_live()
        log.info("collector %s on epoch %s (%d live sessions)", self.pub.host, epoch, found)
        # Sessions whose process was alive at our last look: sync_processes ends those gone.
        for st in self.sessions.states():
            if st.live and st.pid is not None:
                self.live_pids[st.sid] = st.pid
        await self.sync_processes()
        await self.sync_all(initial=True)
        log.info("tracking %d transcripts under %s", len(self.files), self.projects)

    def reset(self) -> None:
        """Forget everything: Redis lost its data; the next :meth:`start` backfills again."""
        self.filesync.clear()
        self.live_pids.clear()
        self.closing.clear()
        self.sessions.clear()

    async def sync_all(
        self, *, initial: bool = False, max_batches: int | None = None, every_file: bool = True
    ) -> set[Path]:
        """The safety-net rescan: every transcript on disk that changed since its cursor last
        looked or is not tracked (:mod:`relaybus.collector.disk_scan`), plus files that vanished.

        Returns the files left with unread lines after ``max_batches`` batches each.
        ``every_file=False``: the routine rescan (quiet files in turn).
        """
        more: set[Path] = set()
        todo, seen = self.disk.scan(self.files, every_file=every_file)
        for path in todo:
            if await self.sync_path(path, initial=initial, max_batches=max_batches):
                more.add(path)
        gone = [k for k in self.files if k not in seen]
        for key in gone:
            await self.sync_path(self.root / key)
        if todo or gone:  # else nothing moved: the tick refreshes them each second anyway
            self._gauges()
        return more

    def _gauges(self) -> None:
        self.metrics.files_watched.set(len(self.files))
        self.metrics.file_lag.set(sum(e.tail.lag_bytes for e in self.files.values()))
        self.metrics.sessions_live.set(sum(1 for s in self.sessions.states() if s.live))

    async def sync_path(
        self, path: Path, *, initial: bool = False, max_batches: int | None = None
    ) -> bool:
        """Publish what is new in one transcript (under backfill rules if ``initial``).

        At most ``max_batches`` batches (None: all); True when lines are left to read.
        """
        return await self.filesync.sync_path(path, initial=initial, max_batches=max_batches)

    # --- live processes and timers --------------------------------------------------

    async def sync_processes(self) -> None:
        """Start/refresh sessions with a live ``claude`` process; end those whose process exited.

        Claude Code removes its live-process file *before* it writes its last transcript
        lines (and sometimes writes it again for a few ms), so a session whose file is gone
        stays live while its process runs; once the process is gone its transcripts are
        drained, then the session ends.
        """
        live = procfiles.scan(self.sessions_dir)
        now = now_ms()
        self.closing.clear()
        for sid, info in live.items():
            state = (await self.sessions.get(sid)).clone()
            update = SessionUpdate(sid)
            if state.pid != info.pid:
                state.pid = info.pid
                update.hash[Field.PID] = str(info.pid)
                state.turn.busy_seen = False  # a new process says idle before busy: not a turn end
            if not state.live:
                plan = self.filesync.projector.plan(state)
                plan.state.cwd = plan.state.cwd or info.cwd
                plan.state.entrypoint = plan.state.entrypoint or (info.entrypoint or "")
                plan.start_now()
                state = plan.state
                update.events += plan.events
                update.hash.update(plan.hash)
                log.info("session %s: live process %d", sid, info.pid)
            update.settle(state.turn, state.turn.on_live(info.status, info.waiting_for, now), now)
            events, h = update.events, update.hash
            if events or h:
                await self.commit(state, events, h, activity_ms=now if events else None)
            else:
                self.keep(state)  # the live status is remembered in memory
            self.live_pids[sid] = info.pid
            self._tell_live(sid, info.status)
        for sid in [s for s in self.live_pids if s not in live]:
            pid = self.live_pids[sid]
            self._tell_live(sid, None)
            state = (await self.sessions.get(sid)).clone()
            if procfiles.pid_alive(pid):
                update = SessionUpdate(sid)
                update.turn(state.turn.on_live(None, None, now))
                if update.events:
                    await self.commit(state, update.events, update.hash)
                else:
                    self.keep(state)
                self.closing.add(sid)
                continue
            await self.drain_session(sid)
            state = (await self.sessions.get(sid)).clone()
            update = SessionUpdate(sid)
            # e.g. the transcript ended the turn while the file said busy
            update.turn(state.turn.on_live(None, None, now))
            if state.live:
                update.end(state, reason="exit", now_ms=now_ms())
                log.info("session %s: process %d exited, session ended", sid, pid)
            state.pid = None
            update.hash[Field.PID] = ""
            await self.commit(state, update.events, update.hash)
            del self.live_pids[sid]

    async def drain_session(self, sid: str) -> None:
        """Publish what is unread in every transcript of ``sid`` (sub-agents' too), including
        ones the watcher has not reported yet."""
        paths = {e.tail.path for e in self.files.values() if e.sid == sid}
        if valid_session_id(sid):
            paths.update(self.projects.glob(f"*/{sid}.jsonl"))
            paths.update(self.projects.glob(f"*/{sid}/subagents/*.jsonl"))
        for path in sorted(paths):
            await self.filesync.sync_path(path)

    def _tell_live(self, sid: str, status: str | None) -> None:
        for observer in self.observers:
            observer.live_status(sid, status)

    async def tick(self) -> None:
        """Timers: the turn backstop, idle sessions without a live process, idle open files."""
        self.filesync.open_files.close_idle(time.monotonic())
        now = now_ms()
        for cached in self.sessions.states():
            sid = cached.sid
            idle_for = now - cached.turn.last_activity_ms
            idle_end = cached.live and sid not in self.live_pids and idle_for >= self.idle_ms
            due = cached.turn.backstop_due(now, self.backstop_ms) or cached.turn.live_idle_due(now)
            if not idle_end and not due:
                if not cached.live and idle_for >= self.idle_ms:
                    self.sessions.drop(sid)  # quiet and ended: reloaded from its hash if needed
                continue
            state = cached.clone()
            update = SessionUpdate(sid)
            update.turn(state.turn.on_tick(now, self.backstop_ms))
            if idle_end:
                update.end(state, reason="idle", now_ms=now)
                log.info("session %s: idle for %d s, session ended", sid, idle_for // 1000)
            if update.events:
                await self.commit(state, update.events, update.hash)
        self._gauges()
