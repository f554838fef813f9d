"""Where the hook reaches the collector: a Unix socket in a directory only this user can enter.

The approval endpoint is ``<runtime dir>/approval-<RELAYBUS_APPROVAL_PORT>.sock`` (or
``RELAYBUS_APPROVAL_SOCKET``); the runtime dir is ``$XDG_RUNTIME_DIR/relaybus`` or, without
one, ``<tmp>/relaybus-<uid>``. The directory must be a real directory (not a symlink)
owned by this user with no access for anyone else (0700): then nobody but this user can
connect to the collector or stand in for it, so both directions are authenticated by the
kernel. The collector creates the directory (and repairs the mode of its own one); the
hook only checks it and falls through when it is not private. A TCP port is no longer
opened: the port number only names the socket (0 still turns approvals off).

Only the standard library: the hook imports this on every permission request.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import sys
import tempfile
from pathlib import Path

#: Room for the path in ``sockaddr_un`` (108 bytes on Linux, 104 on macOS, with the NUL).
MAX_PATH_BYTES = 103


class UnsafeEndpoint(OSError):
    """The socket's directory is not private to this user, or the path cannot be used."""


def runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/relaybus``, else ``<tmp>/relaybus-<uid>`` (as tmux does)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "relaybus"
    return Path(tempfile.gettempdir()) / f"relaybus-{os.getuid()}"


def socket_path(port: int, explicit: str | os.PathLike[str] | None = None) -> Path:
    """The approval socket for ``port`` (``explicit`` wins when given)."""
    if explicit:
        return Path(explicit)
    return runtime_dir() / f"approval-{port}.sock"


def check_private_dir(directory: Path, *, create: bool) -> None:
    """Raise :class:`UnsafeEndpoint` unless ``directory`` is ours alone (0700, not a symlink).

    With ``create`` (the collector) a missing directory is made 0700 and our own directory
    with a wider mode is narrowed; a directory of someone else is never touched.
    """
    if create:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise UnsafeEndpoint(f"{directory}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeEndpoint(f"{directory} is not a directory (a symlink is not accepted)")
    if st.st_uid != os.getuid():
        raise UnsafeEndpoint(f"{directory} belongs to uid {st.st_uid}, not to us ({os.getuid()})")
    if st.st_mode & 0o077:
        if not create:
            raise UnsafeEndpoint(
                f"{directory} is open to other users (mode {st.st_mode & 0o777:o})"
            )
        os.chmod(directory, 0o700)


def check_path(path: Path) -> None:
    """Raise :class:`UnsafeEndpoint` when ``path`` is too long for a Unix socket address."""
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        raise UnsafeEndpoint(f"socket path too long ({len(os.fsencode(path))} bytes): {path}")


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end (Linux ``SO_PEERCRED``), else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def connect(path: Path, timeout_s: float) -> socket.socket:
    """Connect to the collector's socket after checking that its directory is private.

    Raises :class:`UnsafeEndpoint` (or the ``OSError`` of ``connect``) otherwise; on Linux
    the peer must also run as this user.
    """
    check_path(path)
    check_private_dir(path.parent, create=False)
    st = os.lstat(path)
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        raise UnsafeEndpoint(f"{path} is not a socket of ours")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(os.fspath(path))
        uid = peer_uid(sock)
        if uid is not None and uid != os.getuid():
            raise UnsafeEndpoint(f"{path} is served by uid {uid}, not by us")
    except BaseException:
        sock.close()
        raise
    return sock
