"""What every part of one gateway process shares, built once by the runtime."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from relaybus.gateway.metrics import GatewayMetrics
from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys


@dataclass(frozen=True, slots=True)
class GatewayContext:
    """The settings, Redis clients, keys, metrics and identity of one gateway process.

    The runtime owns (and closes) the clients; everything else only uses them."""

    settings: Settings
    keys: Keys
    gateway_id: str
    metrics: GatewayMetrics
    #: Commands and reads that answer at once.
    client: aioredis.Redis
    #: Blocking reads (``XREAD BLOCK``) of up to :attr:`block_ms`.
    reader: aioredis.Redis
    block_ms: int
