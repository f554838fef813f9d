"""Start-up checks that answer in one line: ports to bind, directories to use.

The entry points (``relaybus collector``, ``gateway``, ``up``) run them before anything
starts, print the :class:`StartupError` line and exit 1; ``relaybus doctor`` runs the
same checks and prints each answer.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from pathlib import Path

from relaybus.shared.settings import Settings

log = logging.getLogger(__name__)


class StartupError(Exception):
    """Something this process needs is unusable; the message is one line with the fix."""


def port_problem(host: str, port: int, variable: str) -> str | None:
    """Why ``host:port`` cannot be bound now (one line naming ``variable``), or ``None``.

    Port 0 (off, or any free port) is never a problem. The probe binds the way servers
    do (``SO_REUSEADDR``), so only a socket someone listens on counts as taken.
    """
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "is already in use by another program"
            elif exc.errno == errno.EACCES:
                why = "needs privileges this user does not have"
            elif exc.errno == errno.EADDRNOTAVAIL:
                why = f"cannot be bound: {host} is not an address of this machine"
            else:
                why = f"cannot be bound ({exc.strerror or exc})"
            return f"port {port} on {host} ({variable}) {why}: free it or set {variable} to another port"
    return None


def check_port(host: str, port: int, variable: str) -> None:
    problem = port_problem(host, port, variable)
    if problem is not None:
        raise StartupError(problem)


def claude_dir_problem(settings: Settings) -> str | None:
    """Why the Claude directory cannot be watched, or ``None``.

    A directory named explicitly (``RELAYBUS_CLAUDE_DIR``/``--claude-dir``) must exist:
    a typo is refused, not silently created. The default (``$CLAUDE_CONFIG_DIR`` or
    ``~/.claude``) may be missing on a machine where Claude Code has not run yet.
    """
    path = settings.claude_dir
    if path.exists() and not path.is_dir():
        return f"RELAYBUS_CLAUDE_DIR {path} is a file, not a directory: point it at Claude Code's config directory (the one holding projects/)"
    if not path.exists() and "claude_dir" in settings.model_fields_set:
        return f"RELAYBUS_CLAUDE_DIR {path} does not exist: point it at Claude Code's config directory (the one holding projects/), e.g. ~/.claude"
    if path.is_dir() and not os.access(path, os.R_OK | os.X_OK):
        return f"RELAYBUS_CLAUDE_DIR {path} is not readable by this user: run as its owner or fix its permissions"
    return None


def collector_dirs(settings: Settings) -> list[Path]:
    """The directories the collector watches: ``projects/`` and ``sessions/``, created when
    missing where it may create them. One it cannot create (a read-only mount) is left
    out with a warning; with neither, the Claude directory itself is watched."""
    problem = claude_dir_problem(settings)
    if problem is not None:
        raise StartupError(problem)
    root = settings.claude_dir
    if not root.exists():
        log.warning("%s does not exist yet (Claude Code has not run here?); creating it", root)
    found: list[Path] = []
    for sub in ("projects", "sessions"):
        d = root / sub
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("cannot create %s (%s); not watching it", d, exc.strerror or exc)
            continue
        found.append(d)
    if not found:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StartupError(
                f"cannot create RELAYBUS_CLAUDE_DIR {root} ({exc.strerror or exc})"
            ) from None
        found.append(root)
    return found


def usable_dir(path: Path, what: str) -> Path:
    """``path`` created (mode 0700) and writable, or a :class:`StartupError` naming ``what``."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = path / ".relaybus-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StartupError(
            f"{what} {path} is not usable ({exc.strerror or exc}): {_fix_for(what)}"
        ) from None
    return path


def _fix_for(what: str) -> str:
    if what == "state directory":
        return "set XDG_STATE_HOME to a writable directory"
    return "choose a writable directory"
