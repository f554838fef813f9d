"""Route commands to the session's machine and answer the client that asked.

``prompt`` / ``interrupt_request`` / ``new_conversation`` / ``set_permission_mode`` go to ``{ns}:cmd:<host>`` after a
heartbeat check (``host_offline`` at once when the host is gone), through the process's
:class:`~relaybus.gateway.requests.command_link.CommandLink`; no reply within
``command_timeout_seconds`` is ``timeout``. Every
request gets exactly one answer, logged and counted once — and a prompt whose headless run
fails after its ``prompt_sent`` gets a second reply from the collector (``data.late``),
sent to the same client as ``error{code:"prompt_failed", message, requestId, sessionId}``
(:class:`~relaybus.gateway.requests.late_failures.LateFailures`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from relaybus.gateway import protocol
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.frames import client_frame, refusal
from relaybus.gateway.protocol import ProtocolError
from relaybus.gateway.requests.command_link import CommandLink
from relaybus.gateway.requests.late_failures import LateFailures
from relaybus.shared.aio import now_ms
from relaybus.shared.store.command_streams import session_route
from relaybus.shared.wire.commands import (
    CAP_LOAD_HISTORY,
    LOAD_HISTORY,
    MAX_MESSAGE_CHARS,
    host_capabilities,
)
from relaybus.shared.wire.cwd import cwd_problem
from relaybus.shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

#: Commands one connection may have waiting for their machine; more are refused.
MAX_IN_FLIGHT = 16


def asked_by(conn: Connection) -> dict[str, str]:
    """Who a connection acts for, as a command carries it (``Command.by``)."""
    member = conn.member
    return {
        "member": member.name if member is not None else "token",
        "tokenId": member.token_id if member is not None else "",
        "device": conn.device,
    }


class GatewayCommands:
    """The gateway's command router: prompt, interrupt_request, new_conversation, load_history."""

    def __init__(
        self,
        ctx: GatewayContext,
        *,
        link: CommandLink,
        late: LateFailures,
        position: Callable[[], int],
    ) -> None:
        """``late`` must be the one ``link`` tells of late failures."""
        self._ctx = ctx
        self._link = link
        self._late = late
        self._position = position
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: dict[str, int] = {}
        self._history: dict[str, asyncio.Future[bool]] = {}

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def handle(self, conn: Connection, msg: protocol.Command) -> None:
        """Validate now (errors go back through the endpoint), answer from a task of its own."""
        if isinstance(msg, protocol.Prompt):
            if msg.sessionId is None:
                raise ProtocolError(
                    ErrorCode.INVALID_FIELD, "prompt needs a sessionId", msg.requestId
                )
            if not msg.message.strip() or len(msg.message) > MAX_MESSAGE_CHARS:
                raise ProtocolError(
                    ErrorCode.INVALID_FIELD,
                    f"message must be 1..{MAX_MESSAGE_CHARS} characters",
                    msg.requestId,
                )
            if "\x00" in msg.message:  # never representable in a child's argv
                raise ProtocolError(
                    ErrorCode.INVALID_FIELD, "message must not contain NUL", msg.requestId
                )
        if isinstance(msg, protocol.NewConversation) and msg.cwd:
            problem = cwd_problem(msg.cwd)
            if problem is not None:
                raise ProtocolError(ErrorCode.INVALID_FIELD, problem, msg.requestId)
        if self._in_flight.get(conn.cid, 0) >= MAX_IN_FLIGHT:
            raise ProtocolError(
                ErrorCode.UNAVAILABLE,
                f"{MAX_IN_FLIGHT} commands are already waiting; wait for their answers",
                msg.requestId,
            )
        self._in_flight[conn.cid] = self._in_flight.get(conn.cid, 0) + 1
        task = asyncio.create_task(self._answer(conn, msg), name=f"command-{msg.type}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _t: self._release(conn.cid))

    def _release(self, cid: str) -> None:
        left = self._in_flight.get(cid, 1) - 1
        if left > 0:
            self._in_flight[cid] = left
        else:
            self._in_flight.pop(cid, None)

    async def _answer(self, conn: Connection, msg: protocol.Command) -> None:
        started = time.monotonic()
        cmd_id = "-"
        try:
            frame, outcome, cmd_id = await self.execute(msg, by=asked_by(conn))
        except RedisError as exc:
            log.warning("command %s: Redis error: %s", msg.type, exc)
            frame = _refused(msg, ErrorCode.UNAVAILABLE, "storage unavailable, retry")
            outcome = ErrorCode.UNAVAILABLE.value
        except Exception:  # a bug must still answer the request, and be seen
            log.exception("command %s failed", msg.type)
            frame = _refused(msg, ErrorCode.BRIDGE_ERROR, "internal error")
            outcome = "internal_error"
        elapsed = time.monotonic() - started
        frame["seqId"] = self._position()
        conn.send(frame)
        if frame.get("type") == "prompt_sent":
            sid = str(getattr(msg, "sessionId", "") or "")
            self._late.remember(cmd_id, conn, sid, msg.requestId, msg.traceId)
        self._ctx.metrics.commands.labels(msg.type, outcome).inc()
        log.info(
            "command %s %s session=%s request=%s trace=%s: %s in %.3fs",
            cmd_id,
            msg.type,
            getattr(msg, "sessionId", None) or "-",
            msg.requestId or "-",
            msg.traceId or "-",
            outcome,
            elapsed,
        )

    async def execute(
        self, msg: protocol.Command, by: dict[str, str] | None = None
    ) -> tuple[dict[str, Any], str, str]:
        """Route one command; returns the client frame (no seqId), the outcome and the command id
        (``by``: who asked, for the collector's audit entry)."""
        rid, trace = msg.requestId, msg.traceId

        def refuse(code: str, message: str) -> tuple[dict[str, Any], str, str]:
            return _refused(msg, code, message), code, "-"

        payload: dict[str, Any] = {}
        sid = ""
        if isinstance(msg, protocol.NewConversation):
            host = msg.host or await self._only_live_host()
            if host is None:
                return refuse(
                    ErrorCode.HOST_REQUIRED, "several or no machines are live: say which host"
                )
            if msg.cwd:
                payload["cwd"] = msg.cwd
        else:
            sid = str(getattr(msg, "sessionId", "") or "")
            route = await session_route(self._ctx.client, self._ctx.keys, sid)
            if route is None:
                return refuse(ErrorCode.UNKNOWN_SESSION, f"no session {sid!r}")
            host = route[0]
            if isinstance(msg, protocol.Prompt):
                payload["message"] = msg.message
            elif isinstance(msg, protocol.SetPermissionMode):
                payload["mode"] = msg.mode
        if not await self._ctx.client.exists(self._ctx.keys.host(host)):
            return refuse(ErrorCode.HOST_OFFLINE, f"machine {host!r} is offline")
        cmd = self._link.command(
            msg.type, sid, payload=payload, request_id=rid, trace_id=trace, by=by
        )
        reply = await self._link.round_trip(host, cmd)
        if reply is None:
            why = f"machine {host!r} did not answer in {self._link.timeout_s:g}s"
            return _refused(msg, ErrorCode.TIMEOUT, why), ErrorCode.TIMEOUT, cmd.id
        outcome = "ok" if reply.ok else (reply.code or "error")
        return client_frame(cmd, reply), outcome, cmd.id

    async def load_history(self, sid: str, host: str) -> bool:
        """Ask ``host`` to publish ``sid``'s history (``relaybus.collector.history``); True once it did.

        Concurrent watches of one session on this gateway share one command; the collector
        publishes a history at most once whoever asks.
        """
        shared = self._history.get(sid)
        if shared is not None:
            return await asyncio.shield(shared)
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._history[sid] = fut
        ok = False
        try:
            ok = await self._load_history(sid, host)
        finally:
            del self._history[sid]
            fut.set_result(ok)
        return ok

    async def _load_history(self, sid: str, host: str) -> bool:
        if CAP_LOAD_HISTORY not in host_capabilities(
            await self._ctx.client.get(self._ctx.keys.host(host))
        ):
            log.info("history of %s not loaded: machine %s is offline or too old", sid, host)
            return False
        cmd = self._link.command(LOAD_HISTORY, sid)
        reply = await self._link.round_trip(host, cmd)
        outcome = "timeout" if reply is None else "ok" if reply.ok else (reply.code or "error")
        self._ctx.metrics.commands.labels(LOAD_HISTORY, outcome).inc()
        log.info("command %s load_history session=%s: %s", cmd.id, sid, outcome)
        return reply is not None and reply.ok

    async def _only_live_host(self) -> str | None:
        """The one machine whose heartbeat is current, from the ``hosts`` index (never a
        SCAN of the keyspace: a client could make every gateway walk it per request)."""
        live = await self._ctx.client.zrangebyscore(
            self._ctx.keys.hosts, now_ms(), "+inf", start=0, num=2
        )
        hosts = [h.decode() if isinstance(h, bytes) else str(h) for h in live]
        return hosts[0] if len(hosts) == 1 else None


def _refused(msg: protocol.Command, code: str, message: str) -> dict[str, Any]:
    """The client frame refusing ``msg`` (without ``seqId``)."""
    return refusal(msg.type, code, message, request_id=msg.requestId, trace_id=msg.traceId)
