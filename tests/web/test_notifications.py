"""The Notifications sheet offers the known machines as toggles, not a comma-separated field."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.support import web as w
from tests.web.conftest import Stack, artifacts_dir, open_app


def test_known_machines_are_toggles_with_all_machines_as_the_default(
    page: Page, stack: Stack
) -> None:
    """The sheet lists "All machines" (ticked) and each machine the list knows; ticking one unticks All, and All unticks the rest."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "hello"))
    open_app(page, stack)
    host = page.locator(f'.srow[data-session-id="{sid}"] .host').inner_text()
    page.click("#push-open")
    machines = page.locator("#push-machines label")
    expect(machines).to_have_text(["All machines", host])
    expect(page.locator("#push-settings input[type=text]")).to_have_count(0)
    every = page.locator('#push-machines input[name="host-all"]')
    one = page.locator('#push-machines input[name="host"]')
    expect(every).to_be_checked()
    one.check()
    expect(every).not_to_be_checked()
    every.check()
    expect(one).not_to_be_checked()
    expect(page.locator("#push-muted")).to_contain_text("None. Mute a session from its own screen.")
    page.locator("#push-settings").screenshot(
        path=str(artifacts_dir() / "web-mobile-notifications.png")
    )
