"""The gateway's uvicorn main loop: one wake-up a second (not uvicorn's ten), a Date header
that still advances, a stop that is seen at once rather than at the next tick, and a renewed
TLS certificate served without a restart (with `up`'s renewal loop that renews it)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import socket
import ssl
import time
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from relaybus import tls, uptls
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


def _served_der(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as s,
    ):
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return der


async def test_a_renewed_certificate_is_served_without_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The files replaced (as `relaybus up`'s renewal does): new connections get the new
    certificate at the next look; a pair that does not load keeps the one before."""
    root, first = tls.ensure_server(tmp_path, ["127.0.0.1"])
    port = free_port()
    config = uvicorn.Config(
        _app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        lifespan="on",
        ssl_certfile=str(first.cert),
        ssl_keyfile=str(first.key),
    )
    server = _Server(config, cert_check_s=0.2)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.02)
        der = tls.der(first.cert)
        assert await asyncio.to_thread(_served_der, port) == der
        renewed = tls.make_server(tmp_path, root, ["127.0.0.1"])
        new_der = tls.der(renewed.cert)
        assert new_der != der
        for _ in range(100):
            if await asyncio.to_thread(_served_der, port) == new_der:
                break
            await asyncio.sleep(0.05)
        assert await asyncio.to_thread(_served_der, port) == new_der
        caplog.set_level(logging.WARNING, "relaybus.gateway.main")
        renewed.key.write_bytes(b"not a key\n")
        for _ in range(100):
            if "does not load" in caplog.text:
                break
            await asyncio.sleep(0.05)
        assert "does not load" in caplog.text
        assert await asyncio.to_thread(_served_der, port) == new_der
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_up_renews_a_certificate_near_its_expiry(tmp_path: Path) -> None:
    """`up`'s renewal loop remakes a server certificate with less than 30 days left (one
    with more is left alone), and ends when `up` stops."""
    names = ["127.0.0.1", "localhost"]
    root, _ = tls.ensure_server(tmp_path, names)
    short = tls.make_server(tmp_path, root, names, days=10)
    stop = asyncio.Event()
    task = asyncio.create_task(uptls.keep_renewed(tmp_path, names, stop, every_s=0.05))
    try:
        for _ in range(200):
            left = tls.load_cert(short.cert).not_valid_after_utc - dt.datetime.now(dt.UTC)
            if left > dt.timedelta(days=300):
                break
            await asyncio.sleep(0.05)
        assert left > dt.timedelta(days=300)
        renewed = short.cert.read_bytes()
        await asyncio.sleep(0.3)  # several more looks: a fresh certificate is not remade
        assert short.cert.read_bytes() == renewed
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
