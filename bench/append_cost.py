"""What the collector's atomic append costs against the lean floor's one ``XADD``, per line.

One private Redis, one ~2 KB line, ``--n`` appends of each variant interleaved in blocks
of 100 (A B A B ...), each awaited before the next (one line per wake-up, as at 100 lines/s):

* ``xadd`` — the lean floor's hop: one ``XADD`` of the line;
* ``append`` — relaybus's ``LogAppender.append`` (``shared/store/lua/append.lua``): the
  epoch check, the offset compare-and-set and commit (exactly once), ``INCR`` of the global
  seq (order; what a gap is measured against), the session's own seq and stream (replays),
  the session hash, TTLs and the sessions index — one script, one round trip.

Reports the client-side round trip (p50 / p99 µs) and Redis's own time per call
(``INFO commandstats``). ``--base REF``: also ``REF``'s appender and script (exported),
a third variant in the same interleaving. Writes ``bench/results/append_cost.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import redis.asyncio as aioredis
from rig import REPO
from rig.services import header, scratch, write_result
from rig.stacks import FILLER
from rig.stats import pct
from rig.trees import export

from relaybus.shared.store import appendlog
from relaybus.shared.store.held_conn import pack
from relaybus.shared.store.keys import Keys

OUT = REPO / "bench" / "results" / "append_cost.json"
BLOCK = 100


def prefix(sid: str) -> bytes:
    """A session_event frame as the collector builds it, less its closing ``seqId}``."""
    event = {"type": "user", "blocks": [{"type": "text", "text": f"lat 0 000000 {FILLER}"}]}
    return orjson.dumps({"type": "session_event", "sessionId": sid, "event": event})[:-1]


def base_module(tree: Path) -> ModuleType:
    """The exported tree's ``appendlog`` running its own ``append.lua``."""
    spec = importlib.util.spec_from_file_location(
        "base_appendlog", tree / "shared" / "store" / "appendlog.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    lua = (tree / "shared" / "store" / "lua" / "append.lua").read_text()
    # read when an appender is made (and after a NOSCRIPT)
    vars(mod).update(APPEND_LUA=lua, _LOAD=pack(b"SCRIPT", b"LOAD", lua.encode()))
    return mod


async def appending(
    client: aioredis.Redis, mod: ModuleType, ns: str
) -> Callable[[], Awaitable[None]]:
    """One ~2 KB session_event per call through ``mod``'s appender, as the live collector does."""
    keys = Keys(ns)
    await client.set(keys.epoch, "e1")
    appender = mod.LogAppender(
        client, keys, "bench", log_maxlen=100_000, session_maxlen=10_000, session_ttl_s=86400
    )
    sid = "cost-session"
    line = prefix(sid)
    ev = mod.OutEvent("session_event", line, session_stream=True, session_seq=True)
    offset = 0

    async def append() -> None:
        nonlocal offset
        new = offset + len(line) + 1
        batch = mod.AppendBatch(
            sid,
            [ev],
            "projects/p/s.jsonl",
            str(offset) if offset else "",
            str(new),
            {"lastActivity": str(time.time_ns() // 1_000_000)},
            time.time_ns() // 1_000_000,
        )
        await appender.append(batch, epoch="e1", stamp_ms=time.time_ns() // 1_000_000)
        offset = new

    return append


async def run(n: int, base: str | None) -> dict[str, Any]:
    out: dict[str, Any] = header("append_cost", "", load=True)
    with scratch() as s, tempfile.TemporaryDirectory() as tmp:
        out["server"] = s.kind
        client = aioredis.Redis.from_url(s.srv.url)
        line = prefix("cost-session")

        async def xadd() -> None:
            await client.xadd("lean:cost", {"f": line})

        variants = {"xadd": xadd, "append": await appending(client, appendlog, "cost")}
        if base:
            out["base"] = export(base, Path(tmp))
            variants["append_base"] = await appending(client, base_module(Path(tmp)), "base")
        lat: dict[str, list[float]] = {k: [] for k in variants}
        redis_us: dict[str, list[float]] = {k: [] for k in variants}
        for fn in variants.values():  # warm-up: script loaded, connection open
            for _ in range(20):
                await fn()
        done = 0
        while done < n:
            for name, fn in variants.items():
                await client.config_resetstat()
                for _ in range(BLOCK):
                    t0 = time.perf_counter()
                    await fn()
                    lat[name].append((time.perf_counter() - t0) * 1e6)
                stats = await client.info("commandstats")
                cmd = "cmdstat_xadd" if name == "xadd" else "cmdstat_evalsha"
                redis_us[name].append(stats[cmd]["usec"] / BLOCK)
            done += BLOCK
        await client.aclose()
    out["lines"] = n
    out["line_bytes"] = len(line)
    out["round_trip_us"] = {k: {"p50": pct(v, 0.5), "p99": pct(v, 0.99)} for k, v in lat.items()}
    out["redis_us_per_call"] = {k: round(sum(v) / len(v), 1) for k, v in redis_us.items()}
    #: per block of ``BLOCK`` calls, median: robust to a block the other helper's bench hit
    out["redis_us_per_call_p50_block"] = {k: round(pct(v, 0.5), 1) for k, v in redis_us.items()}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--base", default=None, help="a git ref whose appender runs beside")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    res = asyncio.run(run(args.n, args.base))
    res["machine"]["load_at_end"] = round(os.getloadavg()[0], 2)
    write_result(args.out, res)


if __name__ == "__main__":
    main()
