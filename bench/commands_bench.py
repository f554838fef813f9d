"""Command benchmark: the routed round trip and the prompt-to-event latency.

Runs a private Redis-compatible server, a real ``python -m relaybus.collector`` (prompts allowed,
the stand-in CLI from ``tests/support/fake_claude.py``) and a real ``python -m relaybus.gateway``,
and a WebSocket client:

* round trip — ``interrupt_request`` on an idle session, answered ``no_active_turn`` by the
  collector: client -> gateway -> ``cmd:<host>`` -> collector -> ``reply:<gw>`` -> client,
  with no process started (``--round-trips`` sequential requests);
* prompt — ``prompt`` -> ``prompt_sent`` (the CLI child has started), and -> the prompt's
  ``user`` session_event reaching a watching client (``--prompts`` sequential prompts).

Writes ``bench/results/commands.json``. Usage: ``python bench/commands_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import orjson
from rig import REPO
from rig.services import header, scratch, services, watching, write_result
from rig.stats import summary

from tests.support import fake_claude
from tests.support.gateway_server import GatewayProc

OUT = REPO / "bench" / "results" / "commands.json"


async def measure(gw: GatewayProc, sid: str, round_trips: int, prompts: int) -> dict[str, Any]:
    rtt: list[float] = []
    sent: list[float] = []
    to_event: list[float] = []
    async with watching(gw, sid) as ws:
        for i in range(round_trips):
            t0 = time.perf_counter()
            await ws.send({"type": "interrupt_request", "requestId": f"i{i}", "sessionId": sid})
            ack = await ws.expect("interrupt_ack", wait_s=30)
            rtt.append((time.perf_counter() - t0) * 1000)
            assert ack["errorCode"] == "no_active_turn", ack
        for i in range(prompts):
            text = f"bench prompt {i} {uuid.uuid4().hex[:6]}"
            for _attempt in range(100):  # the previous run may still be exiting: busy
                t0 = time.perf_counter()
                await ws.send(
                    {"type": "prompt", "requestId": f"p{i}", "sessionId": sid, "message": text}
                )
                reply = await ws.recv(30)
                while reply["type"] not in ("prompt_sent", "error"):
                    reply = await ws.recv(30)
                if reply["type"] == "prompt_sent":
                    break
                assert reply["code"] == "busy", reply
                await asyncio.sleep(0.05)
            sent.append((time.perf_counter() - t0) * 1000)
            while True:
                frame = await ws.recv(30)
                blocks = orjson.dumps(frame.get("event", {}).get("blocks", []))
                if frame["type"] == "session_event" and text.encode() in blocks:
                    break
            to_event.append((time.perf_counter() - t0) * 1000)
            while True:  # let the run finish: the next prompt would be busy
                frame = await ws.recv(30)
                if frame["type"] == "turn_status" and frame["state"] == "idle":
                    break
    return {
        "interrupt_round_trip": summary(rtt),
        "prompt_to_prompt_sent": summary(sent),
        "prompt_to_user_event": summary(to_event),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--round-trips", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=20)
    args = ap.parse_args()
    with scratch() as s:
        sid = str(uuid.uuid4())
        path = fake_claude.transcript_path(s.claude_dir, str(s.work), sid)
        t = fake_claude.Transcript(path, sid, str(s.work), "cli")
        t.user("hello")
        t.reply("hello")
        os.environ["CLAUDE_CONFIG_DIR"] = str(s.claude_dir)
        os.environ["FAKE_CLAUDE_DELAY_S"] = "0"
        env = {
            "RELAYBUS_ALLOW_PROMPTS": "true",
            "RELAYBUS_CLAUDE_BIN": str(fake_claude.install(s.root / "bin")),
        }
        with services(s, sid, env) as gw:
            figures = asyncio.run(measure(gw, sid, args.round_trips, args.prompts))
    write_result(
        OUT,
        {
            **header("commands", s.kind),
            **figures,
            "note": "sequential requests on a loopback machine; prompt figures include starting a Python stand-in CLI",
        },
    )


if __name__ == "__main__":
    main()
