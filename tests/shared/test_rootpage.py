"""The plain-http root-certificate page of ``relaybus up`` on real sockets: what it serves,
and that idle, crowding or never-reading clients cannot hold it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

from relaybus.rootpage import RootPage, render, serve
from tests.support.servers import free_port


@contextlib.asynccontextmanager
async def served(
    page: RootPage, *, max_connections: int = 32, deadline_s: float = 10.0
) -> AsyncIterator[int]:
    port, stop = free_port(), asyncio.Event()
    task = asyncio.create_task(
        serve(page, "127.0.0.1", port, stop, max_connections=max_connections, deadline_s=deadline_s)
    )
    for _ in range(200):
        with contextlib.suppress(OSError):
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # the server has seen the probe go (it held a slot)
    try:
        yield port
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def fetch(port: int, request: bytes) -> bytes:
    """The whole reply; ``b""`` when the server closed (or reset) without one."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(request)
        return await asyncio.wait_for(r.read(), 5)
    except ConnectionResetError:
        return b""
    finally:
        w.close()


PAGE = RootPage(render("https://box.local:8443/"), b"DER-BYTES", b"PEM-BYTES")


async def test_serves_the_page_and_the_root_and_nothing_else() -> None:
    async with served(PAGE) as port:
        index = await fetch(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert index.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"https://box.local:8443/" in index
        crt = await fetch(port, b"GET /relaybus-root.crt HTTP/1.1\r\n\r\n")
        assert crt.endswith(b"\r\n\r\nDER-BYTES")
        assert b"application/x-x509-ca-cert" in crt
        head = await fetch(port, b"HEAD /relaybus-root.pem HTTP/1.1\r\n\r\n")
        assert head.endswith(b"\r\n\r\n") and b"Content-Length: 9\r\n" in head
        assert (await fetch(port, b"POST / HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await fetch(port, b"GET /../tls/root.key HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.1 404"
        )


async def test_connections_beyond_the_cap_are_closed_and_served_again_once_freed() -> None:
    async with served(PAGE, max_connections=4) as port:
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
        await asyncio.sleep(0.1)
        assert await fetch(port, b"GET / HTTP/1.1\r\n\r\n") == b""  # closed, not served
        for _, iw in idle:
            iw.close()
        await asyncio.sleep(0.1)
        assert (await fetch(port, b"GET / HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")


async def test_a_client_that_never_reads_is_dropped_at_the_deadline() -> None:
    big = RootPage(b"x" * (8 << 20), b"", b"")  # far more than the socket buffers hold
    async with served(big, max_connections=1, deadline_s=0.5) as port:
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(b"GET / HTTP/1.1\r\n\r\n")
        t0 = time.monotonic()
        # The one slot is taken until the deadline; then a reading client is served.
        while True:
            reply = await fetch(port, b"GET /relaybus-root.pem HTTP/1.1\r\n\r\n")
            if reply.startswith(b"HTTP/1.1 200"):
                break
            assert time.monotonic() - t0 < 5, "the stalled client still holds the page"
            await asyncio.sleep(0.05)
        assert time.monotonic() - t0 >= 0.3  # it was held until (about) the deadline
        stalled.close()
