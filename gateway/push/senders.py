"""The two channels: Web Push (RFC 8030/8291/8292) and Apprise.

Both retry failures that may pass (network errors, 429, 5xx) with backoff, a bounded number
of times; a push service's 404/410 means the subscription is gone: the caller deletes it.

Web Push is encrypted and signed with pywebpush and py_vapid, and sent here with aiohttp
(issue 22): the endpoint is checked again (:mod:`.endpoints`), redirects are not followed, at
most :data:`REPLY_MAX_BYTES` of a reply are read before the connection is closed, and one
send, retries included, ends within :data:`SEND_TIMEOUT_S`. A failure is counted by class
(:data:`Reason`), never by the raw status of whatever answered.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import random
import time
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import aiohttp
import apprise
from pywebpush import WebPusher

from relaybus.gateway.push.endpoints import EndpointPolicy, PublicOnlyResolver, RefusedAddress
from relaybus.gateway.push.store import Subscription, VapidKeys

log = logging.getLogger(__name__)

#: Attempts per notification and target, and the first backoff (doubled each time, jittered).
ATTEMPTS = 3
BACKOFF_S = 0.25
#: One attempt: connect, send, status line and headers.
ATTEMPT_TIMEOUT_S = 10.0
#: One notification to one device, every attempt and backoff included.
SEND_TIMEOUT_S = 20.0
#: What is read of a push service's reply body (it is only logged); the rest is never read.
REPLY_MAX_BYTES = 4096
#: A VAPID signature's lifetime (RFC 8292 allows at most 24 h).
VAPID_EXP_S = 12 * 3600

Outcome = Literal["sent", "gone", "failed"]
#: ``relaybus_gateway_push_failed_total{reason}`` of Web Push: a fixed set of classes.
Reason = Literal[
    "rejected",  # a 4xx (our request is wrong for that service) or a redirect (never followed)
    "too_large",  # 413: the payload is over the service's limit
    "rate_limited",  # 429 after every attempt
    "server_error",  # 5xx after every attempt
    "network",  # connection refused or reset, TLS, an unreadable reply
    "timeout",  # no answer within the attempt or send deadline
    "refused_endpoint",  # the URL is no longer allowed (RELAYBUS_PUSH_ENDPOINT_ALLOW changed)
    "refused_address",  # the name resolved only to private, loopback or link-local addresses
]


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    reason: str = ""


async def _backoff(attempt: int) -> None:
    await asyncio.sleep(BACKOFF_S * (2**attempt) * (0.5 + random.random()))


def keys_ok(p256dh: str, auth: str) -> bool:
    """A subscription's keys as RFC 8291 has them: a P-256 point and a 16-byte secret."""
    try:
        point, secret = b64url_decode(p256dh), b64url_decode(auth)
    except ValueError:
        return False
    return len(point) == 65 and point[0] == 4 and len(secret) == 16


def b64url_decode(text: str) -> bytes:
    """Strict base64url, padding optional (``binascii.Error`` is a ``ValueError``)."""
    return base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))


def status_reason(status: int) -> Reason:
    """The class of a push service's non-success status (3xx included: not followed)."""
    if status == 413:
        return "too_large"
    if status == 429:
        return "rate_limited"
    return "server_error" if status >= 500 else "rejected"


class WebPushSender:
    """Signs with the fleet's VAPID key and encrypts ``aes128gcm`` for each subscription."""

    def __init__(self, subject: str, policy: EndpointPolicy | None = None) -> None:
        self._subject = subject
        self.policy = policy or EndpointPolicy()
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=PublicOnlyResolver(self.policy)),
                timeout=aiohttp.ClientTimeout(total=ATTEMPT_TIMEOUT_S),
                trust_env=False,  # no proxy from the environment: the address check is ours
                auto_decompress=False,
            )
        return self._session

    async def send(
        self, vapid: VapidKeys, sub: Subscription, data: bytes, *, ttl_s: int, topic: str
    ) -> Result:
        if self.policy.refusal(sub.endpoint) is not None:
            return Result("failed", "refused_endpoint")
        try:
            if not keys_ok(sub.p256dh, sub.auth):
                raise ValueError("not a P-256 point and a 16-byte secret")
            body = WebPusher(sub.info()).encode(data, "aes128gcm")["body"]
        except ValueError:  # keys stored before PUT checked them, or not a point on the curve
            return Result("failed", "rejected")
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                return await self._attempts(vapid, sub, body, ttl_s=ttl_s, topic=topic)
        except TimeoutError:
            return Result("failed", "timeout")

    async def _attempts(
        self, vapid: VapidKeys, sub: Subscription, body: bytes, *, ttl_s: int, topic: str
    ) -> Result:
        reason: Reason = "network"
        for attempt in range(ATTEMPTS):
            if attempt:
                await _backoff(attempt - 1)
            try:
                status = await self._post(vapid, sub, body, ttl_s=ttl_s, topic=topic)
            except TimeoutError:
                reason = "timeout"
                continue
            except aiohttp.ClientConnectorError as exc:
                if isinstance(exc.os_error, RefusedAddress):
                    return Result("failed", "refused_address")
                reason = "network"
                log.debug("push to %s… failed: %r", sub.endpoint[:40], exc)
                continue
            except (aiohttp.ClientError, OSError) as exc:
                reason = "network"
                log.debug("push to %s… failed: %r", sub.endpoint[:40], exc)
                continue
            if 200 <= status < 300:
                return Result("sent")
            if status in (404, 410):
                return Result("gone", str(status))
            reason = status_reason(status)
            if reason in ("rejected", "too_large"):
                return Result("failed", reason)  # our request is wrong: retrying will not help
        return Result("failed", reason)

    async def _post(
        self, vapid: VapidKeys, sub: Subscription, body: bytes, *, ttl_s: int, topic: str
    ) -> int:
        """POST the encrypted ``body`` once; the status (:data:`REPLY_MAX_BYTES` read at most)."""
        url = urlsplit(sub.endpoint)
        claims = {
            "sub": self._subject,
            "aud": f"{url.scheme}://{url.netloc}",
            "exp": int(time.time()) + VAPID_EXP_S,
        }
        headers = {
            **vapid.signer().sign(claims),
            "Content-Encoding": "aes128gcm",
            "TTL": str(ttl_s),
            "Topic": topic,
            "Urgency": "high",
        }
        async with self._client().post(
            sub.endpoint, data=body, headers=headers, allow_redirects=False
        ) as resp:
            head = await resp.content.read(REPLY_MAX_BYTES)
            if not resp.content.at_eof():
                resp.close()  # the rest is never read: the connection is dropped instead
            if resp.status >= 300:
                log.debug("push service answered %d: %r", resp.status, head[:200])
            return resp.status

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
