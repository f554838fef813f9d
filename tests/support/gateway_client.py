"""A real WebSocket client for gateway tests (websockets), with waiting helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from ssl import SSLContext
from types import TracebackType
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

Frame = dict[str, Any]


class WsClient:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        query_token: bool = False,
        max_size: int | None = 16 * 1024 * 1024,
        ssl: SSLContext | None = None,
    ) -> None:
        self.url = url
        self.ssl = ssl  # wss: the context that verifies the server (default: the system's)
        self.headers: dict[str, str] = {}
        if token is not None and query_token:
            self.url += ("&" if "?" in url else "?") + f"token={token}"
        elif token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self.max_size = max_size
        self.ws: ClientConnection | None = None
        self.received: list[Frame] = []
        #: session_event frames received so far (cheap to poll in ``until`` predicates)
        self.n_events = 0

    async def __aenter__(self) -> WsClient:
        self.ws = await connect(
            self.url,
            additional_headers=self.headers,
            compression=None,
            max_size=self.max_size,
            open_timeout=20,
            ssl=self.ssl,
        )
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.ws is not None
        await self.ws.close()

    async def send(self, frame: Frame | str | bytes) -> None:
        assert self.ws is not None
        await self.ws.send(
            frame if isinstance(frame, str | bytes) else orjson.dumps(frame).decode()
        )

    async def recv(self, wait_s: float = 10.0) -> Frame:
        assert self.ws is not None
        async with asyncio.timeout(wait_s):
            raw = await self.ws.recv()
        frame: Frame = orjson.loads(raw)
        self.received.append(frame)
        if frame["type"] == "session_event":
            self.n_events += 1
        return frame

    async def expect(self, type_: str, wait_s: float = 10.0) -> Frame:
        """The next frame of ``type_``; frames of other types before it are kept in ``received``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            frame = await self.recv(max(0.01, deadline - loop.time()))
            if frame["type"] == type_:
                return frame

    async def until(self, pred: Callable[[list[Frame]], bool], wait_s: float = 20.0) -> list[Frame]:
        """Receive until ``pred(received)`` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while not pred(self.received):
            await self.recv(max(0.01, deadline - loop.time()))
        return self.received

    async def closed_code(self, wait_s: float = 20.0) -> int | None:
        """Read until the server closes; the close code it sent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        try:
            while True:
                await self.recv(max(0.01, deadline - loop.time()))
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd is not None else None

    async def hello(self, caps: list[str] | None = None, **extra: Any) -> Frame:
        await self.send({"type": "hello", "capabilities": caps or [], **extra})
        return await self.expect("welcome")

    async def watch(self, sid: str, *, wait_s: float = 10.0, **extra: Any) -> Frame:
        """Send ``watch_session`` for ``sid`` (``extra``: more fields, e.g. ``requestId``); its
        ``watch_ack``."""
        await self.send({"type": "watch_session", "sessionId": sid, **extra})
        return await self.expect("watch_ack", wait_s)

    def of_type(self, type_: str) -> list[Frame]:
        return [f for f in self.received if f["type"] == type_]

    def events(self, sid: str | None = None) -> list[Frame]:
        return [
            f
            for f in self.received
            if f["type"] == "session_event" and (sid is None or f["sessionId"] == sid)
        ]


FULL = ["session_subscriptions", "turn_status_observe"]
