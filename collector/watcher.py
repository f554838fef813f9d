"""File-system wake-ups: watchfiles on the transcripts and live-process files, plus a rescan.

watchfiles' defaults group changes for up to 1.6 s and wait 50 ms of quiet; here the
quiet step is ``settings.watch_step_ms`` (1 ms by default) so an append wakes the
collector within a few ms. A periodic rescan catches anything the notifier missed
(overflowed event queues, say).

Only the real directories of :data:`LAYOUT` are watched, one by one and never through a
symlink: watchfiles' recursive mode follows symlinked directories, so a ``projects/x -> /``
would have it walk and watch the whole file system (the user's inotify watches, CPU and
events) though nothing there is ever read. A directory created while running is watched
as soon as its creation is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from watchfiles import Change
from watchfiles._rust_notify import RustNotify

from relaybus.shared.aio import sleep_unless

log = logging.getLogger(__name__)

DEBOUNCE_MS = 50


class Wake:
    """What changed since the engine last looked; ``event`` is set when anything did."""

    def __init__(self, claude_dir: Path) -> None:
        self.claude_dir = Path(os.path.abspath(claude_dir))
        self.sessions_dir = self.claude_dir / "sessions"
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
        # asyncio.timeout, not wait_for: on 3.11 wait_for wraps the wait in a task of its
        # own, one more event-loop turn between a change and the engine.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.event.wait()


#: The directories watched, relative to the Claude dir (``*``: any name): where transcripts
#: and live-process files are, and the ones that lead there. Nothing deeper, nothing else.
LAYOUT: tuple[tuple[str, ...], ...] = (
    ("projects",),
    ("projects", "*"),
    ("projects", "*", "*"),
    ("projects", "*", "*", "subagents"),
    ("sessions",),
)
#: How often the watch compares the directory tree with what it watches, without events.
TREE_CHECK_MS = 5000
#: Times the watch is set up again while the tree keeps changing under it before it settles
#: for what it has (the next tree check catches up).
SETTLE_TRIES = 5


def _in_layout(rel: tuple[str, ...]) -> bool:
    return any(
        len(pat) == len(rel) and all(p in ("*", r) for p, r in zip(pat, rel, strict=True))
        for pat in LAYOUT
    )


def watched_dirs(claude_dir: Path, roots: list[Path]) -> dict[Path, int]:
    """The directories to watch, each with its inode: every root, and below them the real
    (never symlinked) directories of :data:`LAYOUT`. A symlinked root is watched, not
    entered: what is behind it is outside the Claude dir and never read."""
    claude = Path(os.path.abspath(claude_dir))
    found: dict[Path, int] = {}

    def visit(d: Path, rel: tuple[str, ...], inode: int) -> None:
        try:
            with os.scandir(d) as it:
                subs = [
                    (Path(e.path), (*rel, e.name), e.inode())
                    for e in it
                    if _in_layout((*rel, e.name)) and e.is_dir(follow_symlinks=False)
                ]
        except OSError:
            return  # gone already, or unreadable: nothing to watch there
        found[d] = inode
        for sub in subs:
            visit(*sub)

    for root in roots:
        root = Path(os.path.abspath(root))
        try:
            inode = root.stat().st_ino
        except OSError:
            continue
        if root == claude:
            visit(root, (), inode)
        elif root.is_symlink() or not root.is_relative_to(claude):
            found[root] = inode
        else:
            visit(root, root.relative_to(claude).parts, inode)
    return found


class _Until:
    """What the Rust watch polls every step: the collector's stop, or this task cancelled."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.cancelled = False

    def is_set(self) -> bool:
        return self.cancelled or self.stop.is_set()


def _open(
    claude_dir: Path, roots: list[Path], targets: dict[Path, int]
) -> tuple[RustNotify, dict[Path, int]]:
    """A non-recursive notifier over ``targets``, checked against the tree once it exists
    (and opened again over the tree's set if that changed meanwhile): a directory made
    before it was missed by neither the notifier nor the check. Blocking: ~50 µs a
    directory, so it runs in the watcher's thread."""
    for attempt in range(SETTLE_TRIES):
        try:
            notify = RustNotify([str(d) for d in sorted(targets)], False, False, 50, False, True)
        except FileNotFoundError:  # one went away between the look and the watch
            if attempt == SETTLE_TRIES - 1:
                raise
            targets = watched_dirs(claude_dir, roots)
            continue
        now = watched_dirs(claude_dir, roots)
        if now == targets or attempt == SETTLE_TRIES - 1:
            return notify, targets
        notify.close()
        targets = now
    raise AssertionError("unreachable")


def _tree_touched(changes: set[tuple[int, str]], targets: dict[Path, int]) -> bool:
    """Whether ``changes`` may have added or removed a directory to watch."""
    for change, path in changes:
        if change == Change.deleted and Path(path) in targets:
            return True
        if change == Change.added:
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    return True
    return False


async def watch(wake: Wake, dirs: list[Path], stop: asyncio.Event, *, step_ms: int) -> None:
    """Feed ``wake`` from watchfiles until ``stop`` is set.

    Each directory of :func:`watched_dirs` is watched on its own, non-recursively: a
    recursive watch follows symlinked directories, and ``projects/x -> /`` would have it
    walk and watch the whole file system. When a directory to watch appears or goes, a new
    notifier is opened over the new set *before* the old one is closed, then the engine is
    asked for a rescan: nothing written meanwhile is missed.
    """
    # watchfiles logs every change batch at INFO: one line per transcript line here.
    logging.getLogger("watchfiles.main").setLevel(logging.WARNING)
    for d in dirs:  # a restart after someone removed one recreates it
        with contextlib.suppress(OSError):  # a read-only mount: the error below names it
            d.mkdir(parents=True, exist_ok=True)
    # Its own thread: the watch blocks one for good, and must not wait behind the engine's.
    pool = ThreadPoolExecutor(1, thread_name_prefix="watcher")
    try:
        await _watch(wake, dirs, stop, step_ms, pool)
    finally:
        pool.shutdown(wait=False)


async def _watch(
    wake: Wake, dirs: list[Path], stop: asyncio.Event, step_ms: int, pool: ThreadPoolExecutor
) -> None:
    claude = wake.claude_dir
    loop = asyncio.get_running_loop()
    targets = await loop.run_in_executor(pool, watched_dirs, claude, dirs)
    notify, targets = await loop.run_in_executor(pool, _open, claude, dirs, targets)
    log.info(
        "watching %s: %d directories (step %d ms)",
        ", ".join(str(d) for d in dirs),
        len(targets),
        step_ms,
    )
    until = _Until(stop)
    debounce = max(DEBOUNCE_MS, step_ms)
    try:
        while True:
            try:
                raw = await loop.run_in_executor(
                    pool, notify.watch, debounce, step_ms, TREE_CHECK_MS, until
                )
            except asyncio.CancelledError:
                until.cancelled = True  # the thread returns within a step; it closes nothing
                raise
            if raw == "stop":
                return
            if raw == "signal":
                raise RuntimeError("the watch thread received a signal")
            changes: set[tuple[int, str]] = set() if raw == "timeout" else raw
            wake.add({Path(p) for _change, p in changes})
            if raw != "timeout" and not _tree_touched(changes, targets):
                continue
            now = await loop.run_in_executor(pool, watched_dirs, claude, dirs)
            if now != targets:
                new, targets = await loop.run_in_executor(pool, _open, claude, dirs, now)
                notify.close()
                notify = new
                wake.request_rescan()  # what was written before the new watches existed
                log.debug("watching %d directories", len(targets))
    finally:
        if not until.cancelled:
            notify.close()


async def rescan(wake: Wake, stop: asyncio.Event, *, interval_s: float) -> None:
    """Ask the engine for a full rescan every ``interval_s`` until ``stop``."""
    while not stop.is_set():
        await sleep_unless(stop, interval_s)
        wake.request_rescan()
