"""``/push/*``: the public key, a device's subscription, and Approve/Deny from a notification.

* ``GET /push/key`` — ``{publicKey}``, the ``applicationServerKey`` for ``pushManager.subscribe``.
* ``PUT /push/subscription`` (token) — ``{subscription, prefs?}``: store or update this
  device; approvals only reach subscriptions of full-access tokens. The endpoint must be a
  browser's push service or a host of ``RELAYBUS_PUSH_ENDPOINT_ALLOW`` (:mod:`.endpoints`), and
  one held by another token is refused (409). ``DELETE`` with ``{endpoint}`` removes it;
  ``POST /push/subscription/get`` with ``{endpoint}`` reads its prefs.
* ``POST /push/decide`` — ``{cap, decision: allow|deny}``: the capability a notification
  carries decides its one request, once, until the request expires. It is the only
  credential there: a leaked notification payload can do nothing else.

Each gateway limits the subscription routes per token and ``/push/decide`` per client address
(``RELAYBUS_PUSH_RATE_LIMIT_PER_MIN``; 429 with ``Retry-After``); bodies over
:data:`BODY_MAX_BYTES` are refused unread.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from relaybus.gateway.auth import Access, token_from_request
from relaybus.gateway.push.limits import RateLimiter
from relaybus.gateway.push.senders import keys_ok
from relaybus.gateway.push.service import PushService
from relaybus.gateway.push.store import Prefs, Subscription, fingerprint
from relaybus.shared.wire import approvals as ap

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

    def access(request: Request) -> tuple[str, Access] | None:
        token = token_from_request(request.headers, request.query_params)
        if token is None:
            return None
        found = push.tokens.check(token)
        return None if found is None else (fingerprint(token.encode()), found)

    async def admitted(
        request: Request,
    ) -> tuple[str, Access, dict[str, Any] | None] | JSONResponse:
        """The caller's token (fingerprint, access) and the body; a 401/429 when refused."""
        who = access(request)
        if who is None:
            return _error(401, "unauthorized", "a valid token is required")
        if wait := per_token.take(who[0]):
            return _limited(wait)
        return who[0], who[1], await _json(request)

    @r.get("/key")
    async def key() -> dict[str, str]:
        return {"publicKey": (await push.store.vapid()).public}

    @r.put("/subscription")
    async def subscribe(request: Request) -> JSONResponse:
        admission = await admitted(request)
        if isinstance(admission, JSONResponse):
            return admission
        token, token_access, body = admission
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
        )
        held = await push.store.get(saved.id)
        replaceable = ""  # a row that does not parse may be replaced
        if held is not None and held.token != token:
            if held.token in push.fingerprints:
                return _taken()
            replaceable = held.token  # its token is no longer configured
        if not await push.store.save(saved, replaceable=replaceable):
            return _taken()
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
        token, _access, body = admission
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
        if target is None:
            push.metrics.decisions.labels("expired").inc()
            return _error(410, "expired", "this notification's request is over or was answered")
        outcome = await push.approvals.decide_request(target[0], target[1], str(decision))
        push.metrics.decisions.labels(outcome).inc()
        if outcome != "ok":
            return _error(409, outcome, "the request was already resolved")
        return JSONResponse({"decision": decision, "sessionId": target[0], "requestKey": target[1]})

    return r


def _shown(sub: Subscription) -> JSONResponse:
    """What a device is told of its subscription."""
    return JSONResponse({"id": sub.id, "prefs": sub.prefs.as_json(), "approvals": sub.full})


def _taken() -> JSONResponse:
    """The endpoint belongs to another token: nothing changed, nothing about it is told."""
    return _error(409, "taken", "this push endpoint is subscribed with another token")
