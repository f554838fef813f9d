"""The two channels: Web Push (pywebpush, RFC 8030/8291/8292) and Apprise.

Both retry failures that may pass (network errors, 429, 5xx) with backoff, a bounded number
of times; a push service's 404/410 means the subscription is gone: the caller deletes it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from dataclasses import dataclass
from typing import Literal

import aiohttp
import apprise
from pywebpush import WebPushException, webpush_async

from relaybus.gateway.push.store import Subscription, VapidKeys

log = logging.getLogger(__name__)

#: Attempts per notification and target, and the first backoff (doubled each time, jittered).
ATTEMPTS = 3
BACKOFF_S = 0.25
SEND_TIMEOUT_S = 10.0

Outcome = Literal["sent", "gone", "failed"]


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    reason: str = ""


async def _backoff(attempt: int) -> None:
    await asyncio.sleep(BACKOFF_S * (2**attempt) * (0.5 + random.random()))


class WebPushSender:
    """Signs with the fleet's VAPID key and encrypts ``aes128gcm`` for each subscription."""

    def __init__(self, subject: str) -> None:
        self._subject = subject
        self._session: aiohttp.ClientSession | None = None

    async def send(
        self, vapid: VapidKeys, sub: Subscription, data: bytes, *, ttl_s: int, topic: str
    ) -> Result:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=SEND_TIMEOUT_S)
            )
        reason = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                await _backoff(attempt - 1)
            try:
                await webpush_async(
                    subscription_info=dict(sub.info()),
                    data=data.decode(),
                    vapid_private_key=vapid.signer(),
                    vapid_claims={"sub": self._subject},  # a fresh dict: pywebpush adds aud/exp
                    ttl=ttl_s,
                    headers={"Topic": topic, "Urgency": "high"},
                    aiohttp_session=self._session,
                    timeout=SEND_TIMEOUT_S,
                )
                return Result("sent")
            except WebPushException as exc:
                status = exc.response.status if exc.response is not None else None
                if status in (404, 410):
                    return Result("gone", str(status))
                reason = f"http_{status}" if status else "error"
                if status is not None and 400 <= status < 500 and status != 429:
                    return Result("failed", reason)  # our request is wrong: retrying will not help
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                reason = "network"
                log.debug("push to %s… failed: %r", sub.endpoint[:40], exc)
        return Result("failed", reason)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def apprise_target(url: str) -> str:
    """The id a notification URL's claims are stored under (never the URL: it holds the
    service's credentials)."""
    return "apprise:" + hashlib.sha256(url.encode()).hexdigest()[:12]


class AppriseSender:
    """One Apprise target per URL, so a retry resends only to the service that failed."""

    def __init__(self, urls: list[str]) -> None:
        self.targets: dict[str, apprise.Apprise] = {}
        for url in urls:
            a = apprise.Apprise()
            if a.add(url):
                for plugin in a:
                    # Apprise spaces requests to a service (ntfy: 5.5 s) to be polite to shared
                    # servers; relaybus sends a few per minute and a person waits on each.
                    plugin.request_rate_per_sec = 0
                self.targets[apprise_target(url)] = a
            else:  # never echo the URL: it holds the service's credentials
                log.error(
                    "RELAYBUS_NOTIFY_URLS: entry %d is not a URL Apprise knows",
                    len(self.targets) + 1,
                )

    async def send(self, target: str, title: str, body: str) -> Result:
        a = self.targets[target]
        for attempt in range(ATTEMPTS):
            if attempt:
                await _backoff(attempt - 1)
            if await a.async_notify(body=body, title=title):
                return Result("sent")
        return Result("failed", "notify")


def split_urls(raw: str) -> list[str]:
    return [u for u in raw.replace(",", " ").split() if u]
