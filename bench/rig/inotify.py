"""Linux inotify through libc (ctypes), for the bench's lean floor: one directory watch whose
descriptor the event loop reads with ``add_reader`` — no thread, no polling step.

The bench keeps its own copy (not ``relaybus.collector.inotify``): a floor must not share
code with the system it is the floor of.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct

IN_MODIFY = 0x00000002
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then name)


class Inotify:
    """One non-blocking inotify instance watching one directory's writes and new files."""

    def __init__(self, directory: str) -> None:
        self._libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._libc.inotify_init1.argtypes = [ctypes.c_int]
        self._libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd: int = fd
        wd = self._libc.inotify_add_watch(
            fd, os.fsencode(directory), IN_MODIFY | IN_MOVED_TO | IN_CREATE
        )
        if wd < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch", directory)

    def names(self) -> set[str]:
        """The names of the entries that changed since the last call (empty if none)."""
        out: set[str] = set()
        while True:
            try:
                buf = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return out
            pos = 0
            while pos + _HEADER.size <= len(buf):
                _wd, _mask, _cookie, size = _HEADER.unpack_from(buf, pos)
                pos += _HEADER.size
                out.add(os.fsdecode(buf[pos : pos + size].split(b"\0", 1)[0]))
                pos += size

    def close(self) -> None:
        os.close(self.fd)
