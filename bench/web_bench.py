"""Web client benchmark: session-list first paint and chat open, in headless Chromium.

Runs a private Redis-compatible server, a real ``python -m relaybus.collector`` and ``python -m
gateway`` on loopback, with ``--sessions`` sessions of ``--events`` events each, then:

* list first paint — navigation start to the ``relaybus:list-painted`` mark (the first
  frame holding the session list), cold (fresh browser context) and warm (reload);
  also the browser's own first-contentful-paint of the shell;
* chat open — from the tap on a session to its replayed events (``replay_depth``, 200 by
  default) being in the page (page clock, checked every animation frame).

Writes ``bench/results/web.json``. Usage: ``python bench/web_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, ViewportSize, sync_playwright

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import web as w  # noqa: E402
from tests.support.collector_proc import CollectorProc  # noqa: E402
from tests.support.collector_records import append, transcript  # noqa: E402
from tests.support.servers import running_server  # noqa: E402

PHONE: ViewportSize = {"width": 390, "height": 844}


def _list_paint(page: Page) -> dict[str, float]:
    page.wait_for_function("performance.getEntriesByName('relaybus:list-painted').length > 0")
    marks: dict[str, float] = page.evaluate(
        """() => ({
            list: performance.getEntriesByName('relaybus:list-painted')[0].startTime,
            fcp: (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime ?? -1,
        })"""
    )
    return marks


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "max_ms": round(ordered[-1], 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--events", type=int, default=220)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="relaybus-web-bench-") as tmp,
        running_server(Path(tmp) / "srv") as server,
    ):
        root = Path(tmp)
        claude_dir = root / "claude"
        (claude_dir / "projects").mkdir(parents=True)
        (claude_dir / "sessions").mkdir()
        ns = f"bench{uuid.uuid4().hex[:8]}"
        collector = CollectorProc(redis_url=server.url, namespace=ns, claude_dir=claude_dir)
        gateway = w.GatewayProc(redis_url=server.url, namespace=ns, workdir=root)
        try:
            collector.start()
            gateway.start()
            sids = []
            for i in range(args.sessions):
                sid = str(uuid.uuid4())
                lines = [w.prompt(sid, f"session {i}: please do the thing")]
                lines += [
                    w.reply(sid, f"event {j} " + "x" * 80, final=False)
                    for j in range(args.events - 1)
                ]
                append(transcript(claude_dir, sid), b"".join(lines))
                sids.append(sid)
            results = run_browser(gateway, sids[-1], args)
        finally:
            gateway.stop()
            collector.stop()

    out = {
        "bench": "web",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_1m": round(os.getloadavg()[0], 2),
        },
        "params": vars(args),
        **results,
    }
    path = REPO / "bench" / "results" / "web.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


def run_browser(gateway: w.GatewayProc, sid: str, args: argparse.Namespace) -> dict[str, Any]:
    cold: list[float] = []
    warm: list[float] = []
    fcp: list[float] = []
    chat_open: list[float] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=w.CHROMIUM, headless=True, args=w.CHROMIUM_ARGS
        )
        try:
            for _ in range(args.runs):
                ctx = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
                page = ctx.new_page()
                page.goto(f"{gateway.url}?token={w.TOKEN}")
                marks = _list_paint(page)
                cold.append(marks["list"])
                fcp.append(marks["fcp"])
                page.reload()
                warm.append(_list_paint(page)["list"])
                row = page.locator(f'.srow[data-session-id="{sid}"] a')
                row.wait_for()
                started: float = page.evaluate("performance.now()")
                row.click()
                done = page.wait_for_function(
                    "document.querySelectorAll('#messages [data-seq]').length >= 200"
                    " ? performance.now() : 0",
                    polling="raf",
                )
                chat_open.append(float(done.json_value()) - started)
                ctx.close()
        finally:
            browser.close()
    return {
        "list_first_paint_cold": _summary(cold),
        "list_first_paint_warm": _summary(warm),
        "shell_first_contentful_paint": _summary(fcp),
        "chat_open_200_events": _summary(chat_open),
    }


if __name__ == "__main__":
    sys.exit(main())
