"""Where relaybus's time goes at small fan-out: a per-hop timestamp trace against the floors.

One client per system, ``--lines`` timed lines at 100/s. A monitor process-local
``XREAD BLOCK`` on each system's stream stamps the moment an entry is in Redis, so each
line's latency splits into write -> in Redis (tailer, projection, append) and in Redis ->
client (reader, fan-out, WebSocket write). Also counts the Redis commands per line
(``--monitor``: it slows Redis down). ``--base main`` adds a relaybus whose collector runs
that ref's code, interleaved with this tree's. Prints one JSON object per trace. Usage:
``python bench/hops.py [--lines 300] [--base main]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import redis.asyncio as aioredis
from rig.clients import parse
from rig.stacks import CWorker, Stack, floor_stack, lean_stack, relaybus_stack, write_lines
from rig.stats import pct
from rig.trees import export

from tests.support.collector_records import Entries
from tests.support.servers import running_server


async def monitor_stream(url: str, key: str, seen: dict[int, int], stop: asyncio.Event) -> None:
    """Stamp (time_ns) each timed line's arrival in stream ``key``."""
    client = aioredis.Redis.from_url(url)
    last: str | bytes = "$"
    try:
        while not stop.is_set():
            reply = cast(
                list[tuple[bytes, Entries]] | None,
                await client.xread({key: last}, block=200, count=100),
            )
            now = time.time_ns()
            for _key, entries in reply or []:
                for eid, fields in entries:
                    last = eid
                    for value in fields.values():
                        got = parse(value)
                        if got is not None:
                            seen[got[1]] = now - got[0]
    finally:
        await client.aclose()


async def count_commands(url: str, stop: asyncio.Event, out: dict[str, int]) -> None:
    """Redis commands by name while the trace runs (MONITOR)."""
    client = aioredis.Redis.from_url(url)
    async with client.monitor() as m:
        async for cmd in m.listen():
            if stop.is_set():
                break
            name = str(cmd.get("command", "")).split(" ", 1)[0].upper()
            out[name] = out.get(name, 0) + 1
    await client.aclose()


async def trace(st: Stack, url: str, key_of: Any, lines: int, monitor: bool) -> dict[str, Any]:
    sid, path = await st.new_target()
    key = await key_of()
    w = await CWorker(
        "clients",
        *st.clients(sid, 1),
        "--count",
        str(lines),
        "--max-s",
        str(lines / 100 + 10),
        "--per-line",
    ).start()
    seen: dict[int, int] = {}
    commands: dict[str, int] = {}
    stop = asyncio.Event()
    tasks = [asyncio.create_task(monitor_stream(url, key, seen, stop))]
    if monitor:  # MONITOR slows Redis down, the more so the more commands a line costs
        tasks.append(asyncio.create_task(count_commands(url, stop, commands)))
    await asyncio.sleep(0.3)
    await write_lines(path, sid, lines, 100)
    res = await w.result()
    stop.set()
    await asyncio.wait(tasks, timeout=3)
    for t in tasks:
        t.cancel()
    total = {int(k): v for k, v in res["per_line_ms"].items()}
    to_redis = [seen[i] / 1e6 for i in total if i in seen]
    to_client = [total[i] - seen[i] / 1e6 for i in total if i in seen]
    return {
        "system": st.name,
        "lines": lines,
        "traced": len(to_redis),
        "total_p50_ms": pct(list(total.values()), 0.5),
        "write_to_redis_p50_ms": pct(to_redis, 0.5),
        "redis_to_client_p50_ms": pct(to_client, 0.5),
        "total_p99_ms": pct(list(total.values()), 0.99),
        "redis_commands_per_line": {
            k: round(v / lines, 2) for k, v in sorted(commands.items(), key=lambda kv: -kv[1])[:8]
        },
    }


async def main_async(
    lines: int, rounds: int, monitor: bool, base: str | None = None
) -> list[dict[str, Any]]:
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as t, running_server(Path(t) / "srv") as srv:
        tmp = Path(t)
        stacks: list[Stack] = []
        probe = aioredis.Redis.from_url(srv.url)

        def relaybus_key(st: Stack) -> Callable[[], Awaitable[str]]:
            async def key() -> str:
                assert st.log_key is not None
                return st.log_key

            return key

        keys: list[Callable[[], Awaitable[str]]] = []
        try:
            stacks.append(await relaybus_stack(srv, tmp))
            keys.append(relaybus_key(stacks[-1]))
            if base is not None:
                tree = tmp / "base-tree"
                commit = export(base, tree)
                stacks.append(
                    await relaybus_stack(
                        srv, tmp, name=f"relaybus@{commit}", collector_env={"PYTHONPATH": str(tree)}
                    )
                )
                keys.append(relaybus_key(stacks[-1]))
            stacks.append(await floor_stack(srv, tmp))
            stacks.append(await lean_stack(srv, tmp))

            def stream_key(name: str) -> Callable[[], Awaitable[str]]:
                async def key() -> str:  # a floor's stream exists once a line went through
                    while not await probe.keys(f"{name}:*"):
                        await write_lines(tmp / name / "warm.jsonl", "warm", 1, 100)
                        await asyncio.sleep(0.2)
                    return cast(list[bytes], await probe.keys(f"{name}:*"))[0].decode()

                return key

            keys += [stream_key("floor"), stream_key("lean")]
            for _ in range(rounds):
                for st, key_of in zip(stacks, keys, strict=True):
                    rows.append(await trace(st, srv.url, key_of, lines, monitor))
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            await probe.aclose()
            for st in stacks:
                await st.stop()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lines", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--monitor", action="store_true", help="also count Redis commands per line")
    p.add_argument(
        "--base", help="also a relaybus whose collector is this git ref's (e.g. main), interleaved"
    )
    args = p.parse_args()
    asyncio.run(main_async(args.lines, args.rounds, args.monitor, args.base))


if __name__ == "__main__":
    main()
