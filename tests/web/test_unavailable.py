"""The phone, when the gateway cannot reach Redis: "Server unavailable", not "Loading
sessions…" forever; the list appears once Redis is back."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.support.servers import RedisServer
from tests.support.web import TOKEN
from tests.web.conftest import _stack


def test_list_says_server_unavailable_then_loads(
    page: Page,
    private_server: Callable[..., RedisServer],
    namespace: str,
    claude_dir: Path,
    tmp_path: Path,
) -> None:
    """With Redis down the list says the server is unavailable; with Redis back, it loads."""
    srv = private_server()
    with contextmanager(_stack)(srv, namespace, claude_dir, tmp_path) as stack:
        srv.stop()
        page.goto(f"{stack.gateway.url}?token={TOKEN}")
        loading = page.locator("#list-loading")
        expect(loading).to_contain_text("Server unavailable")
        expect(loading).to_be_visible()
        srv.start()
        expect(loading).to_be_hidden(timeout=60_000)
