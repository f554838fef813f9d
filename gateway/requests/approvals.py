"""accept_diff / reject_diff, and this gateway's share of each session's watcher count.

A collector holds a permission request only while some client could answer it, so each
gateway publishes how many full-access clients watch each session
(``{ns}:session:<sid>:watchers``, field = gatewayId, see :mod:`relaybus.shared.wire.approvals`): at
once on watch/unwatch, and from a periodic pass that also notices disconnects and
refreshes the stamps, so the counts of a gateway that died stop counting by themselves.

A decision names a request (``requestKey``) or means the single pending request of the
given (or watched) session; without a ``requestKey`` and with nothing pending it is
``already_resolved`` when such a session's last request ended within the approval timeout
(``{ns}:session:<sid>:approval_resolved``), else ``no_pending_request``. The first decision wins through ``SET NX`` on the request's
decision key; the winner's decision goes to the holding collector as a
``permission_decision`` command, and every watcher sees ``permission_resolved`` from the
log. The decider gets ``decision_ack``; a loser ``error{already_resolved}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson
from redis.exceptions import RedisError

from relaybus.gateway import frames, protocol
from relaybus.gateway.auth import Access
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.protocol import ProtocolError
from relaybus.gateway.requests.command_link import CommandLink
from relaybus.shared.aio import Backoff, Outage, now_ms, reraise_if_cancelling
from relaybus.shared.store.connection import REDIS_UNAVAILABLE
from relaybus.shared.wire.approvals import (
    ALLOW,
    DECISION_GRACE_S,
    DENY,
    PERMISSION_DECISION,
    check_answers,
    decision_record,
    parse_resolved,
    watcher_value,
)
from relaybus.shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

#: How often the watcher counts are compared with the connections (disconnects).
CHECK_S = 1.0


class GatewayApprovals:
    def __init__(self, ctx: GatewayContext, *, hub: Hub, link: CommandLink) -> None:
        self._ctx = ctx
        self._hub = hub
        self._link = link
        #: Counts as last written to Redis, and when each field was last stamped.
        self._written: dict[str, int] = {}
        self._stamped: dict[str, float] = {}
        #: Sessions whose count the next shared write takes, that write, and the one running.
        self._dirty: set[str] = set()
        self._next: asyncio.Future[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._outage = Outage(log, "Redis (watcher counts)", Backoff(CHECK_S, CHECK_S))

    # --- watcher counts -----------------------------------------------------------------

    def count(self, sid: str) -> int:
        """Full-access connections of this gateway watching ``sid``."""
        conns = {*self._hub.watchers.get(sid, ()), *self._hub.firehose}
        return sum(1 for conn in conns if sid in conn.state.watched and conn.access is Access.FULL)

    async def sync(self, sid: str) -> None:
        """Write this gateway's count for ``sid`` now (a failure is retried by the pass).

        Watches arriving together (a reconnect storm) share one write: the counts are
        taken when it starts, after every caller waiting for it changed its watch."""
        self._dirty.add(sid)
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            self._flusher = asyncio.create_task(self._flush(self._flusher, self._next))
        try:
            await asyncio.shield(self._next)
        except RedisError as exc:
            log.warning("watcher count of %s not written: %s", sid, exc)

    async def _flush(self, previous: asyncio.Task[None] | None, done: asyncio.Future[None]) -> None:
        """After the write before it: write the counts of every session synced meanwhile."""
        if previous is not None:
            with contextlib.suppress(BaseException):
                await previous
        self._next = None
        dirty, self._dirty = self._dirty, set()
        try:
            await self._write({sid: self.count(sid) for sid in dirty})
        except RedisError as exc:
            done.set_exception(exc)
            done.exception()  # retrieved: a caller that was cancelled meanwhile is gone
        except BaseException:
            done.cancel()
            raise
        else:
            done.set_result(None)

    async def _write(self, counts: dict[str, int]) -> None:
        expires = now_ms() + self._ctx.settings.watchers_ttl_s * 1000
        pipe = self._ctx.client.pipeline(transaction=False)
        for sid, n in counts.items():
            key = self._ctx.keys.session_watchers(sid)
            if n > 0:
                pipe.hset(key, self._ctx.gateway_id, watcher_value(n, expires))
                pipe.expire(key, self._ctx.settings.watchers_ttl_s)
            else:
                pipe.hdel(key, self._ctx.gateway_id)
        await pipe.execute()
        now = time.monotonic()
        for sid, n in counts.items():
            if n > 0:
                self._written[sid] = n
                self._stamped[sid] = now
            else:
                self._written.pop(sid, None)
                self._stamped.pop(sid, None)

    async def _pass(self) -> None:
        """Write what changed (disconnects) and re-stamp fields before they expire."""
        sids = {sid for conn in self._hub.connections for sid in conn.state.watched} | set(
            self._written
        )
        stale = time.monotonic() - self._ctx.settings.watchers_ttl_s / 3
        due = {}
        for sid in sids:
            n = self.count(sid)
            if n != self._written.get(sid, 0) or (n > 0 and self._stamped.get(sid, 0) < stale):
                due[sid] = n
        if due:
            await self._write(due)

    async def run(self) -> None:
        """Refresh the counts every :data:`CHECK_S` until cancelled (a runtime task)."""
        while True:
            try:
                await self._pass()
                self._outage.ok()
                delay = CHECK_S
            except RedisError as exc:
                reraise_if_cancelling(exc)
                delay = self._outage.failed(exc)
            await asyncio.sleep(delay)

    async def aclose(self) -> None:
        """Withdraw this gateway's counts (after :meth:`run` was stopped)."""
        with contextlib.suppress(*REDIS_UNAVAILABLE):
            await asyncio.wait_for(self._write(dict.fromkeys(self._written, 0)), 2.0)

    # --- decisions ---------------------------------------------------------------------

    async def decide(
        self, conn: Connection, msg: protocol.AcceptDiff | protocol.RejectDiff
    ) -> None:
        rid = msg.requestId
        decision = ALLOW if isinstance(msg, protocol.AcceptDiff) else DENY
        reason = msg.reason if isinstance(msg, protocol.RejectDiff) else None
        sids = [msg.sessionId] if msg.sessionId else sorted(conn.state.watched)
        if not sids:
            raise ProtocolError(
                ErrorCode.INVALID_FIELD, f"{msg.type} needs a sessionId (or a watched session)", rid
            )
        sid, key, entry = await self._target(sids, msg.requestKey, rid)
        extra = _checked(entry, msg)
        if (
            conn.member is not None
        ):  # who decided, for the card: "Approved by dana · iPhone · 14:02"
            extra["decidedBy"] = {"member": conn.member.name, "device": conn.device, "at": now_ms()}
        if not await self._deliver(sid, key, entry, decision, reason, rid, msg.traceId, extra):
            self._ctx.metrics.commands.labels(msg.type, ErrorCode.ALREADY_RESOLVED).inc()
            raise ProtocolError(
                ErrorCode.ALREADY_RESOLVED, f"request {key} was already resolved", rid
            )
        self._ctx.metrics.commands.labels(msg.type, "ok").inc()
        log.info(
            "%s: %s of %s in session %s (request %s)", msg.type, decision, key, sid, rid or "-"
        )
        conn.send(frames.decision_ack(sid, key, decision, self._hub.position, rid, msg.traceId))

    async def decide_request(
        self, sid: str, key: str, decision: str, extra: dict[str, Any] | None = None
    ) -> str:
        """A decision from outside a connection (a notification's Approve/Deny): ``ok``, or
        the error code (``already_resolved``, ``no_pending_request``); ``extra`` goes into
        the decision record (``decidedBy``)."""
        try:
            _sid, _key, entry = await self._target([sid], key, None)
        except ProtocolError as exc:
            return str(exc.code.value)
        if entry.get("questions") is not None or entry.get("answerable") is False:
            return ErrorCode.INVALID_FIELD.value  # one tap is no complete answer to these
        if not await self._deliver(sid, key, entry, decision, None, None, None, extra):
            return ErrorCode.ALREADY_RESOLVED.value
        log.info("push: %s of %s in session %s", decision, key, sid)
        return "ok"

    async def _deliver(
        self,
        sid: str,
        key: str,
        entry: dict[str, Any],
        decision: str,
        reason: str | None,
        rid: str | None,
        trace_id: str | None,
        extra: dict[str, Any] | None = None,
    ) -> bool:
        """Claim the decision (first writer wins) and send it to the holding collector."""
        claimed = await self._ctx.client.set(
            self._ctx.keys.approval(key),
            decision_record(decision, reason, extra),
            nx=True,
            ex=DECISION_GRACE_S,
        )
        if not claimed:
            return False
        cmd = self._link.command(
            PERMISSION_DECISION,
            sid,
            payload={"requestKey": key, "decision": decision, "message": reason},
            request_id=rid,
            trace_id=trace_id,
        )
        await self._link.send(str(entry.get("host", "")), cmd)
        return True

    async def _target(
        self, sids: list[str], request_key: str | None, rid: str | None
    ) -> tuple[str, str, dict[str, Any]]:
        """The one pending request meant: (session, requestKey, its index entry)."""
        pipe = self._ctx.client.pipeline(transaction=False)
        for sid in sids:
            pipe.hgetall(self._ctx.keys.approvals(sid))
        now = now_ms()
        found: list[tuple[str, str, dict[str, Any]]] = []
        expired: str | None = None  # timed out, its collector has not dropped it yet
        for sid, rows in zip(sids, await pipe.execute(), strict=True):
            for raw_key, raw in rows.items():
                key = raw_key.decode()
                if request_key is not None and key != request_key:
                    continue
                try:
                    entry = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(entry, dict):
                    continue
                if int(entry.get("expiresAt", 0)) <= now:
                    expired = key
                else:
                    found.append((sid, key, entry))
        if len(found) == 1:
            return found[0]
        if found:
            raise ProtocolError(
                ErrorCode.AMBIGUOUS,
                f"{len(found)} requests are pending: say which (requestKey)",
                rid,
            )
        if expired is not None:
            raise ProtocolError(ErrorCode.ALREADY_RESOLVED, f"request {expired} timed out", rid)
        if request_key is not None and await self._ctx.client.exists(
            self._ctx.keys.approval(request_key)
        ):
            raise ProtocolError(
                ErrorCode.ALREADY_RESOLVED, f"request {request_key} was already resolved", rid
            )
        if request_key is None:
            late = await self._recently_resolved(sids)
            if late is not None:
                raise ProtocolError(
                    ErrorCode.ALREADY_RESOLVED,
                    f"request {late[0]} was already resolved ({late[1]})",
                    rid,
                )
        raise ProtocolError(ErrorCode.NO_PENDING_REQUEST, "no permission request is pending", rid)

    async def _recently_resolved(self, sids: list[str]) -> tuple[str, str] | None:
        """(requestKey, decision) of a request of ``sids`` that ended within the approval
        timeout (the session's ``approval_resolved`` key), else ``None``."""
        pipe = self._ctx.client.pipeline(transaction=False)
        for sid in sids:
            pipe.get(self._ctx.keys.approval_resolved(sid))
        for raw in await pipe.execute():
            found = parse_resolved(raw)
            if found is not None:
                return found
        return None


def _checked(
    entry: dict[str, Any], msg: protocol.AcceptDiff | protocol.RejectDiff
) -> dict[str, Any]:
    """The decision's ``answers`` / ``suggestion`` / ``interrupt``, checked against the request
    (its approvals index entry); :class:`ProtocolError` ``invalid_field`` when they do not fit."""
    rid = msg.requestId

    def refuse(why: str) -> ProtocolError:
        return ProtocolError(ErrorCode.INVALID_FIELD, why, rid)

    if entry.get("answerable") is False:
        raise refuse("this request cannot be answered from a client: answer it at the terminal")
    if isinstance(msg, protocol.RejectDiff):
        return {"interrupt": True} if msg.interrupt else {}
    extra: dict[str, Any] = {}
    questions = entry.get("questions")
    if msg.answers is not None:
        if not isinstance(questions, list):
            raise refuse("answers: this request asks no questions")
        why = check_answers(questions, msg.answers)
        if why is not None:
            raise refuse(f"answers: {why}")
        extra["answers"] = msg.answers
    elif isinstance(questions, list):
        raise refuse("this request asks questions: accept_diff needs answers")
    if msg.suggestion is not None:
        offered = entry.get("suggestions")
        if not isinstance(offered, int) or msg.suggestion >= offered:
            raise refuse(f"suggestion {msg.suggestion}: the request offers {offered or 0}")
        extra["suggestion"] = msg.suggestion
    return extra
