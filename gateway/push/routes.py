"""``/push/*``: the public key, a device's subscription, and Approve/Deny from a notification.

* ``GET /push/key`` — ``{publicKey}``, the ``applicationServerKey`` for ``pushManager.subscribe``.
* ``PUT /push/subscription`` (token) — ``{subscription, prefs?}``: store or update this
  device; approvals only reach subscriptions of full-access tokens. A member's token (issue
  25) is remembered by its id: its scope decides at send time which sessions reach the
  device, and revoking it removes the subscription; storing the subscription marks the
  token used from that device (``relaybus token list``). The endpoint must be a
  browser's push service or a host of ``RELAYBUS_PUSH_ENDPOINT_ALLOW`` (:mod:`.endpoints`), and
  one held by another token is refused (409). ``DELETE`` with ``{endpoint}`` removes it;
  ``POST /push/subscription/get`` with ``{endpoint}`` reads its prefs.
* ``POST /push/decide`` — ``{cap, decision: allow|deny}``: the capability a notification
  carries decides its one request, once, until the request expires. It is the only
  credential there: a leaked notification payload can do nothing else. The decision is the
  subscription's (``decidedBy``: its member and device, and an audit entry, as from the
  WebSocket) and marks its member's token used from that device, as storing it does; a
  revoked token or a session outside its scope is answered like an expired capability.

Each gateway limits the subscription routes per token and ``/push/decide`` per client address
(``RELAYBUS_PUSH_RATE_LIMIT_PER_MIN``; 429 with ``Retry-After``); bodies over
:data:`BODY_MAX_BYTES` are refused unread.
"""

from __future__ import annotations

from typing import Any, cast

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from relaybus.gateway.auth import Access, token_from_request
from relaybus.gateway.push.audience import audience
from relaybus.gateway.push.limits import RateLimiter
from relaybus.gateway.push.senders import keys_ok
from relaybus.gateway.push.service import PushService
from relaybus.gateway.push.store import Prefs, Subscription, fingerprint
from relaybus.shared.aio import now_ms
from relaybus.shared.store import members
from relaybus.shared.store.command_streams import session_route
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire import approvals as ap
from relaybus.shared.wire.device import device_label
from relaybus.shared.wire.scope import Member

BODY_MAX_BYTES = 8192


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


def _limited(wait_s: int) -> JSONResponse:
    return JSONResponse(
        {"error": "rate_limited", "message": f"too many requests: try again in {wait_s} s"},
        status_code=429,
        headers={"Retry-After": str(wait_s)},
    )


async def _json(request: Request) -> dict[str, Any] | None:
    """The body as a JSON object; None if it is not one or is over :data:`BODY_MAX_BYTES`
    (read no further than that, whatever ``Content-Length`` says)."""
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > BODY_MAX_BYTES:
        return None
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > BODY_MAX_BYTES:
            return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


def router(push: PushService) -> APIRouter:
    r = APIRouter(prefix="/push")
    per_token = RateLimiter(push.settings.push_rate_limit_per_min)
    per_address = RateLimiter(push.settings.push_rate_limit_per_min)

    async def access(request: Request) -> tuple[str, Access, Member | None] | None:
        """The caller's token fingerprint, access and member (``None``: a bootstrap token)."""
        token = token_from_request(request.headers, request.query_params)
        if token is None:
            return None
        found = await push.members.resolve(token)
        return None if found is None else (fingerprint(token.encode()), *found)

    async def admitted(
        request: Request,
    ) -> tuple[str, Access, Member | None, dict[str, Any] | None] | JSONResponse:
        """The caller's token (fingerprint, access, member) and the body; a 401/429 when
        refused."""
        who = await access(request)
        if who is None:
            return _error(401, "unauthorized", "a valid token is required")
        if wait := per_token.take(who[0]):
            return _limited(wait)
        return *who, await _json(request)

    @r.get("/key")
    async def key() -> dict[str, str]:
        return {"publicKey": (await push.store.vapid()).public}

    @r.put("/subscription")
    async def subscribe(request: Request) -> JSONResponse:
        admission = await admitted(request)
        if isinstance(admission, JSONResponse):
            return admission
        token, token_access, member, body = admission
        sub = body.get("subscription") if body else None
        keys = sub.get("keys") if isinstance(sub, dict) else None
        if not (isinstance(sub, dict) and isinstance(keys, dict)):
            return _error(400, "invalid", "subscription needs an https endpoint and keys")
        refused = push.web.policy.refusal(sub.get("endpoint"))
        if refused is not None:
            return _error(400, "endpoint_refused", refused)
        p256dh, auth = keys.get("p256dh"), keys.get("auth")
        if not (
            isinstance(p256dh, str)
            and isinstance(auth, str)
            and len(p256dh) < 200
            and len(auth) < 100
            and keys_ok(p256dh, auth)
        ):
            return _error(
                400, "invalid", "subscription keys need p256dh (a P-256 point) and auth (16 bytes)"
            )
        saved = Subscription(
            sub["endpoint"],
            p256dh,
            auth,
            token,
            token_access is Access.FULL,
            Prefs.parse((body or {}).get("prefs")),
            member.token_id if member else "",
            member.name if member else "",
            device_label(request.headers.get("user-agent")),
        )
        held = await push.store.get(saved.id)
        replaceable = ""  # a row that does not parse may be replaced
        if held is not None and held.token != token:
            live = await audience(push.ctx.client, push.ctx.keys, push.fingerprints, [held])
            if live.full(held) is not None:
                return _taken()
            replaceable = held.token  # its token is no longer configured (or was revoked)
        if not await push.store.save(saved, replaceable=replaceable):
            return _taken()
        if member is not None:  # `relaybus token list`: a push-only device uses its token too
            await members.mark_seen(push.ctx.client, push.ctx.keys, member.token_id, saved.device)
        await push.notifier.ensure_group()  # from here on no event is missed
        await push.holds.hold_pass()
        return _shown(saved)

    @r.delete("/subscription")
    async def unsubscribe(request: Request) -> JSONResponse:
        found = await _mine(request)
        if isinstance(found, JSONResponse):
            return found
        await push.store.delete(found.id)
        return JSONResponse({"deleted": True})

    @r.post("/subscription/get")
    async def read(request: Request) -> JSONResponse:
        found = await _mine(request)
        if isinstance(found, JSONResponse):
            return found
        return _shown(found)

    async def _mine(request: Request) -> Subscription | JSONResponse:
        admission = await admitted(request)
        if isinstance(admission, JSONResponse):
            return admission
        token, _access, _member, body = admission
        endpoint = body.get("endpoint") if body else None
        if not isinstance(endpoint, str):
            return _error(400, "invalid", "endpoint is required")
        probe = Subscription(endpoint, "", "", token, False)
        found = await push.store.get(probe.id)
        if found is None or found.token != token:
            return _error(404, "not_found", "no such subscription for this token")
        return found

    @r.post("/decide")
    async def decide(request: Request) -> JSONResponse:
        if wait := per_address.take(request.client.host if request.client else ""):
            return _limited(wait)
        body = await _json(request)
        cap, decision = (body or {}).get("cap"), (body or {}).get("decision")
        if not isinstance(cap, str) or len(cap) > 100 or decision not in ap.CLIENT_DECISIONS:
            return _error(400, "invalid", "cap and decision (allow or deny) are required")
        target = await push.store.redeem(cap)
        sub = await push.store.get(target[2]) if target and target[2] else None
        place = (await _place(target[0]) or ("", "")) if target and sub else ("", "")
        if target is None or sub is None or not await _reaches(sub, *place):
            push.metrics.decisions.labels("expired").inc()
            return _error(410, "expired", "this notification's request is over or was answered")
        if sub.token_id:  # `relaybus token list`: deciding from a notification uses the token
            device = sub.device or device_label(request.headers.get("user-agent"))
            await members.mark_seen(push.ctx.client, push.ctx.keys, sub.token_id, device)
        # As a decision from the WebSocket: checked, recorded, then delivered.
        await push.members.trail.append(
            "approve" if decision == ap.ALLOW else "deny",
            member=sub.member or "token",
            tokenId=sub.token_id or None,
            device=sub.device or "push",
            sessionId=target[0],
            host=place[0],
        )
        extra: dict[str, Any] | None = None
        if sub.member:  # who decided, for the card: "Approved by dana · iPhone · 14:02"
            extra = {"decidedBy": {"member": sub.member, "device": sub.device, "at": now_ms()}}
        outcome = await push.approvals.decide_request(target[0], target[1], str(decision), extra)
        push.metrics.decisions.labels(outcome).inc()
        if outcome != "ok":
            return _error(409, outcome, "the request was already resolved")
        return JSONResponse({"decision": decision, "sessionId": target[0], "requestKey": target[1]})

    async def _place(sid: str) -> tuple[str, str] | None:
        """(host, cwd) of ``sid`` from its hash (or its reservation); None when unknown."""
        row = cast(
            list[bytes | None],
            await push.ctx.client.hmget(push.ctx.keys.session(sid), [Field.HOST, Field.CWD]),
        )
        if row[0] is not None:
            return row[0].decode(errors="replace"), (row[1] or b"").decode(errors="replace")
        return await session_route(push.ctx.client, push.ctx.keys, sid)

    async def _reaches(sub: Subscription, host: str, cwd: str) -> bool:
        """``sub``'s token is live, full and its scope allows the session."""
        live = await audience(push.ctx.client, push.ctx.keys, push.fingerprints, [sub])
        return live.full(sub) is True and live.reaches(sub, host, cwd)

    return r


def _shown(sub: Subscription) -> JSONResponse:
    """What a device is told of its subscription."""
    return JSONResponse({"id": sub.id, "prefs": sub.prefs.as_json(), "approvals": sub.full})


def _taken() -> JSONResponse:
    """The endpoint belongs to another token: nothing changed, nothing about it is told."""
    return _error(409, "taken", "this push endpoint is subscribed with another token")
