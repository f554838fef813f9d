"""What changed since the engine last looked: the watch backends fill it, the engine takes it."""

from __future__ import annotations

import asyncio
import os
from enum import IntEnum
from pathlib import Path


class Rescan(IntEnum):
    """How much of the disk the engine's next rescan compares with its cursors."""

    NONE = 0
    #: The periodic safety net: files read lately every time, the others in turn
    #: (:mod:`relaybus.collector.disk_scan`).
    ROUTINE = 1
    #: Events may have been lost (queue overflow, new watches, a Redis outage): every file.
    FULL = 2


class Wake:
    """What changed since the engine last looked; ``event`` is set when anything did."""

    def __init__(self, claude_dir: Path) -> None:
        self.claude_dir = Path(os.path.abspath(claude_dir))
        self.sessions_dir = self.claude_dir / "sessions"
        self.paths: set[Path] = set()
        self.processes = False
        self.rescan = Rescan.NONE
        self.event = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, paths: set[Path]) -> None:
        for p in paths:
            if p.suffix == ".jsonl":
                self.paths.add(p)
            elif p.suffix == ".json" and p.parent == self.sessions_dir:
                self.processes = True
        if self.paths or self.processes:
            self.event.set()

    def request_rescan(self, level: Rescan = Rescan.FULL) -> None:
        self.rescan = max(self.rescan, level)
        self.event.set()

    def take(self) -> tuple[set[Path], bool, Rescan]:
        """The pending (paths, processes changed, rescan wanted), cleared."""
        out = (self.paths, self.processes, self.rescan)
        self.paths, self.processes, self.rescan = set(), False, Rescan.NONE
        self.event.clear()
        return out

    async def wait_until(self, deadline: float) -> None:
        """Until something changed or the loop's clock reached ``deadline``.

        The deadline sets :attr:`event` (a wake-up with nothing taken is harmless), from a
        timer kept while the deadline stays the same: the engine waits for the same tick
        between many changes, and a timeout per wait (``asyncio.timeout``) cost ~5 µs each.
        """
        if self.event.is_set():
            return
        timer = self._timer
        if timer is None or timer.when() != deadline:
            if timer is not None:
                timer.cancel()
            self._timer = asyncio.get_running_loop().call_at(deadline, self._expired)
        await self.event.wait()

    def _expired(self) -> None:
        self._timer = None
        self.event.set()
