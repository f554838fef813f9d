"""The live Claude Code process of a session, and the process-tree facts drivers need.

Live processes come from ``<claude>/sessions/<pid>.json`` (``relaybus.collector.procfiles``).
"""

from __future__ import annotations

from pathlib import Path

from relaybus.collector.procfiles import LiveProcess, scan

MAX_DEPTH = 64


def find_live(claude_dir: Path, session_id: str) -> LiveProcess | None:
    """The running process of ``session_id``, if a live-process file names one."""
    return scan(claude_dir / "sessions").get(session_id)


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
