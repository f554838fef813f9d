"""A WebSocket client that survives its gateway dying: reconnects and resumes, counting
every session event it sees (for the nginx fail-over test)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from ssl import SSLContext
from typing import Any, Literal

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

#: Frames derived from the log: their seqId is the event's position in it.
LOG_FRAMES = frozenset({"session_event", "session_started", "session_ended", "turn_status"})


class ResumingClient:
    """``mode="global"``: hello with lastSeqId (v1-style, every session's events).
    ``mode="watch"``: session_subscriptions and watch_session with sinceSeqId."""

    def __init__(
        self,
        url: str,
        token: str,
        sid: str,
        mode: Literal["global", "watch"],
        ssl: SSLContext | None = None,
    ) -> None:
        self.url, self.token, self.sid, self.mode = url, token, sid, mode
        self.ssl = ssl  # wss: the context that verifies the server
        self.ws: ClientConnection | None = None
        self.epoch: str | None = None
        self.last_log_seq: int | None = None  # global mode: highest log-derived seqId seen
        self.seqs: list[int] = []  # seqIds of this session's session_events, as received
        self.gateways: list[str] = []  # gatewayId of each connection, in order
        self.gaps: list[dict[str, Any]] = []
        #: seconds each connect attempt took, refused and failed ones included
        self.connect_s: list[float] = []

    @property
    def gateway(self) -> str:
        return self.gateways[-1]

    async def connect(self) -> str:
        """Open a connection through the URL and resume; the gatewayId it landed on."""
        started = time.monotonic()
        try:
            ws = await connect(
                f"{self.url}?token={self.token}", compression=None, open_timeout=20, ssl=self.ssl
            )
        finally:
            self.connect_s.append(time.monotonic() - started)
        hello: dict[str, Any] = {"type": "hello"}
        if self.mode == "global":
            hello["capabilities"] = []
            if self.last_log_seq is not None:
                hello.update(lastSeqId=self.last_log_seq, epoch=self.epoch)
        else:
            hello["capabilities"] = ["session_subscriptions"]
        await ws.send(orjson.dumps(hello).decode())
        while True:
            frame = await self._recv(ws)
            if frame["type"] == "welcome":
                break
        self.epoch = str(frame["epoch"])
        if self.mode == "watch":
            watch: dict[str, Any] = {"type": "watch_session", "sessionId": self.sid}
            if self.seqs:
                watch["sinceSeqId"] = self.seqs[-1]
            await ws.send(orjson.dumps(watch).decode())
        self.ws = ws
        self.gateways.append(str(frame["gatewayId"]))
        return self.gateway

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
            self.ws = None

    async def land_on(self, gateway: str, tries: int = 20) -> None:
        """Connect through nginx until the connection is served by ``gateway``."""
        for _ in range(tries):
            if await self.connect() == gateway:
                return
            await self.close()
            self.gateways.pop()  # not the connection under test
        raise AssertionError(f"nginx never routed to {gateway}")

    async def run(self, stop: asyncio.Event, reconnect_timeout_s: float = 30.0) -> None:
        """Receive until ``stop``; on a lost connection, reconnect (bounded) and resume."""
        while not stop.is_set():
            assert self.ws is not None
            try:
                await self._recv(self.ws)
            except ConnectionClosed:
                self.ws = None
                await self._reconnect(reconnect_timeout_s)

    async def _reconnect(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                await self.connect()
                return
            # refused, closed, or a 502 from nginx while it fails over
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
                if loop.time() > deadline:
                    raise TimeoutError(f"could not reconnect: {exc}") from exc
                await asyncio.sleep(0.2)

    async def _recv(self, ws: ClientConnection) -> dict[str, Any]:
        frame: dict[str, Any] = orjson.loads(await ws.recv())
        kind = frame["type"]
        if kind in LOG_FRAMES and self.mode == "global":
            self.last_log_seq = max(self.last_log_seq or 0, int(frame["seqId"]))
        if kind == "session_event" and frame["sessionId"] == self.sid:
            self.seqs.append(int(frame["seqId"]))
        elif kind == "gap_detected":
            self.gaps.append(frame)
        return frame


async def stop_clients(tasks: list[asyncio.Task[None]], clients: list[ResumingClient]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for client in clients:
        await client.close()
