"""``watch_session``: subscribe, replay the session's recent history (or everything after
``sinceSeqId``), then switch to live delivery without a duplicate or a hole.

The connection is subscribed (buffering) *before* the history is read; pages are queued
within its byte budget until they meet the buffer, and the merge by ``sessionSeq``
(:mod:`relaybus.gateway.delivery.replay`) reports holes. Observers then get the session's current
``turn_status``.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

from redis.exceptions import RedisError

from relaybus.gateway import frames, protocol
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.delivery import history
from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.replay import TRIMMED, Gap, Merged, merge
from relaybus.gateway.delivery.shared_pages import SharedPages, SharedReads
from relaybus.gateway.frames import Outgoing
from relaybus.gateway.protocol import ProtocolError
from relaybus.gateway.requests.approvals import GatewayApprovals
from relaybus.gateway.requests.commands import GatewayCommands
from relaybus.shared.store.session_row import SessionRow
from relaybus.shared.wire.errors import CloseCode, ErrorCode

log = logging.getLogger(__name__)

#: How long a session head read (its hash, first entry, head seq) serves later watches:
#: what the live buffer does not cover is only as old as the reader's position allows.
HEAD_TTL_S = 1.0


class Watches:
    """Serves ``watch_session`` for every connection of the process."""

    def __init__(
        self,
        ctx: GatewayContext,
        *,
        pages: SharedPages,
        hub: Hub,
        commands: GatewayCommands,
        approvals: GatewayApprovals,
    ) -> None:
        self.ctx = ctx
        self.pages = pages
        self.heads: SharedReads[history.SessionHead] = SharedReads(hub, HEAD_TTL_S)
        self.hub = hub
        #: Asks a session's machine to publish a history it only listed (old sessions).
        self.commands = commands
        self.approvals = approvals

    async def watch(self, conn: Connection, msg: protocol.WatchSession) -> None:
        sid = msg.sessionId
        was_watched = conn.state.begin_watch(sid)
        self.hub.watch(conn, sid)
        floor = self.hub.position  # the buffer holds every event dispatched above it
        await self.approvals.sync(sid)  # counted before the ack: a request may follow at once
        history_loaded = True
        try:
            head = await self._read_session(msg, floor)
            row = SessionRow.parse(head.row)
            if row.history_loaded is False:
                history_loaded = await self._load_history(sid, row)
                head = await self._read_session(msg, None)
                row = SessionRow.parse(head.row)
            if not head.row and not await self.ctx.client.exists(self.ctx.keys.reservation(sid)):
                raise ProtocolError(ErrorCode.UNKNOWN_SESSION, f"no session {sid!r}", msg.requestId)
        except BaseException:
            self._cancel_watch(conn, sid, was_watched)
            raise
        ack_frame = frames.watch_ack(sid, True, self.hub.position, msg.requestId, msg.traceId)
        if not history_loaded:
            ack_frame["historyLoaded"] = False
        items: list[Outgoing] = [conn.direct_out(ack_frame)]
        since, after = msg.sinceSeqId, head.after
        if since is not None and since > head.head:
            items.append(conn.direct_out(frames.gap_frame(1, since, "epoch", session_id=sid)))
            self.ctx.metrics.gaps.labels("epoch").inc()
            since = after = 0
        gap = _session_leading_gap(since, head)
        if gap is not None:
            items.append(conn.gap_out(gap, session_id=sid))
            # Past what the gap announced: a shared page read before the trim still holds it.
            after = max(after, gap.to_seq)
        self.ctx.metrics.replays.inc()
        ack = items[0]
        try:
            merged = await self._replay_session(conn, sid, after, floor, items)
        except RedisError as exc:
            self._cancel_watch(conn, sid, was_watched)
            if not items or items[0] is not ack:  # pages were sent: the client starts over
                log.warning("connection %s: replay of %s failed: %s", conn.cid, sid, exc)
                final = frames.error_frame(
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
        tail = conn.state.finish_watch(sid, merged)
        self._session_items(conn, sid, tail, items)
        if conn.state.observe:
            status = frames.turn_status(sid, row, self.hub.position)
            if status is not None:
                items.append(conn.direct_out(status))
        conn.send_burst(items)
        log.debug("connection %s watches %s", conn.cid, sid)

    async def _replay_session(
        self, conn: Connection, sid: str, after: int, floor: int, items: list[Outgoing]
    ) -> Merged | None:
        """Queue the session's history above ``after`` page by page (within the byte
        budget) until it meets the live buffer (which holds what the reader dispatched
        above ``floor``); the last page's items stay in ``items`` for the caller.
        ``None``: the connection closed meanwhile. Pages are shared with the watches
        replaying the same stream at the same time (:mod:`relaybus.gateway.delivery.shared_pages`)."""
        merged = Merged(last_seq=after)
        stream = self.ctx.keys.session_events(sid)
        while True:
            page = await self.pages.page(stream, merged.last_seq, floor)
            cut = conn.state.before_buffer(page.events, sid)
            if conn.closing() or cut is None:
                return None
            events, met_buffer = cut
            merged = merge(events, [], floor=merged.last_seq, by_session_seq=True, prev=merged.last)
            self._session_items(conn, sid, merged, items)
            if met_buffer or not page.more:
                return merged
            if not await conn.send_replay(items):
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
        self.ctx.metrics.replayed_events.inc(replayed)

    async def _read_session(
        self, msg: protocol.WatchSession, floor: int | None
    ) -> history.SessionHead:
        """The session's head, shared with the watches of the same session and start that
        subscribed no later than ``floor`` (``None``: a read of its own)."""
        sid, since = msg.sessionId, msg.sinceSeqId

        def read() -> Coroutine[Any, Any, history.SessionHead]:
            return history.read_session_head(
                self.ctx.client,
                self.ctx.keys,
                sid,
                depth=self.ctx.settings.replay_depth,
                since=since,
            )

        if floor is None:
            return await read()
        return await self.heads.get((sid, since), floor, read)

    async def _load_history(self, sid: str, row: SessionRow) -> bool:
        """Have the session's machine publish the history it only listed; False if it did not."""
        if not row.host:
            return False
        return await self.commands.load_history(sid, row.host)

    def _cancel_watch(self, conn: Connection, sid: str, was_watched: bool) -> None:
        conn.state.abandon_watch(sid)
        if not was_watched:
            self.hub.unwatch(conn, sid)


def _session_leading_gap(since: int | None, hist: history.SessionHead) -> Gap | None:
    """With ``sinceSeqId``: was the session stream trimmed past it? (conservative)."""
    if since is None:
        return None
    first = hist.first
    if first is None:
        row = SessionRow.parse(hist.row)
        had_events, last = row.session_seq > 0, row.last_seq_id
        return Gap(since + 1, last, TRIMMED) if had_events and last > since else None
    if first.seq > since + 1 and (first.session_seq or 1) > 1:
        return Gap(since + 1, first.seq - 1, TRIMMED)
    return None
