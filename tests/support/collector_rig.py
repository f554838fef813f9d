"""An in-process collector engine on a real server, driven step by step by a test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from relaybus.collector.engine import Engine
from relaybus.collector.metrics import CollectorMetrics
from relaybus.collector.publisher import Publisher
from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from tests.support.collector_records import Entries


@dataclass
class Rig:
    settings: Settings
    client: aioredis.Redis
    engine: Engine
    metrics: CollectorMetrics
    keys: Keys

    @classmethod
    def build(cls, settings: Settings) -> Rig:
        client = aioredis.Redis.from_url(settings.redis_url.get_secret_value())
        metrics = CollectorMetrics(CollectorRegistry())
        engine = Engine(settings, Publisher(client, settings, metrics), metrics)
        return cls(settings, client, engine, metrics, Keys(settings.namespace))

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else value

    async def frames(self, key: str) -> list[dict[str, Any]]:
        return [orjson.loads(f[b"f"]) for _id, f in cast(Entries, await self.client.xrange(key))]

    async def events(self, sid: str) -> list[dict[str, Any]]:
        return await self.frames(self.keys.session_events(sid))

    async def close(self) -> None:
        await self.client.aclose()


RigFactory = Callable[..., Rig]
"""What the ``make_rig`` fixture yields: build a :class:`Rig` with settings overrides."""
