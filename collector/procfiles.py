"""Claude Code's live-process files: ``<claude>/sessions/<pid>.json``.

Each running ``claude`` writes one, with at least ``pid``, ``sessionId`` and ``cwd``
(newer versions add ``status``, ``waitingFor``, ``entrypoint`` and, under tmux, ``tmux``
naming the pane, e.g. ``"main:@0.%0"``; 2.1.332 adds ``procStart``, the process's start
time from ``/proc/<pid>/stat``). Parsed tolerantly: anything missing or malformed makes the
file be ignored, never an error.

A live file decides where a phone's prompt is typed, so only trusted ones count: a regular
file owned by the collector's user in a ``sessions/`` directory of that user that no group
or other user can write (not a symlink), opened through that directory's descriptor.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from relaybus.collector.tailer import NotRegular
from relaybus.shared.wire.ids import valid_session_id
from relaybus.shared.wire.json_object import json_object

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
    #: ``procStart``: the process's start time (clock ticks after boot), when the file says
    proc_start: int | None = None


def parse(raw: bytes) -> LiveProcess | None:
    obj = json_object(raw)
    if obj is None:
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
        proc_start=_proc_start(obj.get("procStart")),
    )


def _proc_start(value: object) -> int | None:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (Linux): state, ppid, pgrp,
    session, tty_nr, tpgid, …; ``None`` without it."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")".
    return raw[raw.rfind(b")") + 2 :].split()


def _stat(pid: int) -> tuple[str, int] | None:
    """State and parent pid; ``None`` without them."""
    fields = stat_fields(pid)
    try:
        return (fields[0].decode(), int(fields[1])) if fields else None
    except (IndexError, ValueError):
        return None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_warned: set[tuple[str, str]] = set()


class Untrusted(OSError):
    """A live-process file or directory someone else could have written: never read."""


def open_trusted_dir(sessions_dir: Path) -> int:
    """A descriptor of ``sessions_dir`` if only the collector's user can write it."""
    fd = os.open(sessions_dir, _DIR_FLAGS)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise Untrusted(f"{sessions_dir} belongs to uid {st.st_uid}, not to this user")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise Untrusted(
                f"{sessions_dir} is writable by group or others (mode {st.st_mode & 0o7777:o}):"
                " chmod go-w it"
            )
        return fd
    except BaseException:
        os.close(fd)
        raise


def _read(dir_fd: int, name: str) -> LiveProcess | None:
    """The live file ``name`` in the directory ``dir_fd``: regular, the user's, parsed."""
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"not a regular file: {name}")
        if st.st_uid != os.geteuid():
            raise Untrusted(f"{name} belongs to uid {st.st_uid}")
        return parse(os.read(fd, MAX_FILE_BYTES))
    finally:
        os.close(fd)


def _warn_once(sessions_dir: Path, exc: OSError) -> None:
    key = (str(sessions_dir), str(exc))
    if key not in _warned and len(_warned) < 64:
        _warned.add(key)
        log.warning("live-process files ignored: %s", exc)


def scan(sessions_dir: Path) -> dict[str, LiveProcess]:
    """Live processes by session id: trusted files that parse and whose pid is alive."""
    found: dict[str, LiveProcess] = {}
    try:
        dir_fd = open_trusted_dir(sessions_dir)
    except FileNotFoundError:
        return found
    except OSError as exc:
        _warn_once(sessions_dir, exc)
        return found
    try:
        for name in os.listdir(dir_fd):
            if not name.endswith(".json"):
                continue
            try:
                info = _read(dir_fd, name)
            except Untrusted as exc:
                _warn_once(sessions_dir, exc)
                continue
            except OSError:
                continue
            if info is not None and pid_alive(info.pid):
                found[info.session_id] = info
    finally:
        os.close(dir_fd)
    return found


def read_live(sessions_dir: Path, pid: int) -> LiveProcess | None:
    """What the trusted live file of ``pid`` (``sessions/<pid>.json``) says now, if any."""
    try:
        dir_fd = open_trusted_dir(sessions_dir)
    except OSError:
        return None
    try:
        return _read(dir_fd, f"{pid}.json")
    except OSError:
        return None
    finally:
        os.close(dir_fd)
