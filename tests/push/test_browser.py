"""Web Push in Chromium: the real service worker shows the pushed request, and its Approve
action lets the real hook proceed."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from playwright.sync_api import BrowserContext, expect, sync_playwright

from relaybus.shared.store.keys import Keys
from tests.approvals.conftest import Machine
from tests.support.approvals import RELAYBUS, hook_input, session_with_tool
from tests.support.gateway_server import GatewayProc
from tests.support.push_service import ALLOW, PushServiceStandIn
from tests.support.servers import RedisServer
from tests.support.web import CHROMIUM, CHROMIUM_ARGS

EDIT = {"old_string": "a = 1", "new_string": "a = 2"}


@pytest.fixture
def sw_context() -> Iterator[BrowserContext]:
    """Chromium with service workers allowed (the web tests block them)."""
    assert Path(CHROMIUM).exists()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        ctx = browser.new_context(service_workers="allow")
        ctx.set_default_timeout(20_000)
        yield ctx
        ctx.close()
        browser.close()


def _until(probe: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.05)
    raise TimeoutError(what)


def test_approve_from_the_notification_lets_the_hook_proceed(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    machine: Callable[..., Machine],
    push_service: PushServiceStandIn,
    sw_context: BrowserContext,
) -> None:
    """Push → stand-in (decrypted) → ServiceWorker.deliverPushMessage → a notification with
    Approve/Deny → notificationclick(approve) → the hook prints allow."""
    m = machine()
    target = m.workdir / "parser.py"
    target.write_text("a = 1\n")
    tool_input = {"file_path": str(target), **EDIT}
    sid, path, _ = session_with_tool(m.claude_dir, m.workdir, "Edit", tool_input)
    admin = redis.Redis.from_url(server.url)
    _until(lambda: admin.hget(keys.session(sid), "host"), "session published")
    with GatewayProc(
        redis_url=server.url, namespace=namespace, env={ALLOW: push_service.host}
    ) as gw:
        origin = gw.http
        push_service.vapid_public = httpx.get(f"{origin}/push/key").json()["publicKey"]
        device = push_service.device("chromium")
        r = httpx.put(
            f"{origin}/push/subscription",
            json={"subscription": device.subscription()},
            headers={"Authorization": "Bearer full-token"},
        )
        assert r.status_code == 200, r.text

        sw_context.grant_permissions(["notifications"], origin=origin)
        page = sw_context.new_page()
        registrations: list[dict[str, Any]] = []
        cdp = sw_context.new_cdp_session(page)
        cdp.on(
            "ServiceWorker.workerRegistrationUpdated",
            lambda ev: registrations.extend(ev["registrations"]),
        )
        cdp.send("ServiceWorker.enable")
        page.goto(f"{origin}/#token=full-token")
        page.evaluate("navigator.serviceWorker.ready.then(() => true)")
        reg_id = _until(
            lambda: next(
                (r["registrationId"] for r in registrations if r["scopeURL"] == f"{origin}/"), None
            ),
            "the service worker registration",
        )
        worker = _until(lambda: sw_context.service_workers, "the service worker")[0]

        # the settings screen: defaults picked; headless Chromium refuses a real subscription
        # (no push service), which the screen reports instead of failing silently
        page.click("#push-open")
        expect(page.locator("#push-settings")).to_be_visible()
        checked = page.eval_on_selector_all(
            'input[name="event"]', "bs => bs.filter((b) => b.checked).map((b) => b.value)"
        )
        assert checked == ["approvals", "waiting", "done", "notify"]
        expect(page.locator("#push-status")).to_have_text("Off on this device.")
        page.click("#push-on")
        expect(page.locator("#push-status")).to_contain_text("Registration failed")
        page.click("#push-close")

        hook = subprocess.Popen(
            [str(RELAYBUS), "hook", "permission-request"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=m.hook_env(),
        )
        assert hook.stdin is not None
        hook.stdin.write(
            json.dumps(hook_input(sid, path, str(m.workdir), "Edit", tool_input)).encode()
        )
        hook.stdin.close()
        hook.stdin = None  # written and closed: communicate() only reads
        try:
            [push] = push_service.wait("chromium", 1)
            cdp.send(
                "ServiceWorker.deliverPushMessage",
                {"origin": origin, "registrationId": reg_id, "data": json.dumps(push.payload)},
            )
            shown = _until(
                lambda: worker.evaluate(
                    """() => self.registration.getNotifications().then((ns) => ns.map((n) => ({
                        title: n.title, body: n.body, tag: n.tag,
                        actions: n.actions.map((a) => a.action)})))"""
                ),
                "the notification",
                timeout_s=45,  # the worker's push event waits for a CPU under a parallel suite
            )
            assert shown == [
                {
                    "title": push.payload["title"],
                    "body": "Edit parser.py +1 −1",
                    "tag": f"relaybus:{sid}",
                    "actions": ["approve", "deny"],
                }
            ]
            worker.evaluate(
                """async () => {
                    const [n] = await self.registration.getNotifications();
                    self.dispatchEvent(new NotificationEvent("notificationclick",
                        { notification: n, action: "approve" }));
                }"""
            )
            out, _ = hook.communicate(timeout=30)
            assert hook.returncode == 0
            assert json.loads(out)["hookSpecificOutput"]["decision"]["behavior"] == "allow"

            # the chat's Mute, with the test's subscription standing in for the browser's
            stand_in = json.dumps(device.subscription())
            page.add_init_script(
                f"""PushManager.prototype.getSubscription = async () => {{
                    const sub = {stand_in};
                    return {{ endpoint: sub.endpoint, toJSON: () => sub }};
                }};"""
            )
            page.goto(f"{origin}/#/s/{sid}")
            page.reload()
            expect(page.locator("#push-mute")).to_have_text("Mute")
            page.click("#push-mute")
            expect(page.locator("#push-mute")).to_have_text("Unmute")
            [raw] = admin.hvals(f"{keys.prefix}push:subs")
            assert json.loads(raw)["prefs"]["muted"] == [sid]
        finally:
            if hook.poll() is None:
                hook.kill()
                hook.communicate()
            admin.close()
