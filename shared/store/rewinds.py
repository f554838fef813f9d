"""The log's rewinds recorded in Redis (``{ns}:rewinds``): failovers that lost entries.

Each rewind is a *generation* with the first seq it changed. Gateways record one when the
entries they dispatched changed after a reconnect; a collector records one when its append
finds the committed offset behind the appends it was acknowledged for (nobody else may have
seen those entries). Several reporters of one failover make one generation: the record
keeps the lowest first seq. How clients hold generations: :mod:`relaybus.gateway.delivery.rewinds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys

# KEYS: 1 rewinds hash. ARGV: 1 generation the caller's view is consistent with,
# 2 first seq the caller found changed ("" = none). Records a new generation only when the
# caller's seq is below every rewind recorded since its generation (several gateways and
# collectors see the same failover: the first records it, the others adopt it).
# Returns {current generation, lowest seq recorded after ARGV[1] (-1 = none)}.
RECORD_LUA = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'gen') or '0')
local seen = tonumber(ARGV[1])
if cur < seen then
  redis.call('HSET', KEYS[1], 'gen', seen)
  cur = seen
end
local lowest = -1
for g = seen + 1, cur do
  local f = tonumber(redis.call('HGET', KEYS[1], tostring(g)) or '1')
  if lowest < 0 or f < lowest then lowest = f end
end
if ARGV[2] ~= '' then
  local from = tonumber(ARGV[2])
  if lowest < 0 or from < lowest then
    cur = redis.call('HINCRBY', KEYS[1], 'gen', 1)
    redis.call('HSET', KEYS[1], tostring(cur), from)
  end
end
return {cur, lowest}
"""


@dataclass(frozen=True, slots=True)
class Since:
    """What was rewound after a generation: the current generation and the lowest first
    seq of the rewinds recorded after it (``None``: none)."""

    gen: int
    lowest: int | None


class Rewinds:
    """Read and record the rewinds of one namespace's log."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._record = client.register_script(RECORD_LUA)

    async def since(self, gen: int) -> Since:
        raw: Any = await self.client.hgetall(self.keys.rewinds)
        table = {int(k): int(v) for k, v in raw.items() if k.isdigit()}
        cur = int(raw.get(b"gen", 0))
        later = [seq for g, seq in table.items() if gen < g <= cur]
        return Since(cur, min(later) if later else None)

    async def record(self, seen: int, from_seq: int | None) -> Since:
        """Report a rewind found from ``from_seq`` (or none) by a view at generation
        ``seen``; the generation the view is at afterwards and what was recorded since."""
        arg = "" if from_seq is None else str(from_seq)
        reply: Any = await self._record(keys=[self.keys.rewinds], args=[seen, arg])
        cur, lowest = int(reply[0]), int(reply[1])
        return Since(cur, lowest if lowest >= 0 else None)
