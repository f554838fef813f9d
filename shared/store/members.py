"""Members' tokens in Redis: ``{ns}:tokens`` (hashes only), last use per device, revocations
and the machines each member's collectors registered (``{ns}:owners``).

A token is 32 url-safe random characters shown once; its id is the first 12 hex digits of its
sha256, so a gateway finds the entry with one ``HGET`` and then compares the full hash in
constant time. Nothing here stores or logs the token itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from relaybus.shared.store.keys import REVOCATIONS_MAXLEN, Keys
from relaybus.shared.wire.json_object import json_object
from relaybus.shared.wire.scope import NAME_RE, Member, Scope, ScopeError

#: Hex digits of the sha256 that name a token (its id: shown by ``token list``, in the audit).
ID_HEX = 12
#: A Redis token is this prefix plus random characters, so ``RELAYBUS_TOKENS`` entries and
#: store tokens never collide and a leaked one is recognisable in a scanner.
TOKEN_PREFIX = "rbt_"
#: Longest token looked up (anything longer is refused without touching Redis).
MAX_TOKEN_CHARS = 256


class MemberError(ValueError):
    """A request the store refuses: a bad name, an unknown member or token."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_id(token: str) -> str:
    return token_hash(token)[:ID_HEX]


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One stored token, as ``token list`` shows it."""

    id: str
    name: str
    scope: Scope
    created_ms: int
    last_used_ms: int | None
    devices: tuple[str, ...]


def _now_ms() -> int:
    return int(time.time() * 1000)


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise MemberError(f"member name {name[:64]!r}: use 1-64 of A-Z a-z 0-9 _ . @ -")
    return name


async def add_token(client: aioredis.Redis, keys: Keys, name: str, scope: Scope) -> tuple[str, str]:
    """Store a new token for ``name``; returns ``(id, token)`` (the only time it is known)."""
    check_name(name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(24)
    entry = {
        "name": name,
        "hash": token_hash(token),
        "scope": scope.to_json(),
        "created": _now_ms(),
    }
    tid = token_id(token)
    await client.hset(keys.tokens, tid, json.dumps(entry, separators=(",", ":")))
    return tid, token


def _text(raw: bytes | str) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


async def resolve(client: aioredis.Redis, keys: Keys, token: str) -> Member | None:
    """The member a store token belongs to, or ``None`` (unknown, revoked, malformed)."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return None
    digest = token_hash(token)
    raw = await client.hget(keys.tokens, digest[:ID_HEX])
    data = json_object(raw) if isinstance(raw, bytes) else None
    if data is None:
        return None
    stored, name, scope = data.get("hash"), data.get("name"), data.get("scope")
    if not (isinstance(stored, str) and isinstance(name, str) and isinstance(scope, dict)):
        return None
    if not hmac.compare_digest(stored.encode(), digest.encode()):
        return None
    try:
        return Member(name, digest[:ID_HEX], Scope.from_json(scope))
    except ScopeError:
        return None


async def scopes(client: aioredis.Redis, keys: Keys, ids: Iterable[str]) -> dict[str, Scope]:
    """The scope of each stored token of ``ids`` (one ``HMGET``); a revoked or malformed
    token is absent."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    found: dict[str, Scope] = {}
    rows: list[Any] = await client.hmget(keys.tokens, wanted)
    for tid, raw in zip(wanted, rows, strict=True):
        data = json_object(raw)
        scope = data.get("scope") if data is not None else None
        if isinstance(scope, dict):
            with contextlib.suppress(ScopeError):
                found[tid] = Scope.from_json(scope)
    return found


async def mark_seen(client: aioredis.Redis, keys: Keys, tid: str, device: str) -> None:
    """Remember that ``tid`` was used from ``device`` (a label of :mod:`shared.wire.device`)."""
    await client.hset(keys.token_seen(tid), device, _now_ms())


async def list_tokens(client: aioredis.Redis, keys: Keys) -> list[TokenEntry]:
    """Every stored token, oldest first."""
    out: list[TokenEntry] = []
    for raw_id, raw in (await client.hgetall(keys.tokens)).items():
        data = json_object(raw)
        if data is None:
            continue
        tid = _text(raw_id)
        seen = await client.hgetall(keys.token_seen(tid))
        stamps = [int(_text(v)) for v in seen.values() if _text(v).isdigit()]
        scope = data.get("scope")
        created = data.get("created")
        try:
            parsed = Scope.from_json(scope if isinstance(scope, dict) else {"hosts": []})
        except ScopeError:
            parsed = Scope(hosts=frozenset())
        out.append(
            TokenEntry(
                id=tid,
                name=str(data.get("name", "")),
                scope=parsed,
                created_ms=created if isinstance(created, int) else 0,
                last_used_ms=max(stamps) if stamps else None,
                devices=tuple(sorted(_text(k) for k in seen)),
            )
        )
    return sorted(out, key=lambda e: (e.created_ms, e.id))


async def revoke(client: aioredis.Redis, keys: Keys, name_or_id: str) -> list[str]:
    """Delete every token of member ``name_or_id`` (or the token with that id) and announce
    each on ``{ns}:revocations``; returns the ids revoked (empty: nothing matched)."""
    ids = [e.id for e in await list_tokens(client, keys) if name_or_id in (e.id, e.name)]
    for tid in ids:
        async with client.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.tokens, tid)
            pipe.delete(keys.token_seen(tid))
            pipe.xadd(keys.revocations, {"id": tid}, maxlen=REVOCATIONS_MAXLEN, approximate=True)
            await pipe.execute()
    return ids


async def owned_hosts(client: aioredis.Redis, keys: Keys, owner: str) -> list[str]:
    """The machines whose collectors were started for ``owner``."""
    rows = await client.hgetall(keys.owners)
    return sorted(_text(h) for h, o in rows.items() if _text(o) == owner)
