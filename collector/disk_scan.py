"""The safety-net rescan's walk: which transcripts on disk the engine must look at.

Every :data:`~relaybus.collector.service.RESCAN_S` the engine walks the projects tree in
case the watcher missed a change. A tracked transcript whose cursor's own check finds the
same file with nothing unread needs nothing (the drain would stop right there): only the
others become ``Path``s and go through ``FileSync.sync_path``. A routine rescan also
``lstat``s only the files read lately (their descriptor still open:
:mod:`relaybus.collector.open_files`) every time, and each quiet one on one rescan in
:data:`QUIET_EVERY` (staggered by name): an ``lstat`` costs ~16 µs on a small VM, and a
collector beside 2,000 old transcripts spent 6 % of a core on this net. A missed change to
a quiet file is found within ``QUIET_EVERY`` rescans; a full rescan (the watcher's queue
overflowed, new watches, Redis came back) compares every file.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from pathlib import Path

from relaybus.collector import backfill
from relaybus.collector.paths import SUFFIX
from relaybus.collector.tailer import Status
from relaybus.collector.tracked import FileEntry

#: A quiet file is compared on one routine rescan in this many (2 s each: every 30 s).
QUIET_EVERY = 15


class DiskScan:
    """The walk of one engine's projects tree, and which routine rescan it is."""

    def __init__(self, projects: Path) -> None:
        self.projects = projects
        self.rounds = 0

    def scan(
        self, tracked: Mapping[str, FileEntry], *, every_file: bool = True
    ) -> tuple[list[Path], set[str]]:
        """The ``.jsonl`` files to sync, in sync order: every file not tracked, and the
        tracked ones whose cursor's check finds something to read or another file. Also the
        keys of every such file found (``projects/…``, as ``FileSync`` keys them).
        ``every_file=False``: a routine rescan, comparing the quiet files in turn."""
        top = str(self.projects)
        base = self.projects.name
        self.rounds += 1
        turn = -1 if every_file else self.rounds % QUIET_EVERY
        todo: list[Path] = []
        seen: set[str] = set()
        for dirpath, _dirs, names in os.walk(top):
            prefix = base + dirpath[len(top) :] + "/"
            for name in names:
                if not name.endswith(SUFFIX):
                    continue
                key = prefix + name
                seen.add(key)
                entry = tracked.get(key)
                if entry is not None:
                    tail = entry.tail
                    quiet = turn >= 0 and not tail.is_open
                    if quiet and zlib.crc32(key.encode()) % QUIET_EVERY != turn:
                        continue  # a quiet file, not its turn
                    try:
                        if tail.check().status is Status.SAME and not tail.has_unread:
                            continue  # what sync_path's drain would find: nothing to read
                    except OSError:
                        pass  # unreadable now: sync_path sets it aside
                todo.append(Path(dirpath, name))
        todo.sort(key=backfill.sync_order)
        return todo, seen
