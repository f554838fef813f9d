"""The state file of a running ``relaybus up``: ``up.json`` in its state directory.

``up`` writes it (mode 0600: the phone URL carries the token) once it serves and removes it
on exit; ``relaybus url`` and ``relaybus status`` read it. A file whose process no longer
runs (``up`` was killed, or its pid now names another process) is reported as stale by
:func:`alive`, never trusted blindly.

Fields (JSON): ``pid``, ``pidStart`` (the process's start, field 22 of ``/proc/<pid>/stat``;
absent where there is no ``/proc`` and in files of older versions), ``startedAt`` (ms since
the epoch), ``url`` (the phone URL, https when TLS is on), ``http_url`` (the same without
TLS, or "" when the phone port is https only), ``root_url`` (the plain-http page that
offers the root certificate, "" without one), ``root_cert`` (its path, "" without one),
``tls`` (bool), ``redis`` (address, no password), ``ports`` (name -> port: gateway, root,
metrics, …).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FILE_NAME = "up.json"
#: A state file is a few hundred bytes; anything bigger is not ours.
MAX_BYTES = 64 * 1024


def state_dir() -> Path:
    """``$XDG_STATE_HOME/relaybus``, or ``~/.local/state/relaybus``."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "relaybus"


@dataclass(frozen=True)
class UpState:
    """What a running ``up`` says about itself."""

    pid: int
    url: str
    http_url: str = ""
    root_url: str = ""
    root_cert: str = ""
    tls: bool = False
    redis: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    started_at: int = field(default_factory=lambda: int(time.time() * 1000))
    #: :func:`process_start` of ``pid`` when it wrote the file (None: unknown).
    pid_start: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["startedAt"] = data.pop("started_at")
        if (start := data.pop("pid_start")) is not None:
            data["pidStart"] = start
        return data

    @classmethod
    def from_json(cls, data: Any) -> UpState | None:
        """The state in ``data``, or None when it is not a state file's shape."""
        if not isinstance(data, dict):
            return None
        try:
            ports = data.get("ports", {})
            state = cls(
                pid=int(data["pid"]),
                url=str(data["url"]),
                http_url=str(data.get("http_url", "")),
                root_url=str(data.get("root_url", "")),
                root_cert=str(data.get("root_cert", "")),
                tls=bool(data.get("tls", False)),
                redis=str(data.get("redis", "")),
                ports={str(k): int(v) for k, v in ports.items()},
                started_at=int(data.get("startedAt", 0)),
                pid_start=None if data.get("pidStart") is None else int(data["pidStart"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return state if state.pid > 0 else None


def path(directory: Path | None = None) -> Path:
    """Where the state file of ``up`` with this state directory lives."""
    return (directory or state_dir()) / FILE_NAME


def write(state: UpState, directory: Path | None = None) -> Path:
    """Write ``state`` atomically with mode 0600 (created so, never widened)."""
    target = path(directory)
    tmp = target.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (json.dumps(state.to_json(), indent=2) + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return target


def read(directory: Path | None = None) -> UpState | None:
    """The state file's content; None when there is none or it is unreadable or malformed."""
    try:
        with path(directory).open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_BYTES:
        return None
    try:
        return UpState.from_json(json.loads(raw))
    except (ValueError, RecursionError):
        return None


def process_start(pid: int) -> int | None:
    """When ``pid`` started (field 22 of ``/proc/<pid>/stat``, clock ticks since boot); None
    without ``/proc`` or such a process. Pids are reused; a pid with its start is not."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    after_name = raw.rpartition(b")")[2].split()  # the name may hold spaces and parentheses
    try:
        return int(after_name[19])  # fields 3.. follow the name
    except (IndexError, ValueError):
        return None


def alive(state: UpState) -> bool:
    """Whether the process that wrote ``state`` still runs (False: a stale file). With a
    recorded start, a process that has its pid but started at another time is not it."""
    try:
        os.kill(state.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if state.pid_start is None:
        return True
    now = process_start(state.pid)
    return now is None or now == state.pid_start


def remove(directory: Path | None = None, pid: int | None = None) -> None:
    """Remove the state file if it is this process's (or ``pid``'s); another ``up``'s stays."""
    current = read(directory)
    if current is not None and current.pid != (pid or os.getpid()):
        return
    with contextlib.suppress(FileNotFoundError):
        path(directory).unlink()
