"""File-system wake-ups: watchfiles on the transcripts and live-process files, plus a rescan.

watchfiles' defaults group changes for up to 1.6 s and wait 50 ms of quiet; here the
quiet step is ``settings.watch_step_ms`` (1 ms by default) so an append wakes the
collector within a few ms. A periodic rescan catches anything the notifier missed
(directories created before their watch existed, overflowed event queues).

Directories are watched one by one, non-recursively, and only real ones: the watched
roots, their sub-directories down to ``<enc>/<sid>/subagents``, never through a symlink.
(watchfiles' recursive mode follows symlinked directories: a ``projects/x -> /`` would
make it watch the whole file system and use up the user's inotify watches.) When the
directory tree changes, the watch is set up again over the new set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from watchfiles import Change, awatch

log = logging.getLogger(__name__)

DEBOUNCE_MS = 50


class Wake:
    """What changed since the engine last looked; ``event`` is set when anything did."""

    def __init__(self, claude_dir: Path) -> None:
        self.sessions_dir = Path(os.path.abspath(claude_dir)) / "sessions"
        self.paths: set[Path] = set()
        self.processes = False
        self.rescan = False
        self.event = asyncio.Event()

    def add(self, paths: set[Path]) -> None:
        for p in paths:
            if p.suffix == ".jsonl":
                self.paths.add(p)
            elif p.suffix == ".json" and p.parent == self.sessions_dir:
                self.processes = True
        if self.paths or self.processes:
            self.event.set()

    def request_rescan(self) -> None:
        self.rescan = True
        self.event.set()

    def take(self) -> tuple[set[Path], bool, bool]:
        """The pending (paths, processes changed, rescan wanted), cleared."""
        out = (self.paths, self.processes, self.rescan)
        self.paths, self.processes, self.rescan = set(), False, False
        self.event.clear()
        return out

    async def wait(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout_s)


#: How often the watch looks again at the directory tree even without events.
TREE_CHECK_MS = 5000


def _interesting(change: Change, path: str) -> bool:
    # Creations and deletions of anything (a new directory changes what is watched).
    return change != Change.modified or path.endswith((".jsonl", ".json"))


def watched_dirs(roots: list[Path]) -> set[Path]:
    """The real directories to watch: each root, its sub-directories two levels down, and
    ``subagents`` one level below those — never a symlink, never deeper."""
    found: set[Path] = set()

    def visit(d: Path, depth: int) -> None:
        found.add(d)
        if depth == 3:
            return
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            if (depth < 2 or e.name == "subagents") and e.is_dir(follow_symlinks=False):
                visit(Path(e.path), depth + 1)

    for root in roots:
        if root.is_dir() and not root.is_symlink():
            visit(root, 0)
    return found


class _Either:
    """``stop`` or a re-watch request: what watchfiles polls to end a watch."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.again = False

    def is_set(self) -> bool:
        return self.again or self.stop.is_set()


async def watch(wake: Wake, dirs: list[Path], stop: asyncio.Event, *, step_ms: int) -> None:
    """Feed ``wake`` from watchfiles until ``stop`` is set."""
    # watchfiles logs every change batch at INFO: one line per transcript line here.
    logging.getLogger("watchfiles.main").setLevel(logging.WARNING)
    for d in dirs:  # watchfiles needs them; a restart after someone removed one recreates it
        d.mkdir(parents=True, exist_ok=True)
    log.info("watching %s (step %d ms)", ", ".join(str(d) for d in dirs), step_ms)
    while not stop.is_set():
        targets = watched_dirs(dirs)
        until = _Either(stop)
        async for changes in awatch(
            *sorted(targets),
            watch_filter=_interesting,
            step=step_ms,
            debounce=max(DEBOUNCE_MS, step_ms),
            stop_event=until,
            recursive=False,
            rust_timeout=TREE_CHECK_MS,
            yield_on_timeout=True,
        ):
            wake.add({Path(p) for _change, p in changes})
            maybe_dirs = any(not p.endswith((".jsonl", ".json")) for _c, p in changes)
            if (maybe_dirs or not changes) and watched_dirs(dirs) != targets:
                until.again = True  # the tree changed: watch the new set of directories
                wake.request_rescan()  # files made before the new watch existed
async def rescan(wake: Wake, stop: asyncio.Event, *, interval_s: float) -> None:
    """Ask the engine for a full rescan every ``interval_s`` until ``stop``."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
        wake.request_rescan()
