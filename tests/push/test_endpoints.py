"""The push endpoint policy (issue 22.2): the URL check, the connect-time address check
against a real resolver and a real local server, and the rate limiter's bounded table."""

from __future__ import annotations

import pytest

from relaybus.gateway.push.endpoints import EndpointPolicy, PublicOnlyResolver, RefusedAddress
from relaybus.gateway.push.limits import RateLimiter
from relaybus.gateway.push.senders import WebPushSender
from relaybus.gateway.push.store import Subscription, new_vapid
from tests.support.push_service import PushServiceStandIn


@pytest.mark.parametrize(
    ("allow", "endpoint", "ok"),
    [
        ("", "https://fcm.googleapis.com/fcm/send/a", True),
        ("", "https://fcm.googleapis.com:443/fcm/send/a", True),
        ("", "https://jmt17.google.com/fcm/send/a", True),
        ("", "https://FCM.googleapis.com./fcm/send/a", True),
        ("", "https://web.push.apple.com/a", True),
        ("", "https://push.apple.com/a", False),
        ("", "https://evilpush.apple.com.evil.example/a", False),
        ("", "http://fcm.googleapis.com/a", False),
        ("", "https://127.0.0.1/a", False),
        ("", "https://[::ffff:127.0.0.1]/a", False),
        ("", "https://2130706433/a", False),
        ("", "https://fcm.googleapis.com:99999/a", False),
        ("", "ftp://fcm.googleapis.com/a", False),
        ("127.0.0.1", "http://127.0.0.1:9000/push", True),
        ("127.0.0.1:9000", "http://127.0.0.1:9000/push", True),
        ("127.0.0.1:9000", "http://127.0.0.1:9001/push", False),
        ("127.0.0.1:443", "https://127.0.0.1/push", True),
        ("[::1]:9000", "http://[::1]:9000/push", True),
        ("push.internal", "http://push.internal/x", True),
    ],
)
def test_endpoint_policy(allow: str, endpoint: str, ok: bool) -> None:
    """Only browser push services over https on 443, or what the allow setting lists."""
    assert (EndpointPolicy.from_setting(allow).refusal(endpoint) is None) is ok


async def test_a_name_resolving_to_a_private_address_is_refused_at_connect() -> None:
    """DNS rebinding: a name that passed the URL check but resolves to loopback is refused
    when connecting (the resolver drops the address), unless the allow setting lists it."""
    with PushServiceStandIn() as target:
        device = target.device("rebound")
        port = int(target.origin.rsplit(":", 1)[1])

        class PassingUrls(EndpointPolicy):
            def refusal(self, endpoint: object) -> str | None:
                return None  # as for a push service's name that DNS now points at 127.0.0.1

        sender = WebPushSender("mailto:ops@example.com", PassingUrls())
        sub = {**device.subscription(), "endpoint": f"http://localhost:{port}/push/rebound"}
        keys = sub["keys"]
        stored = Subscription(sub["endpoint"], keys["p256dh"], keys["auth"], "t", False)
        try:
            result = await sender.send(new_vapid(), stored, b"{}", ttl_s=60, topic="t")
        finally:
            await sender.aclose()
        assert (result.outcome, result.reason) == ("failed", "refused_address")
        assert target.requests == 0
    refused = PublicOnlyResolver(EndpointPolicy())
    allowed = PublicOnlyResolver(EndpointPolicy.from_setting("localhost"))
    try:
        try:
            await refused.resolve("localhost", 443)
        except RefusedAddress:
            pass
        else:
            raise AssertionError("localhost resolved through the public-only resolver")
        assert await allowed.resolve("localhost", 443)
    finally:
        await refused.close()
        await allowed.close()


def test_rate_limiter_refills_and_keeps_a_bounded_table() -> None:
    """A key gets its burst, then waits (Retry-After) until the bucket refills; the table never
    holds more than its bound, dropping the least recently used key."""
    now = [0.0]
    limiter = RateLimiter(6, max_keys=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(7)] == [0] * 6 + [10]
    now[0] = 10.0
    assert (limiter.take("a"), limiter.take("a")) == (0, 10)
    for key in ("b", "c", "d"):
        limiter.take(key)
    assert len(limiter) == 3
    assert limiter.take("a") == 0, "the least recently used key was dropped: a fresh bucket"
