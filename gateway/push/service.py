"""The push machinery of one gateway: store, senders, worker tasks; ``async with`` owns them."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from relaybus.gateway.approvals import GatewayApprovals
from relaybus.gateway.auth import Access, TokenTable
from relaybus.gateway.push.endpoints import EndpointPolicy
from relaybus.gateway.push.metrics import PushMetrics
from relaybus.gateway.push.senders import AppriseSender, WebPushSender, split_urls
from relaybus.gateway.push.store import PushStore, fingerprint
from relaybus.gateway.push.worker import PushWorker
from relaybus.shared.aio import cancel_and_wait
from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys

log = logging.getLogger(__name__)


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
        self.worker = PushWorker(
            client=client,
            reader=self._reader,
            keys=keys,
            settings=settings,
            store=self.store,
            web=self.web,
            apprise=self.apprise,
            metrics=self.metrics,
            gateway_id=gateway_id,
            tokens=self.fingerprints,
            block_ms=block_ms,
        )
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> PushService:
        if self.settings.push_enabled:
            self._tasks = [
                asyncio.create_task(self.worker.run(), name="push-worker"),
                asyncio.create_task(self.worker.run_holds(), name="push-holds"),
            ]
            for task in self._tasks:
                task.add_done_callback(_crashed)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for task in self._tasks:
            await cancel_and_wait(task)
        await self.web.aclose()
        await self._reader.aclose()


def _crashed(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s crashed", task.get_name(), exc_info=task.exception())
