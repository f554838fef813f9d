"""The inotify watch backend: kernel events read on the event loop, no thread, no step.

Each directory of :func:`~relaybus.collector.watch_tree.watched_dirs` gets its own watch
(``IN_DONT_FOLLOW``: a symlinked directory is never entered). A directory made, removed
or renamed under a watched one, a watched one that goes, a queue overflow or the periodic
tree check sets the watches again from the tree as it is now; when a watch was added, the
engine is asked for a rescan: what was written before the new watch existed is not missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from pathlib import Path

from relaybus.collector.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Event,
    Inotify,
)
from relaybus.collector.wake import Wake
from relaybus.collector.watch_tree import SETTLE_TRIES, TREE_CHECK_MS, watched_dirs

log = logging.getLogger(__name__)

_TREE_CHANGED = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
_WATCH_GONE = IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF
_NAME_GONE = IN_DELETE | IN_MOVED_FROM


class _Watches:
    """The watched directories (path -> inode, descriptor) on one inotify instance."""

    def __init__(self, notify: Inotify, wake: Wake) -> None:
        self.notify = notify
        self.wake = wake
        self.by_wd: dict[int, Path] = {}
        self.by_path: dict[Path, tuple[int, int]] = {}
        #: The paths of the files each watch reported, made once: a ``Path`` built, hashed and
        #: classified anew costs ~10 µs per wake-up (``relaybus.collector.paths.classify``).
        self.names: dict[int, dict[str, Path]] = {}
        #: Set when the tree may have changed: the watches are set again from it.
        self.dirty = asyncio.Event()
        self._limit_warned = False

    def on_readable(self) -> None:
        """Hand what the kernel queued to the engine (called by the loop's reader)."""
        try:
            events = self.notify.read()
        except OSError as exc:  # never seen; the rescan covers whatever it hid
            log.warning("reading inotify events failed: %s", exc)
            self._lost()
            return
        changed: set[Path] = set()
        for ev in events:
            self._one(ev, changed)
        if changed:
            self.wake.add(changed)

    def _one(self, ev: Event, changed: set[Path]) -> None:
        if ev.mask & IN_Q_OVERFLOW:
            self._lost()
            return
        base = self.by_wd.get(ev.wd)
        if base is None:  # a watch removed meanwhile
            return
        if ev.mask & _WATCH_GONE:
            # Forget it now: a directory made in its place may get the same inode number,
            # and would otherwise look watched already.
            self._forget(base)
            self.dirty.set()
        elif ev.mask & IN_ISDIR:
            if ev.mask & _TREE_CHANGED:
                self.dirty.set()
        elif ev.name:
            names = self.names.setdefault(ev.wd, {})
            path = names.get(ev.name)
            if path is None:
                path = names[ev.name] = base / ev.name
            if ev.mask & _NAME_GONE:
                del names[ev.name]
            changed.add(path)

    def _lost(self) -> None:
        """Events were dropped: look at everything again."""
        self.wake.request_rescan()
        self.dirty.set()

    def apply(self, target: dict[Path, int]) -> bool:
        """Watch exactly ``target``'s directories; whether a watch was added."""
        for path, (inode, _wd) in list(self.by_path.items()):
            if target.get(path) != inode:
                self._forget(path)
        added = False
        for path, inode in target.items():
            if path in self.by_path:
                continue
            try:
                wd = self.notify.add(str(path))
            except OSError as exc:
                self._refused(path, exc)
                continue
            self.by_path[path] = (inode, wd)
            self.by_wd[wd] = path
            self.names.pop(wd, None)  # a descriptor number used again
            added = True
        return added

    def _forget(self, path: Path) -> None:
        inode_wd = self.by_path.pop(path, None)
        if inode_wd is not None:
            wd = inode_wd[1]
            if self.by_wd.get(wd) == path:
                del self.by_wd[wd]
                self.names.pop(wd, None)
            self.notify.remove(wd)

    def _refused(self, path: Path, exc: OSError) -> None:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            self.dirty.set()  # gone between the look and the watch: look again
        elif not self._limit_warned:  # ENOSPC: fs.inotify.max_user_watches reached
            self._limit_warned = True
            log.warning("cannot watch %s (%s): the periodic rescan covers it", path, exc)

    def current(self) -> dict[Path, int]:
        return {p: inode for p, (inode, _wd) in self.by_path.items()}


async def watch_inotify(wake: Wake, dirs: list[Path], stop: asyncio.Event) -> None:
    """Feed ``wake`` from inotify until ``stop`` is set. :class:`~relaybus.collector.
    inotify.Unavailable` at once if this system has no inotify for us."""
    notify = Inotify()
    loop = asyncio.get_running_loop()
    watches = _Watches(notify, wake)
    loop.add_reader(notify.fd, watches.on_readable)
    try:
        await _settle(watches, wake.claude_dir, dirs)
        log.info(
            "watching %s with inotify: %d directories",
            ", ".join(str(d) for d in dirs),
            len(watches.by_path),
        )
        while not stop.is_set():
            await _first_of(watches.dirty, stop, TREE_CHECK_MS / 1000)
            if stop.is_set():
                return
            watches.dirty.clear()
            if await _settle(watches, wake.claude_dir, dirs):
                wake.request_rescan()  # what was written before the new watches existed
                log.debug("watching %d directories", len(watches.by_path))
    finally:
        loop.remove_reader(notify.fd)
        notify.close()


async def _settle(watches: _Watches, claude_dir: Path, dirs: list[Path]) -> bool:
    """Set the watches from the tree until a look after them finds the same tree (or
    :data:`SETTLE_TRIES` ran out: the next tree check catches up); whether one was added.
    The scans block (~50 µs a directory), so they run in a worker thread."""
    loop = asyncio.get_running_loop()
    added = False
    target = await loop.run_in_executor(None, watched_dirs, claude_dir, dirs)
    for _ in range(SETTLE_TRIES):
        added |= watches.apply(target)
        target = await loop.run_in_executor(None, watched_dirs, claude_dir, dirs)
        if target == watches.current():
            break
    return added


async def _first_of(a: asyncio.Event, b: asyncio.Event, timeout_s: float) -> None:
    """Return when ``a`` or ``b`` is set, or after ``timeout_s``."""
    waiters = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*waiters, return_exceptions=True)
