"""How a backfill reads a transcript: its last events whole, the lines before only for state.

A backfill (``FileSync._backfill``) publishes a file's last ``backfill_events`` events and
the session state its whole content leaves (first prompt, title, cwd, turn state, sub-agent
links, warm-up agents). Projecting every line took time in proportion to the file, and
Claude Code transcripts reach hundreds of MB. So :func:`collapse` reads

1. a window: the last lines holding ``backfill_events`` published lines, found backwards
   from the end (:func:`~relaybus.collector.backfill.tail_start`), grown 4x until it does;
2. the lines before it, in bounded batches, each only parsed and classified
   (:func:`~relaybus.shared.transcript.projection.hint_line`): the few that change the
   state (a turn signal, a title or first-prompt candidate, a warm-up, a sub-agent link, a
   summary's leaf, a cwd or entrypoint still unknown) are projected and planned, in file
   order, the others skipped;
3. the window, projected and planned whole.

It runs in a thread. Setting ``abandon`` (the collector stops) makes it raise
:class:`Abandoned` at its next batch, so a stop does not wait for a huge file's read.

The plan so sees every line that changes its state, in order, and the window supplies the
events, so the outcome is that of a full read as long as timestamps do not go backwards
(the last activity and a ``session_started`` time are the newest timestamps: the window's).
Where the window cannot vouch for that — it published fewer events than wanted, or
nothing with content (the head may have had some), or the session's turn was ended by the
backstop (then any activity line counts) — the file is read and projected whole, as before.
"""

from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from relaybus.collector import backfill
from relaybus.collector.batch_plan import BatchPlan
from relaybus.collector.projector import Projector
from relaybus.collector.session_state import SessionState
from relaybus.collector.tailer import FileTail, Identity, Line, open_fd
from relaybus.shared.transcript import projection

#: Lines and bytes read (and projected) at a time.
BATCH_LINES = 10_000
BATCH_BYTES = 4 * 1024 * 1024
#: Lines looked at per wanted event at first (bookkeeping lines publish nothing).
LINES_PER_EVENT = 3


class Abandoned(Exception):
    """The read was given up: its ``abandon`` event was set."""


def _check(abandon: threading.Event | None) -> None:
    if abandon is not None and abandon.is_set():
        raise Abandoned


@dataclass(slots=True)
class Read:
    """A finished plan and what was read for it."""

    plan: BatchPlan
    #: offset just past the last line read (the value to commit)
    end: int
    lines: int
    #: lines projected (the others were only classified)
    projected: int
    #: where the window began (0: the whole file was projected)
    window: int


def collapse(
    projector: Projector,
    new_plan: Callable[[], BatchPlan],
    path: Path,
    ident: Identity,
    end: int,
    *,
    abandon: threading.Event | None = None,
) -> Read:
    """Plan the backfill of the complete lines before ``end`` (a line end) with
    ``new_plan()`` (a collapsing plan), reading as little of the file whole as it can."""
    plan = new_plan()
    events = projector.settings.backfill_events
    if not plan.orig.turn.backstopped:
        start = _window(projector, path, ident, end, events, abandon)
        if start > 0:
            read = _split(projector, plan, path, ident, start, end, abandon)
            if read.plan.published >= events and read.plan.state.has_content:
                return read
            plan = new_plan()
    return _whole(projector, plan, path, ident, end, abandon)


def _batches(
    path: Path,
    ident: Identity,
    start: int,
    stop: int,
    max_line_bytes: int,
    abandon: threading.Event | None = None,
) -> Iterator[list[Line]]:
    """The complete lines between ``start`` and ``stop`` (line ends), in bounded batches."""
    cursor = FileTail(path, ident, start)
    while cursor.offset < stop:
        _check(abandon)
        lines = cursor.read(
            max_lines=BATCH_LINES, max_bytes=BATCH_BYTES, max_line_bytes=max_line_bytes
        )
        lines = [ln for ln in lines if ln.end <= stop]
        if not lines:
            return
        yield lines
        cursor.commit(lines[-1].end)


def _window(
    projector: Projector,
    path: Path,
    ident: Identity,
    end: int,
    events: int,
    abandon: threading.Event | None,
) -> int:
    """Start of the last lines before ``end`` that hold ``events`` published lines; 0 when
    those reach back past the file's first half (reading it whole costs about as much).
    Each line is projected once here however often the window grows."""
    s = projector.settings
    n_lines = max(1, events) * LINES_PER_EVENT
    published, counted = 0, end
    while True:
        start = backfill.tail_start(path, end, lines=n_lines, max_bytes=end, identity=ident)
        if start < end // 2 or start == 0:  # 0: the whole file (a window that cannot grow)
            return 0
        for lines in _batches(path, ident, start, counted, s.max_line_bytes, abandon):
            published += sum(projector.project_one(ln).publish for ln in lines)
        if published >= events:
            return start
        counted = start
        n_lines *= 4


def _split(
    projector: Projector,
    plan: BatchPlan,
    path: Path,
    ident: Identity,
    start: int,
    end: int,
    abandon: threading.Event | None,
) -> Read:
    """The lines before ``start`` for the state alone, then the window whole."""
    max_line_bytes = projector.settings.max_line_bytes
    st = plan.state
    scan = _Scan(path, ident, start, max_line_bytes, st, abandon)
    projected = 0
    for ln in scan.lines():
        if ln.raw is None:
            continue  # an oversize stand-in is an event, no state
        h = projection.hint_line(ln.raw)
        if (
            h.stateful
            or (h.has_cwd and not st.cwd)
            or (h.has_entrypoint and not st.entrypoint)
            or (h.uuid is not None and h.uuid in st.pending_summaries)
        ):
            projector.feed(plan, [ln])  # one at a time: it may change what matters next
            projected += 1
    read, last = scan.read, start
    for lines in _batches(path, ident, start, end, max_line_bytes, abandon):
        projector.feed(plan, lines)
        read += len(lines)
        projected += len(lines)
        last = lines[-1].end
    plan.finish()
    return Read(plan, last, read, projected, start)


class _Scan:
    """The lines before ``stop`` that may change the state ``st``, in file order.

    Reads :data:`BATCH_BYTES` at a time and searches each chunk whole for the
    :data:`~relaybus.shared.transcript.projection.STATE_NEEDLES` (plus a cwd or entrypoint
    still unknown, and the leaf uuids of pending summaries): a line holding none is never
    split off. ``read`` counts every complete line passed.
    """

    def __init__(
        self,
        path: Path,
        ident: Identity,
        stop: int,
        max_line_bytes: int,
        st: SessionState,
        abandon: threading.Event | None = None,
    ) -> None:
        self.path, self.ident, self.stop = path, ident, stop
        self.max_line_bytes = max_line_bytes
        self.st = st
        self.abandon = abandon
        self.read = 0

    def lines(self) -> Iterator[Line]:
        try:
            fd, info = open_fd(self.path)
        except OSError:
            return
        try:
            if Identity.of(info) != self.ident:
                return
            pos = 0
            while pos < self.stop:
                _check(self.abandon)
                chunk = os.pread(fd, min(BATCH_BYTES, self.stop - pos), pos)
                cut = chunk.rfind(b"\n") + 1
                if cut == 0:  # one line longer than a chunk (or nothing left)
                    long = FileTail(self.path, self.ident, pos).read(
                        max_lines=1, max_bytes=1, max_line_bytes=self.max_line_bytes
                    )
                    if not long or long[0].end > self.stop:
                        return
                    self.read += 1
                    yield long[0]
                    pos = long[0].end
                    continue
                self.read += chunk.count(b"\n", 0, cut)
                yield from self._hits(chunk, cut, pos)
                pos += cut
        finally:
            os.close(fd)

    def _hits(self, chunk: bytes, cut: int, base: int) -> Iterator[Line]:
        """The lines of ``chunk[:cut]`` (at ``base``) worth parsing, in order."""
        st = self.st
        heap: list[int] = []
        #: line start -> (its end, found only by the user word)
        marks: dict[int, tuple[int, bool]] = {}

        def mark(i: int, user: bool) -> int:
            s = chunk.rfind(b"\n", 0, i) + 1
            e = chunk.find(b"\n", i, cut)
            if s not in marks:
                heapq.heappush(heap, s)
                marks[s] = (e, user)
            elif not user:
                marks[s] = (e, False)
            return e + 1

        def find(needle: bytes, frm: int = 0, *, user: bool = False, stop: bool = False) -> None:
            i = chunk.find(needle, frm, cut)
            while i >= 0:
                if stop and not projection.terminal_stop_at(chunk, i + len(needle)):
                    i = chunk.find(needle, i + 1, cut)
                    continue
                i = chunk.find(needle, mark(i, user), cut)

        for word in projection.STATE_WORDS:
            find(word, user=word == projection.USER_WORD)
        for opening in projection.STOP_OPENINGS:
            find(opening, stop=True)
        if not st.cwd:
            find(b'"cwd"')
        if not st.entrypoint:
            find(b'"entrypoint"')
        leaves = set(st.pending_summaries)
        for leaf in leaves:
            find(leaf.encode())
        while heap:
            s = heapq.heappop(heap)
            e, user_only = marks[s]
            raw = chunk[s:e]
            if user_only and projection.plain_tool_result(raw):
                continue
            size = e - s
            yield Line(raw if size <= self.max_line_bytes else None, size, base + e + 1)
            new = set(st.pending_summaries) - leaves
            if new:  # a summary just read: its leaf may follow in this chunk
                leaves |= new
                for leaf in new:
                    find(leaf.encode(), e + 1)


def _whole(
    projector: Projector,
    plan: BatchPlan,
    path: Path,
    ident: Identity,
    end: int,
    abandon: threading.Event | None = None,
) -> Read:
    """Every line projected and planned, in bounded batches."""
    read, last = 0, 0
    for lines in _batches(path, ident, 0, end, projector.settings.max_line_bytes, abandon):
        projector.feed(plan, lines)
        read += len(lines)
        last = lines[-1].end
    plan.finish()
    return Read(plan, last, read, read, 0)
