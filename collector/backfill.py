"""Backfill rules for a transcript seen for the first time, and the order files are scanned.

A file modified within ``backfill_max_age_hours`` publishes its last ``backfill_events``
publishable events (so a watch has history); an older one is only registered: its offset
is committed at the end of its last complete line and nothing is published. From then on
every appended line is published exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path

from relaybus.collector.tailer import Identity, open_fd

SCAN_CHUNK = 64 * 1024
AGENT_PREFIX = "agent-"


def sync_order(path: Path) -> tuple[str, int, str]:
    """Sort key for a scan: per project folder, main transcripts before sub-agent files
    (``<sid>/subagents/agent-*.jsonl`` and legacy ``agent-*.jsonl`` siblings), so backfill
    publishes the Task call before the sub-agent's work. (Sorting ``Path``s puts
    ``<sid>/subagents/…`` before ``<sid>.jsonl``: a prefix sorts first.)"""
    parts = path.parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1] == "projects":
            folder = "/".join(parts[: i + 1])
            agent = len(parts) > i + 2 or parts[-1].startswith(AGENT_PREFIX)
            return folder, int(agent), path.as_posix()
    return path.parent.as_posix(), int(parts[-1].startswith(AGENT_PREFIX)), path.as_posix()


def wants_history(mtime: float, now: float, *, max_age_hours: float, events: int) -> bool:
    return events > 0 and now - mtime <= max_age_hours * 3600


class Replaced(OSError):
    """The path names another file than the one checked: read nothing of it."""


def _open(path: Path, identity: Identity | None) -> int:
    """One descriptor of ``path`` (never a FIFO, device or symlink: :func:`open_fd`), and
    of the file checked (``identity``) when one is given; everything is read through it."""
    fd, st = open_fd(path)
    if identity is not None and Identity.of(st) != identity:
        os.close(fd)
        raise Replaced(f"replaced since it was checked: {path}")
    return fd


def last_line_end(path: Path, size: int, identity: Identity | None = None) -> int:
    """Offset just past the last ``\\n`` within the first ``size`` bytes (0 if none)."""
    fd = _open(path, identity)
    try:
        pos = size
        while pos > 0:
            start = max(0, pos - SCAN_CHUNK)
            chunk = os.pread(fd, pos - start, start)
            k = chunk.rfind(b"\n")
            if k >= 0:
                return start + k + 1
            pos = start
    finally:
        os.close(fd)
    return 0


def offset_value(end: int, dev: int, ino: int) -> str:
    """The committed value stored in ``{ns}:offsets:<host>``."""
    return f"{end}:{dev}:{ino}"


def parse_offset(value: str) -> tuple[int, int, int] | None:
    """``(offset, dev, ino)`` of a committed value, or ``None`` if absent or unreadable."""
    parts = value.split(":")
    if len(parts) != 3:
        return None
    try:
        off, dev, ino = (int(p) for p in parts)
    except ValueError:
        return None
    return (off, dev, ino) if off >= 0 else None


def tail_start(
    path: Path, end: int, *, lines: int, max_bytes: int, identity: Identity | None = None
) -> int:
    """Offset of the start of the last ``lines`` complete lines before ``end``.

    Scans backwards from ``end`` (which must be a line end) and stops after ``max_bytes``,
    at the start of the first whole line within that budget; 0 when the file is shorter.
    The file is opened once, without blocking or following a symlink, and read only through
    that descriptor: a FIFO swapped in raises :class:`~relaybus.collector.tailer.NotRegular`,
    another file (not ``identity``) :class:`Replaced`.
    """
    if end <= 0 or lines <= 0:
        return end
    floor = max(0, end - max_bytes)
    seen = 0
    fd = _open(path, identity)
    try:
        pos = end - 1  # the byte at end - 1 is the newline ending the last line
        while pos > floor:
            start = max(floor, pos - SCAN_CHUNK)
            chunk = os.pread(fd, pos - start, start)
            k = len(chunk)
            while True:
                k = chunk.rfind(b"\n", 0, k)
                if k < 0:
                    break
                seen += 1
                if seen >= lines:
                    return start + k + 1
            pos = start
        if floor == 0:
            return 0
        return _next_line_start(fd, floor, end)
    finally:
        os.close(fd)


def _next_line_start(fd: int, at: int, end: int) -> int:
    """The first line start at or after ``at`` (``end`` if none)."""
    pos = at - 1
    while pos < end:
        chunk = os.pread(fd, min(SCAN_CHUNK, end - pos), pos)
        if not chunk:
            break
        k = chunk.find(b"\n")
        if k >= 0:
            return pos + k + 1
        pos += len(chunk)
    return end
