"""Claude Code's live-process files: ``<claude>/sessions/<pid>.json``.

Each running ``claude`` writes one, with at least ``pid``, ``sessionId`` and ``cwd``
(newer versions add ``status``, ``waitingFor``, ``entrypoint`` and, under tmux, ``tmux``
naming the pane, e.g. ``"main:@0.%0"``). Parsed tolerantly: anything missing
or malformed makes the file be ignored, never an error.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from relaybus.collector.tailer import open_regular
from relaybus.shared.wire.ids import valid_session_id

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class LiveProcess:
    pid: int
    session_id: str
    cwd: str
    status: str | None
    waiting_for: str | None
    entrypoint: str | None
    tmux: str | None = None


def parse(raw: bytes) -> LiveProcess | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    pid, sid = obj.get("pid"), obj.get("sessionId")
    if isinstance(pid, str) and pid.isdigit():
        pid = int(pid)
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if not valid_session_id(sid):
        return None
    return LiveProcess(
        pid=pid,
        session_id=sid,
        cwd=_str(obj.get("cwd")) or "",
        status=_str(obj.get("status")),
        waiting_for=_str(obj.get("waitingFor")),
        entrypoint=_str(obj.get("entrypoint")),
        tmux=_str(obj.get("tmux")),
    )


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process. Someone else's zombie (exited, not yet reaped:
    after ``/exit`` an orphaned CLI waits ~1.3 s for its new parent) is not: its Claude
    session is over. Our own child's zombie still counts until the driver reaps it, so a
    headless run ends (its turn with it) before its session does."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _stat(pid)
    return stat is None or stat[0] != "Z" or stat[1] == os.getpid()


def _stat(pid: int) -> tuple[str, int] | None:
    """State and parent pid from ``/proc/<pid>/stat`` (Linux); ``None`` without it."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")": the
    # fields that follow the last ")" are state, then ppid.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[1])
    except (IndexError, ValueError):
        return None


def scan(sessions_dir: Path) -> dict[str, LiveProcess]:
    """Live processes by session id: files that parse and whose pid is alive."""
    found: dict[str, LiveProcess] = {}
    try:
        entries = list(os.scandir(sessions_dir))
    except FileNotFoundError:
        return found
    for entry in entries:
        if not entry.name.endswith(".json"):
            continue
        try:
            with open_regular(entry.path) as f:
                info = parse(f.read(MAX_FILE_BYTES))
        except OSError:
            continue
        if info is not None and pid_alive(info.pid):
            found[info.session_id] = info
    return found
