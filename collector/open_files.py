"""The transcripts kept open between reads, bounded in number and in idle time.

A tracked transcript's cursor keeps its file open after a read (``FileTail(hold=True)``),
so the next wake-up costs an ``fstat`` and a ``pread`` instead of an ``open``/``close``
as well. Every transcript under the claude dir is tracked, so the open ones are bounded:
at most :data:`MAX_OPEN` (the least recently read is closed first) and none left open
after :data:`IDLE_S` without a read (:meth:`OpenFiles.close_idle`, on the engine's tick).
A closed cursor opens its path again on its next read.
"""

from __future__ import annotations

from relaybus.collector.tailer import FileTail

#: Transcripts kept open at most (a few live sessions and their sub-agents).
MAX_OPEN = 64
#: A transcript not read for this long is closed.
IDLE_S = 30.0


class OpenFiles:
    """The open cursors, least recently read first."""

    def __init__(self, max_open: int = MAX_OPEN, idle_s: float = IDLE_S) -> None:
        self.max_open = max_open
        self.idle_s = idle_s
        self._last: dict[FileTail, float] = {}

    def read(self, tail: FileTail, now: float) -> None:
        """``tail`` was just read at ``now`` (monotonic s): keep it, close the oldest beyond the cap."""
        if not tail.is_open:
            self._last.pop(tail, None)
            return
        last = self._last
        last.pop(tail, None)
        last[tail] = now
        while len(last) > self.max_open:
            oldest = next(iter(last))
            del last[oldest]
            oldest.close()

    def close_idle(self, now: float) -> None:
        """Close the cursors not read since ``now - idle_s``."""
        last = self._last
        while last:
            oldest, when = next(iter(last.items()))
            if now - when < self.idle_s:
                return
            del last[oldest]
            oldest.close()

    def close(self, tail: FileTail) -> None:
        """Close one cursor (its file is no longer tracked)."""
        self._last.pop(tail, None)
        tail.close()

    def close_all(self) -> None:
        for tail in self._last:
            tail.close()
        self._last.clear()
