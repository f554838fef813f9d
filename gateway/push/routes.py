"""``/push/*``: the public key, a device's subscription, and Approve/Deny from a notification.

* ``GET /push/key`` — ``{publicKey}``, the ``applicationServerKey`` for ``pushManager.subscribe``.
* ``PUT /push/subscription`` (token) — ``{subscription, prefs?}``: store or update this
  device; approvals only reach subscriptions of full-access tokens. ``DELETE`` with
  ``{endpoint}`` removes it; ``POST /push/subscription/get`` with ``{endpoint}`` reads its prefs.
* ``POST /push/decide`` — ``{cap, decision: allow|deny}``: the capability a notification
  carries decides its one request, once, until the request expires. It is the only
  credential there: a leaked notification payload can do nothing else.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from relaybus.gateway.auth import Access, token_from_request
from relaybus.gateway.push.service import PushService
from relaybus.gateway.push.store import Prefs, Subscription, fingerprint
from relaybus.shared.wire import approvals as ap

BODY_MAX_BYTES = 8192
ENDPOINT_MAX = 2048
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


async def _json(request: Request) -> dict[str, Any] | None:
    raw = await request.body()
    if len(raw) > BODY_MAX_BYTES:
        return None
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _endpoint_ok(endpoint: Any) -> bool:
    """A push service URL: https (plain http only on loopback, for a local stand-in)."""
    if not isinstance(endpoint, str) or len(endpoint) > ENDPOINT_MAX:
        return False
    parts = urlsplit(endpoint)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK)


def router(push: PushService) -> APIRouter:
    r = APIRouter(prefix="/push")

    def access(request: Request) -> tuple[str, Access] | None:
        token = token_from_request(request.headers, request.query_params)
        if token is None:
            return None
        found = push.tokens.check(token)
        return None if found is None else (fingerprint(token.encode()), found)

    @r.get("/key")
    async def key() -> dict[str, str]:
        return {"publicKey": (await push.store.vapid()).public}

    @r.put("/subscription")
    async def subscribe(request: Request) -> JSONResponse:
        who = access(request)
        if who is None:
            return _error(401, "unauthorized", "a valid token is required")
        body = await _json(request)
        sub = body.get("subscription") if body else None
        keys = sub.get("keys") if isinstance(sub, dict) else None
        if not (
            isinstance(sub, dict) and _endpoint_ok(sub.get("endpoint")) and isinstance(keys, dict)
        ):
            return _error(400, "invalid", "subscription needs an https endpoint and keys")
        p256dh, auth = keys.get("p256dh"), keys.get("auth")
        if not (
            isinstance(p256dh, str)
            and isinstance(auth, str)
            and len(p256dh) < 200
            and len(auth) < 100
        ):
            return _error(400, "invalid", "subscription keys need p256dh and auth")
        saved = Subscription(
            sub["endpoint"],
            p256dh,
            auth,
            who[0],
            who[1] is Access.FULL,
            Prefs.parse((body or {}).get("prefs")),
        )
        await push.store.save(saved)
        await push.worker.ensure_group()  # from here on no event is missed
        await push.worker.hold_pass()
        return JSONResponse(
            {"id": saved.id, "prefs": saved.prefs.as_json(), "approvals": saved.full}
        )

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
        return JSONResponse(
            {"id": found.id, "prefs": found.prefs.as_json(), "approvals": found.full}
        )

    async def _mine(request: Request) -> Subscription | JSONResponse:
        who = access(request)
        if who is None:
            return _error(401, "unauthorized", "a valid token is required")
        body = await _json(request)
        endpoint = body.get("endpoint") if body else None
        if not isinstance(endpoint, str):
            return _error(400, "invalid", "endpoint is required")
        probe = Subscription(endpoint, "", "", who[0], False)
        found = await push.store.get(probe.id)
        if found is None or found.token != who[0]:
            return _error(404, "not_found", "no such subscription for this token")
        return found

    @r.post("/decide")
    async def decide(request: Request) -> JSONResponse:
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
