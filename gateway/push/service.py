"""The push machinery of one gateway: store, senders, the notifier and the holds.

Their loops are jobs the gateway runtime supervises (:meth:`PushService.jobs`: crashes
logged, counted in ``task_crashes_total`` and restarted; ``/readyz`` asks :meth:`healthy`);
``async with`` owns the senders and the notifier's blocking Redis client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from relaybus.gateway.auth import Access, TokenTable
from relaybus.gateway.push.endpoints import EndpointPolicy
from relaybus.gateway.push.holds import PushHolds
from relaybus.gateway.push.metrics import PushMetrics
from relaybus.gateway.push.notify import PushNotifier
from relaybus.gateway.push.senders import AppriseSender, WebPushSender, split_urls
from relaybus.gateway.push.store import PushStore, fingerprint
from relaybus.gateway.requests.approvals import GatewayApprovals
from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys


class PushService:
    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        *,
        client: aioredis.Redis,
        keys: Keys,
        gateway_id: str,
        tokens: TokenTable,
        approvals: GatewayApprovals,
        block_ms: int,
    ) -> None:
        self.settings = settings
        self.tokens = tokens
        self.approvals = approvals
        self.metrics = PushMetrics(registry)
        self.store = PushStore(client, keys)
        self.web = WebPushSender(
            settings.push_subject, EndpointPolicy.from_setting(settings.push_endpoint_allow)
        )
        #: token fingerprint -> full access, for every configured token.
        self.fingerprints = {
            fingerprint(secret): access is Access.FULL for secret, access in tokens.tokens
        }
        self.apprise = AppriseSender(split_urls(settings.notify_urls.get_secret_value()))
        self._reader = connect(settings, block_ms=block_ms)
        self.holds = PushHolds(
            client=client,
            keys=keys,
            store=self.store,
            tokens=self.fingerprints,
            watchers_ttl_s=settings.watchers_ttl_s,
        )
        self.notifier = PushNotifier(
            client=client,
            reader=self._reader,
            keys=keys,
            settings=settings,
            store=self.store,
            holds=self.holds,
            web=self.web,
            apprise=self.apprise,
            metrics=self.metrics,
            gateway_id=gateway_id,
            tokens=self.fingerprints,
            block_ms=block_ms,
        )

    def jobs(self) -> dict[str, Callable[[], Awaitable[None]]]:
        """The loops for the runtime to supervise, by task name (none while push is off)."""
        if not self.settings.push_enabled:
            return {}
        return {"push-notify": self.notifier.run, "push-holds": self.holds.run}

    def healthy(self) -> bool:
        """Push is off, or both of its loops run (none crashed or waits to be restarted)."""
        return not self.settings.push_enabled or (self.notifier.healthy() and self.holds.healthy())

    async def __aenter__(self) -> PushService:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.web.aclose()
        await self._reader.aclose()
