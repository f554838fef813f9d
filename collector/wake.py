"""What changed since the engine last looked: the watch backends fill it, the engine takes it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path


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
