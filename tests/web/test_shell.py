"""Sign-in, the 500-message cap, the installable shell and the phone layout."""

from __future__ import annotations

import time

from playwright.sync_api import Browser, Page, expect

from tests.support import web as w
from tests.support.web import TOKEN
from tests.web.conftest import PHONE, Stack, artifacts_dir, open_app


def test_sign_in_refuses_a_bad_token_and_keeps_a_good_one(page: Page, stack: Stack) -> None:
    """Without a token the page asks for one; a wrong token is refused in plain words; the right one shows the list and is kept on the device."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "hello"))
    page.goto(stack.gateway.url)
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#signin-msg")).to_have_text("This server needs a token.")
    page.locator("#token").fill("not-the-token")
    page.locator("#signin-form button").click()
    expect(page.locator("#signin-msg")).to_have_text("That token was not accepted.")
    page.locator("#token").fill(TOKEN)
    page.locator("#signin-form button").click()
    expect(page.locator(f'.srow[data-session-id="{sid}"]')).to_be_visible()
    expect(page.locator("#signin")).to_be_hidden()
    assert page.evaluate("localStorage.getItem('relaybus.token')") == TOKEN
    page.locator("#signout").click()
    expect(page.locator("#signin")).to_be_visible()
    assert page.evaluate("localStorage.getItem('relaybus.token')") is None


def test_chat_keeps_at_most_500_events(page: Page, stack: Stack) -> None:
    """A session that grows past 500 events keeps only the newest 500 in the page."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "go"))
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator("#messages .bubble")).to_have_text(["go"])
    stack.write(path, *(w.reply(sid, f"line {i}", final=False) for i in range(620)))
    expect(page.locator("#messages .bubble").last).to_have_text("line 619", timeout=60_000)
    expect(page.locator("#messages [data-seq]")).to_have_count(500)
    expect(page.locator("#messages .bubble").first).to_have_text("line 120")


def test_session_list_first_paint_is_fast_on_loopback(page: Page, stack: Stack) -> None:
    """The session list paints well within a second on loopback (generous bound here; bench/ measures)."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "hello"))
    open_app(page, stack)  # warm caches and the token
    start = time.monotonic()
    page.goto(stack.gateway.url)
    page.wait_for_selector(f'.srow[data-session-id="{sid}"]')
    elapsed = time.monotonic() - start
    assert elapsed < 5.0, f"session list took {elapsed:.2f}s"


def test_installable_shell_caches_only_the_shell(browser: Browser, stack: Stack) -> None:
    """The manifest and icons are served, the service worker caches the app shell, and no message is ever stored on the device (caches, localStorage, IndexedDB)."""
    ctx = browser.new_context(viewport=PHONE)
    try:
        page = ctx.new_page()
        sid, path = stack.new_session()
        stack.write(path, w.prompt(sid, "secret prompt text"))
        open_app(page, stack)
        manifest = page.evaluate("fetch('manifest.webmanifest').then(r => r.json())")
        assert manifest["display"] == "standalone"
        sizes = {icon["sizes"] for icon in manifest["icons"]}
        assert {"192x192", "512x512"} <= sizes
        for icon in manifest["icons"]:
            status = page.evaluate(f"fetch('{icon['src']}').then(r => r.status)")
            assert status == 200, icon
        page.evaluate("navigator.serviceWorker.ready.then(() => true)")
        page.locator(f'.srow[data-session-id="{sid}"] a').click()
        expect(page.locator("#messages .bubble")).to_have_text(["secret prompt text"])
        cached: list[str] = page.evaluate(
            """async () => {
                const out = [];
                for (const name of await caches.keys()) {
                    const cache = await caches.open(name);
                    for (const req of await cache.keys()) out.push(new URL(req.url).pathname);
                }
                return out;
            }"""
        )
        assert {"/", "/index.html", "/app.js", "/styles.css", "/sw.js"} - {"/sw.js"} <= set(cached)
        assert all(
            p.endswith((".js", ".css", ".html", ".png", ".svg", ".webmanifest", "/"))
            for p in cached
        ), cached
        bodies: list[str] = page.evaluate(
            """async () => {
                const out = [];
                for (const name of await caches.keys()) {
                    const cache = await caches.open(name);
                    for (const req of await cache.keys()) out.push(await (await cache.match(req)).text());
                }
                return out;
            }"""
        )
        assert not any("secret prompt text" in b for b in bodies)
        stored = page.evaluate("Object.keys(localStorage)")
        assert stored == ["relaybus.token"], "only the token is kept on the device"
        assert page.evaluate("indexedDB.databases().then(dbs => dbs.length)") == 0
    finally:
        ctx.close()


def test_phone_screenshots_fit_the_viewport(page: Page, stack: Stack) -> None:
    """On a phone-sized viewport nothing overflows sideways; screenshots go to tests/artifacts/."""
    sid, path = stack.new_session()
    stack.write(
        path,
        w.prompt(sid, "Please fix the flaky login test in the auth module"),
        w.thinking(sid, "Look at the session check."),
        w.reply(sid, "Let me read the test first.", final=False),
        w.tool_use(sid, "t1", "Read", {"file_path": "/home/dev/project/tests/test_login.py"}),
        w.tool_result(sid, "t1", "def test_login():\n    assert login()\n"),
        w.tool_use(
            sid,
            "t2",
            "Edit",
            {"file_path": "/home/dev/project/auth.py", "old_string": "a", "new_string": "b"},
        ),
        w.edit_result(
            sid,
            "t2",
            "/home/dev/project/auth.py",
            [
                {
                    "oldStart": 40,
                    "lines": [
                        " def login(user):",
                        "-    return check(user)",
                        "+    session = open_session(user)",
                        "+    return check(session)",
                    ],
                }
            ],
        ),
        w.tool_use(sid, "t3", "Bash", {"command": "pytest tests/test_login.py -q"}),
    )
    other, other_path = stack.new_session()
    stack.write(other_path, w.prompt(other, "Write the release notes"), w.reply(other, "Done."))
    out = artifacts_dir()
    open_app(page, stack)
    expect(page.locator("#sessions .srow")).to_have_count(2)
    page.screenshot(path=str(out / "web-mobile-list.png"))
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator('.tool[data-tool-use-id="t2"] .delta')).to_be_visible()
    expect(page.locator("#indicator")).to_be_visible()
    page.screenshot(path=str(out / "web-mobile-chat.png"))
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(out / "web-mobile-chat-dark.png"))
    assert page.locator("#scroller").evaluate("e => e.scrollWidth <= e.clientWidth")
    assert (out / "web-mobile-chat.png").stat().st_size > 10_000
