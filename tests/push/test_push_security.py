"""Issue 22 against real gateways: a hostile push endpoint (a huge reply, a redirect, a private
address), subscription takeover, and the rate limit of ``/push/*``."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from relaybus.gateway.push.senders import SEND_TIMEOUT_S
from relaybus.gateway.push.store import Subscription, fingerprint
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.push.test_webpush import subscribe
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import GatewayProc, running_gateway
from tests.support.push_service import ALLOW, Device, PushServiceStandIn
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

MIB = 2**20
FAILED = "relaybus_gateway_push_failed_total"


def _memory_kib(pid: int, field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (peak RSS) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def _scrape(base: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of counter ``name`` on a gateway's /metrics, by label set."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


async def test_a_huge_push_reply_is_cut_off_unread(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    admin: aioredis.Redis,
    push_service: PushServiceStandIn,
) -> None:
    """An endpoint answering with a 300 MB body costs the gateway process a few KB of it: the
    peak RSS grows by less than 64 MB, the connection is dropped within the send timeout."""
    push_service.reply_bytes = 300 * MIB
    with GatewayProc(
        redis_url=server.url, namespace=namespace, env={ALLOW: push_service.host}
    ) as gw:
        async with httpx.AsyncClient(base_url=gw.http) as http:
            push_service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
            r = await http.put(
                "/push/subscription",
                json={"subscription": push_service.device("attacker").subscription()},
                headers={"Authorization": "Bearer ro-token"},
            )
            assert r.status_code == 200, r.text
        peak_before = _memory_kib(gw.pid, "VmHWM")
        pub = Publisher(admin, keys)
        await pub.start_session("sess-huge", title="huge reply")
        started = time.monotonic()
        await pub.turn("sess-huge", "waiting")
        await wait_for(lambda: push_service.replies_done or None, what="the reply ended")
        took_s = time.monotonic() - started

        def sent() -> float | None:
            return _scrape(gw.http, "relaybus_gateway_push_sent_total").get(
                (("channel", "webpush"),)
            )

        assert await wait_for(sent, what="the push counted as sent") == 1
        grew_mib = (_memory_kib(gw.pid, "VmHWM") - peak_before) / 1024
        written_mib = push_service.reply_written / MIB
        assert written_mib < 32, f"the gateway took {written_mib:.0f} MiB of the reply"
        assert grew_mib < 64, f"peak RSS grew by {grew_mib:.0f} MiB"
        assert took_s < SEND_TIMEOUT_S, f"the send took {took_s:.1f} s"


async def test_endpoints_outside_the_push_services_are_refused(
    server: RedisServer, namespace: str, keys: Keys, admin: aioredis.Redis
) -> None:
    """Without the allow setting a PUT may name only a browser push service over https: the
    Redis port, the gateway's own /metrics, other hosts and ports get 400 and store nothing."""
    settings = make_settings(server.url, namespace)
    async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
        refused = [
            f"http://127.0.0.1:{server.port}/",
            f"{gw.http}/metrics",
            f"https://127.0.0.1:{gw.port}/metrics",
            "https://evil.example/push/1",
            "https://fcm.googleapis.com.evil.example/x",
            "https://fcm.googleapis.com:8443/x",
            "http://fcm.googleapis.com/x",
            "https://user@fcm.googleapis.com/x",
            "https://[::1]/x",
        ]
        for endpoint in refused:
            sub = Device(endpoint).subscription()
            r = await http.put(
                "/push/subscription",
                json={"subscription": sub},
                headers={"Authorization": "Bearer full-token"},
            )
            assert r.status_code == 400, (endpoint, r.text)
            assert r.json()["error"] == "endpoint_refused"
        assert await admin.hlen(f"{keys.prefix}push:subs") == 0
        for endpoint in (
            "https://fcm.googleapis.com/fcm/send/abc",
            "https://updates.push.services.mozilla.com/wpush/v2/abc",
            "https://web.push.apple.com/abc",
            "https://wns2-by3p.notify.windows.com/w/?token=abc",
        ):
            sub = Device(endpoint).subscription()
            await subscribe(gw, sub)
        assert await admin.hlen(f"{keys.prefix}push:subs") == 4


async def test_a_redirect_is_not_followed_and_failures_are_classes(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    admin: aioredis.Redis,
    push_service: PushServiceStandIn,
) -> None:
    """An allowed endpoint that redirects (307) to an address refused directly is not followed;
    the failure is counted as ``rejected``, never as the target's raw status."""
    with PushServiceStandIn() as inner:
        inner_device = inner.device("internal")
        push_service.redirect_to = inner_device.endpoint
        allow = push_service.origin.removeprefix("http://")  # this host:port only
        settings = make_settings(server.url, namespace, push_endpoint_allow=allow)
        async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
            await subscribe(gw, push_service.device("outer").subscription(), token="ro-token")
            pub = Publisher(admin, keys)
            await pub.start_session("sess-redirect", title="redirect")
            await pub.turn("sess-redirect", "waiting")

            def failures() -> dict[str, float] | None:
                found = {
                    s.labels["reason"]: s.value
                    for family in gw.registry.collect()
                    for s in family.samples
                    if s.name == FAILED
                }
                return found or None

            reasons = await wait_for(failures, what="the push counted as failed")
            assert inner.requests == 0, "the redirect was followed"
            assert (reasons, push_service.requests) == ({"rejected": 1.0}, 1)
            r = await http.put(
                "/push/subscription",
                json={"subscription": inner_device.subscription()},
                headers={"Authorization": "Bearer ro-token"},
            )
            assert r.status_code == 400, "the inner port is not allowed directly"


async def test_a_stored_endpoint_no_longer_allowed_is_refused_at_send(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    admin: aioredis.Redis,
    push_service: PushServiceStandIn,
) -> None:
    """A loopback subscription stored before the allow-list (or under a wider setting) gets
    nothing: the send is refused (``refused_endpoint``) and the endpoint sees no request."""
    device = push_service.device("stored").subscription()
    row = Subscription(
        device["endpoint"],
        device["keys"]["p256dh"],
        device["keys"]["auth"],
        fingerprint(b"ro-token"),
        False,
    )
    await admin.hset(f"{keys.prefix}push:subs", row.id, row.dumps())
    settings = make_settings(server.url, namespace)
    async with running_gateway(settings) as gw:
        pub = Publisher(admin, keys)
        await pub.start_session("sess-stored", title="stored")
        await pub.turn("sess-stored", "waiting")

        def settled() -> float | None:
            return (
                gw.metric(FAILED, {"channel": "webpush", "reason": "refused_endpoint"})
                + gw.metric("relaybus_gateway_push_sent_total", {"channel": "webpush"})
            ) or None

        await wait_for(settled, what="the push settled")
        assert push_service.requests == 0, "sent to an endpoint the policy refuses"
        assert gw.metric(FAILED, {"channel": "webpush", "reason": "refused_endpoint"}) == 1


async def test_a_subscription_cannot_be_taken_over_by_another_token(
    server: RedisServer, namespace: str, keys: Keys, admin: aioredis.Redis
) -> None:
    """A read-only PUT with a full-token device's endpoint gets 409 and changes nothing: the
    owner still reads its subscription with approvals on, and the stored keys are its own."""
    settings = make_settings(server.url, namespace)
    endpoint = "https://fcm.googleapis.com/fcm/send/owner-device"
    mine = Device(endpoint).subscription()
    async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
        body = await subscribe(gw, mine)
        assert body["approvals"] is True
        stored = await admin.hget(f"{keys.prefix}push:subs", str(body["id"]))
        r = await http.put(
            "/push/subscription",
            json={"subscription": Device(endpoint).subscription()},
            headers={"Authorization": "Bearer ro-token"},
        )
        assert r.status_code == 409, r.text
        assert r.json() == {
            "error": "taken",
            "message": "this push endpoint is subscribed with another token",
        }
        assert await admin.hget(f"{keys.prefix}push:subs", str(body["id"])) == stored
        got = await http.post(
            "/push/subscription/get", json={"endpoint": endpoint}, headers=_bearer("full-token")
        )
        assert got.status_code == 200 and got.json()["approvals"] is True
        again = await subscribe(gw, mine, prefs={"events": ["approvals"]})
        assert again["prefs"] == {"events": ["approvals"], "hosts": [], "muted": []}


async def test_push_routes_are_rate_limited(server: RedisServer, namespace: str) -> None:
    """Past RELAYBUS_PUSH_RATE_LIMIT_PER_MIN, a token's subscription requests and an address's
    /push/decide guesses get 429 with Retry-After; another token is not held up."""
    settings = make_settings(server.url, namespace, push_rate_limit_per_min=5)
    sub = Device("https://fcm.googleapis.com/fcm/send/limited").subscription()
    async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
        codes = [
            (
                await http.put(
                    "/push/subscription", json={"subscription": sub}, headers=_bearer("full-token")
                )
            ).status_code
            for _ in range(5)
        ]
        assert codes == [200] * 5
        over = await http.post(
            "/push/subscription/get",
            json={"endpoint": sub["endpoint"]},
            headers=_bearer("full-token"),
        )
        assert over.status_code == 429 and 1 <= int(over.headers["Retry-After"]) <= 60
        other = await http.post(
            "/push/subscription/get",
            json={"endpoint": sub["endpoint"]},
            headers=_bearer("ro-token"),
        )
        assert other.status_code == 404, "another token has its own allowance"
        guesses = [
            (
                await http.post("/push/decide", json={"cap": f"guess-{i}", "decision": "allow"})
            ).status_code
            for i in range(7)
        ]
        assert guesses == [410] * 5 + [429] * 2
        assert gw.metric("relaybus_gateway_push_decisions_total", {"outcome": "expired"}) == 5


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
