"""Helpers for the web client's browser tests: a real gateway process and transcript lines.

    gw = GatewayProc(redis_url=..., namespace=ns, workdir=tmp_path).start()
    gw.url                  # http://127.0.0.1:<port>/
    gw.kill(); gw.start()   # SIGKILL and restart on the same port

Transcript lines follow Claude Code's record shapes (see tests/data/claude-jsonl/); the
collector projects them into typed blocks, which is all the client ever renders.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.support.collector_records import assistant_message, line, record
from tests.support.procs import ManagedProcess, http_ok
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
TOKEN = "web-test-token"
READ_TOKEN = "web-read-token"  # read-only: may watch, may not act
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class GatewayProc(ManagedProcess):
    """``python -m relaybus.gateway`` on a fixed loopback port (kept across restarts)."""

    name = "gateway"

    def __init__(
        self, *, redis_url: str, namespace: str, workdir: Path, token: str = TOKEN
    ) -> None:
        super().__init__(workdir / "gateway.log")
        self.redis_url = redis_url
        self.namespace = namespace
        self.token = token
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
        env.update(
            {
                "RELAYBUS_REDIS_URL": self.redis_url,
                "RELAYBUS_NAMESPACE": self.namespace,
                "RELAYBUS_GATEWAY_HOST": "127.0.0.1",
                "RELAYBUS_GATEWAY_PORT": str(self.port),
                "RELAYBUS_TOKENS": f"{self.token},{READ_TOKEN}:read",
                "RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "2",
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def start(self, timeout_s: float = 30.0) -> GatewayProc:
        self.spawn([sys.executable, "-m", "relaybus.gateway"], cwd=REPO, env=self.env())
        self.wait_until(lambda: http_ok(f"{self.url}readyz"), timeout_s)
        return self


# --- transcript lines ------------------------------------------------------------------


def _record(sid: str, rtype: str, **extra: Any) -> bytes:
    return line(record(sid, rtype, **extra))


def _assistant(
    sid: str, content: list[dict[str, Any]], stop: str | None = None, **extra: Any
) -> bytes:
    return _record(sid, "assistant", message=assistant_message(content, stop), **extra)


def prompt(sid: str, text: str, **extra: Any) -> bytes:
    """A person's prompt: a user bubble, and the turn becomes ``working``."""
    return _record(sid, "user", message={"role": "user", "content": text}, **extra)


def reply(sid: str, text: str, *, final: bool = True, **extra: Any) -> bytes:
    """An assistant text reply; ``final`` ends the turn (``end_turn``)."""
    stop = "end_turn" if final else None
    return _assistant(sid, [{"type": "text", "text": text}], stop, **extra)


def thinking(sid: str, text: str) -> bytes:
    return _assistant(sid, [{"type": "thinking", "thinking": text, "signature": "sig"}])


def tool_use(sid: str, tool_id: str, name: str, tool_input: dict[str, Any], **extra: Any) -> bytes:
    content = [{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}]
    return _assistant(sid, content, "tool_use", **extra)


def tool_result(
    sid: str, tool_id: str, text: str, *, error: bool = False, result: Any = None, **extra: Any
) -> bytes:
    item: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": text}
    if error:
        item["is_error"] = True
    fields: dict[str, Any] = {"message": {"role": "user", "content": [item]}, **extra}
    if result is not None:
        fields["toolUseResult"] = result
    return _record(sid, "user", **fields)


def edit_result(sid: str, tool_id: str, path: str, hunks: list[dict[str, Any]]) -> bytes:
    """The result of an ``Edit``: ``structuredPatch`` hunks become ``edit`` on the block."""
    result = {
        "filePath": path,
        "oldString": "x",
        "newString": "y",
        "originalFile": "",
        "structuredPatch": [
            {
                "oldStart": h["oldStart"],
                "oldLines": 1,
                "newStart": h["oldStart"],
                "newLines": 1,
                "lines": h["lines"],
            }
            for h in hunks
        ],
        "userModified": False,
        "replaceAll": False,
    }
    return tool_result(sid, tool_id, f"The file {path} has been updated.", result=result)


def unknown_item(sid: str, kind: str, text: str) -> bytes:
    """An assistant content item of a kind nobody knows yet (an open-union ``kind``)."""
    return _assistant(sid, [{"type": kind, "text": text}])


def unknown_record(sid: str, rtype: str) -> bytes:
    """A record type Claude Code may add tomorrow, holding something to show: published as a
    neutral event (one with nothing displayable is dropped as bookkeeping)."""
    return _record(sid, rtype, payload={"x": 1}, content="news from the future")


def ai_title(sid: str, title: str) -> bytes:
    return orjson.dumps({"type": "ai-title", "sessionId": sid, "aiTitle": title}) + b"\n"


def sidechain(sid: str, agent_id: str, text: str) -> bytes:
    """A sub-agent's assistant line in the main transcript."""
    return _assistant(
        sid, [{"type": "text", "text": text}], None, isSidechain=True, agentId=agent_id
    )


def image_result(sid: str, tool_id: str, n_bytes: int) -> bytes:
    """A tool result holding a PNG screenshot (the collector keeps only type and size)."""
    data = "A" * (((n_bytes + 2) // 3) * 4)
    item = {
        "type": "tool_result",
        "tool_use_id": tool_id,
        "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
        ],
    }
    return _record(sid, "user", message={"role": "user", "content": [item]})
