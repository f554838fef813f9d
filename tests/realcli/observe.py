"""What a real-CLI scenario watches: WebSocket clients, the live files, processes.

:class:`Recorder` is a WebSocket client that keeps every frame with its arrival time
(``_at``) and watches each session once as soon as it starts; :class:`LivePoller` records
every change of the CLI's ``sessions/*.json`` and of the transcripts' line counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.gateway_client import FULL, Frame, WsClient


class Recorder:
    """A WebSocket client receiving in the background; every frame gets ``_at`` (epoch s)."""

    def __init__(self, ws: WsClient, *, auto_watch: bool) -> None:
        self.ws = ws
        self.auto_watch = auto_watch
        self.frames: list[Frame] = []
        self._task: asyncio.Task[None] | None = None
        self._n = 0
        self.watched: set[str] = set()

    async def start(self) -> Recorder:
        await self.ws.hello(FULL)
        self._task = asyncio.create_task(self._loop())
        return self

    async def _loop(self) -> None:
        assert self.ws.ws is not None
        async for raw in self.ws.ws:
            frame: Frame = json.loads(raw)
            frame["_at"] = time.time()
            self.frames.append(frame)
            if (
                self.auto_watch
                and frame["type"] == "session_started"
                and frame["sessionId"] not in self.watched
            ):
                await self.watch(frame["sessionId"])

    async def watch(self, sid: str) -> None:
        """Watch ``sid`` (once: a second watch would replay what was already received)."""
        self.watched.add(sid)
        self._n += 1
        await self.ws.send({"type": "watch_session", "requestId": f"w{self._n}", "sessionId": sid})

    async def send(self, frame: Frame) -> None:
        await self.ws.send(frame)

    async def until(
        self, pred: Callable[[list[Frame]], Any], timeout_s: float = 30.0, what: str = "frames"
    ) -> Any:
        """Poll until ``pred(frames)`` is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = pred(self.frames)
            if value:
                return value
            if self._task is not None and self._task.done():
                self._task.result()
                raise AssertionError(f"connection closed while waiting for {what}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
            await asyncio.sleep(0.02)

    async def reply(self, request_id: str, timeout_s: float = 30.0) -> Frame:
        """The direct reply (any type) carrying ``requestId``."""
        found: Frame = await self.until(
            lambda fs: next(
                (
                    f
                    for f in fs
                    if f.get("requestId") == request_id and f["type"] not in ("watch_ack",)
                ),
                None,
            ),
            timeout_s,
            f"reply to {request_id}",
        )
        return found

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def started_sid(frames: list[Frame]) -> str | None:
    return next((f["sessionId"] for f in frames if f["type"] == "session_started"), None)


class LivePoller:
    """Every change of ``sessions/*.json`` and of transcript line counts, with times.

    For docs/claude-code-notes.md: how the live file races the transcript.
    """

    def __init__(self, claude_dir: Path, interval_s: float = 0.005) -> None:
        self.claude_dir = claude_dir
        self.interval_s = interval_s
        self.timeline: list[dict[str, Any]] = []
        self.task: asyncio.Task[None] | None = None

    def _snapshot(self) -> dict[str, Any]:
        live = {}
        for path in (self.claude_dir / "sessions").glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                doc = json.loads(path.read_text())
                live[path.name] = {
                    k: doc.get(k)
                    for k in ("status", "waitingFor", "sessionId", "entrypoint", "kind", "tmux")
                }
        lines = {}
        for path in (self.claude_dir / "projects").rglob("*.jsonl"):
            with contextlib.suppress(OSError):
                data = path.read_bytes()
                last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
                with contextlib.suppress(ValueError):
                    last = json.loads(last).get("type", "?").encode()
                lines[path.name] = [data.count(b"\n"), last.decode(errors="replace")[:40]]
        return {"live": live, "lines": lines}

    async def run(self) -> None:
        previous: dict[str, Any] = {}
        while True:
            snap = self._snapshot()
            if snap != previous:
                self.timeline.append({"at": time.time(), **snap})
                previous = snap
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
