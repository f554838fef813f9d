"""Push benchmark: a permission request in the transcript → the push service accepted it.

Runs a private Redis-compatible server, a real ``python -m relaybus.collector`` (approval
endpoint on a free port), a real ``python -m relaybus.gateway`` and the push-service stand-in
of the tests (it verifies the VAPID JWT and decrypts ``aes128gcm``, as a real one would
accept), with one subscribed device and nobody watching. Per round,
``relaybus hook permission-request`` runs as Claude Code runs it, then the notification's
Approve is sent as the service worker sends it:

* log → push accepted: the request's collector stamp in the log → the stand-in accepted the
  push (what the gateway adds: consumer-group read, capability, VAPID signing, encryption);
* hook → push accepted: hook started (a Python process) → the stand-in accepted the push;
* approve → hook answer: ``POST /push/decide`` → the hook has printed allow and exited.

Writes ``bench/results/push.json``. Usage: ``python bench/push_bench.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import time
from typing import Any, cast

import httpx
import redis.asyncio as aioredis
from rig import REPO
from rig.services import NAMESPACE, TOKEN, edit_request, header, scratch, write_result
from rig.stats import summary

from relaybus.shared.store.keys import Keys
from tests.support.approvals import RELAYBUS
from tests.support.collector_records import Entries
from tests.support.gateway_server import GatewayProc
from tests.support.push_service import PushServiceStandIn

OUT = REPO / "bench" / "results" / "push.json"


async def measure(
    gw: GatewayProc, url: str, payload: dict[str, Any], env: dict[str, str], rounds: int
) -> dict[str, Any]:
    log_to_push: list[float] = []
    hook_to_push: list[float] = []
    approve_to_answer: list[float] = []
    keys = Keys(NAMESPACE)
    admin = aioredis.Redis.from_url(url)
    with PushServiceStandIn() as service:
        async with httpx.AsyncClient(base_url=gw.http) as http:
            service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
            r = await http.put(
                "/push/subscription",
                json={"subscription": service.device("phone").subscription()},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert r.status_code == 200, r.text
            for i in range(rounds):
                seen = len(service.of("phone"))
                t0 = time.time()
                proc = await asyncio.create_subprocess_shell(
                    f"{shlex.quote(str(RELAYBUS))} hook permission-request",
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    env=env,
                )
                assert proc.stdin is not None
                proc.stdin.write(json.dumps(payload).encode())
                proc.stdin.close()
                pushes = await asyncio.to_thread(service.wait, "phone", seen + 1)
                push = pushes[seen]
                assert push.payload["kind"] == "approval", push.payload
                entries = cast(Entries, await admin.xrevrange(keys.log, count=50))
                [stamp] = [
                    int(f[b"t"])
                    for _id, f in entries
                    if f[b"k"] == b"permission_request"
                    and json.loads(f[b"f"])["requestKey"] == push.payload["requestKey"]
                ]
                log_to_push.append((push.at - stamp / 1000) * 1000)
                hook_to_push.append((push.at - t0) * 1000)
                t1 = time.perf_counter()
                d = await http.post(
                    "/push/decide", json={"cap": push.payload["cap"], "decision": "allow"}
                )
                out, _ = await proc.communicate()
                approve_to_answer.append((time.perf_counter() - t1) * 1000)
                assert d.status_code == 200 and b'"allow"' in out, (i, d.text, out)
                # the "resolved" push that follows, before the next round
                await asyncio.to_thread(service.wait, "phone", seen + 2)
    await admin.aclose()
    return {
        "log_to_push_accepted": summary(log_to_push),
        "hook_to_push_accepted": summary(hook_to_push),
        "approve_to_hook_answer": summary(approve_to_answer),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    with scratch() as s, edit_request(s) as req:
        figures = asyncio.run(measure(req.gw, s.srv.url, req.payload, req.env, args.rounds))
    write_result(
        OUT,
        {
            **header("push", s.kind, load=True),
            **figures,
            "note": "sequential rounds on one loopback machine shared with other work; the push "
            "service is the tests' local stand-in (VAPID verified, payload decrypted); hook → push "
            "includes starting the hook's Python process",
        },
    )


if __name__ == "__main__":
    main()
