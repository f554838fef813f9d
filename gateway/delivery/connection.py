"""One client connection: the I/O shell around its :class:`StreamState`, and a bounded send queue.

Live events are offered synchronously by the fan-out (no awaits: one slow client never
delays the others); the connection's state (capabilities, dedupe marks, buffers:
:mod:`relaybus.gateway.delivery.stream_state`) says which to send, and those are staged; after each reader batch the staged frames are written at
once when nothing is pending and the transport takes data, else queued as one entry and
drained by a sender task that exists only while something is queued (an idle connection
has none). A connection more than ``queue_max`` live frames
behind, or holding more than ``budget_bytes`` unwritten, when the next batch arrives is
cut off with close code 4008 (slow consumer) and resumes later with its ``lastSeqId``.
While a replay is being read, the state buffers live events for that stream and merges
them afterwards (:mod:`relaybus.gateway.delivery.replay`).

Replays and resumes share the same byte budget: their producers queue one page at a
time and wait (:meth:`Connection.replay_room`) until the queue is down to half the
budget. Every socket write has a deadline; a client that takes no data for that long is
dropped (4008, counted), so nothing waits for it and nothing piles up behind it.

Over 300 lines on purpose: live delivery and the send queue share one byte budget and
one close state (``flush`` writes now or queues by the queue's state; ``abort`` empties it
and hands the sender its final frame), so one class keeps that invariant in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, deque
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from relaybus.gateway import frames
from relaybus.gateway.auth import Access
from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.replay import Gap
from relaybus.gateway.delivery.runs import Burst, Run
from relaybus.gateway.delivery.stream_state import OVERFLOW, SEND, StreamState
from relaybus.gateway.delivery.wsio import FrameSink, Write, WriteTimeout
from relaybus.gateway.frames import Outgoing
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.shared.wire.errors import CloseCode
from relaybus.shared.wire.scope import Member

log = logging.getLogger(__name__)

#: Frames per transport write of a queued burst (a resume may replay thousands).
CHUNK = 256
#: Bytes per transport write of a queued burst: the transport buffers at most this much
#: above its high-water mark, so a slow socket holds little.
CHUNK_BYTES = 128 * 1024
_KIND = attrgetter("kind")


class Connection:
    def __init__(
        self,
        sink: FrameSink,
        *,
        cid: str,
        metrics: GatewayMetrics,
        queue_max: int,
        buffer_max: int,
        position: int,
        budget_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.sink = sink
        self.cid = cid
        self.metrics = metrics
        self.queue_max = queue_max
        self.budget_bytes = budget_bytes
        self.access: Access | None = None
        #: Who this connection acts for (a member's token; ``None``: a ``RELAYBUS_TOKENS``
        #: token or anonymous); its scope's filter is ``state.in_scope``.
        self.member: Member | None = None
        #: Coarse device label of its User-Agent (``shared.wire.device``), for the audit.
        self.device = "client"
        #: Capabilities, dedupe marks, buffers and held gaps: asked what to send.
        self.state = StreamState(position=position, buffer_max=buffer_max)
        self.close_code: int | None = None
        self.close_reason = ""
        # An idle connection allocates neither its queue nor the futures its waits need
        # (an empty deque and two asyncio.Events were ~2.4 KiB of every idle connection).
        #: Entries: (frames written back to back, how many of them are live frames, bytes);
        #: ``None`` until something is queued and after a close.
        self._queue: deque[tuple[list[Outgoing], int, int]] | None = None
        self._live_backlog = 0
        #: Bytes of every frame queued and not yet written (live, direct, replay).
        self.queued_bytes = 0
        #: A replay producer waiting for the queue to drain to half the budget.
        self._room: asyncio.Future[None] | None = None
        #: Live frames of the reader batch being offered: one frame or one run's shared
        #: burst as they are (nothing allocated per connection), a list once there is more.
        self._staged: Outgoing | Burst | list[Outgoing] | None = None
        self._busy = False  # the sender is writing an entry it already took off the queue
        self._final: Outgoing | None = None
        #: Writes the queue; made by the first entry, gone once the queue is drained.
        self._sender: asyncio.Task[None] | None = None
        #: Called once when the connection starts closing (its endpoint stops receiving).
        self.on_close: Callable[[], None] | None = None
        #: Called whenever this connection may stop (or start) being steady (:meth:`steady`).
        self.changed: Callable[[], object] = _nothing

    def on_change(self, changed: Callable[[], object]) -> None:
        """Call ``changed`` whenever this connection, its stream or its sink may stop (or
        start) being steady: the hub's cache of steady connections is dropped then."""
        self.changed = changed
        self.state.on_change(changed)

    def steady(self, sid: str) -> tuple[Write, int] | None:
        """``(transport.write, dedupe floor)`` while this connection takes ``sid``'s live
        runs as they come: open, nothing queued, staged or being written, its stream steady
        for ``sid`` (:meth:`StreamState.steady_floor`) and its transport taking data."""
        if self.close_code is not None or self._queue or self._busy or self._staged is not None:
            return None
        floor = self.state.steady_floor(sid)
        if floor is None:
            return None
        if not self.sink.raw_ok:
            return None
        write = self.sink.steady_write(self.changed)
        return None if write is None else (write, floor)

    # --- live delivery (synchronous, called by the fan-out) -----------------------------

    def offer(self, ev: Event) -> bool:
        """A live event from the log reader (seq order).

        Returns ``True`` when this started a new staged batch: the caller must call
        :meth:`flush` once its whole batch is offered.
        """
        if self.close_code is not None:
            return False
        state = self.state
        verdict = state.admit(ev)
        if verdict is SEND:
            ev.delivered = True
            return self._stage(
                ev.out(blocks_only=state.blocks_only, raw=self.sink.raw_ok, live=True)
            )
        if verdict is OVERFLOW:
            self.abort(CloseCode.SLOW_CONSUMER, "replay buffer overflow")
            self.metrics.slow_consumers.inc()
        return False

    def offer_run(self, run: Run) -> bool:
        """:meth:`offer` of each event of ``run`` in turn, with the checks done once for the
        whole run when nothing is buffered for its session (the live state)."""
        if self.close_code is not None:
            return False
        start = self.state.run_start(run)
        if start is None:
            started = False
            for ev in run.events:
                if self.offer(ev):
                    started = True
            return started
        if start == len(run.events):
            return False
        return self._stage(
            run.burst(start, blocks_only=self.state.blocks_only, raw=self.sink.raw_ok)
        )

    def _stage(self, items: Outgoing | Burst) -> bool:
        """Add to the staged frames; ``True`` when they were empty (flush once offered)."""
        staged = self._staged
        if staged is None:
            self._staged = items
            return True
        if not isinstance(staged, list):
            staged = self._staged = list(staged) if isinstance(staged, Burst) else [staged]
        if isinstance(items, Burst):
            staged.extend(items)
        else:
            staged.append(items)
        return False

    def flush(self) -> Sequence[Outgoing] | None:
        """Write or queue the staged live frames, or cut off a client too far behind.

        Returns the frames when they were written synchronously (the caller counts them).
        """
        one, self._staged = self._staged, None
        if one is None or self.close_code is not None:
            return None
        staged: Sequence[Outgoing] = one if isinstance(one, (list, Burst)) else (one,)
        if self._live_backlog >= self.queue_max or self.queued_bytes >= self.budget_bytes:
            self.metrics.slow_consumers.inc()
            log.info(
                "connection %s: %d frames / %d bytes behind, closing as slow consumer",
                self.cid,
                self._live_backlog,
                self.queued_bytes,
            )
            self.abort(CloseCode.SLOW_CONSUMER, "slow consumer")
            return None
        if not self._queue and not self._busy and self.sink.write_now(staged):
            # Nothing pending and the transport takes data: written here, synchronously,
            # as websockets' broadcast() does; no task switch per connection per event.
            # The fan-out counts these writes once per batch.
            return staged
        self._live_backlog += len(staged)
        self._push(list(staged), len(staged))
        return None

    def event_out(self, ev: Event, *, live: bool) -> Outgoing:
        # A raw-capable sink writes ``wire`` as is: no decoded copy is held per frame.
        return ev.out(blocks_only=self.state.blocks_only, raw=self.sink.raw_ok, live=live)

    # --- direct frames -------------------------------------------------------------------

    def send(self, frame: dict[str, Any]) -> None:
        """Queue a direct (non-log) frame; a client already ``budget_bytes`` behind is cut
        off instead (a never-reading client asking for big replies, e.g. list_sessions)."""
        if self.close_code is None and self.queued_bytes >= self.budget_bytes:
            self.metrics.slow_consumers.inc()
            log.info(
                "connection %s: %d bytes behind on replies, closing as slow consumer",
                self.cid,
                self.queued_bytes,
            )
            self.abort(CloseCode.SLOW_CONSUMER, "slow consumer")
            return
        self._enqueue([self.direct_out(frame)])

    @staticmethod
    def direct_out(frame: dict[str, Any]) -> Outgoing:
        return frames.direct(frame)

    def send_burst(self, items: list[Outgoing]) -> None:
        """A replay: one queue entry, written back to back by the sender."""
        if items:
            self._enqueue(items)

    def gap_out(self, gap: Gap, *, session_id: str | None = None) -> Outgoing:
        self.metrics.gaps.labels(gap.reason).inc()
        frame = frames.gap_frame(gap.from_seq, gap.to_seq, gap.reason, session_id=session_id)
        return self.direct_out(frame)

    def _enqueue(self, items: list[Outgoing]) -> None:
        """Direct replies and replays: bounded by their producers (one page at a time,
        after :meth:`replay_room`), counted in ``queued_bytes``."""
        if self.close_code is None:
            self._push(items, 0)

    def _push(self, items: list[Outgoing], live: int) -> None:
        size = sum(item.size for item in items)
        if self._queue is None:
            self._queue = deque()
            self.changed()
        self._queue.append((items, live, size))
        self.queued_bytes += size
        if self._sender is None:
            self._start_sender()

    async def replay_room(self) -> bool:
        """Wait until the queue is down to half the byte budget; ``False``: closing.

        Replay producers call it before each page, so a replay holds at most about half
        the budget and leaves the rest to live events; a client that does not read is
        closed by the write deadline, which ends this wait.
        """
        while self.close_code is None and self.queued_bytes > self.budget_bytes // 2:
            room = self._room
            if room is None or room.done():
                room = self._room = asyncio.get_running_loop().create_future()
            # shielded: a cancelled producer must not cancel the future others wait on
            await asyncio.shield(room)
        return self.close_code is None

    async def send_replay(self, items: list[Outgoing]) -> bool:
        """Queue a replay page in slices of a quarter of the byte budget, each once the
        queue is down to half of it; ``False`` when the connection closed meanwhile."""
        limit = max(self.budget_bytes // 4, 1)
        at = 0
        while at < len(items):
            end, size = at, 0
            while end < len(items) and (size == 0 or size < limit):
                size += items[end].size
                end += 1
            if not await self.replay_room():
                return False
            self.send_burst(items[at:end])
            at = end
        return not self.closing()

    # --- closing -----------------------------------------------------------------------

    def closing(self) -> bool:
        return self.close_code is not None

    def abort(self, code: int, reason: str, final: dict[str, Any] | None = None) -> None:
        """Stop sending: drop what is queued, write ``final`` (if any), then close with ``code``."""
        if self.close_code is not None:
            return
        self.close_code = code
        self.close_reason = reason
        self.changed()
        self._queue = None
        self._live_backlog = 0
        self.queued_bytes = 0
        _wake(self._room)
        self._final = self.direct_out(final) if final is not None else None
        sender = self._sender
        if self._final is not None:
            if sender is None:
                self._start_sender()  # to write the final frame
        elif sender is not None and sender is not asyncio.current_task():
            sender.cancel()  # it may be stuck writing to a client that does not read
        if self.on_close is not None:
            self.on_close()

    # --- the sender task ---------------------------------------------------------------

    async def finish(self) -> None:
        """Once closing: let the sender write the final frame (its write deadline bounds
        this); otherwise stop it. Returns when no sender runs."""
        sender = self._sender
        if sender is None:
            return
        if self._final is not None and self.close_code is not None:
            await asyncio.wait({sender})
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender

    def _start_sender(self) -> None:
        self._sender = asyncio.create_task(self._run_sender(), name=f"send-{self.cid}")

    async def _run_sender(self) -> None:
        try:
            await self._drain()
        except WriteTimeout:
            # The socket took nothing for the whole deadline: drop the client (it would
            # not read a close frame either) instead of holding what it is sent.
            if self.close_code is None:
                self.metrics.slow_consumers.inc()
            log.info(
                "connection %s: socket took no data in time, closing as slow consumer", self.cid
            )
            self.abort(CloseCode.SLOW_CONSUMER, "write timeout")
            self.sink.abort()
        except OSError as exc:  # ClientGone included
            # The client went away mid-write; the receive side notices and cleans up.
            log.debug("connection %s: write failed: %r", self.cid, exc)
        except Exception:
            log.exception("connection %s: sender failed", self.cid)
            self.abort(CloseCode.INTERNAL_ERROR, "internal error")
        finally:
            if self._sender is asyncio.current_task():
                self._sender = None

    async def _drain(self) -> None:
        while not self.closing():
            queue = self._queue
            if not queue:
                # drained: an idle connection holds no deque and no sender
                self._queue = None
                self.changed()
                return
            items, live, size = queue.popleft()
            self._busy = True
            try:
                await self._write(items, size)
            finally:
                self._busy = False
            if self.close_code is not None:
                break
            self._live_backlog -= live
            self.queued_bytes -= size
            if self.queued_bytes <= self.budget_bytes // 2:
                _wake(self._room)
        final, self._final = self._final, None
        if final is not None:
            await self._write([final], final.size)

    async def _write(self, items: list[Outgoing], total: int) -> None:
        """One burst of ``total`` bytes, written in chunks of at most :data:`CHUNK` frames
        and :data:`CHUNK_BYTES` bytes (flow control and the write deadline between)."""
        at = 0
        while at < len(items):
            end, size = at, 0
            while end < len(items) and end - at < CHUNK and (size == 0 or size < CHUNK_BYTES):
                size += items[end].size
                end += 1
            await self.sink.send_many(items[at:end])
            at = end
        self._count(items, total)

    def _count(self, items: list[Outgoing], size: int) -> None:
        """Frames and bytes of a queued write (synchronous writes are counted by the hub);
        counted in C (a replay burst is hundreds of frames)."""
        m = self.metrics
        m.bytes_sent.inc(size)
        for kind, n in Counter(map(_KIND, items)).items():
            m.sent(kind).inc(n)


def _nothing() -> None:
    """No hub watches this connection (yet)."""


def _wake(waiter: asyncio.Future[None] | None) -> None:
    """Resolve the future a wait is on, if there is one."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
