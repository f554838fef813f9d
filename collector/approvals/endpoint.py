"""The collector's side of the approval socket (see ``relaybus.shared.approval_socket``).

One ``POST /permission-request`` per connection, its JSON body handed to an
:data:`Answer`, whose reply is sent back as the JSON body of a ``200``; anything else is
a ``400`` with ``{}`` (no decision). :func:`listen` binds the socket in a private directory, refusing loudly — approvals off,
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
from typing import Any, Protocol

import orjson

from relaybus.shared import approval_socket
from relaybus.shared.settings import Settings

log = logging.getLogger(__name__)

HEADER_MAX_BYTES = 16 * 1024
BODY_MAX_BYTES = 16 * 1024 * 1024
READ_TIMEOUT_S = 10.0

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
#: (server, socket path, its inode)
Bound = tuple[asyncio.Server, Path, int]


class Answer(Protocol):
    """The hook's answer to a request body; ``gone`` completes when the hook hangs up."""

    def __call__(
        self, body: bytes, *, gone: asyncio.Future[bytes]
    ) -> Awaitable[dict[str, Any]]: ...


def endpoint_path(settings: Settings) -> Path:
    return approval_socket.socket_path(settings.approval_port, settings.approval_socket)


async def listen(settings: Settings, answer: Answer) -> Bound | None:
    """(server, socket path, its inode) serving ``answer``, or ``None`` after logging why not."""
    path = endpoint_path(settings)
    try:
        approval_socket.check_path(path)
        approval_socket.check_private_dir(path.parent, create=True)
        _clear_stale(path)
        server = await asyncio.start_unix_server(
            _same_user_only(_http(answer)), path=os.fspath(path), limit=HEADER_MAX_BYTES
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


def _http(answer: Answer) -> Handler:
    """One request, one answer, then close."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        status, reply = 400, {}
        try:
            body = await asyncio.wait_for(_read_body(reader), READ_TIMEOUT_S)
            if body is not None:
                status = 200
                reply = await answer(body, gone=asyncio.ensure_future(reader.read(1)))
        except (
            TimeoutError,
            OSError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as exc:
            log.debug("approvals: bad or lost request: %r", exc)
        finally:
            with contextlib.suppress(OSError):
                payload = orjson.dumps(reply)
                writer.write(
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Bad Request'}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                    "Connection: close\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return connection


async def _read_body(reader: asyncio.StreamReader) -> bytes | None:
    """The body of one ``POST /permission-request`` (``None`` for anything else)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[0] != "POST" or parts[1] != "/permission-request":
        return None
    length = -1
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if not 0 <= length <= BODY_MAX_BYTES:
        return None
    return await reader.readexactly(length)


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
