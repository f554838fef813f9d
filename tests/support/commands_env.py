"""Helpers for the command tests: polling, transcripts, turn-hook recording, a private tmux server."""

from __future__ import annotations

import json
import shlex
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def records(path: Path) -> list[dict[str, Any]]:
    """The JSON records of a transcript (empty when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def texts(path: Path, kind: str) -> list[str]:
    """Message texts of the records of one type (``user``/``assistant``)."""
    out: list[str] = []
    for rec in records(path):
        if rec.get("type") != kind:
            continue
        content = rec["message"]["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out.extend(b.get("text", "") for b in content if isinstance(b, dict))
    return out


@dataclass
class RecordingHooks:
    """A ``TurnHooks`` that records calls: ``("started", sid, trace)`` / ``("ended", sid, None)``."""

    calls: list[tuple[str, str, str | None]] = field(default_factory=list)

    async def prompt_started(
        self, session_id: str, trace_id: str | None, at_ms: int, *, run: bool = False
    ) -> None:
        self.calls.append(("started", session_id, trace_id))

    async def prompt_ended(self, session_id: str) -> None:
        self.calls.append(("ended", session_id, None))

    async def prompt_failed(self, session_id: str, code: str, message: str) -> None:
        self.calls.append(("failed", session_id, f"{code}: {message}"))


class TmuxServer:
    """A tmux server on its own socket (``-L``), killed at teardown."""

    def __init__(self) -> None:
        self.name = f"relaybus-test-{uuid.uuid4().hex[:10]}"

    def run(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.name, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout

    def start(self, command: list[str], cwd: Path, env: dict[str, str]) -> int:
        """Start ``command`` in a new detached session; returns the pane's pid."""
        env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
        self.run(
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            "200",
            "-y",
            "50",
            "-c",
            str(cwd),
            *env_args,
            shlex.join(command),
        )
        return int(self.run("list-panes", "-t", "main", "-F", "#{pane_pid}").split()[0])

    def kill(self) -> None:
        subprocess.run(
            ["tmux", "-L", self.name, "kill-server"], capture_output=True, timeout=10, check=False
        )
