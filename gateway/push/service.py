"""The push machinery of one gateway: store, senders, the notifier and the holds.

Their loops are jobs the gateway runtime supervises (:meth:`PushService.jobs`: crashes
logged, counted in ``task_crashes_total`` and restarted; ``/readyz`` asks :meth:`healthy`);
:meth:`aclose` closes the senders and the notifier's blocking Redis client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry

from relaybus.gateway.auth import Access, TokenTable
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.push.endpoints import EndpointPolicy
from relaybus.gateway.push.holds import PushHolds
from relaybus.gateway.push.metrics import PushMetrics
from relaybus.gateway.push.notify import PushNotifier
from relaybus.gateway.push.senders import AppriseSender, WebPushSender, split_urls
from relaybus.gateway.push.store import PushStore, fingerprint
from relaybus.gateway.requests.approvals import GatewayApprovals
from relaybus.gateway.scope import Members
from relaybus.shared.store.connection import connect


class PushService:
    def __init__(
        self,
        ctx: GatewayContext,
        registry: CollectorRegistry,
        *,
        tokens: TokenTable,
        approvals: GatewayApprovals,
        members: Members,
    ) -> None:
        settings = self.settings = ctx.settings
        self.ctx = ctx
        self.tokens = tokens
        self.approvals = approvals
        #: who a token is (bootstrap or member) and the audit trail of decisions.
        self.members = members
        self.metrics = PushMetrics(registry)
        self.store = PushStore(ctx.client, ctx.keys)
        self.web = WebPushSender(
            settings.push_subject, EndpointPolicy.from_setting(settings.push_endpoint_allow)
        )
        #: token fingerprint -> full access, for every ``RELAYBUS_TOKENS`` token.
        self.fingerprints = {
            fingerprint(secret): access is Access.FULL for secret, access in tokens.tokens
        }
        self.apprise = AppriseSender(split_urls(settings.notify_urls.get_secret_value()))
        self._reader = connect(settings, block_ms=ctx.block_ms)
        self.holds = PushHolds(ctx, store=self.store, tokens=self.fingerprints)
        self.notifier = PushNotifier(
            ctx,
            reader=self._reader,
            store=self.store,
            holds=self.holds,
            web=self.web,
            apprise=self.apprise,
            metrics=self.metrics,
            tokens=self.fingerprints,
        )

    def jobs(self) -> dict[str, Callable[[], Awaitable[None]]]:
        """The loops for the runtime to supervise, by task name (none while push is off)."""
        if not self.settings.push_enabled:
            return {}
        return {"push-notify": self.notifier.run, "push-holds": self.holds.run}

    def healthy(self) -> bool:
        """Push is off, or both of its loops run (none crashed or waits to be restarted)."""
        return not self.settings.push_enabled or (self.notifier.healthy() and self.holds.healthy())

    async def aclose(self) -> None:
        """Close the senders and the notifier's blocking client (after :meth:`jobs` stopped)."""
        await self.web.aclose()
        await self._reader.aclose()
