"""Members on the gateway: who a token is (``RELAYBUS_TOKENS`` first, then ``{ns}:tokens``),
what its scope lets a connection see and drive, revocations closing its sockets, and the
audit entry of each action it asks for.

Out of scope behaves exactly like nonexistent: the same error code and message as for a
session id nobody knows, no counts, no ids. The live fan-out and resume replays filter with
``Connection.state.in_scope`` (set here for a restricted scope, from :class:`Places`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from relaybus.gateway import frames, protocol
from relaybus.gateway.auth import Access, TokenTable
from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.protocol import ProtocolError
from relaybus.shared.store import members
from relaybus.shared.store.audit import Trail
from relaybus.shared.store.command_streams import session_route
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.errors import CloseCode, ErrorCode
from relaybus.shared.wire.scope import Member

log = logging.getLogger(__name__)

#: The audit action of each command a client sends.
ACTIONS = {
    "prompt": "prompt",
    "interrupt_request": "interrupt",
    "new_conversation": "new_conversation",
    "set_permission_mode": "set_permission_mode",
    "reject_diff": "deny",
}


class Members:
    """Authentication and scope checks for one gateway process."""

    def __init__(
        self, *, tokens: TokenTable, client: aioredis.Redis, keys: Keys, hub: Hub, trail: Trail
    ) -> None:
        self.tokens = tokens
        self.client = client
        self.keys = keys
        self.hub = hub
        self.trail = trail
        #: What else a revocation removes (push: the token's subscriptions), given its id.
        self.on_revoked: Callable[[str], Awaitable[object]] | None = None

    async def resolve(self, token: str | None) -> tuple[Access, Member | None] | None:
        """The access a token grants and its member (``None`` for a bootstrap token)."""
        access = self.tokens.check(token)
        if access is not None or token is None:
            return None if access is None else (access, None)
        member = await members.resolve(self.client, self.keys, token)
        if member is None:
            return None
        return (Access.READ if member.scope.read_only else Access.FULL), member

    async def admit(self, conn: Connection, token: str | None) -> bool:
        """Authenticate ``conn`` with ``token``; ``False`` means refuse it."""
        found = await self.resolve(token)
        if found is None:
            return False
        conn.access, conn.member = found
        if conn.member is not None:
            scope = conn.member.scope
            if not scope.unrestricted:
                conn.state.restrict(self.hub.places.check(scope))
            await members.mark_seen(self.client, self.keys, conn.member.token_id, conn.device)
        return True

    # --- what a scoped connection may see ----------------------------------------------

    @staticmethod
    def visible_sessions(
        conn: Connection, infos: list[dict[str, Any]], hosts: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The ``sessions`` reply of ``conn``: only its scope's sessions and machines."""
        if conn.member is None or conn.member.scope.unrestricted:
            return infos, hosts
        scope = conn.member.scope
        shown = [i for i in infos if scope.allows(i.get("host"), i.get("cwd"))]
        machines = [h for h in hosts if scope.hosts is None or h.get("host") in scope.hosts]
        return shown, machines

    async def check_session(self, conn: Connection, sid: str, request_id: str | None) -> None:
        """Refuse a session outside ``conn``'s scope exactly as an unknown one."""
        if conn.state.in_scope is None:
            return
        places = self.hub.places
        if places.get(sid) is None and (route := await session_route(self.client, self.keys, sid)):
            places.put(sid, *route)
        if sid not in conn.state.in_scope:
            raise ProtocolError(ErrorCode.UNKNOWN_SESSION, f"no session {sid!r}", request_id)

    async def check_command(self, conn: Connection, msg: protocol.Command) -> None:
        """A command names a session (or a machine and directory) inside the scope."""
        if conn.member is None or conn.member.scope.unrestricted:
            return
        if isinstance(msg, protocol.NewConversation):
            scope = conn.member.scope
            if msg.host is None and scope.hosts is not None:
                raise ProtocolError(
                    ErrorCode.HOST_REQUIRED,
                    "several or no machines are live: say which host",
                    msg.requestId,
                )
            if msg.host is not None and scope.hosts is not None and msg.host not in scope.hosts:
                raise ProtocolError(
                    ErrorCode.HOST_OFFLINE, f"machine {msg.host!r} is offline", msg.requestId
                )
            if scope.projects is not None and not scope.allows(msg.host, msg.cwd):
                raise ProtocolError(
                    ErrorCode.FORBIDDEN, "this token may not run in that directory", msg.requestId
                )
            return
        await self.check_session(conn, str(getattr(msg, "sessionId", "") or ""), msg.requestId)

    # --- the audit trail ---------------------------------------------------------------

    async def record(self, conn: Connection, msg: protocol.Command) -> None:
        """Append the action ``msg`` asks for, with who, from which device, where."""
        sid = str(getattr(msg, "sessionId", "") or "")
        action, detail = ACTIONS.get(msg.type, msg.type), ""
        if isinstance(msg, protocol.AcceptDiff):
            action = (
                "always_allow"
                if msg.suggestion is not None
                else "answer"
                if msg.answers
                else "approve"
            )
        host = msg.host if isinstance(msg, protocol.NewConversation) else None
        if host is None and sid:
            place = self.hub.places.get(sid) or await session_route(self.client, self.keys, sid)
            host = place[0] if place else None
        if isinstance(msg, protocol.NewConversation):
            detail = msg.cwd or ""
        member = conn.member
        await self.trail.append(
            action,
            member=member.name if member else ("token" if conn.access else "anonymous"),
            tokenId=member.token_id if member else None,
            device=conn.device,
            sessionId=sid,
            host=host,
            detail=detail,
        )

    def decided_by(self, conn: Connection) -> dict[str, str]:
        """Who decided a permission request (``permission_resolved.decidedBy``)."""
        name = conn.member.name if conn.member else "token"
        return {"member": name, "device": conn.device}

    # --- revocation ----------------------------------------------------------------------

    def revoked(self, token_id: str) -> int:
        """Close every connection of ``token_id`` on this gateway (4401); how many."""
        closed = 0
        for conn in list(self.hub.connections):
            if conn.member is not None and conn.member.token_id == token_id:
                final = frames.error_frame(
                    ErrorCode.UNAUTHORIZED, "token revoked", None, self.hub.position
                )
                conn.abort(CloseCode.UNAUTHORIZED, "token revoked", final=final)
                closed += 1
        if closed:
            log.info("token %s revoked: closed %d connection(s)", token_id, closed)
        return closed

    async def revocation(self, _eid: str, fields: dict[bytes, bytes]) -> None:
        """One ``{ns}:revocations`` entry (the runtime's ``StreamTail`` reads them from the
        stream's end: earlier revocations already deleted their hashes): close the token's
        connections here and drop what else it had."""
        tid = fields.get(b"id")
        if isinstance(tid, bytes):
            self.revoked(tid.decode())
            if self.on_revoked is not None:  # a Redis error: the tail hands this entry again
                await self.on_revoked(tid.decode())
