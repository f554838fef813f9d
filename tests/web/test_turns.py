"""Working/waiting indicator, Stop and the prompt box, in a real browser."""

from __future__ import annotations

import re
import time

from playwright.sync_api import Browser, Page, expect

from tests.support import web as w
from tests.web.conftest import PHONE, Stack, open_app

ELAPSED = re.compile(r"^\d+s$|^\d+m \d\ds$")


def _open(page: Page, stack: Stack, sid: str) -> None:
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()


def _seconds(text: str) -> int:
    m = re.match(r"^(?:(\d+)m )?(\d+)s$", text)
    assert m, text
    return int(m.group(1) or 0) * 60 + int(m.group(2))


def test_working_indicator_elapsed_idle_and_waiting(page: Page, stack: Stack) -> None:
    """A user line makes the session 'working' (glyph, verb, growing elapsed, Stop); the final reply ends it; 'waiting' shows what for."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "refactor the parser"))
    open_app(page, stack)
    expect(page.locator(f'.srow[data-session-id="{sid}"] .badge.working')).to_be_visible()
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    indicator = page.locator("#indicator")
    expect(indicator).to_be_visible()
    expect(indicator.locator(".glyph")).to_have_text("✻")
    expect(indicator.locator(".verb")).to_have_text(re.compile("…$"))
    expect(indicator.locator(".elapsed")).to_have_text(ELAPSED)
    first = _seconds(indicator.locator(".elapsed").inner_text())
    deadline = time.monotonic() + 20
    while _seconds(indicator.locator(".elapsed").inner_text()) < first + 2:
        assert time.monotonic() < deadline, "elapsed time did not advance"
        page.wait_for_timeout(250)
    assert indicator.locator(".glyph").evaluate("e => getComputedStyle(e).animationName") == "spin"
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator("#stop")).to_be_enabled()

    stack.write(path, w.reply(sid, "Done: the parser is split in two."))
    expect(indicator).to_be_hidden()
    expect(page.locator("#stop")).to_be_hidden()

    stack.live_process(sid, "waiting", "permission to run Bash")
    expect(indicator.locator(".verb")).to_have_text("Waiting: permission to run Bash")
    expect(page.locator("#stop")).to_be_hidden()
    page.locator("#back").click()
    expect(page.locator(f'.srow[data-session-id="{sid}"] .badge.waiting')).to_be_visible()


def test_reduced_motion_keeps_a_static_label(browser: Browser, stack: Stack) -> None:
    """Under prefers-reduced-motion the glyph does not animate and the verb does not rotate; elapsed still counts."""
    ctx = browser.new_context(viewport=PHONE, reduced_motion="reduce", service_workers="block")
    try:
        page = ctx.new_page()
        sid, path = stack.new_session()
        stack.write(path, w.prompt(sid, "long task"))
        _open(page, stack, sid)
        indicator = page.locator("#indicator")
        expect(indicator).to_have_class(re.compile(r"\bstill\b"))
        assert indicator.locator(".glyph").evaluate("e => getComputedStyle(e).animationName") == "none"
        verbs = set()
        deadline = time.monotonic() + 30
        while _seconds(indicator.locator(".elapsed").inner_text()) < 7:
            assert time.monotonic() < deadline, "elapsed time did not advance"
            verbs.add(indicator.locator(".verb").inner_text())
            page.wait_for_timeout(200)
        assert verbs == {"Working…"}
    finally:
        ctx.close()


def test_verbs_rotate_with_motion(page: Page, stack: Stack) -> None:
    """With motion allowed, the indicator's verb rotates while working."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "long task"))
    _open(page, stack, sid)
    indicator = page.locator("#indicator")
    expect(indicator).to_be_visible()
    verbs: set[str] = set()
    deadline = time.monotonic() + 30
    while len(verbs) < 2:
        assert time.monotonic() < deadline, f"verb never changed: {verbs}"
        verbs.add(indicator.locator(".verb").inner_text())
        page.wait_for_timeout(200)


def _plain_words(page: Page) -> list[str]:
    """The client's plain-words explanation of every error code it knows."""
    words: list[str] = page.evaluate(
        "import('./toolDisplay.js').then(m => m.KNOWN_ERROR_CODES.map(c => m.errorText(c)))"
    )
    return words


def test_stop_failure_is_a_toast_and_prompt_error_is_explained(page: Page, stack: Stack) -> None:
    """Stop while working shows the server's refusal as a toast in plain words; a prompt echoes at once and then says in plain words why it was not sent (prompts are off by default)."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "build it"))
    _open(page, stack, sid)
    words = _plain_words(page)
    page.locator("#stop").click()
    toast = page.locator(".toast").first
    expect(toast).to_be_visible()
    assert toast.inner_text() in [*words, "Stop requested."]

    page.locator("#prompt").fill("also add tests")
    page.locator("#composer button[type=submit]").click()
    echo = page.locator(".echo")
    expect(echo.locator(".bubble")).to_have_text("also add tests")
    expect(echo.locator(".echo-status")).to_contain_text("Not sent: ")
    reason = echo.locator(".echo-status").inner_text().removeprefix("Not sent: ").removesuffix("Dismiss")
    assert reason.strip() in words, reason
    expect(page.locator(".bubble", has_text="also add tests")).to_have_count(1)
    expect(page.locator("#prompt")).to_have_value("")
    echo.locator("button", has_text="Dismiss").click()
    expect(page.locator(".echo")).to_have_count(0)


def test_read_only_token_is_told_it_may_not_act(page: Page, stack: Stack) -> None:
    """With a read-only token the session is visible, but a prompt is refused in plain words (forbidden)."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "look only"), w.reply(sid, "ok"))
    page.goto(f"{stack.gateway.url}?token={w.READ_TOKEN}")
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator("#messages .bubble")).to_have_text(["look only", "ok"])
    page.locator("#prompt").fill("try anyway")
    page.locator("#composer button[type=submit]").click()
    expect(page.locator(".echo .echo-status")).to_contain_text(
        "Not sent: Your token isn't allowed to do that."
    )
