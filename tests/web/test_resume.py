"""Reconnect and resume: a gateway killed and restarted, and a gap the server reports."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from playwright.sync_api import Page, WebSocket, expect

from tests.support import web as w
from tests.web.conftest import Stack, open_app


def _record_sent(page: Page) -> list[dict[str, Any]]:
    """Every frame the page sends on any WebSocket, decoded."""
    sent: list[dict[str, Any]] = []

    def on_ws(ws: WebSocket) -> None:
        ws.on("framesent", lambda payload: sent.append(json.loads(payload)))

    page.on("websocket", on_ws)
    return sent


def _seqs(page: Page) -> list[float]:
    return [
        float(s)
        for s in page.locator("#messages [data-seq]").evaluate_all(
            "els => els.map(e => e.dataset.seq)"
        )
    ]


def test_gateway_sigkill_and_restart_recovers_every_event_once(page: Page, stack: Stack) -> None:
    """After SIGKILL and a restart on the same port the page reconnects by itself, resumes with lastSeqId/sinceSeqId and shows every event exactly once, in order."""
    sent = _record_sent(page)
    sid, path = stack.new_session()
    stack.write(
        path, w.prompt(sid, "m1"), w.reply(sid, "r1", final=False), w.reply(sid, "r2", final=False)
    )
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    bubbles = page.locator("#messages .bubble")
    expect(bubbles).to_have_text(["m1", "r1", "r2"])

    stack.gateway.kill()
    expect(page.locator("#conn")).to_be_visible()
    expect(page.locator("#conn-text")).to_contain_text("Connection lost")
    stack.write(path, w.reply(sid, "r3", final=False), w.reply(sid, "r4", final=False))
    other, other_path = stack.new_session()
    stack.write(other_path, w.prompt(other, "a session started while the gateway was down"))
    stack.gateway.start()

    expect(bubbles).to_have_text(["m1", "r1", "r2", "r3", "r4"], timeout=40_000)
    expect(page.locator("#conn")).to_be_hidden()
    stack.write(path, w.reply(sid, "r5"))
    expect(bubbles).to_have_text(["m1", "r1", "r2", "r3", "r4", "r5"])
    seqs = _seqs(page)
    assert len(seqs) == len(set(seqs)) and seqs == sorted(seqs)

    hellos = [f for f in sent if f["type"] == "hello"]
    assert len(hellos) >= 2
    assert "lastSeqId" not in hellos[0]
    assert hellos[-1]["lastSeqId"] > 0 and hellos[-1]["epoch"]
    watches = [f for f in sent if f["type"] == "watch_session" and f["sessionId"] == sid]
    assert "sinceSeqId" not in watches[0]
    assert watches[-1]["sinceSeqId"] == int(seqs[2])  # r2: the last event seen before the kill

    page.locator("#back").click()
    expect(page.locator(f'.srow[data-session-id="{other}"]')).to_be_visible()


def test_gap_detected_shows_a_marker_and_reloads(page: Page, small_stack: Stack) -> None:
    """When the session stream was trimmed past the client's position, the page shows a gap marker and reloads the session's recent events, without duplicates."""
    stack = small_stack
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "start"), w.reply(sid, "first", final=False))
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator("#messages .bubble")).to_have_text(["start", "first"])

    stack.gateway.kill()
    expect(page.locator("#conn")).to_be_visible()
    stack.write(path, *(w.reply(sid, f"burst {i}", final=False) for i in range(260)))
    stack.write(path, w.reply(sid, "the end"))
    stack.gateway.start()

    expect(page.locator("#messages .gap")).to_be_visible(timeout=40_000)
    expect(page.locator("#messages .gap")).to_contain_text("could not be delivered")
    expect(page.locator("#messages .bubble").last).to_have_text("the end")
    expect(page.locator("#messages .bubble", has_text="first")).to_have_count(0)
    seqs = _seqs(page)
    assert len(seqs) == len(set(seqs)) and seqs == sorted(seqs)
    texts = page.locator("#messages .bubble").all_inner_texts()
    assert len(texts) == len(set(texts))


def test_a_frozen_connection_is_replaced_when_the_network_returns(page: Page, stack: Stack) -> None:
    """When the network comes back the page probes its socket; a peer that does not answer (half-open) is replaced, and the events written meanwhile arrive exactly once."""
    sockets: list[WebSocket] = []
    page.on("websocket", lambda ws: sockets.append(ws))
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "m1"))
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    bubbles = page.locator("#messages .bubble")
    expect(bubbles).to_have_text(["m1"])
    assert len(sockets) == 1

    os.kill(stack.gateway.pid, signal.SIGSTOP)  # the socket stays open but nothing answers
    try:
        stack.write(path, w.reply(sid, "r1", final=False), w.reply(sid, "r2", final=False))
        page.evaluate("window.dispatchEvent(new Event('online'))")
        page.wait_for_timeout(500)
        assert len(sockets) == 1, "a live-looking socket is kept until the probe times out"
        for _ in range(100):  # the probe gives up after 5 s; allow 20 s on a loaded box
            if len(sockets) >= 2:
                break
            page.wait_for_timeout(200)
        assert len(sockets) >= 2, "the unanswered socket was never replaced"
    finally:
        os.kill(stack.gateway.pid, signal.SIGCONT)
    expect(bubbles).to_have_text(["m1", "r1", "r2"])
    seqs = _seqs(page)
    assert len(seqs) == len(set(seqs))


def test_redis_data_loss_shows_an_epoch_gap_and_reloads(page: Page, stack: Stack) -> None:
    """If Redis loses the namespace's data (new epoch) while the page is away, the page says so with a gap marker and shows the session as the server now has it."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "before the loss"), w.reply(sid, "old reply", final=False))
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator("#messages .bubble")).to_have_text(["before the loss", "old reply"])

    stack.gateway.kill()
    client = stack.server.client()
    try:
        keys = list(client.scan_iter(match=f"{{{stack.namespace}}}:*", count=1000))
        assert keys
        client.delete(*keys)
    finally:
        client.close()
    stack.gateway.start()
    stack.write(path, w.reply(sid, "after the loss"))

    gap = page.locator("#messages .gap")
    expect(gap).to_contain_text("reason: epoch", timeout=40_000)
    expect(page.locator("#messages .bubble").last).to_have_text("after the loss", timeout=40_000)
    seqs = _seqs(page)
    assert len(seqs) == len(set(seqs)) and seqs == sorted(seqs)
    expect(gap).to_have_count(1)
