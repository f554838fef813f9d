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


def test_working_indicator_elapsed_idle_and_waiting(page: Page, command_stack: Stack) -> None:
    """A user line makes the session 'working' (glyph, verb, growing elapsed, Stop); the final reply ends it; 'waiting' shows what for."""
    stack = command_stack
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
        assert (
            indicator.locator(".glyph").evaluate("e => getComputedStyle(e).animationName") == "none"
        )
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


def test_prompts_off_hides_the_box_and_says_how_to_turn_them_on(page: Page, stack: Stack) -> None:
    """On a machine whose collector does not take prompts (the default) there is no message box and no Stop, but a note naming the setting."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "build it"))
    _open(page, stack, sid)
    expect(page.locator("#indicator")).to_be_visible()
    note = page.locator("#prompts-off")
    expect(note).to_be_visible()
    expect(note).to_contain_text("Prompts are off on testhost")
    expect(note).to_contain_text("RELAYBUS_ALLOW_PROMPTS=true")
    expect(page.locator("#composer")).to_be_hidden()
    expect(page.locator("#stop")).to_be_hidden()
    page.locator("#back").click()
    expect(page.locator("#new-conv")).to_be_hidden()  # no machine takes prompts


def test_read_only_token_is_told_it_may_not_act(page: Page, command_stack: Stack) -> None:
    """With a read-only token the session is visible, but a prompt is refused in plain words (forbidden)."""
    stack = command_stack
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
