"""Where an idle watching ``/ws`` connection's memory goes: tracemalloc in one gateway process,
by owner (the innermost frame outside the standard library), KiB per connection.

An in-process gateway (``tests.support.gateway_server.running_gateway``) on its own
redis-server; ``--clients`` raw-socket clients in a child process each send ``hello`` and
``watch_session`` and then read nothing. ``--tree`` measures another source tree's gateway
(``git archive <commit> | tar -x -C DIR``); the owners are matched by path, so both builds
are split the same way. Prints one JSON object.

    python bench/conn_memory.py --clients 300 [--tree /tmp/before]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import sysconfig
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: (owner, path fragment) in order: the first fragment found in a frame's file names it.
OWNERS = (
    ("uvicorn", "/uvicorn/"),
    ("websockets", "/websockets/"),
    ("starlette/fastapi", "/starlette/"),
    ("starlette/fastapi", "/fastapi/"),
    ("relaybus ws protocol", "/gateway/web/ws"),
    ("relaybus endpoint", "/gateway/web/endpoint.py"),
    ("relaybus delivery", "/gateway/delivery/"),
    ("relaybus other", "/gateway/"),
    ("redis-py", "/redis/"),
)
_STDLIB = sysconfig.get_paths()["stdlib"]

CLIENTS = """
import sys, time
from tests.support.raw_ws import DeafClient
port, n = int(sys.argv[1]), int(sys.argv[2])
sys.stdin.readline()  # go
held = []
for _ in range(n):
    c = DeafClient(port, token="full-token")
    c.send({"type": "hello", "capabilities": ["session_subscriptions", "blocks_only"]})
    c.send({"type": "watch_session", "sessionId": "s1", "requestId": "w"})
    held.append(c)
print("ready", flush=True)
sys.stdin.readline()
"""


def owner(tb: tracemalloc.Traceback) -> str:
    for frame in reversed(tb):  # innermost first
        name = frame.filename
        if (name.startswith(_STDLIB) and "site-packages" not in name) or name == __file__:
            continue
        for who, fragment in OWNERS:
            if fragment in name:
                return who
        return "other"
    return "asyncio (transport, socket, selector)"


async def measure(tree: Path, n: int) -> dict[str, object]:
    import redis.asyncio as aioredis

    from relaybus.shared.store.keys import Keys
    from tests.conftest import make_settings
    from tests.support.gateway_publish import Publisher
    from tests.support.gateway_server import running_gateway
    from tests.support.servers import running_server

    with tempfile.TemporaryDirectory() as tmp, running_server(Path(tmp) / "srv") as srv:
        ns = "mem"
        client = aioredis.Redis.from_url(srv.url)
        await Publisher(client, Keys(ns)).start_session("s1")
        await client.aclose()
        async with running_gateway(make_settings(srv.url, ns)) as gw:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CLIENTS,
                str(gw.port),
                str(n),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=env,
                cwd=tree,
            )
            assert proc.stdout is not None and proc.stdin is not None
            await asyncio.sleep(1.0)
            tracemalloc.start(30)
            before = tracemalloc.take_snapshot()
            proc.stdin.write(b"go\n")
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line.strip() == b"ready", line
            deadline = time.monotonic() + 30
            while len(gw.runtime.hub.connections) < n:
                assert time.monotonic() < deadline, "clients did not all connect"
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            connected = len(gw.runtime.hub.connections)
            proc.stdin.write(b"\n")
            await asyncio.wait_for(proc.wait(), 30)
    by: dict[str, int] = {}
    for stat in after.compare_to(before, "traceback"):
        who = owner(stat.traceback)
        by[who] = by.get(who, 0) + stat.size_diff
    per = {k: round(v / connected / 1024, 2) for k, v in sorted(by.items(), key=lambda kv: -kv[1])}
    return {
        "tree": str(tree),
        "clients": connected,
        "kib_per_connection": per,
        "total_kib": round(sum(by.values()) / connected / 1024, 2),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=300)
    p.add_argument("--tree", type=Path, default=REPO, help="source tree whose gateway to measure")
    args = p.parse_args()
    tree = args.tree.resolve()
    sys.path.insert(0, str(tree))
    print(json.dumps(asyncio.run(measure(tree, args.clients))))


if __name__ == "__main__":
    main()
