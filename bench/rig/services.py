"""A private server and real collector/gateway processes for a bench, and its JSON result.

A private Redis-compatible server, a Claude config dir and a work dir in a temporary folder
(``scratch``), a real ``python -m relaybus.collector`` and ``python -m relaybus.gateway`` on it
(``services``), and the result file every bench writes (``header``, ``write_result``).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc
from tests.support.servers import RedisServer, running_server

NAMESPACE = "bench"
TOKEN = "bench"


@dataclass
class Scratch:
    root: Path
    kind: str
    srv: RedisServer
    claude_dir: Path
    work: Path


@contextmanager
def scratch() -> Iterator[Scratch]:
    """A temporary folder with a running server, ``claude/{projects,sessions}`` and ``work``."""
    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp) / "srv") as srv:
        root = Path(tmp)
        claude_dir = root / "claude"
        (claude_dir / "projects").mkdir(parents=True)
        (claude_dir / "sessions").mkdir()
        work = root / "work"
        work.mkdir()
        yield Scratch(root, srv.kind, srv, claude_dir, work)


@contextmanager
def services(s: Scratch, sid: str, collector_env: dict[str, str]) -> Iterator[GatewayProc]:
    """Run a collector and a gateway until the collector has published session ``sid``."""
    col = CollectorProc(
        redis_url=s.srv.url,
        namespace=NAMESPACE,
        claude_dir=s.claude_dir,
        host_id="benchhost",
        env=collector_env,
    )
    gw = GatewayProc(
        redis_url=s.srv.url,
        namespace=NAMESPACE,
        tokens=TOKEN,
        env={
            "RELAYBUS_RATE_LIMIT_PER_S": "100000",  # sequential requests, not a flood
            # the push bench's local push service (off the browsers' push services)
            "RELAYBUS_PUSH_ENDPOINT_ALLOW": "127.0.0.1",
            "RELAYBUS_PUSH_RATE_LIMIT_PER_MIN": "6000",
        },
    )
    try:
        col.start()
        gw.start()
        client = redis.Redis(port=s.srv.port)
        deadline = time.monotonic() + 30
        while client.hget(Keys(NAMESPACE).session(sid), "host") is None:
            if time.monotonic() > deadline:
                raise RuntimeError("session not published")
            time.sleep(0.05)
        client.close()
        yield gw
    finally:
        gw.kill()
        col.stop()


@asynccontextmanager
async def watching(gw: GatewayProc, sid: str) -> AsyncIterator[WsClient]:
    """A full-capability client of ``gw`` that watches session ``sid``."""
    async with WsClient(gw.ws, token=TOKEN) as ws:
        await ws.hello(FULL)
        await ws.watch(sid)
        yield ws


def write_result(out: Path, result: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def header(name: str, kind: str, *, load: bool = False) -> dict[str, Any]:
    """The fields every result starts with: name, time, machine and server kind."""
    machine: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if load:
        machine["load"] = os.getloadavg()[0]
    return {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine,
        "server": kind,
    }


@dataclass
class EditRequest:
    """A session whose last line is an Edit tool call, served by a collector (approval
    socket on its own port) and a gateway: what a hook run asks permission for."""

    gw: GatewayProc
    payload: dict[str, Any]  # the hook's stdin
    env: dict[str, str]  # the hook's environment


@contextmanager
def edit_request(s: Scratch) -> Iterator[EditRequest]:
    from tests.support.approvals import hook_input, session_with_tool
    from tests.support.servers import free_port

    target = s.work / "f.py"
    target.write_text("a = 1\n")
    tool_input = {"file_path": str(target), "old_string": "a = 1", "new_string": "a = 2"}
    sid, path, _tid = session_with_tool(s.claude_dir, s.work, "Edit", tool_input)
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env["RELAYBUS_APPROVAL_PORT"] = port
    with services(s, sid, {"RELAYBUS_APPROVAL_PORT": port}) as gw:
        yield EditRequest(gw, hook_input(sid, path, str(s.work), "Edit", tool_input), env)
