"""File-system wake-ups for the engine: a watch backend on the Claude dir, plus a rescan.

Two backends feed the same :class:`~relaybus.collector.wake.Wake`, over the same
directories (:mod:`relaybus.collector.watch_tree`), following directories made or removed
while running and asking for a rescan when the set changed:

* ``inotify`` (Linux, :mod:`relaybus.collector.watch_inotify`): the kernel's events read
  on the event loop the moment they are queued; the default where it works.
* ``watchfiles`` (everywhere else): its Rust notifier in a thread of its own, reporting a
  change after ``settings.watch_step_ms`` of quiet (1 ms by default; ~2 ms in practice).

A periodic rescan catches anything a notifier missed (overflowed event queues, say).
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

from relaybus.collector.inotify import Unavailable
from relaybus.collector.wake import Rescan, Wake
from relaybus.collector.watch_inotify import watch_inotify
from relaybus.collector.watch_tree import SETTLE_TRIES, TREE_CHECK_MS, watched_dirs
from relaybus.shared.aio import sleep_unless

log = logging.getLogger(__name__)

DEBOUNCE_MS = 50


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


def _watched_gone(changes: set[tuple[int, str]], targets: dict[Path, int]) -> bool:
    """Whether a watched directory was removed (one made in its place may reuse its inode
    number: comparing the tree would not tell)."""
    return any(change == Change.deleted and Path(path) in targets for change, path in changes)


def _dir_added(changes: set[tuple[int, str]]) -> bool:
    """Whether ``changes`` added a directory (maybe one to watch)."""
    for change, path in changes:
        if change == Change.added:
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    return True
    return False


async def watch(
    wake: Wake, dirs: list[Path], stop: asyncio.Event, *, step_ms: int, backend: str = "auto"
) -> None:
    """Feed ``wake`` until ``stop`` is set: from inotify (``backend`` ``auto`` where it
    works, or ``inotify``), else from watchfiles."""
    for d in dirs:  # a restart after someone removed one recreates it
        with contextlib.suppress(OSError):  # a read-only mount: the error below names it
            d.mkdir(parents=True, exist_ok=True)
    if backend in ("auto", "inotify"):
        try:
            await watch_inotify(wake, dirs, stop)
            return
        except Unavailable as exc:
            if backend == "inotify":
                raise
            log.info("inotify unavailable (%s): watching with watchfiles", exc)
    await watch_watchfiles(wake, dirs, stop, step_ms=step_ms)


async def watch_watchfiles(
    wake: Wake, dirs: list[Path], stop: asyncio.Event, *, step_ms: int
) -> None:
    """Feed ``wake`` from watchfiles until ``stop`` is set.

    Each directory of :func:`watched_dirs` is watched on its own, non-recursively: a
    recursive watch follows symlinked directories, and ``projects/x -> /`` would have it
    walk and watch the whole file system. When a directory to watch appears or goes, a new
    notifier is opened over the new set *before* the old one is closed, then the engine is
    asked for a rescan: nothing written meanwhile is missed.
    """
    # watchfiles logs every change batch at INFO: one line per transcript line here.
    logging.getLogger("watchfiles.main").setLevel(logging.WARNING)
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
        "watching %s with watchfiles: %d directories (step %d ms)",
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
            gone = _watched_gone(changes, targets)
            if raw != "timeout" and not gone and not _dir_added(changes):
                continue
            now = await loop.run_in_executor(pool, watched_dirs, claude, dirs)
            if now != targets or gone:
                new, targets = await loop.run_in_executor(pool, _open, claude, dirs, now)
                notify.close()
                notify = new
                wake.request_rescan()  # what was written before the new watches existed
                log.debug("watching %d directories", len(targets))
    finally:
        if not until.cancelled:
            notify.close()


async def rescan(wake: Wake, stop: asyncio.Event, *, interval_s: float) -> None:
    """Ask the engine for its routine rescan every ``interval_s`` until ``stop``."""
    while not stop.is_set():
        await sleep_unless(stop, interval_s)
        wake.request_rescan(Rescan.ROUTINE)
