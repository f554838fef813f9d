"""The collector's side of the approval socket (see ``relaybus.shared.approval_socket``).

:func:`listen` binds the socket in a private directory, refusing loudly — approvals off,
never the endpoint left to someone else — when the directory is not ours alone, the path
does not fit, or another live collector already serves it. A socket file nobody answers
on (a collector that was killed) is replaced. :func:`unlink` removes our socket at stop,
unless someone else's has taken its place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

from relaybus.shared import approval_socket
from relaybus.shared.settings import Settings

log = logging.getLogger(__name__)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def endpoint_path(settings: Settings) -> Path:
    return approval_socket.socket_path(settings.approval_port, settings.approval_socket)


async def listen(
    settings: Settings, handler: Handler, *, limit: int
) -> tuple[asyncio.Server, Path, int] | None:
    """(server, socket path, its inode) serving ``handler``, or ``None`` after logging why not."""
    path = endpoint_path(settings)
    try:
        approval_socket.check_path(path)
        approval_socket.check_private_dir(path.parent, create=True)
        _clear_stale(path)
        server = await asyncio.start_unix_server(
            _same_user_only(handler), path=os.fspath(path), limit=limit
        )
        os.chmod(path, 0o600)
        ino = os.lstat(path).st_ino
    except OSError as exc:
        log.error(
            "APPROVALS OFF: cannot serve the approval socket %s (%s); the hook will fall "
            "through to Claude Code's own prompt",
            path,
            exc,
        )
        return None
    return server, path, ino


def _same_user_only(handler: Handler) -> Handler:
    """Close, unanswered, a connection from another uid (Linux ``SO_PEERCRED``; root aside).

    The private directory already keeps others out; this holds even if its mode was widened.
    """

    async def checked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        uid = approval_socket.peer_uid(sock) if sock is not None else None
        if uid is not None and uid not in (os.getuid(), 0):
            log.warning("approvals: refused a connection from uid %d", uid)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return
        await handler(reader, writer)

    return checked


def unlink(path: Path, ino: int) -> None:
    """Remove the socket we bound, if it is still ours."""
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == ino:
            os.unlink(path)


def _clear_stale(path: Path) -> None:
    """Remove a dead socket file; raise when a live endpoint or a non-socket is in the way."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise approval_socket.UnsafeEndpoint(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # nobody answers: left by a collector that was killed
        return
    except OSError:
        pass
    finally:
        probe.close()
    raise approval_socket.UnsafeEndpoint(f"another process (another collector?) serves {path}")
