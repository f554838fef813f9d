"""The state file of a running ``relaybus up``: ``up.json`` in its state directory.

``up`` writes it (mode 0600: the phone URL carries the token) once it serves and removes it
on exit; ``relaybus url`` and ``relaybus status`` read it. A file whose process no longer
runs (``up`` was killed) is reported as stale by :func:`alive`, never trusted blindly.

Fields (JSON): ``pid``, ``startedAt`` (ms since the epoch), ``url`` (the phone URL, https
when TLS is on), ``http_url`` (the same without TLS, or "" when the phone port is https
only), ``root_url`` (the plain-http page that offers the root certificate, "" without
one), ``root_cert`` (its path, "" without one), ``tls`` (bool), ``redis`` (address, no
password), ``ports`` (name -> port: gateway, root, metrics, …).
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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["startedAt"] = data.pop("started_at")
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


def alive(state: UpState) -> bool:
    """Whether the process that wrote ``state`` still runs (False: a stale file)."""
    try:
        os.kill(state.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove(directory: Path | None = None, pid: int | None = None) -> None:
    """Remove the state file if it is this process's (or ``pid``'s); another ``up``'s stays."""
    current = read(directory)
    if current is not None and current.pid != (pid or os.getpid()):
        return
    with contextlib.suppress(FileNotFoundError):
        path(directory).unlink()
