"""What each client message does. One :class:`Handlers` per process, stateless per call.

Replays follow DESIGN §8: the connection is subscribed (buffering) *before* history is
read; the merge in :mod:`relaybus.gateway.replay` then yields every event once, in order, and the
whole replay is queued as one burst. Commands go to :class:`GatewayCommands`, decisions
on permission requests to :class:`GatewayApprovals`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from relaybus.gateway import history, protocol, server_frames
from relaybus.gateway.approvals import GatewayApprovals
from relaybus.gateway.auth import Access
from relaybus.gateway.commands import GatewayCommands
from relaybus.gateway.connection import Connection
from relaybus.gateway.fanout import Hub
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.gateway.protocol import CloseCode, ErrorCode, ProtocolError
from relaybus.gateway.replay import Gap, Merged, leading_gap, merge, with_held_gaps
from relaybus.gateway.server_frames import Outgoing
from relaybus.gateway.sessions import list_hosts, list_sessions
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.commands import reservation_key

log = logging.getLogger(__name__)

#: Session hash field: ``0`` while an old session's history was never published.
HISTORY_LOADED = b"historyLoaded"
#: Heartbeats change rarely; a burst of list_sessions (reconnects) scans them once.
HOSTS_TTL_S = 1.0


class Handlers:
    def __init__(
        self,
        *,
        client: aioredis.Redis,
        keys: Keys,
        hub: Hub,
        metrics: GatewayMetrics,
        gateway_id: str,
        replay_depth: int,
        commands: GatewayCommands,
        approvals: GatewayApprovals,
    ) -> None:
        self.client = client
        self.keys = keys
        self.hub = hub
        self.metrics = metrics
        self.gateway_id = gateway_id
        self.replay_depth = replay_depth
        self.commands = commands
        self.approvals = approvals
        self._hosts_cache: tuple[float, list[dict[str, Any]]] | None = None

    async def handle(self, conn: Connection, msg: protocol.ClientMessage) -> None:
        if isinstance(msg, protocol.Hello):
            await self.hello(conn, msg)
            return
        if conn.global_buffer is not None and not conn.hello_done:
            await self.resolve_v1(conn)
        if isinstance(msg, protocol.ListSessions):
            sessions = await list_sessions(self.client, self.keys)
            hosts = await self._hosts()
            conn.send(server_frames.sessions(sessions, hosts, self.hub.position, msg.requestId))
        elif isinstance(msg, protocol.WatchSession):
            await self.watch(conn, msg)
        elif isinstance(msg, protocol.UnwatchSession):
            self.hub.unwatch(conn, msg.sessionId)
            await self.approvals.sync(msg.sessionId)
            conn.send(self._ack(msg.sessionId, False, msg.requestId, msg.traceId))
        else:
            if conn.access is not Access.FULL:
                self.metrics.commands.labels(msg.type, ErrorCode.FORBIDDEN.value).inc()
                raise ProtocolError(ErrorCode.FORBIDDEN, "this token is read-only", msg.requestId)
            if isinstance(msg, protocol.AcceptDiff | protocol.RejectDiff):
                await self.approvals.decide(conn, msg)
                return
            await self.commands.handle(conn, msg)

    # --- hello and resume ---------------------------------------------------------------

    async def hello(self, conn: Connection, msg: protocol.Hello) -> None:
        if conn.hello_done:
            raise ProtocolError(ErrorCode.BAD_STATE, "hello was already sent", msg.requestId)
        conn.hello_done = True
        caps = protocol.accepted_capabilities(msg.capabilities)
        conn.subscriptions = protocol.SESSION_SUBSCRIPTIONS in caps
        conn.observe = protocol.TURN_STATUS_OBSERVE in caps
        conn.blocks_only = protocol.BLOCKS_ONLY in caps
        if conn.global_buffer is None:  # late hello: already live as v1; buffer again
            # Everything dispatched so far was offered to it live: a resume must not repeat it.
            conn.global_mark = max(conn.global_mark, self.hub.position)
            conn.global_buffer = []
            conn.buffer_floor = self.hub.position
            self.hub.refresh(conn)
        conn.send(
            server_frames.welcome(
                caps, self.hub.epoch, self.gateway_id, self.hub.position, msg.requestId
            )
        )
        conn.welcomed = True
        await self._resume_or_close(conn, msg.lastSeqId, msg.epoch, msg.requestId)

    async def _resume_or_close(
        self, conn: Connection, last: int | None, epoch: str | None, request_id: str | None
    ) -> None:
        try:
            await self._resume(conn, last, epoch)
        except RedisError as exc:
            # The connection is buffering and cannot be completed: close it so the client
            # resumes (here or elsewhere) instead of silently receiving nothing.
            log.warning("connection %s: resume failed: %s", conn.cid, exc)
            final = server_frames.error_frame(
                ErrorCode.UNAVAILABLE, "resume failed, reconnect", request_id, self.hub.position
            )
            conn.abort(CloseCode.INTERNAL_ERROR, "resume failed", final=final)

    async def _resume(self, conn: Connection, last: int | None, epoch: str | None) -> None:
        items: list[Outgoing] = []
        if last is None:
            merged = merge([], conn.global_buffer or [], floor=conn.buffer_floor)
            self._finish_global(conn, merged, items, conn.buffer_floor)
            return
        page = await history.read_log_page(self.client, self.keys, last, count=1)
        if (epoch is not None and epoch != page.epoch) or last > page.head:
            items.append(
                conn.direct_out(server_frames.gap_frame(1, last, "epoch", epoch=page.epoch))
            )
            self.metrics.gaps.labels("epoch").inc()
            last = 0
        floor = max(last, conn.global_mark)
        self.metrics.replays.inc()
        covered = await self._replay_log_after(conn, floor, items)
        if covered is None:
            return  # closed meanwhile
        merged = merge([], conn.global_buffer or [], floor=covered, holes=False)
        self._finish_global(conn, merged, items, covered)

    async def _replay_log_after(
        self, conn: Connection, floor: int, items: list[Outgoing]
    ) -> int | None:
        """Queue the entitled log entries after ``floor``, page by page, until they meet the
        live buffer; the highest seq covered (``None``: the connection closed meanwhile).

        Each page is queued within the connection's byte budget before the next is read,
        so memory follows one page, not the log. The log is trimmed only at its head, so
        entries after the first are contiguous: only a leading gap is possible.
        """
        cursor = floor
        first_page = True
        replayed = 0
        while True:
            page = await history.read_log_page(self.client, self.keys, cursor)
            buf = conn.global_buffer
            if conn.closing() or buf is None:
                return None
            if first_page:
                first_page = False
                first = (
                    page.events[0].seq
                    if page.events
                    else next((e.seq for e in buf if e.seq > floor), None)
                )
                gap = leading_gap(floor, first, page.head)
                if gap is not None:
                    items.append(conn.gap_out(gap))
            stop_at = buf[0].seq if buf else None
            met_buffer = False
            for ev in page.events:
                if stop_at is not None and ev.seq >= stop_at:
                    met_buffer = True
                    break
                cursor = ev.seq
                if conn.entitled(ev):
                    items.append(conn.event_out(ev, live=False))
                    replayed += 1
            if met_buffer or len(page.events) < history.RESUME_PAGE:
                self.metrics.replayed_events.inc(replayed)
                return cursor
            if not await self._emit(conn, items):
                return None
            items.clear()

    async def _emit(self, conn: Connection, items: list[Outgoing]) -> bool:
        """Queue a replay page in slices of a quarter of the byte budget, each once the
        connection's queue is down to half of it; ``False`` when it closed meanwhile."""
        limit = max(conn.budget_bytes // 4, 1)
        at = 0
        while at < len(items):
            end, size = at, 0
            while end < len(items) and (size == 0 or size < limit):
                size += items[end].size
                end += 1
            if not await conn.replay_room():
                return False
            conn.send_burst(items[at:end])
            at = end
        return not conn.closing()

    async def resolve_v1(self, conn: Connection) -> None:
        """No hello (first message was something else, or the grace period ran out): a v1
        client, resumed from the URL's ``?lastSeqId=`` (and ``?epoch=``) when it gave one."""
        if conn.global_buffer is None or conn.hello_done or conn.close_code is not None:
            return
        conn.welcomed = True
        if conn.url_last_seq is None:
            merged = merge([], conn.global_buffer, floor=conn.buffer_floor)
            self._finish_global(conn, merged, [], conn.buffer_floor)
            return
        await self._resume_or_close(conn, conn.url_last_seq, conn.url_epoch, None)

    def _finish_global(
        self, conn: Connection, merged: Merged, items: list[Outgoing], covered: int
    ) -> None:
        replayed = 0
        for item in with_held_gaps(merged, conn.held_gaps, covered):
            if isinstance(item, Gap):
                items.append(conn.gap_out(item))
            elif conn.entitled(item):
                items.append(conn.event_out(item, live=False))
                replayed += 1
        self.metrics.replayed_events.inc(replayed)
        conn.global_mark = max(merged.last_seq, conn.buffer_floor)
        conn.global_buffer = None
        conn.held_gaps = []
        self.hub.refresh(conn)
        conn.send_burst(items)

    # --- watch ---------------------------------------------------------------------------

    async def watch(self, conn: Connection, msg: protocol.WatchSession) -> None:
        sid = msg.sessionId
        was_watched = sid in conn.watched
        conn.watch_buffers[sid] = []
        self.hub.watch(conn, sid)
        await self.approvals.sync(sid)  # counted before the ack: a request may follow at once
        history_loaded = True
        try:
            head = await self._read_session(msg)
            if head.row.get(HISTORY_LOADED) == b"0":
                history_loaded = await self._load_history(sid, head.row)
                head = await self._read_session(msg)
            if not head.row and not await self.client.exists(reservation_key(self.keys, sid)):
                raise ProtocolError(ErrorCode.UNKNOWN_SESSION, f"no session {sid!r}", msg.requestId)
        except BaseException:
            self._cancel_watch(conn, sid, was_watched)
            raise
        ack_frame = self._ack(sid, True, msg.requestId, msg.traceId)
        if not history_loaded:
            ack_frame["historyLoaded"] = False
        items: list[Outgoing] = [conn.direct_out(ack_frame)]
        since, after = msg.sinceSeqId, head.after
        if since is not None and since > head.head:
            items.append(
                conn.direct_out(server_frames.gap_frame(1, since, "epoch", session_id=sid))
            )
            self.metrics.gaps.labels("epoch").inc()
            since = after = 0
        gap = _session_leading_gap(since, head)
        if gap is not None:
            items.append(conn.gap_out(gap, session_id=sid))
        self.metrics.replays.inc()
        ack = items[0]
        try:
            merged = await self._replay_session(conn, sid, after, items)
        except RedisError as exc:
            self._cancel_watch(conn, sid, was_watched)
            if not items or items[0] is not ack:  # pages were sent: the client starts over
                log.warning("connection %s: replay of %s failed: %s", conn.cid, sid, exc)
                final = server_frames.error_frame(
                    ErrorCode.UNAVAILABLE,
                    "replay failed, reconnect",
                    msg.requestId,
                    self.hub.position,
                )
                conn.abort(CloseCode.INTERNAL_ERROR, "replay failed", final=final)
                return
            raise
        except BaseException:
            self._cancel_watch(conn, sid, was_watched)
            raise
        if merged is None:
            return  # closed meanwhile
        if not await conn.replay_room():
            return
        # From here to the session mark, no await: live events switch from the buffer to
        # direct delivery exactly at merged.last_seq.
        buffered = conn.watch_buffers.pop(sid, [])
        tail = merge([], buffered, floor=merged.last_seq, by_session_seq=True, prev=merged.last)
        self._session_items(conn, sid, tail, items)
        conn.session_marks[sid] = tail.last_seq
        if conn.observe:
            status = server_frames.turn_status(sid, head.row, self.hub.position)
            if status is not None:
                items.append(conn.direct_out(status))
        conn.send_burst(items)
        log.debug("connection %s watches %s", conn.cid, sid)

    async def _replay_session(
        self, conn: Connection, sid: str, after: int, items: list[Outgoing]
    ) -> Merged | None:
        """Queue the session's history above ``after`` page by page (within the byte
        budget) until it meets the live buffer; the last page's items stay in ``items``
        for the caller. ``None``: the connection closed meanwhile."""
        merged = Merged(last_seq=after)
        while True:
            page = await history.read_session_page(self.client, self.keys, sid, merged.last_seq)
            buf = conn.watch_buffers.get(sid)
            if conn.closing() or buf is None:
                return None
            stop_at = buf[0].seq if buf else None
            events = [ev for ev in page if stop_at is None or ev.seq < stop_at]
            merged = merge(events, [], floor=merged.last_seq, by_session_seq=True, prev=merged.last)
            self._session_items(conn, sid, merged, items)
            if len(events) < history.SESSION_PAGE:
                return merged
            if not await self._emit(conn, items):
                return None
            items.clear()

    def _session_items(
        self, conn: Connection, sid: str, merged: Merged, items: list[Outgoing]
    ) -> None:
        replayed = 0
        for item in merged.items:
            if isinstance(item, Gap):
                items.append(conn.gap_out(item, session_id=sid))
            else:
                items.append(conn.event_out(item, live=False))
                replayed += 1
        self.metrics.replayed_events.inc(replayed)

    async def _hosts(self) -> list[dict[str, Any]]:
        """The machines of the ``sessions`` frame, read at most once per ``HOSTS_TTL_S``."""
        now = time.monotonic()
        if self._hosts_cache is None or now - self._hosts_cache[0] > HOSTS_TTL_S:
            self._hosts_cache = (now, await list_hosts(self.client, self.keys))
        return self._hosts_cache[1]

    async def _read_session(self, msg: protocol.WatchSession) -> history.SessionHead:
        return await history.read_session_head(
            self.client, self.keys, msg.sessionId, depth=self.replay_depth, since=msg.sinceSeqId
        )

    async def _load_history(self, sid: str, row: dict[bytes, bytes]) -> bool:
        """Have the session's machine publish the history it only listed; False if it did not."""
        host = row.get(b"host", b"").decode("utf-8", "replace")
        if not host:
            return False
        return await self.commands.load_history(sid, host)

    def _cancel_watch(self, conn: Connection, sid: str, was_watched: bool) -> None:
        conn.watch_buffers.pop(sid, None)
        if not was_watched:
            self.hub.unwatch(conn, sid)

    def _ack(
        self, sid: str, watching: bool, request_id: str | None, trace_id: str | None
    ) -> dict[str, Any]:
        return server_frames.watch_ack(sid, watching, self.hub.position, request_id, trace_id)


def _session_leading_gap(since: int | None, hist: history.SessionHead) -> Gap | None:
    """With ``sinceSeqId``: was the session stream trimmed past it? (conservative)."""
    if since is None:
        return None
    first = hist.first
    if first is None:
        had_events = int(hist.row.get(b"sessionSeq", b"0") or 0) > 0
        last = int(hist.row.get(b"lastSeqId", b"0") or 0)
        return Gap(since + 1, last, "trimmed") if had_events and last > since else None
    if first.seq > since + 1 and (first.session_seq or 1) > 1:
        return Gap(since + 1, first.seq - 1, "trimmed")
    return None
