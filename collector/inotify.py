"""Linux inotify through libc: directory watches whose events are read on the event loop.

watchfiles reports a change once its polling step has passed quietly (1 ms at the least,
~2 ms in practice) and from a thread of its own; an inotify descriptor is readable the
moment the kernel queues the event, so the collector's loop reads it with ``add_reader``
and no thread, no step, no GIL hand-over sits between an append and the engine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys
from dataclasses import dataclass
from typing import Final

IN_MODIFY: Final = 0x00000002
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
IN_EXCL_UNLINK: Final = 0x04000000
IN_ISDIR: Final = 0x40000000
IN_NONBLOCK: Final = os.O_NONBLOCK
IN_CLOEXEC: Final = os.O_CLOEXEC

#: What a watched directory reports: its files written (a truncation too), made, removed,
#: renamed in or out (an atomic replace is a rename in), and its own removal. Not a close
#: after writing nor a change of attributes: neither changes what is read, and each would
#: be one more wake-up per append.
DIR_EVENTS: Final = (
    IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
)

_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then name)
_READ_SIZE = 64 * 1024
#: The largest event: its header and a name of NAME_MAX bytes with its NUL.
_EVENT_MAX = _HEADER.size + 256


@dataclass(frozen=True, slots=True)
class Event:
    wd: int
    mask: int
    name: str  # the entry's name inside the watched directory ("" for the directory itself)


class Unavailable(OSError):
    """No inotify here (not Linux, or the kernel or its limits refuse an instance)."""


def _libc() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        raise Unavailable("inotify is Linux only")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError) as exc:
        raise Unavailable(f"no inotify in the C library: {exc}") from exc
    return libc


def parse(buf: bytes) -> list[Event]:
    """The events in one ``read`` of an inotify descriptor (the kernel returns whole events)."""
    out: list[Event] = []
    pos, end = 0, len(buf)
    while pos + _HEADER.size <= end:
        wd, mask, _cookie, size = _HEADER.unpack_from(buf, pos)
        pos += _HEADER.size
        raw = buf[pos : pos + size].split(b"\0", 1)[0]
        pos += size
        out.append(Event(wd, mask, os.fsdecode(raw)))
    return out


class Inotify:
    """One non-blocking inotify instance; :meth:`read` takes what is queued."""

    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise Unavailable(err, f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd

    def add(self, path: str) -> int:
        """Watch directory ``path`` (never through a symlink); its watch descriptor.
        ``OSError`` if it is gone, not a directory, or the watch limit is reached."""
        wd = self._libc.inotify_add_watch(
            self.fd, os.fsencode(path), DIR_EVENTS | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK
        )
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch: {os.strerror(err)}", path)
        return int(wd)

    def remove(self, wd: int) -> None:
        """Stop watching ``wd``; a watch the kernel dropped already is no error."""
        self._libc.inotify_rm_watch(self.fd, wd)

    def read(self) -> list[Event]:
        """Everything queued now (empty if nothing is)."""
        out: list[Event] = []
        while True:
            try:
                buf = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return out
            out.extend(parse(buf))
            if len(buf) <= _READ_SIZE - _EVENT_MAX:  # the queue was emptied: no second read
                return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
