"""``hello`` and the resume of the log stream (the client's ``lastSeqId``), or the live start
of a v1 client.

The connection buffers live events from its first moment; the log after the client's
position is queued page by page within its byte budget until it meets that buffer, and the
merge (:mod:`relaybus.gateway.delivery.replay`) places every event once, in order, with the gaps
the client must hear of (DESIGN §8). A client whose epoch token predates a recorded rewind
of the log at or below its ``lastSeqId`` is told ``gap_detected{rewound}`` first and
re-reads from there (:mod:`relaybus.gateway.delivery.rewinds`).
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from relaybus.gateway import frames, protocol
from relaybus.gateway.auth import Access
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.replay import Gap, leading_gap
from relaybus.gateway.delivery.rewinds import parse_token, token
from relaybus.gateway.delivery.shared_pages import SharedPages
from relaybus.gateway.frames import Outgoing
from relaybus.gateway.protocol import ProtocolError
from relaybus.shared.store.rewinds import Rewinds
from relaybus.shared.wire.errors import CloseCode, ErrorCode

log = logging.getLogger(__name__)


class Resumer:
    """Welcomes connections and brings each to the live edge of the log."""

    def __init__(self, ctx: GatewayContext, *, pages: SharedPages, hub: Hub) -> None:
        self.ctx = ctx
        self.pages = pages
        self.hub = hub
        self.rewinds = Rewinds(ctx.client, ctx.keys)

    async def hello(self, conn: Connection, msg: protocol.Hello) -> None:
        if conn.state.hello_done:
            raise ProtocolError(ErrorCode.BAD_STATE, "hello was already sent", msg.requestId)
        caps = protocol.accepted_capabilities(msg.capabilities)
        if conn.state.accept_hello(caps, self.hub.position):  # late hello: was live as v1
            self.hub.refresh(conn)
        await self._resume_or_close(conn, msg.lastSeqId, msg.epoch, msg.requestId, caps)

    async def _resume_or_close(
        self,
        conn: Connection,
        last: int | None,
        epoch: str | None,
        request_id: str | None,
        welcome_caps: list[str] | None = None,
    ) -> None:
        """Welcome (a hello; not a v1 client) and resume; ``epoch`` is the client's token."""
        try:
            gen, rewind_from = await self._rewound_since(last, epoch)
            if welcome_caps is not None:
                # Until the rewound gap arrives the client's view is still the old one.
                tok = epoch if rewind_from is not None and epoch else self._token(gen)
                self._welcome(conn, welcome_caps, tok, request_id)
            if rewind_from is not None and last is not None:
                self.ctx.metrics.gaps.labels("rewound").inc()
                frame = frames.gap_frame(rewind_from, last, "rewound", epoch=self._token(gen))
                conn.send(frame)
                conn.state.rewind_mark(rewind_from - 1)
                last = rewind_from - 1
            await self._resume(conn, last, epoch, gen)
        except RedisError as exc:
            # The connection is buffering and cannot be completed: close it so the client
            # resumes (here or elsewhere) instead of silently receiving nothing.
            # Failing before its welcome, the client keeps its own token (and view).
            log.warning("connection %s: resume failed: %s", conn.cid, exc)
            final = frames.error_frame(
                ErrorCode.UNAVAILABLE, "resume failed, reconnect", request_id, self.hub.position
            )
            conn.abort(CloseCode.INTERNAL_ERROR, "resume failed", final=final)

    def _welcome(self, conn: Connection, caps: list[str], tok: str, request_id: str | None) -> None:
        read_only = conn.access is Access.READ
        frame = frames.welcome(
            caps, tok, self.ctx.gateway_id, self.hub.position, request_id, read_only=read_only
        )
        conn.send(frame)
        conn.state.welcome()

    def _token(self, gen: int) -> str:
        return token(self.hub.epoch, gen)

    async def _rewound_since(self, last: int | None, epoch: str | None) -> tuple[int, int | None]:
        """The rewind generation to give the client, and the seq to rewind it from (``None``:
        its view is current). Read again when the hub took in a rewind meanwhile: the hub
        records before it tells its connections, and this one is not welcomed yet."""
        base, gen = parse_token(epoch) if epoch else (self.hub.epoch, 0)
        try:
            for _ in range(2):
                since = await self.rewinds.since(gen)
                if self.hub.gen <= since.gen:
                    break
        except RedisError:
            if last is not None:
                raise
            return self.hub.gen, None  # a fresh view comes from this hub: live without Redis
        if epoch is None or last is None or base != self.hub.epoch:
            return since.gen, None  # an epoch gap or a fresh view: nothing to rewind
        if since.lowest is not None and since.lowest <= last:
            return since.gen, since.lowest
        return since.gen, None

    async def _resume(
        self, conn: Connection, last: int | None, epoch: str | None, gen: int
    ) -> None:
        items: list[Outgoing] = []
        state = conn.state
        if last is None:
            self._finish_global(conn, state.finish_resume(state.buffer_floor, holes=True), items)
            return
        # The first page tells the head and epoch; a resume from there reads it once.
        page = await self.pages.page(self.ctx.keys.log, last, state.buffer_floor)
        if (epoch is not None and parse_token(epoch)[0] != page.epoch) or last > page.head:
            items.append(
                conn.direct_out(
                    frames.gap_frame(
                        1, last, "epoch", epoch=token(page.epoch, gen) if page.epoch else None
                    )
                )
            )
            self.ctx.metrics.gaps.labels("epoch").inc()
            last = 0
        floor = max(last, state.global_mark)
        self.ctx.metrics.replays.inc()
        covered = await self._replay_log_after(conn, floor, items)
        if covered is None:
            return  # closed meanwhile
        self._finish_global(conn, state.finish_resume(covered, holes=False), items)

    async def _replay_log_after(
        self, conn: Connection, floor: int, items: list[Outgoing]
    ) -> int | None:
        """Queue the entitled log entries after ``floor``, page by page, until they meet the
        live buffer; the highest seq covered (``None``: the connection closed meanwhile).

        Each page is queued within the connection's byte budget before the next is read,
        so memory follows one page, not the log; pages are shared with the connections
        resuming at the same time (:mod:`relaybus.gateway.delivery.shared_pages`). The log is
        trimmed only at its head, so entries after the first are contiguous: only a
        leading gap is possible.
        """
        cursor = floor
        first_page = True
        replayed = 0
        while True:
            page = await self.pages.page(self.ctx.keys.log, cursor, conn.state.buffer_floor)
            if conn.state.in_scope is not None:  # a scoped replay may reach sessions not seen live
                seen = ((e.sid, e.kind, e.frame) for e in page.events)
                await self.hub.places.ensure(self.ctx.client, self.ctx.keys, seen)
            cut = conn.state.before_buffer(page.events)
            if conn.closing() or cut is None:
                return None
            events, met_buffer = cut
            if first_page:
                first_page = False
                # The buffer may hold entries the log lost to a trim after the reader read them.
                in_log = page.events[0].seq if page.events else None
                buf = conn.state.global_buffer or []
                in_buf = next((e.seq for e in buf if e.seq > floor), None)
                first = min((s for s in (in_log, in_buf) if s is not None), default=None)
                gap = leading_gap(floor, first, page.head)
                if gap is not None:
                    items.append(conn.gap_out(gap))
                    # Covered: the reader's own gap, held meanwhile, must not repeat it.
                    cursor = gap.to_seq
            for ev in events:
                cursor = ev.seq
                if conn.state.entitled(ev):
                    items.append(conn.event_out(ev, live=False))
                    replayed += 1
            if met_buffer or not page.more:
                self.ctx.metrics.replayed_events.inc(replayed)
                return cursor
            if not await conn.send_replay(items):
                return None
            items.clear()

    async def resolve_v1(self, conn: Connection) -> None:
        """No hello (first message was something else, or the grace period ran out): a v1
        client, resumed from the URL's ``?lastSeqId=`` (and ``?epoch=``) when it gave one."""
        state = conn.state
        if state.global_buffer is None or state.hello_done or conn.close_code is not None:
            return
        state.welcome()
        if state.url_last_seq is None:
            self._finish_global(conn, state.finish_resume(state.buffer_floor, holes=True), [])
            return
        await self._resume_or_close(conn, state.url_last_seq, state.url_epoch, None)

    def _finish_global(
        self, conn: Connection, merged: list[Event | Gap], items: list[Outgoing]
    ) -> None:
        """Queue what the resume's switch to live merged (after ``items``) and re-index
        the connection, now live."""
        replayed = 0
        for item in merged:
            if isinstance(item, Gap):
                items.append(conn.gap_out(item))
            elif conn.state.entitled(item):
                items.append(conn.event_out(item, live=False))
                replayed += 1
        self.ctx.metrics.replayed_events.inc(replayed)
        self.hub.refresh(conn)
        conn.send_burst(items)
