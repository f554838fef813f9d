"""What one connection's stream is at: capabilities, dedupe marks, buffers and held gaps.

Sans-I/O (no socket, no Redis, no asyncio): :class:`~relaybus.gateway.delivery.connection.
Connection` asks :meth:`StreamState.admit` what to do with each live event and keeps the
send queue; the resume, the watch and the fan-out change the state only through its
methods. The invariant they keep together (DESIGN §8): while a replay is read, live events
of that stream are buffered; the replay stops where the buffer starts, the merge
(:mod:`relaybus.gateway.delivery.replay`) places every event once, in order, with its gaps,
and the marks set at the switch drop what the client already has.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Sequence
from collections.abc import Set as AbstractSet

from relaybus.gateway import protocol
from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.replay import Gap, Merged, merge, with_held_gaps
from relaybus.gateway.delivery.runs import Run
from relaybus.shared.wire import frames as wire_frames


class Admit(enum.Enum):
    """What :meth:`StreamState.admit` decided for a live event."""

    SEND = "send"
    SKIP = "skip"  # not entitled, or at or below a mark (the client has it)
    BUFFERED = "buffered"  # held for the merge of a replay being read
    OVERFLOW = "overflow"  # a buffer is full: the connection is a slow consumer


# Read per event and connection on the fan-out's path: module globals, as an Enum member
# lookup costs about 0.1 µs each in Python 3.11.
SEND = Admit.SEND
SKIP = Admit.SKIP
BUFFERED = Admit.BUFFERED
OVERFLOW = Admit.OVERFLOW


class StreamState:
    """One connection's position in the log and in each watched session's stream."""

    __slots__ = (
        "blocks_only",
        "buffer_floor",
        "buffer_max",
        "global_buffer",
        "global_mark",
        "held_gaps",
        "hello_done",
        "in_scope",
        "notify",
        "observe",
        "session_marks",
        "subscriptions",
        "url_epoch",
        "url_last_seq",
        "watch_buffers",
        "watched",
        "welcomed",
    )

    def __init__(self, *, position: int, buffer_max: int) -> None:
        #: Events a buffer holds at most before the connection is a slow consumer.
        self.buffer_max = buffer_max
        self.hello_done = False
        #: ``welcome`` was queued (hello) or the connection was resolved as v1: from then on
        #: it may receive frames the hub sends to everyone (reader gaps, epoch changes).
        self.welcomed = False
        #: ``?lastSeqId=`` / ``?epoch=`` of the URL: a v1 client's resume point.
        self.url_last_seq: int | None = None
        self.url_epoch: str | None = None
        self.subscriptions = False
        self.observe = False
        self.blocks_only = False
        #: While not ``None`` every offered event is buffered (before hello / during resume).
        self.global_buffer: list[Event] | None = []
        #: Reader position when buffering began: the buffer holds every event above it.
        self.buffer_floor = position
        #: Reader gaps announced while buffering: placed by the merge, after the replay.
        self.held_gaps: list[Gap] = []
        self.global_mark = 0
        self.watched: set[str] = set()
        self.watch_buffers: dict[str, list[Event]] = {}
        self.session_marks: dict[str, int] = {}
        #: A member's restricted scope: whether a session id is inside it (``None``: every
        #: session; set by :meth:`restrict` when a member authenticates).
        self.in_scope: AbstractSet[str] | None = None
        #: Called by every change that can end a steady stream (:meth:`steady_floor`): the
        #: hub drops its cache of steady connections (:mod:`relaybus.gateway.delivery.steady`).
        self.notify: Callable[[], object] = _nothing

    def on_change(self, changed: Callable[[], object]) -> None:
        """Call ``changed`` from now on whenever this stream may stop (or start) being steady."""
        self.notify = changed

    def steady_floor(self, sid: str) -> int | None:
        """The dedupe floor of ``sid``'s live events while this stream takes them as they
        come (no buffer, no held gap, no scope filter, watched or the firehose): a run above
        it is sent whole; ``None`` otherwise (the run takes :meth:`run_start`)."""
        if (
            self.global_buffer is not None
            or sid in self.watch_buffers
            or self.in_scope is not None
            or self.held_gaps
        ):
            return None
        if self.subscriptions:
            return self.session_marks.get(sid, 0) if sid in self.watched else None
        return max(self.session_marks.get(sid, 0), self.global_mark)

    def restrict(self, in_scope: AbstractSet[str]) -> None:
        """From now on only the sessions in ``in_scope`` reach this stream (a member's scope;
        a set kept current by ``gateway/places.py``: membership is the cheapest check)."""
        self.notify()
        self.in_scope = in_scope

    # --- entitlement and live events (the fan-out's hot path) ---------------------------

    @property
    def firehose(self) -> bool:
        """Receives every session's events: v1 clients, and anyone still buffering."""
        return self.global_buffer is not None or not self.subscriptions

    def entitled(self, ev: Event) -> bool:
        if self.in_scope is not None and ev.sid not in self.in_scope:
            return False
        if ev.session_scoped:
            return not self.subscriptions or ev.sid in self.watched
        if ev.kind == wire_frames.TURN_STATUS:
            return self.observe
        return ev.kind in wire_frames.BROADCAST_KINDS

    def admit(self, ev: Event) -> Admit:
        """A live event from the log reader (seq order): send it, skip it or buffer it."""
        if self.global_buffer is not None:
            return self._buffer(self.global_buffer, ev)
        if ev.session_scoped:
            buf = self.watch_buffers.get(ev.sid)
            if buf is not None:
                return self._buffer(buf, ev)
            if ev.seq <= self.session_marks.get(ev.sid, 0):
                return SKIP
            if not self.subscriptions and ev.seq <= self.global_mark:
                return SKIP
        elif ev.seq <= self.global_mark:
            return SKIP
        return SEND if self.entitled(ev) else SKIP

    def run_start(self, run: Run) -> int | None:
        """:meth:`admit` of a whole run at once: the index of its first event to send
        (``len(run.events)``: none); ``None`` while its session is buffered (admit each)."""
        sid = run.sid
        if self.global_buffer is not None or sid in self.watch_buffers:
            return None
        events = run.events
        n = len(events)
        if self.in_scope is not None and sid not in self.in_scope:
            return n
        if self.subscriptions:
            if sid not in self.watched:
                return n
            floor = self.session_marks.get(sid, 0)
        else:
            floor = max(self.session_marks.get(sid, 0), self.global_mark)
        start = 0
        while start < n and events[start].seq <= floor:
            start += 1
        return start

    def _buffer(self, buf: list[Event], ev: Event) -> Admit:
        if len(buf) >= self.buffer_max:
            return OVERFLOW
        buf.append(ev)
        return BUFFERED

    def before_buffer(
        self, page: Sequence[Event], sid: str | None = None
    ) -> tuple[Sequence[Event], bool] | None:
        """A replay page's events below the live buffer of its stream (``sid``: a watched
        session's, ``None``: the log's), and whether the page reached the buffer (the replay
        is done: the merge takes over from there); ``None`` when the stream is no longer
        buffered (the replay was abandoned, or the connection unwatched)."""
        buf = self.global_buffer if sid is None else self.watch_buffers.get(sid)
        if buf is None:
            return None
        if not buf:
            return page, False
        stop_at = buf[0].seq
        n = 0
        while n < len(page) and page[n].seq < stop_at:
            n += 1
        return page[:n], n < len(page)

    def hold_gap(self, gap: Gap) -> Gap | None:
        """The log was trimmed past the reader: while buffering the gap is held for the merge
        (placed after the replay); else the part of it this client must be told now, above
        what its own replay read (``None``: nothing, or not welcomed yet)."""
        self.notify()
        if self.global_buffer is not None:
            self.held_gaps.append(gap)
            return None
        if self.welcomed and gap.to_seq > self.global_mark:
            return Gap(max(gap.from_seq, self.global_mark + 1), gap.to_seq, gap.reason)
        return None

    # --- hello and the resume of the log stream --------------------------------------------

    def set_url_resume(self, last_seq: int | None, epoch: str | None) -> None:
        """The resume point a v1 client gave in its URL."""
        self.url_last_seq = last_seq
        self.url_epoch = epoch

    def accept_hello(self, caps: Collection[str], position: int) -> bool:
        """Take a hello's accepted capabilities; ``True`` when the connection was live (a v1
        client) and buffers again from ``position`` (the caller re-indexes it)."""
        self.notify()
        self.hello_done = True
        self.subscriptions = protocol.SESSION_SUBSCRIPTIONS in caps
        self.observe = protocol.TURN_STATUS_OBSERVE in caps
        self.blocks_only = protocol.BLOCKS_ONLY in caps
        if self.global_buffer is not None:
            return False
        self.begin_resume(position)
        return True

    def begin_resume(self, position: int) -> None:
        """Buffer every live event above ``position`` again, for a resume; everything
        dispatched so far was offered live, so the resume must not repeat it."""
        self.notify()
        self.global_mark = max(self.global_mark, position)
        self.global_buffer = []
        self.buffer_floor = position

    def welcome(self) -> None:
        """``welcome`` was queued, or the connection was resolved as a v1 client."""
        self.welcomed = True

    def rewind_mark(self, to_seq: int) -> None:
        """The client's view was rewound to ``to_seq``: nothing above it counts as sent."""
        self.notify()
        self.global_mark = min(self.global_mark, to_seq)

    def finish_resume(self, covered: int, *, holes: bool) -> list[Event | Gap]:
        """Switch to live at the end of a replay that covered the log up to ``covered``: the
        buffered events above it, once each, in order, with the gaps held meanwhile (``holes``:
        also report holes in the buffer's seqs, when no replay filtered by entitlement)."""
        self.notify()
        merged = merge([], self.global_buffer or [], floor=covered, holes=holes)
        items = with_held_gaps(merged, self.held_gaps, covered)
        self.global_mark = max(merged.last_seq, self.buffer_floor)
        self.global_buffer = None
        self.held_gaps = []
        return items

    # --- watches of one session's stream ----------------------------------------------------

    def begin_watch(self, sid: str) -> bool:
        """Watch ``sid`` and buffer its live events until :meth:`finish_watch`; ``True`` when
        it was watched already (a re-watch)."""
        self.notify()
        was_watched = sid in self.watched
        self.watch_buffers[sid] = []
        self.watched.add(sid)
        return was_watched

    def finish_watch(self, sid: str, replayed: Merged) -> Merged:
        """Switch ``sid`` to live at the end of its replay: the buffered events above it
        (holes by ``sessionSeq``); later live events start above the mark set here."""
        self.notify()
        buffered = self.watch_buffers.pop(sid, [])
        tail = merge([], buffered, floor=replayed.last_seq, by_session_seq=True, prev=replayed.last)
        self.session_marks[sid] = tail.last_seq
        return tail

    def abandon_watch(self, sid: str) -> None:
        """The replay of ``sid`` failed: stop buffering it (the caller unwatches if new)."""
        self.notify()
        self.watch_buffers.pop(sid, None)

    def unwatch(self, sid: str) -> None:
        self.notify()
        self.watched.discard(sid)
        self.watch_buffers.pop(sid, None)
        self.session_marks.pop(sid, None)

    # --- the log changed under the reader -----------------------------------------------

    def reset_epoch(self) -> None:
        """Redis lost its data: seqs restart at 1, so every dedupe mark is void."""
        self.notify()
        self.global_mark = 0
        self.buffer_floor = 0
        self.session_marks.clear()
        for buf in self.watch_buffers.values():
            buf.clear()
        if self.global_buffer is not None:
            self.global_buffer.clear()
        self.held_gaps.clear()

    def rewind(self, to_seq: int) -> None:
        """The log's entries above ``to_seq`` changed after they were offered (a failover
        lost them): they will be offered again, so no dedupe mark or buffer may cover them."""
        self.notify()
        self.global_mark = min(self.global_mark, to_seq)
        self.buffer_floor = min(self.buffer_floor, to_seq)
        self.session_marks = {sid: min(m, to_seq) for sid, m in self.session_marks.items()}
        for buf in self.watch_buffers.values():
            buf[:] = [ev for ev in buf if ev.seq <= to_seq]
        if self.global_buffer is not None:
            self.global_buffer[:] = [ev for ev in self.global_buffer if ev.seq <= to_seq]
        self.held_gaps = [g for g in self.held_gaps if g.to_seq <= to_seq]


def _nothing() -> None:
    """No hub watches this stream (yet)."""
