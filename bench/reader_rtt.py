"""Client CPU of one log-reader round trip (``XREAD BLOCK`` + ``GET epoch`` + ``GET seq``,
one entry returned): redis-py's pipeline against the held connection the reader now uses
(``relaybus.shared.store.held_conn``), ``time.process_time`` over ``--n`` round trips per
round, rounds interleaved, on a private Redis. Usage: ``python bench/reader_rtt.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relaybus.shared.store.held_conn import HeldConnection, entry_fields, pack  # noqa: E402
from tests.support.servers import running_server  # noqa: E402


async def measure(n: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as t, running_server(Path(t) / "srv") as srv:
        client = aioredis.Redis.from_url(srv.url)
        held = HeldConnection(client.connection_pool)
        try:
            entry = {"s": "s1", "k": "session_event", "f": b"x" * 300, "t": "1"}
            await client.xadd("log", entry, id="5-0")  # type: ignore[arg-type]
            await client.mset({"epoch": "e", "seq": "5"})
            request = (
                pack(b"XREAD", b"COUNT", b"1000", b"BLOCK", b"1000", b"STREAMS", b"log", b"4-0")
                + pack(b"GET", b"epoch")
                + pack(b"GET", b"seq")
            )

            async def pipeline() -> None:
                pipe = client.pipeline(transaction=False)
                pipe.xread({"log": "4-0"}, count=1000, block=1000)
                pipe.get("epoch")
                pipe.get("seq")
                await pipe.execute()

            async def own() -> None:
                await held.send(request, 3)
                reply = await held.reply()
                await held.reply()
                await held.reply()
                entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
                [(eid, entry_fields(flat)) for eid, flat in entries]

            ways: dict[str, Callable[[], Awaitable[None]]] = {"pipeline": pipeline, "held": own}
            out: dict[str, list[float]] = {name: [] for name in ways}
            for _ in range(rounds):
                for name, way in ways.items():
                    started = time.process_time()
                    for _ in range(n):
                        await way()
                    out[name].append((time.process_time() - started) / n * 1e6)
            return out
        finally:
            await held.close()
            await client.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    load = os.getloadavg()[0]
    res = asyncio.run(measure(args.n, args.rounds))
    for name, us in res.items():
        print(
            f"{name}: µs CPU per round trip, median {statistics.median(us):.1f}, "
            f"min {min(us):.1f} (load {load:.1f})"
        )


if __name__ == "__main__":
    main()
