"""Approvals benchmark: how long a phone waits, and how long Claude Code waits on the hook.

Runs a private Redis-compatible server, a real ``python -m relaybus.collector`` (approval endpoint on
a free port), a real ``python -m relaybus.gateway`` and a watching WebSocket client, then, per round,
``relaybus hook permission-request`` as Claude Code runs it (a shell command, JSON on stdin):

* hook -> request: hook started -> ``permission_request`` reaches the watching client;
* accept -> hook answer: ``accept_diff`` sent -> the hook has printed allow and exited;
* accept -> ack: ``accept_diff`` -> ``decision_ack``;
* unwatched: the hook's whole run when nobody watches (falls through at once);
* collector down: the hook's whole run when nothing listens on the port.

Writes ``bench/results/approvals.json``. Usage: ``python bench/approvals_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import time
from typing import Any

from rig import REPO
from rig.services import edit_request, header, scratch, watching, write_result
from rig.stats import summary

from tests.support.approvals import RELAYBUS
from tests.support.gateway_server import GatewayProc
from tests.support.servers import free_port

OUT = REPO / "bench" / "results" / "approvals.json"


async def hook(payload: dict[str, Any], env: dict[str, str]) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_shell(
        f"{shlex.quote(str(RELAYBUS))} hook permission-request",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(payload).encode())
    await proc.stdin.drain()
    proc.stdin.close()
    return proc


async def measure(
    gw: GatewayProc, payload: dict[str, Any], env: dict[str, str], rounds: int
) -> dict[str, Any]:
    to_request: list[float] = []
    to_answer: list[float] = []
    to_ack: list[float] = []
    unwatched: list[float] = []
    down: list[float] = []
    sid = payload["session_id"]
    for _ in range(rounds):
        t0 = time.perf_counter()
        proc = await hook(payload, env)
        await proc.communicate()
        unwatched.append((time.perf_counter() - t0) * 1000)
    down_env = {**env, "RELAYBUS_APPROVAL_PORT": str(free_port())}
    for _ in range(rounds):
        t0 = time.perf_counter()
        proc = await hook(payload, down_env)
        await proc.communicate()
        down.append((time.perf_counter() - t0) * 1000)
    async with watching(gw, sid) as ws:
        for i in range(rounds):
            t0 = time.perf_counter()
            proc = await hook(payload, env)
            req = await ws.expect("permission_request", wait_s=30)
            t1 = time.perf_counter()
            to_request.append((t1 - t0) * 1000)
            await ws.send(
                {"type": "accept_diff", "requestId": f"a{i}", "requestKey": req["requestKey"]}
            )
            ack = await ws.expect("decision_ack", wait_s=30)
            to_ack.append((time.perf_counter() - t1) * 1000)
            out, _ = await proc.communicate()
            to_answer.append((time.perf_counter() - t1) * 1000)
            assert ack["decision"] == "allow" and b'"allow"' in out, (ack, out)
    return {
        "hook_to_permission_request": summary(to_request),
        "accept_to_hook_answer": summary(to_answer),
        "accept_to_decision_ack": summary(to_ack),
        "hook_run_unwatched": summary(unwatched),
        "hook_run_collector_down": summary(down),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    with scratch() as s, edit_request(s) as req:
        figures = asyncio.run(measure(req.gw, req.payload, req.env, args.rounds))
    write_result(
        OUT,
        {
            **header("approvals", s.kind, load=True),
            **figures,
            "note": "sequential rounds on one loopback machine shared with other work; each figure "
            "with the hook includes starting its Python process",
        },
    )


if __name__ == "__main__":
    main()
