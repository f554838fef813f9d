"""Entry point run inside ``unshare --net`` by :func:`tests.support.netns.run_isolated`.

``python -m tests.support.netns_inside <module:function> <workdir> <result.json> <budget_s>``:
brings loopback up, refuses to go on when the namespace has any other interface, runs
the scenario coroutine with the budget, and writes ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "<traceback>"}``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import socket
import subprocess
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

Scenario = Callable[[Path], Awaitable[dict[str, Any]]]


class NotIsolated(RuntimeError):
    """This process can see a network interface other than loopback."""


def interfaces() -> list[str]:
    """The network interfaces of this process's namespace (not ``/sys``, which may show the host's)."""
    return sorted(name for _index, name in socket.if_nameindex())


def assert_isolated() -> None:
    """Raise :class:`NotIsolated` unless loopback is the only interface here."""
    found = interfaces()
    if found != ["lo"]:
        raise NotIsolated(f"refusing to run the Claude Code CLI: interfaces {found} besides lo")


def bring_up_loopback() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True, timeout=10)


def load(target: str) -> Scenario:
    module, _, name = target.partition(":")
    fn: Scenario = getattr(importlib.import_module(module), name)
    return fn


async def _run(fn: Scenario, workdir: Path, budget_s: float) -> dict[str, Any]:
    async with asyncio.timeout(budget_s):
        return await fn(workdir)


def main(argv: list[str]) -> int:
    target, workdir, out, budget = argv[0], Path(argv[1]), Path(argv[2]), float(argv[3])
    try:
        assert_isolated()
        bring_up_loopback()
        assert_isolated()
        result: dict[str, Any] = {
            "ok": True,
            "result": asyncio.run(_run(load(target), workdir, budget)),
        }
    except BaseException:
        result = {"ok": False, "error": traceback.format_exc()}
    out.write_text(json.dumps(result, default=str))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
