"""A tracked transcript (its cursor and committed offset), and whose failure an error is.

A failure of one file (unreadable, refused) sets that file aside; a failure of Redis or
the epoch (:func:`bus_error`) holds the whole engine.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

import redis.exceptions

from relaybus.collector.paths import TranscriptPath, parent_tool_use_id
from relaybus.collector.tailer import FileTail, NotRegular
from relaybus.shared.store.appendlog import EpochChanged

#: ``OSError`` numbers that mean "this file", not "the connection to Redis".
FILE_ERRNOS = frozenset(
    {
        errno.ENOENT,
        errno.EACCES,
        errno.EPERM,
        errno.ELOOP,
        errno.EISDIR,
        errno.ENOTDIR,
        errno.ENXIO,
        errno.ENAMETOOLONG,
        errno.EINVAL,
        errno.EIO,
        errno.EFBIG,
        errno.EOVERFLOW,
    }
)


def bus_error(exc: BaseException) -> bool:
    """An error of Redis or the epoch (the engine holds and retries), not of one file."""
    if isinstance(
        exc,
        EpochChanged
        | redis.exceptions.ConnectionError
        | redis.exceptions.TimeoutError
        | redis.exceptions.ReadOnlyError
        | redis.exceptions.OutOfMemoryError
        | redis.exceptions.BusyLoadingError
        | redis.exceptions.ClusterError
        | redis.exceptions.TryAgainError
        | redis.exceptions.SlotNotCoveredError,
    ):
        return True
    if isinstance(exc, NotRegular):
        return False
    return isinstance(exc, OSError) and exc.errno not in FILE_ERRNOS


def stamp(path: Path) -> tuple[int, int, int, float] | None:
    """What identifies a file's current content well enough to retry it when it changes."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime)


@dataclass(slots=True)
class FileEntry:
    """A tracked transcript: its cursor and the offset value Redis holds for it."""

    tp: TranscriptPath
    tail: FileTail
    committed: str
    sid: str | None
    #: Registered without its history (old file): load it before publishing new lines.
    history_pending: bool = False
    #: a sub-agent file: the tool call that started it (read from its .meta.json)
    parent_tool: str | None = None

    def parent_tool_use_id(self) -> str | None:
        if self.parent_tool is None and self.tp.agent_id is not None:
            self.parent_tool = parent_tool_use_id(self.tail.path)
        return self.parent_tool
