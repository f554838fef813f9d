"""Live Claude Code processes on this machine, from ``<claude>/sessions/<pid>.json``.

Claude Code writes one such file per running interactive process (``pid``,
``sessionId``, ``cwd``, …). A file whose process is gone is stale and ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson

MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class LiveProcess:
    pid: int
    session_id: str
    cwd: str


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def find_live(claude_dir: Path, session_id: str) -> LiveProcess | None:
    """The running process of ``session_id``, if a live-process file names one."""
    folder = claude_dir / "sessions"
    try:
        entries = sorted(folder.glob("*.json"))
    except OSError:
        return None
    for path in entries:
        try:
            record = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if not isinstance(record, dict) or record.get("sessionId") != session_id:
            continue
        pid = record.get("pid")
        if not isinstance(pid, int):
            pid = int(path.stem) if path.stem.isdigit() else 0
        if pid > 0 and pid_alive(pid):
            cwd = record.get("cwd")
            return LiveProcess(pid, session_id, cwd if isinstance(cwd, str) else "")
    return None


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc/<pid>/stat``, or ``None`` when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: fields start after the last ')'
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def ancestors(pid: int) -> list[int]:
    """``pid`` and its ancestors, nearest first (bounded, stops at init)."""
    chain = [pid]
    current: int | None = pid
    while current is not None and current > 1 and len(chain) < MAX_DEPTH:
        current = parent_pid(current)
        if current is not None and current > 0:
            chain.append(current)
    return chain


def environ(pid: int) -> dict[str, str]:
    """A process's environment (empty when unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            out[name.decode(errors="replace")] = value.decode(errors="replace")
    return out
