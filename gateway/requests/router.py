"""What each client message does: one :class:`Router` per process, stateless per call.

``hello`` and resumes are :mod:`relaybus.gateway.requests.resume`'s, ``watch_session``
:mod:`relaybus.gateway.requests.watch`'s; commands go to :class:`GatewayCommands`, decisions on
permission requests to :class:`GatewayApprovals`.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from relaybus.gateway import frames, protocol
from relaybus.gateway.auth import Access
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.delivery import history
from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.shared_pages import SharedPages
from relaybus.gateway.protocol import ProtocolError
from relaybus.gateway.requests.approvals import GatewayApprovals
from relaybus.gateway.requests.commands import GatewayCommands
from relaybus.gateway.requests.listing import list_hosts, list_sessions
from relaybus.gateway.requests.resume import Resumer
from relaybus.gateway.requests.watch import Watches
from relaybus.gateway.scope import Members
from relaybus.shared.wire.errors import ErrorCode

#: Heartbeats change rarely; a burst of list_sessions (reconnects) scans them once.
HOSTS_TTL_S = 1.0


class Router:
    def __init__(
        self,
        ctx: GatewayContext,
        *,
        hub: Hub,
        commands: GatewayCommands,
        approvals: GatewayApprovals,
        members: Members | None = None,
    ) -> None:
        self.ctx = ctx
        #: Scopes and the audit trail (``None``: every connection sees everything, unrecorded).
        self.members = members
        self.hub = hub
        self.commands = commands
        self.approvals = approvals
        pages = SharedPages(hub, partial(history.read_page, ctx.client, ctx.keys))
        self.resume = Resumer(ctx, pages=pages, hub=hub)
        self.watches = Watches(ctx, pages=pages, hub=hub, commands=commands, approvals=approvals)
        self._hosts_cache: tuple[float, list[dict[str, Any]]] | None = None

    async def handle(self, conn: Connection, msg: protocol.ClientMessage) -> None:
        if isinstance(msg, protocol.Hello):
            await self.resume.hello(conn, msg)
            return
        if conn.state.global_buffer is not None and not conn.state.hello_done:
            await self.resume.resolve_v1(conn)
        if isinstance(msg, protocol.ListSessions):
            sessions = await list_sessions(self.ctx.client, self.ctx.keys)
            hosts = await self._hosts()
            if self.members is not None:
                sessions, hosts = self.members.visible_sessions(conn, sessions, hosts)
            conn.send(frames.sessions(sessions, hosts, self.hub.position, msg.requestId))
        elif isinstance(msg, protocol.WatchSession):
            if self.members is not None:
                await self.members.check_session(conn, msg.sessionId, msg.requestId)
            await self.watches.watch(conn, msg)
        elif isinstance(msg, protocol.UnwatchSession):
            self.hub.unwatch(conn, msg.sessionId)
            await self.approvals.sync(msg.sessionId)
            conn.send(
                frames.watch_ack(
                    msg.sessionId, False, self.hub.position, msg.requestId, msg.traceId
                )
            )
        else:
            if conn.access is not Access.FULL:
                self.ctx.metrics.commands.labels(msg.type, ErrorCode.FORBIDDEN.value).inc()
                raise ProtocolError(ErrorCode.FORBIDDEN, "this token is read-only", msg.requestId)
            if self.members is not None:
                await self.members.check_command(conn, msg)
                await self.members.record(conn, msg)
            if isinstance(msg, protocol.AcceptDiff | protocol.RejectDiff):
                await self.approvals.decide(conn, msg)
                return
            await self.commands.handle(conn, msg)

    async def _hosts(self) -> list[dict[str, Any]]:
        """The machines of the ``sessions`` frame, read at most once per ``HOSTS_TTL_S``."""
        now = time.monotonic()
        if self._hosts_cache is None or now - self._hosts_cache[0] > HOSTS_TTL_S:
            self._hosts_cache = (now, await list_hosts(self.ctx.client, self.ctx.keys))
        return self._hosts_cache[1]
