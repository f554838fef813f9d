"""The Redis side of push (all keys under the namespace's hash tag).

* ``{ns}:push:vapid`` — string, JSON ``{"private": <PEM>, "public": <b64url point>}``: one key
  pair for the fleet, created with ``SET NX`` by whichever gateway needs it first, replaced
  only by ``relaybus push keys --rotate`` (which also drops every subscription: a browser's
  subscription is bound to the public key it was made with).
* ``{ns}:push:subs`` — hash subscription id → JSON :class:`Subscription` (the browser's
  ``PushSubscription``, the fingerprint of the token that made it, the device's preferences).
* ``{ns}:push:cap:<sha256(cap)>`` — a capability to decide one permission request, JSON
  ``{sid, requestKey}``, expiring with the request; ``GETDEL`` makes it single-use.
* ``{ns}:push:done:<seq>:<notice>:<target>`` — claim, ``SET NX`` before sending: a retried or
  taken-over event never notifies a target twice.
* ``{ns}:push:turns`` — hash sid → ms the session's turn started working (for "Done").
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis.asyncio as aioredis
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from py_vapid import Vapid02

from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.ids import valid_host_id

#: Every event kind a device can pick; the defaults leave out failures.
EVENTS = ("approvals", "waiting", "done", "notify", "failures")
DEFAULT_EVENTS = ("approvals", "waiting", "done", "notify")
#: Subscriptions one token may hold (a bounded hash; the oldest is replaced).
MAX_SUBS_PER_TOKEN = 20
MAX_LIST = 200
CLAIM_TTL_S = 86_400


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def fingerprint(token: bytes) -> str:
    """What a subscription remembers of its token: never the secret itself."""
    return hashlib.sha256(b"relaybus-push:" + token).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Prefs:
    """A device's choice: event kinds, machines (empty: all) and muted sessions."""

    events: tuple[str, ...] = DEFAULT_EVENTS
    hosts: tuple[str, ...] = ()
    muted: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Any) -> Prefs:
        """Lenient: unknown events, non-strings and malformed machine ids are dropped; lists
        are bounded."""
        if not isinstance(raw, dict):
            return cls()

        def strings(v: Any, default: tuple[str, ...]) -> tuple[str, ...]:
            if not isinstance(v, list):
                return default
            return tuple(dict.fromkeys(s for s in v[:MAX_LIST] if isinstance(s, str) and s))

        events = tuple(e for e in strings(raw.get("events"), DEFAULT_EVENTS) if e in EVENTS)
        hosts = tuple(h for h in strings(raw.get("hosts"), ()) if valid_host_id(h))
        return cls(events, hosts, strings(raw.get("muted"), ()))

    def wants(self, event: str, host: str, sid: str) -> bool:
        return (
            event in self.events
            and (not self.hosts or host in self.hosts)
            and sid not in self.muted
        )

    def as_json(self) -> dict[str, list[str]]:
        return {"events": list(self.events), "hosts": list(self.hosts), "muted": list(self.muted)}


@dataclass(frozen=True, slots=True)
class Subscription:
    endpoint: str
    p256dh: str
    auth: str
    token: str  # fingerprint
    full: bool  # made with a full-access token: may get approvals
    prefs: Prefs = field(default_factory=Prefs)
    #: A member's token id (``{ns}:tokens``; empty for a ``RELAYBUS_TOKENS`` token): its
    #: scope is looked up at send time, and revoking the token removes the subscription.
    token_id: str = ""
    member: str = ""  # the member's name, for ``decidedBy`` and the audit
    device: str = ""  # the device label of the browser that subscribed

    @property
    def id(self) -> str:
        return hashlib.sha256(self.endpoint.encode()).hexdigest()[:24]

    def info(self) -> dict[str, Any]:
        """The ``subscription_info`` pywebpush takes."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}

    def dumps(self) -> bytes:
        return orjson.dumps(
            {
                "endpoint": self.endpoint,
                "keys": {"p256dh": self.p256dh, "auth": self.auth},
                "token": self.token,
                "full": self.full,
                "prefs": self.prefs.as_json(),
                "tokenId": self.token_id,
                "member": self.member,
                "device": self.device,
            }
        )

    @classmethod
    def loads(cls, raw: bytes | str) -> Subscription | None:
        try:
            body = orjson.loads(raw)
            k = body["keys"]
            return cls(
                str(body["endpoint"]),
                str(k["p256dh"]),
                str(k["auth"]),
                str(body["token"]),
                bool(body.get("full")),
                Prefs.parse(body.get("prefs")),
                str(body.get("tokenId") or ""),
                str(body.get("member") or ""),
                str(body.get("device") or ""),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class VapidKeys:
    private_pem: bytes
    public: str  # the applicationServerKey: b64url of the uncompressed P-256 point

    def signer(self) -> Vapid02:
        return Vapid02.from_pem(self.private_pem)


def new_vapid() -> VapidKeys:
    v = Vapid02()
    v.generate_keys()
    point = v.public_key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    return VapidKeys(v.private_pem(), b64url(point))


class PushStore:
    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self.vapid_key = keys.push_vapid
        self.subs_key = keys.push_subs
        self.turns_key = keys.push_turns
        self._save_owned = client.register_script(_SAVE_OWNED_LUA)

    # --- VAPID ------------------------------------------------------------------------

    async def vapid(self, *, rotate: bool = False) -> VapidKeys:
        """The fleet's key pair (made once; ``rotate`` replaces it and drops subscriptions)."""
        if rotate:
            fresh = new_vapid()
            pipe = self._client.pipeline(transaction=True)
            pipe.set(self.vapid_key, _vapid_json(fresh))
            pipe.delete(self.subs_key)
            await pipe.execute()
            return fresh
        raw = await self._client.get(self.vapid_key)
        if raw is None:
            await self._client.set(self.vapid_key, _vapid_json(new_vapid()), nx=True)
            raw = await self._client.get(self.vapid_key)
        body = orjson.loads(raw or b"{}")
        return VapidKeys(body["private"].encode(), body["public"])

    # --- subscriptions ----------------------------------------------------------------

    async def subscriptions(self) -> list[Subscription]:
        rows = await self._client.hgetall(self.subs_key)
        subs = [Subscription.loads(raw) for raw in rows.values()]
        return [s for s in subs if s is not None]

    async def save(self, sub: Subscription, *, replaceable: str = "") -> bool:
        """Store ``sub`` unless its endpoint belongs to another token (issue 22.8): False then,
        and nothing changes. ``replaceable`` names one other owner that may lose it (a token
        no longer configured). A token over :data:`MAX_SUBS_PER_TOKEN` loses another of its own.
        """
        if not await self._save_owned(
            keys=[self.subs_key], args=[sub.id, sub.token, replaceable, sub.dumps()]
        ):
            return False
        mine = [s for s in await self.subscriptions() if s.token == sub.token and s.id != sub.id]
        extra = mine[: max(0, len(mine) - MAX_SUBS_PER_TOKEN + 1)]
        if extra:
            await self._client.hdel(self.subs_key, *(old.id for old in extra))
        return True

    async def get(self, sub_id: str) -> Subscription | None:
        raw = await self._client.hget(self.subs_key, sub_id)
        return None if raw is None else Subscription.loads(raw)

    async def delete(self, sub_id: str) -> bool:
        return bool(await self._client.hdel(self.subs_key, sub_id))

    async def drop_token(self, token_id: str) -> int:
        """Remove every subscription of a member's token (it was revoked); how many."""
        gone = [s.id for s in await self.subscriptions() if token_id and s.token_id == token_id]
        return int(await self._client.hdel(self.subs_key, *gone)) if gone else 0

    # --- capabilities -----------------------------------------------------------------

    async def grant(self, sid: str, request_key: str, expires_ms: int, sub_id: str) -> str:
        """A single-use capability for subscription ``sub_id`` to decide this one request
        until it expires."""
        cap = secrets.token_urlsafe(24)
        await self._client.set(
            self._keys.push_cap(_digest(cap)),
            orjson.dumps({"sid": sid, "requestKey": request_key, "sub": sub_id}),
            pxat=max(expires_ms, 1),
        )
        return cap

    async def redeem(self, cap: str) -> tuple[str, str, str] | None:
        """(sid, requestKey, subscription id) the capability was for; it is gone afterwards."""
        raw = await self._client.getdel(self._keys.push_cap(_digest(cap)))
        if raw is None:
            return None
        body = orjson.loads(raw)
        return str(body["sid"]), str(body["requestKey"]), str(body.get("sub") or "")

    # --- claims -----------------------------------------------------------------------

    async def claim(self, event: str, target: str, owner: str) -> bool:
        """First claim of (event, target) wins; later ones (a retry, a takeover) skip it."""
        return bool(
            await self._client.set(
                self._keys.push_done(event, target), owner, nx=True, ex=CLAIM_TTL_S
            )
        )

    async def settle(self, event: str, target: str, outcome: str) -> None:
        await self._client.set(self._keys.push_done(event, target), outcome, xx=True, keepttl=True)


#: HSET a subscription only if the endpoint is free, ours, or held by the replaceable owner
#: (ARGV: id, our fingerprint, replaceable fingerprint or "", the JSON): check and write in one
#: step, so two tokens racing for one endpoint cannot both win.
_SAVE_OWNED_LUA = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local ok, body = pcall(cjson.decode, cur)
  local owner = ''
  if ok and type(body) == 'table' and type(body.token) == 'string' then owner = body.token end
  if owner ~= ARGV[2] and owner ~= ARGV[3] then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
return 1
"""


def _digest(cap: str) -> str:
    return hashlib.sha256(cap.encode()).hexdigest()


def _vapid_json(v: VapidKeys) -> bytes:
    return orjson.dumps({"private": v.private_pem.decode(), "public": v.public})
