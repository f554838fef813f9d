"""The gateway's resources, composed and torn down in order (the FastAPI lifespan uses it).

Its background tasks (the log reader, the reply reader, the watcher counts, push's notifier
and holds) run under one supervisor policy (:func:`relaybus.shared.aio.supervise`): a crash
is logged, counted and restarted with backoff, and ``/readyz`` answers 503 while the log
reader, the reply reader or a push loop is down.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from types import TracebackType

from prometheus_client import CollectorRegistry

from relaybus.gateway.auth import TokenTable
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.delivery.fanout import Hub, LogReader
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.gateway.push.service import PushService
from relaybus.gateway.requests.approvals import GatewayApprovals
from relaybus.gateway.requests.command_link import CommandLink
from relaybus.gateway.requests.commands import GatewayCommands
from relaybus.gateway.requests.late_failures import LateFailures
from relaybus.gateway.requests.router import Router
from relaybus.gateway.scope import Members
from relaybus.gateway.stream_tail import StreamTail
from relaybus.gateway.web.endpoint import Endpoint, EndpointConfig
from relaybus.gateway.web.security import OriginPolicy
from relaybus.shared.aio import cancel_and_wait, supervise
from relaybus.shared.settings import Settings
from relaybus.shared.store.audit import Trail
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.errors import CloseCode

log = logging.getLogger(__name__)

READER_BLOCK_MS = 1000


class Runtime:
    """Redis clients, the hub, the one log reader task, the endpoint; ``async with`` owns them."""

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        *,
        reader_block_ms: int = READER_BLOCK_MS,
        hello_grace_s: float = 1.0,
        auth_timeout_s: float = 10.0,
        close_timeout_s: float = 10.0,
    ) -> None:
        self.settings = settings
        self.tokens = TokenTable.from_settings(settings)
        self.metrics = GatewayMetrics(registry)
        self.hub = Hub(self.metrics)
        self.ctx = GatewayContext(
            settings=settings,
            keys=Keys(settings.namespace),
            gateway_id=settings.gateway_id or f"gw-{uuid.uuid4().hex[:10]}",
            metrics=self.metrics,
            client=connect(settings),
            reader=connect(settings, block_ms=reader_block_ms),
            block_ms=reader_block_ms,
        )
        self.gateway_id = self.ctx.gateway_id
        self.reader = LogReader(self.ctx, self.hub)
        self.late = LateFailures(self.metrics, position=lambda: self.hub.position)
        self.link = CommandLink(self.ctx, on_late=self.late.failed)
        self.gateway_commands = GatewayCommands(
            self.ctx, link=self.link, late=self.late, position=lambda: self.hub.position
        )
        self.approvals = GatewayApprovals(self.ctx, hub=self.hub, link=self.link)
        self.members = Members(
            tokens=self.tokens,
            client=self.ctx.client,
            keys=self.ctx.keys,
            hub=self.hub,
            trail=Trail(self.ctx.client, self.ctx.keys, settings.audit_retention_days),
        )
        self.router = Router(
            self.ctx,
            hub=self.hub,
            commands=self.gateway_commands,
            approvals=self.approvals,
            members=self.members,
        )
        self.endpoint = Endpoint(
            self.ctx,
            hub=self.hub,
            router=self.router,
            tokens=self.tokens,
            config=EndpointConfig(
                max_frame_bytes=settings.max_frame_bytes,
                send_queue_max=settings.send_queue_max,
                rate_limit_per_s=settings.rate_limit_per_s,
                hello_grace_s=hello_grace_s,
                auth_timeout_s=auth_timeout_s,
                close_timeout_s=close_timeout_s,
                send_buffer_bytes=settings.send_buffer_bytes,
                write_timeout_s=settings.write_timeout_s,
                origins=OriginPolicy.parse(settings.allowed_origins),
            ),
            members=self.members,
        )
        self.push = PushService(
            self.ctx, registry, tokens=self.tokens, approvals=self.approvals, members=self.members
        )
        self.members.on_revoked = self.push.store.drop_token
        self.revocations = StreamTail(
            self.ctx.reader,
            self.ctx.keys.revocations,
            what="revocation stream",
            block_ms=self.ctx.block_ms,
        )
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Runtime:
        jobs: dict[str, Callable[[], Awaitable[None]]] = {
            "log-reader": self.reader.run,
            "command-replies": self.link.replies.run,
            "watcher-counts": self.approvals.run,
            "revocations": partial(self.revocations.follow, self.members.revocation),
            **self.push.jobs(),
        }
        crashes = self.metrics.task_crashes
        self._tasks = [
            asyncio.create_task(
                supervise(name, job, self._stop, lambda task: crashes.labels(task).inc()),
                name=name,
            )
            for name, job in jobs.items()
        ]
        log.info("gateway %s started (namespace %s)", self.gateway_id, self.settings.namespace)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close_connections(CloseCode.SERVICE_RESTART)
        self._stop.set()
        self.reader.stop()
        for task in self._tasks:
            await cancel_and_wait(task)
        await self.push.aclose()
        await self.gateway_commands.aclose()
        self.link.replies.close()
        await self.approvals.aclose()
        await self.ctx.client.aclose()
        await self.ctx.reader.aclose()
        log.info("gateway %s stopped", self.gateway_id)

    def close_connections(self, code: int) -> None:
        self.hub.close_all(code, "gateway shutting down")

    async def ready(self) -> bool:
        """Redis answers, the reply reader and push's loops run, and the log reader runs and
        looped recently."""
        if not self._tasks or any(task.done() for task in self._tasks):
            return False
        if not self.link.replies.healthy() or not self.push.healthy():
            return False
        if not self.reader.healthy(slack_s=self.settings.redis_socket_timeout_s + 1):
            return False
        try:
            started = time.monotonic()
            await asyncio.wait_for(self.ctx.client.ping(), self.settings.redis_socket_timeout_s)
            log.debug("readyz ping %.1f ms", (time.monotonic() - started) * 1000)
        except Exception:  # any failure to answer means not ready
            return False
        return True
