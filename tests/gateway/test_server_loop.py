"""The gateway's uvicorn main loop: one wake-up a second (not uvicorn's ten), a Date header
that still advances, and a stop that is seen at once rather than at the next tick."""

from __future__ import annotations

import asyncio
import time
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import uvicorn

from relaybus.gateway.main import _Server
from tests.support.servers import free_port


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


class _CountingServer(_Server):
    ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


async def test_one_tick_a_second_date_advances_and_stop_is_prompt() -> None:
    port = free_port()
    config = uvicorn.Config(_app, host="127.0.0.1", port=port, log_config=None, lifespan="on")
    server = _CountingServer(config)
    task = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(200):
                if server.started:
                    break
                await asyncio.sleep(0.02)
            assert server.started
            first = (await client.get("/")).headers["date"]
            ticks_before = server.ticks
            await asyncio.sleep(2.1)
            second = (await client.get("/")).headers["date"]
            ticks = server.ticks - ticks_before
        # uvicorn's own loop would have ticked ~21 times
        assert 1 <= ticks <= 4, ticks
        assert (parsedate_to_datetime(second) - parsedate_to_datetime(first)).total_seconds() >= 1
        t0 = time.monotonic()
        server.should_exit = True
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - t0 < 0.5  # not held until the next one-second tick
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
