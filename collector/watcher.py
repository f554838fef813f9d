"""File-system wake-ups: watchfiles on the transcripts and live-process files, plus a rescan.

watchfiles' defaults group changes for up to 1.6 s and wait 50 ms of quiet; here the
quiet step is ``settings.watch_step_ms`` (1 ms by default) so an append wakes the
collector within a few ms. A periodic rescan catches anything the notifier missed
(directories created before their watch existed, overflowed event queues).
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


def _interesting(change: Change, path: str) -> bool:
    return path.endswith((".jsonl", ".json"))


async def watch(wake: Wake, dirs: list[Path], stop: asyncio.Event, *, step_ms: int) -> None:
    """Feed ``wake`` from watchfiles until ``stop`` is set."""
    # watchfiles logs every change batch at INFO: one line per transcript line here.
    logging.getLogger("watchfiles.main").setLevel(logging.WARNING)
    for d in dirs:  # watchfiles needs them; a restart after someone removed one recreates it
        with contextlib.suppress(OSError):  # a read-only mount: the error below names it
            d.mkdir(parents=True, exist_ok=True)
    log.info("watching %s (step %d ms)", ", ".join(str(d) for d in dirs), step_ms)
    async for changes in awatch(
        *dirs,
        watch_filter=_interesting,
        step=step_ms,
        debounce=max(DEBOUNCE_MS, step_ms),
        stop_event=stop,
        recursive=True,
    ):
        wake.add({Path(p) for _change, p in changes})


async def rescan(wake: Wake, stop: asyncio.Event, *, interval_s: float) -> None:
    """Ask the engine for a full rescan every ``interval_s`` until ``stop``."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
        wake.request_rescan()
