"""The audit trail: ``{ns}:audit``, one stream entry per action (who drove what, from where).

The gateway appends what a member asked (prompt, interrupt, new conversation, approve, deny,
answer, always-allow); the collector appends what it did with a command (ran, refused,
failed). Each append trims entries older than ``RELAYBUS_AUDIT_RETENTION_DAYS`` (exact ``MINID``).
Fields are short strings, each cut to :data:`MAX_FIELD` characters.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys

#: The fields an entry may hold (anything else is dropped) and their longest value.
FIELDS = (
    "action",
    "member",
    "tokenId",
    "device",
    "sessionId",
    "host",
    "ts",
    "commandId",
    "detail",
)
MAX_FIELD = 200
#: Most entries ``relaybus audit`` reads at once.
READ_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Trail:
    """Where actions go: the stream key and how long entries are kept."""

    client: aioredis.Redis
    keys: Keys
    retention_days: float

    async def append(self, action: str, **fields: str | None) -> None:
        """Append one action; ``ts`` (epoch ms) is now unless given."""
        now_ms = int(time.time() * 1000)
        entry = {"action": action, "ts": str(now_ms)}
        for name, value in fields.items():
            if name in FIELDS and value:
                entry[name] = value[:MAX_FIELD]
        oldest = now_ms - int(self.retention_days * 86_400_000)
        await self.client.xadd(
            self.keys.audit,
            entry,  # type: ignore[arg-type]  # redis-py's stub wants its own invariant mapping
            minid=f"{max(oldest, 0)}-0",
            approximate=False,  # exact: cheap (only what is trimmed) and holds the promise
        )


def _text(raw: bytes | str) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


async def read(
    client: aioredis.Redis,
    keys: Keys,
    *,
    since_ms: int = 0,
    member: str | None = None,
    limit: int = READ_MAX,
) -> list[dict[str, str]]:
    """Entries from ``since_ms`` on (oldest first), of ``member`` only when given."""
    rows = await client.xrange(keys.audit, min=f"{since_ms}-0", max="+", count=limit)
    out: list[dict[str, str]] = []
    for _id, raw in rows or []:
        entry: Mapping[bytes | str, bytes | str] = raw or {}
        row = {_text(k): _text(v) for k, v in entry.items()}
        if member is None or row.get("member") == member:
            out.append(row)
    return out
