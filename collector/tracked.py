"""A tracked transcript (its cursor and committed offset), and whose failure an error is.

A failure of one file (unreadable, refused) sets that file aside; a failure of Redis or
the epoch (:func:`bus_error`) holds the whole engine.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from relaybus.collector.backfill import parse_offset
from relaybus.collector.paths import TranscriptPath, parent_tool_use_id
from relaybus.collector.tailer import FileTail, NotRegular
from relaybus.shared.store.appendlog import EpochChanged
from relaybus.shared.store.connection import REDIS_ERRORS

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
    if isinstance(exc, (EpochChanged, *REDIS_ERRORS)):  # a file's OSError is not Redis's
        return True
    if isinstance(exc, NotRegular):
        return False
    return isinstance(exc, OSError) and exc.errno not in FILE_ERRNOS


#: Acknowledged appends remembered per file (what a failover may have lost): a failover
#: that lost more of one file is recorded from the oldest of them.
ACKED_MAX = 64


@dataclass(frozen=True, slots=True)
class Acked:
    """An append Redis acknowledged: where it left the file and the seqs it was given."""

    end: int
    ino: int
    first_seq: int
    #: the log's rewind generation it was appended under
    gen: int


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
    #: recent acknowledged appends that carried events, oldest first
    acked: deque[Acked] = field(default_factory=lambda: deque(maxlen=ACKED_MAX))

    def first_lost(self, committed: str) -> Acked | None:
        """The oldest acknowledged append beyond the ``committed`` value Redis now holds
        (a failover to a replica that never got it), or ``None``: nothing known lost."""
        parsed = parse_offset(committed)
        for a in self.acked:
            if parsed is None or (a.ino == parsed[2] and a.end > parsed[0]):
                return a
        return None

    def parent_tool_use_id(self) -> str | None:
        if self.parent_tool is None and self.tp.agent_id is not None:
            self.parent_tool = parent_tool_use_id(self.tail.path)
        return self.parent_tool
